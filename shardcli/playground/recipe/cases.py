"""The recipe registry: the classic sharding recipes, each a name, a line, a default mesh and its program.

Adding a recipe is adding an entry to RECIPES; `--help`, `recipe list`, validation and the tests pick
it up. `--help` lists this registry, so it stays fast: a recipe names its program, a function of
`shardcli/playground/recipe/programs.py` that the core looks up when the recipe runs, so this module imports
neither the core nor NumPy nor JAX.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from shardcli.errors import ShardcliError

if TYPE_CHECKING:
    from shardcli.specs.meshes import MeshSpec


@dataclass(frozen=True)
class Recipe:
    """One recipe: what it shows, the mesh it runs on by default, the meshes it can use, its program."""

    name: str
    summary: str
    default_mesh: str  # e.g. "2x4"
    default_axes: str  # e.g. "data,model"
    ranks: tuple[int, ...]  # mesh ranks (number of axes) the recipe can use
    needs: str  # the mesh it needs, in words, for errors
    program: str  # its function in shardcli/playground/recipe/programs.py: Lab -> sections and checks
    input: str | None = None  # the input --init fills (the recipe's lesson), or None
    takes_shape: bool = True  # whether --shape sets that input's shape (one input), or only --init
    lesson: str = ""  # the tutorial (file in the tutorials folder) and section it reproduces

    @property
    def default(self) -> str:
        return f"--mesh {self.default_mesh} --axes {self.default_axes}"


TWO_AXES = "a 2-D mesh (rows x columns of devices)"
# The tutorials the recipes reproduce (in the project's tutorials folder; see docs/tutorials/lessons.md).
PROJAX = "ProJAX 'Introduction to sharded computation' (tutorials/004)"
INTRO = "learn_jax intro_to_distributed.py (tutorials/000)"

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
            "elementwise",
            input="x, sharded over the first two mesh axes",
            lesson=PROJAX
            + ", '1. Automatic parallelism via jit': f_elementwise on arange(32.0).reshape(4, 8) "
            "over a 2x4 mesh",
        ),
        Recipe(
            "reduce",
            "x.sum(axis=0) under jit: the sharding the compiler picks, then one forced with "
            "with_sharding_constraint",
            "2x4",
            "data,model",
            (2,),
            TWO_AXES,
            "reduce",
            input="x, rows over the first axis and columns over the second",
            lesson=PROJAX + ", f_contract and '2. Semi-automated sharding with constraints': "
            "x.sum(axis=0) of arange(32.0).reshape(4, 8) is [48. 52. ... 76.]",
        ),
        Recipe(
            "three-ways",
            "sigmoid(x @ W + b) automatic, semi-automatic (with_sharding_constraint) and manual "
            "(shard_map + psum): same numbers, their collectives",
            "8",
            "x",
            (1, 2),
            "a 1-D mesh (the lesson) or a 2-D one (batch and contracting dim split)",
            "three_ways",
            lesson=PROJAX + ", 'Comparing the three approaches': layer(x[32], weights[32, 4], bias[4]) "
            "from default_rng(0) on a 1-D mesh is [0.02138916 0.8931118 0.5989196 0.9774251]",
        ),
        Recipe(
            "normalize",
            "parallel_normalize: each element normalised by the mean and std of its peers along the "
            "second axis (pmean element by element in shard_map)",
            "4x2",
            "i,j",
            (2,),
            TWO_AXES,
            "normalize",
            lesson=INTRO + ", 'Axis Communication': parallel_normalize of normal(PRNGKey(0), (192, 64)) on "
            "a 4x2 (i, j) mesh",
        ),
        Recipe(
            "normalize-rows",
            "a variant of normalize: each row normalised by its own mean and std, the row split over "
            "the second axis (mean of the block, then pmean)",
            "4x2",
            "i,j",
            (2,),
            TWO_AXES,
            "normalize_rows",
            lesson="a variant of " + INTRO + "'s parallel_normalize (its comment's 'row statistics')",
        ),
        Recipe(
            "axis-index",
            "each device's index along every mesh axis, from axis_index in a jitted shard_map",
            "2x2x2",
            "x,y,z",
            (1, 2, 3, 4),
            "a mesh of 1 to 4 axes",
            "axis_index",
            lesson=INTRO + ", 'axis indexing': Device k: i-axis=..., j-axis=... on a 4x2 (i, j) mesh",
        ),
        Recipe(
            "rng-fold",
            "a PRNG key folded over the first axis: devices differ along it and agree along the second",
            "2x4",
            "data,model",
            (2,),
            TWO_AXES,
            "rng_fold",
            lesson=INTRO + ", 'fold rng over given axis': fold_rng_over_axis over i on a 4x2 (i, j) mesh",
        ),
        Recipe(
            "pipeline-ring",
            "arange(n) rolling around a ring of devices with ppermute, step by step (--steps)",
            "4",
            "stage",
            (1,),
            "a 1-D mesh (the ring)",
            "pipeline_ring",
            input="the values on the ring, split over its axis",
            lesson=INTRO + ", ppermute_example: arange(4) over i=4, one step gives [3 0 1 2]",
        ),
        Recipe(
            "sharded-mac",
            "x[B_i,D] . W[D,F_j] + b[F_j] placed with device_put, plain jnp under jit, then shard_map",
            "2x4",
            "data,model",
            (2,),
            TWO_AXES,
            "sharded_mac",
            input="x, W and b (arange numbers them in one sequence)",
            takes_shape=False,
            lesson=INTRO + ", 'multi-axis mesh': the sharded MAC y = x @ w + b, x over i, w and b over j, "
            "then the same with shard_map (smaller arrays)",
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
