"""The recipe registry: the classic sharding recipes, each a name, a line, a default mesh and its program.

Adding a recipe is adding an entry to RECIPES; `--help`, `recipe list`, validation and the tests pick
it up. `--help` lists this registry, so it stays fast: the programs (`shardcli/core/recipe_programs.py`)
import NumPy and JAX only when they run.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardcli.core import recipe_programs as programs
from shardcli.core.recipe_programs import RecipeProgram
from shardcli.errors import ShardcliError
from shardcli.specs import MeshSpec


@dataclass(frozen=True)
class Recipe:
    """One recipe: what it shows, the mesh it runs on by default, the meshes it can use, its program."""

    name: str
    summary: str
    default_mesh: str  # e.g. "2x4"
    default_axes: str  # e.g. "data,model"
    ranks: tuple[int, ...]  # mesh ranks (number of axes) the recipe can use
    needs: str  # the mesh it needs, in words, for errors
    program: RecipeProgram  # runs the recipe on a Lab and returns its sections and checks
    input: str | None = None  # the input --shape and --init set (the recipe's lesson), or None

    @property
    def default(self) -> str:
        return f"--mesh {self.default_mesh} --axes {self.default_axes}"


TWO_AXES = "a 2-D mesh (rows x columns of devices)"

RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            "elementwise",
            "2*sin(x)+1 on a sharded array keeps the input's sharding, device by device",
            "2x4",
            "data,model",
            (1, 2),
            "a 1-D or 2-D mesh",
            programs.elementwise,
            input="x, sharded over the first two mesh axes",
        ),
        Recipe(
            "reduce",
            "x.sum(axis=0) under jit: the sharding the compiler picks, then one forced with "
            "with_sharding_constraint",
            "2x4",
            "data,model",
            (2,),
            TWO_AXES,
            programs.reduce,
            input="x, rows over the first axis and columns over the second",
        ),
        Recipe(
            "three-ways",
            "sigmoid(x @ W + b) automatic, semi-automatic (with_sharding_constraint) and manual "
            "(shard_map + psum): same numbers, their collectives",
            "2x4",
            "data,model",
            (2,),
            TWO_AXES,
            programs.three_ways,
        ),
        Recipe(
            "normalize",
            "per-row normalisation with rows split over the second axis: mean and std via pmean in shard_map",
            "2x4",
            "data,model",
            (2,),
            TWO_AXES,
            programs.normalize,
        ),
        Recipe(
            "axis-index",
            "each device's index along every mesh axis, from axis_index in a jitted shard_map",
            "2x2x2",
            "x,y,z",
            (1, 2, 3, 4),
            "a mesh of 1 to 4 axes",
            programs.axis_index,
        ),
        Recipe(
            "rng-fold",
            "a PRNG key folded over the first axis: devices differ along it and agree along the second",
            "2x4",
            "data,model",
            (2,),
            TWO_AXES,
            programs.rng_fold,
        ),
        Recipe(
            "pipeline-ring",
            "values rolling around a ring of devices with ppermute, step by step (--steps)",
            "4",
            "stage",
            (1,),
            "a 1-D mesh (the ring)",
            programs.pipeline_ring,
        ),
        Recipe(
            "sharded-mac",
            "x[B_i,D] . W[D,F_j] + b[F_j] placed with device_put, plain jnp under jit, then shard_map",
            "2x4",
            "data,model",
            (2,),
            TWO_AXES,
            programs.sharded_mac,
        ),
    )
}


def get_recipe(name: str) -> Recipe:
    """The recipe called `name`.

    Raises:
        ShardcliError: an unknown name (the message lists the recipes).
    """
    if name not in RECIPES:
        raise ShardcliError(
            f"unknown recipe {name!r}; choose one of {', '.join(RECIPES)} (shardcli recipe list)"
        )
    return RECIPES[name]


def validate_recipe_mesh(recipe: Recipe, mesh: MeshSpec) -> None:
    """Refuse a mesh the recipe cannot use, naming its default.

    Raises:
        ShardcliError: the wrong number of axes.
    """
    rank = len(mesh.shape)
    if rank not in recipe.ranks:
        given = "x".join(map(str, mesh.shape))
        raise ShardcliError(
            f"recipe {recipe.name} needs {recipe.needs}, not --mesh {given}; its default is {recipe.default}"
        )
