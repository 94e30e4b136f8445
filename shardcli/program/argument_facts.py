"""The user's arguments as shardcli describes them: each array leaf's name, shape, sharding, tiles and
bytes (`fact_of`), and the checks `inspect` makes of them before it compiles (a sharding that does
not divide its array, --inputs that returned too many arrays, an --arg spec naming an axis the mesh
lacks)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from shardcli.analysis.arguments import ArrayFact, Entries
from shardcli.errors import ShardcliError
from shardcli.program.inputs import argument_trees, is_array_leaf, path_text
from shardcli.specs.arguments import AbstractArg
from shardcli.specs.meshes import MeshSpec, ShardingSpec
from shardcli.tile_math import ShardingLayout, group_tiles, normalize_index


def layout_of(sharding: Any, shape: tuple[int, ...]) -> ShardingLayout:
    """The tiles a sharding cuts an array of `shape` into, from JAX's own index map."""
    index = sharding.devices_indices_map(tuple(shape))
    return group_tiles(shape, {d.id: normalize_index(idx, shape) for d, idx in index.items()})


def spec_text(entries: Entries | None, sharding: Any) -> str:
    if entries is None:
        return type(sharding).__name__
    if not any(entries):
        return "P() (replicated)"
    return ShardingSpec(entries).describe()


def fact_of(name: str, struct: Any, default_sharding: Any = None, *, sharding: Any = None) -> ArrayFact:
    """An ArrayFact for one leaf (a ShapeDtypeStruct or array with a sharding).

    A typed PRNG key (`key<rbg>`) counts the bytes of its key data (`jax.random.key_data`: 4 uint32
    words per rbg key, 2 per threefry key) per element of its shape.

    Args:
        sharding: the sharding to describe it with (the compiled program's), before its own.
        default_sharding: the sharding where the leaf has none.
    """
    import numpy as np

    from shardcli.program.inputs import is_key
    from shardcli.runtime.mesh import entries_of

    shape = tuple(int(d) for d in struct.shape)
    sharding = sharding or getattr(struct, "sharding", None) or default_sharding
    if sharding is None:
        raise ShardcliError(f"argument {name} ({struct.dtype}{list(shape)}) has no sharding; give it one")
    key = is_key(struct.dtype)
    itemsize = int(struct.dtype.itemsize) if key else np.dtype(struct.dtype).itemsize
    entries = entries_of(sharding, len(shape))
    layout = layout_of(sharding, shape)
    return ArrayFact(
        name=name,
        dtype=str(struct.dtype) if key else str(np.dtype(struct.dtype)),
        shape=shape,
        entries=entries,
        spec=spec_text(entries, sharding),
        layout=layout,
        bytes_global=math.prod(shape) * itemsize,
        bytes_per_device=math.prod(layout.local_shape) * itemsize if shape else itemsize,
    )


def leaf_names(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None = None
) -> list[tuple[str, Any]]:
    """(`params['w1']`, leaf) for every array leaf (`argument_trees` names the arguments). Other
    leaves (Python numbers, an equinox module's functions) take no device memory and are left out."""
    import jax

    out = []
    for base, arg in argument_trees(fn, args, kwargs):
        for path, leaf in jax.tree_util.tree_flatten_with_path(arg)[0]:
            if is_array_leaf(leaf):
                out.append((base + path_text(path), leaf))
    return out


def laid_out_fact(program: str, name: str, leaf: Any, unplaced: Any) -> ArrayFact:
    """`fact_of` one argument leaf.

    Raises:
        ShardcliError: its sharding does not divide it (one line naming the argument).
    """
    try:
        return fact_of(name, leaf, unplaced)
    except ShardcliError:
        raise
    except Exception as error:  # noqa: BLE001 - a sharding that does not divide its array, say
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        spec = getattr(getattr(leaf, "sharding", None), "spec", None)
        laid = f" laid out {spec}" if spec is not None else ""
        raise ShardcliError(
            f"argument {name} of {program} ({leaf.dtype}{list(leaf.shape)}){laid} cannot be laid out on this "
            f"mesh: {reason}"
        ) from None


# Far above a real model's parameter arrays (hundreds to a few thousand), far below what would
# take minutes to lower: a program over a million arguments is a mistake, not a model.
MAX_INPUT_LEAVES = 10_000


def check_input_leaves(args: tuple[Any, ...], inputs: str) -> None:
    """Raises: ShardcliError when --inputs returned more arrays than a program takes, or a pytree
    nested too deeply to walk."""
    import jax

    try:
        count = len(jax.tree_util.tree_leaves(args))
    except (RecursionError, SystemError, MemoryError) as error:
        raise ShardcliError(
            f"--inputs {inputs} returned a pytree nested too deeply to walk ({type(error).__name__}); "
            "return the function's arguments"
        ) from None
    if count > MAX_INPUT_LEAVES:
        raise ShardcliError(
            f"--inputs {inputs} returned {count} arrays; inspect takes at most {MAX_INPUT_LEAVES} (a "
            "model's parameters are hundreds to thousands): return the function's arguments"
        )


def checked_on(args: tuple[AbstractArg, ...], mesh: MeshSpec) -> tuple[AbstractArg, ...]:
    """The --arg specs, checked against the mesh they meet (a target's mesh is known only now)."""
    from shardcli.specs.meshes import check_sharding_fits

    for i, a in enumerate(args):
        for axis in a.sharding.axes_used():
            if axis not in mesh.axes:
                raise ShardcliError(
                    f"--arg {a.describe()!r} names mesh axis {axis!r}, which is not in the mesh; the mesh "
                    f"axes are {', '.join(mesh.axes)}"
                )
        check_sharding_fits(a.sharding, mesh, a.shape, flag="its spec", what=f"--arg {i} ({a.describe()})")
    return args
