"""`shardcli recipe`: run one classic sharding recipe, verified, as plain result data.

A recipe's program (in `shardcli/playground/recipe/programs.py`) gets a `Lab` (the session plus helpers
to describe arrays; `shardcli/playground/recipe/lab.py`) and returns what a tutorial would show, as
sections (sharding pictures, tables, lines of text; `shardcli/analysis/report.py`) and checks against
NumPy. The render layer draws every recipe the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from shardcli.analysis.report import Check, Section, TextSection
from shardcli.playground.recipe import programs as recipe_programs
from shardcli.playground.recipe.cases import Recipe, get_recipe, validate_recipe_mesh
from shardcli.playground.recipe.lab import Lab, RecipeProgram
from shardcli.runtime.processes import gather_from_processes
from shardcli.runtime.session import Session, open_session
from shardcli.specs.meshes import MeshSpec
from shardcli.specs.runs import RunOptions


@dataclass(frozen=True)
class RecipeRequest:
    """A recipe by name, on a mesh (the recipe's default unless the user gave one)."""

    name: str
    mesh: MeshSpec
    options: RunOptions = field(default_factory=RunOptions)
    steps: int | None = None  # pipeline-ring: how many ring steps
    show_values: bool = True
    shape: tuple[int, ...] | None = None  # --shape: the recipe's input (recipes with `input` only)
    init: str | None = None  # --init: how that input is filled


@dataclass(frozen=True)
class RecipeResult:
    """One recipe's run: its sections, and its checks (a check fails if it failed in any process)."""

    session: Session
    request: RecipeRequest
    recipe: Recipe
    sections: tuple[Section, ...]
    checks: tuple[Check, ...]

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.ok)


def _check_input_flags(request: RecipeRequest, recipe: Recipe) -> None:
    """--shape and --init only for the recipes whose input they set (nothing silently ignored).

    Raises:
        ShardcliError: naming the recipes that take the flag.
    """
    from shardcli.errors import ShardcliError
    from shardcli.playground.recipe.cases import RECIPES

    if request.shape is not None and (recipe.input is None or not recipe.takes_shape):
        takes = ", ".join(r.name for r in RECIPES.values() if r.input is not None and r.takes_shape)
        raise ShardcliError(f"--shape sets the input of {takes}; recipe {recipe.name} sizes its own inputs")
    if request.init is not None and recipe.input is None:
        takes = ", ".join(r.name for r in RECIPES.values() if r.input is not None)
        raise ShardcliError(
            f"--init fills the input of {takes}; recipe {recipe.name} builds no input to fill"
        )


# pipeline-ring prints a row per step and checks each; the ring repeats after its length (at most
# the device count), so more steps than this show nothing new and would run past any patience.
MAX_RING_STEPS = 1000


def run_recipe(request: RecipeRequest) -> RecipeResult:
    """Run one recipe on its mesh and return its sections and checks.

    Raises:
        ShardcliError: an unknown recipe or a mesh it cannot use, before JAX starts.
    """
    recipe = get_recipe(request.name)
    validate_recipe_mesh(recipe, request.mesh)
    if request.steps is not None and recipe.name != "pipeline-ring":
        from shardcli.errors import ShardcliError

        raise ShardcliError("--steps is for the pipeline-ring recipe; leave it out for " + recipe.name)
    if request.steps is not None and not 1 <= request.steps <= MAX_RING_STEPS:
        from shardcli.errors import ShardcliError

        raise ShardcliError(
            f"--steps {request.steps} is not valid; give 1 to {MAX_RING_STEPS} (each step is one row, "
            "and the ring repeats itself after its length)"
        )
    _check_input_flags(request, recipe)
    session = open_session(request.mesh, request.options)
    program: RecipeProgram = getattr(recipe_programs, recipe.program)
    output = program(Lab(session, steps=request.steps, shape=request.shape, init=request.init))
    # Several processes: each checked its own devices; a check fails if it failed anywhere.
    oks = gather_from_processes(np.array([c.ok for c in output.checks], dtype=np.int32)).min(axis=0)
    checks = tuple(
        c if bool(ok) == c.ok else Check(c.what, False, c.detail + " (failed on another process)")
        for c, ok in zip(output.checks, oks, strict=True)
    )
    lesson = (TextSection("lesson", (recipe.lesson,)),) if recipe.lesson else ()
    return RecipeResult(
        session=session, request=request, recipe=recipe, sections=lesson + output.sections, checks=checks
    )
