"""`shardcli recipe`: run one classic sharding lesson, verified, as plain result data.

A lesson (in `shardcli/core/lessons.py`) gets a `Lab` (the session plus helpers to describe arrays)
and returns what a tutorial would show, as sections (sharding pictures, tables, lines of text) and
checks against NumPy. The render layer draws every recipe the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardcli.core.program_analysis import HloCollective, find_collectives
from shardcli.core.processes import gather_from_processes
from shardcli.core.session import Session, open_session
from shardcli.recipe_registry import Recipe, get_recipe, validate_recipe_mesh
from shardcli.specs import MeshSpec, RunOptions
from shardcli.tile_math import ShardingLayout, group_tiles, normalize_index


@dataclass(frozen=True)
class RecipeRequest:
    """A recipe by name, on a mesh (the recipe's default unless the user gave one)."""

    name: str
    mesh: MeshSpec
    options: RunOptions = field(default_factory=RunOptions)
    steps: int | None = None  # pipeline-ring: how many ring steps
    show_values: bool = True


@dataclass(frozen=True)
class Picture:
    """An array's sharding: its tiles, and its spec as JAX reports it."""

    title: str
    layout: ShardingLayout
    spec: str


@dataclass(frozen=True)
class TableSection:
    """Rows of plain values under named columns."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class TextSection:
    """Lines of text (what the compiler chose, the collectives it inserted, ...)."""

    title: str
    lines: tuple[str, ...]


Section = Picture | TableSection | TextSection


@dataclass(frozen=True)
class Check:
    """One property the recipe asserts, with what was measured."""

    what: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class LessonOutput:
    sections: tuple[Section, ...]
    checks: tuple[Check, ...]


@dataclass(frozen=True)
class RecipeResult:
    session: Session
    request: RecipeRequest
    recipe: Recipe
    sections: tuple[Section, ...]
    checks: tuple[Check, ...]

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.ok)


class Lab:
    """What a lesson works with: the mesh, and helpers that turn JAX objects into plain sections."""

    def __init__(self, session: Session, request: RecipeRequest) -> None:
        self.session = session
        self.request = request
        self.mesh = session.mesh
        self.axes = session.spec.axes
        self.sizes = session.spec.shape

    def picture(self, title: str, array: Any) -> Picture:
        """The sharding picture of a JAX array (what `jax.debug.visualize_array_sharding` draws)."""
        return picture_of(title, array)

    def device_rows(self, array: Any, *, label: str = "values") -> TableSection:
        """Each of this process's devices, its mesh coordinates and its block of `array`."""
        by_id = {s.device.id: s for s in array.addressable_shards}
        rows = []
        for cell in self.session.layout.cells:
            shard = by_id.get(cell.device_id)
            if shard is None:
                continue
            coords = " ".join(f"{a}={c}" for a, c in zip(self.axes, cell.coords, strict=True))
            rows.append((cell.device_id, coords, np.asarray(shard.data)))
        return TableSection(
            title=f"per device: {label}", columns=("device", "mesh coords", label), rows=tuple(rows)
        )

    def collectives(self, jitted: Any, *args: Any) -> tuple[HloCollective, ...]:
        """The collectives the compiler put into `jitted(*args)`."""
        return find_collectives(jitted.lower(*args).compile().as_text())


def picture_of(title: str, array: Any) -> Picture:
    """The sharding picture of a JAX array: its tiles and the devices holding each."""
    shape = tuple(array.shape)
    index_map = {
        d.id: normalize_index(idx, shape) for d, idx in array.sharding.devices_indices_map(shape).items()
    }
    return Picture(title=title, layout=group_tiles(shape, index_map), spec=spec_of(array))


def spec_of(array: Any) -> str:
    """`P('data', None)` as JAX reports the array's sharding."""
    spec = getattr(array.sharding, "spec", None)
    return str(spec) if spec is not None else type(array.sharding).__name__


def collectives_text(ops: tuple[HloCollective, ...]) -> str:
    if not ops:
        return "none"
    return ", ".join(f"{h.op} x{h.count}" for h in ops)


def compare_blocks(array: Any, expected: np.ndarray, bound: np.ndarray | float) -> tuple[int, float]:
    """How many elements of this process's blocks are farther than `bound` from `expected`; the max error."""
    wrong, worst = 0, 0.0
    bound_arr = np.broadcast_to(np.asarray(bound, dtype=np.float64), expected.shape)
    for shard in array.addressable_shards:
        index = tuple(slice(a, b) for a, b in normalize_index(shard.index, tuple(array.shape)))
        got = np.asarray(shard.data).astype(np.float64)
        err = np.abs(got - expected[index])
        wrong += int(np.count_nonzero(~(err <= bound_arr[index])))
        if err.size:
            worst = max(worst, float(np.max(err)))
    return wrong, worst


def close_check(what: str, array: Any, expected: np.ndarray, bound: np.ndarray | float, how: str) -> Check:
    """A check that every element of `array` is within `bound` of the float64 NumPy `expected`."""
    wrong, worst = compare_blocks(array, expected, bound)
    detail = (
        f"max |err| {worst:.2e}; {how}"
        if wrong == 0
        else f"{wrong} element(s) off; max |err| {worst:.2e}; {how}"
    )
    return Check(what=what, ok=wrong == 0, detail=detail)


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
    if request.steps is not None and request.steps < 1:
        from shardcli.errors import ShardcliError

        raise ShardcliError(f"--steps {request.steps} is not valid; give at least 1")
    session = open_session(request.mesh, request.options)
    output = recipe.lesson(Lab(session, request))
    # Several processes: each checked its own devices; a check fails if it failed anywhere.
    oks = gather_from_processes(np.array([c.ok for c in output.checks], dtype=np.int32)).min(axis=0)
    checks = tuple(
        c if bool(ok) == c.ok else Check(c.what, False, c.detail + " (failed on another process)")
        for c, ok in zip(output.checks, oks, strict=True)
    )
    return RecipeResult(
        session=session, request=request, recipe=recipe, sections=output.sections, checks=checks
    )
