"""`shardcli run`'s inputs: the values of each --arg (an init or a .npy file, checked to fit its
dtype), or what `--inputs` returned, filled where abstract and placed on the mesh."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from shardcli.errors import ShardcliError
from shardcli.program.run_request import RunArg, RunRequest
from shardcli.runtime.session import Session


def host_values(arg: RunArg, default_init: str) -> np.ndarray:
    """The global values of one --arg: an init, or a .npy file of the declared shape.

    Raises:
        ShardcliError: the file cannot be read (empty, an .npz, a pickle), or holds another shape, a
            dtype it cannot be cast from, or a value the declared dtype cannot hold.
    """
    from shardcli.runtime.arrays import make_host_array, numpy_dtype
    from shardcli.specs.values import ArraySpec

    dtype = numpy_dtype(arg.arg.dtype)
    if arg.values_file is None:
        try:
            return make_host_array(ArraySpec(arg.arg.shape, arg.arg.dtype, arg.init or default_init))
        except MemoryError:
            raise ShardcliError(
                f"--arg {arg.describe()!r}: this machine cannot hold the array in memory; give a smaller "
                "shape"
            ) from None
    loaded = _read_npy(arg)
    if tuple(loaded.shape) != arg.arg.shape:
        raise ShardcliError(
            f"--arg {arg.describe()!r}: {arg.values_file} holds shape {list(loaded.shape)}, not "
            f"{list(arg.arg.shape)}; give the file's shape in the --arg"
        )
    if not np.can_cast(loaded.dtype, dtype, casting="same_kind"):
        raise ShardcliError(
            f"--arg {arg.describe()!r}: {arg.values_file} holds {loaded.dtype}, which does not cast to "
            f"{arg.arg.dtype.name}; give its dtype in the --arg"
        )
    _check_values_fit(arg, loaded, dtype)
    return loaded.astype(dtype)


def _read_npy(arg: RunArg) -> np.ndarray:
    """The array of a .npy file (never a pickle); one line for whatever else the file holds."""
    assert arg.values_file is not None
    try:
        loaded = np.load(arg.values_file, allow_pickle=False)
    except EOFError:  # click would take it for Ctrl-D at a prompt: "interrupted"
        raise ShardcliError(
            f"--arg {arg.describe()!r}: {arg.values_file} is empty; write it with numpy.save"
        ) from None
    except (OSError, ValueError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ShardcliError(f"--arg {arg.describe()!r}: cannot read {arg.values_file}: {first}") from None
    if not isinstance(loaded, np.ndarray):  # an .npz archive under a .npy name
        loaded.close()
        raise ShardcliError(
            f"--arg {arg.describe()!r}: {arg.values_file} is an .npz archive of several arrays, not "
            f"one .npy array; save the one array with numpy.save"
        )
    if loaded.dtype.kind not in "biuf":
        raise ShardcliError(
            f"--arg {arg.describe()!r}: {arg.values_file} holds {loaded.dtype}, not numbers; save a "
            f"bool, int or float array"
        )
    return loaded


def _check_values_fit(arg: RunArg, loaded: np.ndarray, dtype: np.dtype) -> None:
    """Refuse a value the declared dtype cannot hold (int64 2**40 in int32 would wrap to 0, 1e10
    in float16 would become inf): nothing the user gave is silently changed.

    Raises:
        ShardcliError: the first such value, with the dtype's range.
    """
    if loaded.size == 0 or loaded.dtype.kind == "b" or dtype.kind == "b":
        return
    import ml_dtypes  # its finfo and iinfo know bfloat16 and friends as well as NumPy's own

    if dtype.kind in "iu":
        info = ml_dtypes.iinfo(dtype)
        bad = (loaded < info.min) | (loaded > info.max)
        limits = f"{info.min} to {info.max}"
    else:
        top = float(ml_dtypes.finfo(dtype).max)
        wide = loaded.astype(np.float64)
        bad = np.isfinite(wide) & (np.abs(wide) > top)
        limits = f"finite values up to {top:.6g} in magnitude"
    if np.any(bad):
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        value = loaded[where].item()
        raise ShardcliError(
            f"--arg {arg.describe()!r}: {arg.values_file} holds {value!r} at index {list(where)}, which "
            f"{arg.arg.dtype.name} cannot hold ({limits}); give a wider dtype in the --arg"
        )


def _fill(struct: Any, init: str, seed: int) -> np.ndarray:
    """Values for an abstract leaf (a ShapeDtypeStruct that --inputs returned)."""
    from shardcli.runtime.arrays import make_host_array
    from shardcli.specs.values import DTYPES, ArraySpec

    name = np.dtype(struct.dtype).name
    if name not in DTYPES:
        raise ShardcliError(
            f"--inputs returned an abstract {name} array; shardcli fills {', '.join(DTYPES)}: "
            f"return the array itself"
        )
    return make_host_array(ArraySpec(tuple(struct.shape), DTYPES[name], init), seed=seed)


def concrete_inputs(
    request: RunRequest, session: Session
) -> tuple[Any, list[str], tuple[str, ...], Callable[..., Any] | None]:
    """The function's positional arguments as arrays on the mesh, what filled each leaf, the files
    of --inputs (an error raised there is the user's), and the step --inputs returned (if any)."""
    import jax
    from jax.sharding import NamedSharding

    from shardcli.program.inputs import call_inputs
    from shardcli.program.user_code import load
    from shardcli.runtime.arrays import place_array
    from shardcli.runtime.mesh import partition_spec

    if request.inputs is None:
        _check_memory(request, session)
        arrays = []
        for a in request.args:
            sharding = NamedSharding(session.mesh, partition_spec(a.arg.sharding.entries))
            arrays.append(place_array(host_values(a, request.init), sharding))
        return tuple(arrays), [a.filled_with(request.init) for a in request.args], (), None
    maker = load(request.inputs, flag="--inputs", what="NAME")
    given = call_inputs(maker, request.inputs, session.mesh)
    if given.kwargs:
        raise ShardcliError(
            f"--inputs {request.inputs} returned keyword arguments ({', '.join(map(str, given.kwargs))}); "
            f'run passes positional arguments only: return them in "args"'
        )
    flat, tree = jax.tree_util.tree_flatten_with_path(given.args)
    filled: list[Any] = []
    how: list[str] = []
    for path, leaf in flat:
        where = f"--inputs {request.inputs} returned args{jax.tree_util.keystr(path)}"
        _check_input_leaf(leaf, where)
        if isinstance(leaf, jax.ShapeDtypeStruct):
            host = _fill(leaf, request.init, seed=len(filled))
            sharding = leaf.sharding or NamedSharding(session.mesh, partition_spec(()))
            filled.append(place_array(host, sharding))
            how.append(request.init)
        else:
            filled.append(leaf)
            how.append("--inputs")
    args = jax.tree_util.tree_unflatten(tree, filled)
    return args, how, maker.roots, given.fn


def _check_input_leaf(leaf: Any, where: str) -> None:
    """Raises: ShardcliError for a leaf run cannot fill, place or show: no array (a Python number,
    a string), a typed PRNG key, a sharding that does not divide the shape."""
    import jax

    from shardcli.program.inputs import is_array_leaf, is_key

    if not is_array_leaf(leaf):
        raise ShardcliError(
            f"{where}: a {type(leaf).__name__}, not an array; run takes arrays or jax.ShapeDtypeStruct "
            f"(make a number an array: jnp.asarray(x))"
        )
    if is_key(leaf.dtype):
        raise ShardcliError(
            f"{where}: a typed PRNG key ({leaf.dtype}), whose values run cannot show; pass "
            f"jax.random.key_data(key) and wrap it inside the function"
        )
    sharding = getattr(leaf, "sharding", None)
    if isinstance(leaf, jax.ShapeDtypeStruct) and sharding is not None:
        try:
            sharding.shard_shape(tuple(leaf.shape))
        except ValueError as error:
            first = (str(error).strip().splitlines() or [""])[0]
            raise ShardcliError(
                f"{where}: shape {list(leaf.shape)} cannot be split as its sharding asks ({first[:160]}); "
                f"give a shape each sharded dimension divides into"
            ) from None


def _check_memory(request: RunRequest, session: Session) -> None:
    """Refuse --arg arrays that do not fit this machine, before any is made (as `shard` does).

    Raises:
        ShardcliError: they would not fit.
    """
    from shardcli.runtime.memory import check_fits_in_memory

    if not request.args:
        return
    host = sum(math.prod(a.arg.shape) * a.arg.dtype.itemsize for a in request.args)
    sizes = dict(zip(request.mesh.axes, request.mesh.shape, strict=True))
    per_device = sum(
        math.prod(a.arg.shape)
        * a.arg.dtype.itemsize
        // math.prod(sizes.get(axis, 1) for axis in a.arg.sharding.axes_used())
        for a in request.args
    )
    check_fits_in_memory(
        session.runtime,
        list(session.devices),
        per_device=per_device,
        # the host copy plus one block per device
        total=host + per_device * request.mesh.size,
        what="--arg " + " ".join(a.describe() for a in request.args),
    )
