"""Making input arrays: a NumPy host copy (the reference) and its sharded JAX placement."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shardcli.errors import ShardcliError
from shardcli.specs.values import ArraySpec, DType
from shardcli.tile_math import Index, normalize_index

RANDOM_SEED = 0


def numpy_dtype(dtype: DType) -> np.dtype:
    """The NumPy dtype for a DType (bfloat16 comes from ml_dtypes, which JAX ships)."""
    if dtype.name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype.name)


def make_host_array(spec: ArraySpec, seed: int = RANDOM_SEED, start: int = 0) -> np.ndarray:
    """The global array in host memory, filled per `spec.init` (or `spec.values`); deterministic.

    Args:
        spec: shape, dtype and fill.
        seed: the seed of `random`.
        start: where `arange` starts, so that several operands number their elements in one sequence
            (A 0..15, B 16..31), as the tutorials' `arange(16)` and `arange(16, 32)` do.
    """
    dt = numpy_dtype(spec.dtype)
    if spec.values is not None:
        return (
            np.array(spec.values, dtype=np.float64 if spec.dtype.kind == "float" else object)
            .astype(dt)
            .reshape(spec.shape)
        )
    if spec.init == "ones":
        return np.ones(spec.shape, dtype=dt)
    if spec.init == "zeros":
        return np.zeros(spec.shape, dtype=dt)
    if spec.init == "arange":
        flat = np.arange(start, start + spec.size, dtype=np.int64)
        if spec.dtype.kind == "bool":
            return (flat % 2).astype(bool).reshape(spec.shape)
        if spec.dtype.kind in ("int", "uint"):
            top = int(np.iinfo(dt).max)
            if start + spec.size > top:  # wrap instead of overflowing narrow ints
                flat = flat % (top + 1)
        return flat.astype(dt).reshape(spec.shape)
    if spec.init in ("random", "normal"):
        rng = np.random.default_rng(seed)
        if spec.dtype.kind == "float" and spec.init == "normal":
            return rng.standard_normal(spec.shape, dtype=np.float32).astype(dt)
        if spec.dtype.kind == "float":
            return rng.random(spec.shape, dtype=np.float32).astype(dt)
        if spec.dtype.kind == "bool":
            return rng.integers(0, 2, spec.shape).astype(bool)
        return rng.integers(0, 100, spec.shape).astype(dt)
    raise ValueError(f"unknown init {spec.init!r}")


# --values-file reads at most this many bytes: a small array to look at, not a data set.
VALUES_FILE_MAX_BYTES = 16 * 2**20


def load_values_file(path: str, max_bytes: int = VALUES_FILE_MAX_BYTES) -> np.ndarray:
    """A numeric array from a .npy file, read with a size cap; never a pickle, never a non-file.

    Raises:
        ShardcliError: not a regular file (a directory, fifo or device), too large, not a .npy
            NumPy reads without pickles, or not numbers.
    """
    import io
    import os
    import stat

    flag = f"--values-file {path}"
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        raise ShardcliError(f"{flag} cannot be read: {error.strerror}; give a .npy file") from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a fifo, device or socket)"
        raise ShardcliError(f"{flag} is {kind}; give a .npy file written by numpy.save")
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as error:
        raise ShardcliError(f"{flag} cannot be read: {error.strerror}; give a .npy file") from None
    if len(data) > max_bytes:
        raise ShardcliError(
            f"{flag} is over {max_bytes // 2**20} MiB; --values-file is for small arrays to look at"
        )
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as error:  # noqa: BLE001 - whatever NumPy says of a bad file, one line
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ShardcliError(
            f"{flag} is not a .npy array NumPy can read ({first}); write it with numpy.save"
        ) from None
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "biuf":
        what = getattr(array, "dtype", type(array).__name__)
        raise ShardcliError(f"{flag} holds {what}, not numbers; save a bool, int or float array")
    return array


@dataclass(frozen=True)
class DeviceBlock:
    """One device's block of a result: where it sits in the global array, and its values."""

    device_id: int
    index: Index
    values: np.ndarray


@dataclass(frozen=True)
class ShownValues:
    """A small result as a person reads it: the global array and every (addressable) device's block."""

    global_values: np.ndarray
    blocks: tuple[DeviceBlock, ...]


def shown_values(array: Any, device_order: list[int] | None = None) -> ShownValues | None:
    """The global values and each device's block of a JAX array; None where this process cannot see
    every block (the global array spans processes)."""
    if not getattr(array, "is_fully_addressable", True):
        return None
    shape = tuple(array.shape)
    by_device = {s.device.id: s for s in array.addressable_shards}
    order = device_order if device_order is not None else sorted(by_device)
    blocks = tuple(
        DeviceBlock(
            device_id=d,
            index=normalize_index(by_device[d].index, shape),
            values=np.asarray(by_device[d].data),
        )
        for d in order
        if d in by_device
    )
    return ShownValues(global_values=np.asarray(array), blocks=blocks)


def place_array(host: np.ndarray, sharding: Any) -> Any:
    """Put a host array on devices with the given sharding, one block per device.

    `make_array_from_callback` hands each device only its block, and works the same when the mesh
    spans several processes.
    """
    import jax

    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])
