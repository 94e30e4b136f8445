"""Making input arrays: a NumPy host copy (the reference) and its sharded JAX placement."""

from __future__ import annotations

from typing import Any

import numpy as np

from shardcli.specs import ArraySpec, DType

RANDOM_SEED = 0


def numpy_dtype(dtype: DType) -> np.dtype:
    """The NumPy dtype for a DType (bfloat16 comes from ml_dtypes, which JAX ships)."""
    if dtype.name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype.name)


def make_host_array(spec: ArraySpec, seed: int = RANDOM_SEED) -> np.ndarray:
    """The global array in host memory, filled per `spec.init`; deterministic for a given spec and seed."""
    dt = numpy_dtype(spec.dtype)
    if spec.init == "ones":
        return np.ones(spec.shape, dtype=dt)
    if spec.init == "zeros":
        return np.zeros(spec.shape, dtype=dt)
    if spec.init == "arange":
        flat = np.arange(spec.size, dtype=np.int64)
        if spec.dtype.kind == "bool":
            return (flat % 2).astype(bool).reshape(spec.shape)
        if spec.dtype.kind in ("int", "uint"):
            info = np.iinfo(dt)
            flat = flat % (int(info.max) + 1)  # wrap instead of overflowing narrow ints
        return flat.astype(dt).reshape(spec.shape)
    if spec.init == "random":
        rng = np.random.default_rng(seed)
        if spec.dtype.kind == "float":
            return rng.random(spec.shape, dtype=np.float32).astype(dt)
        if spec.dtype.kind == "bool":
            return rng.integers(0, 2, spec.shape).astype(bool)
        return rng.integers(0, 100, spec.shape).astype(dt)
    raise ValueError(f"unknown init {spec.init!r}")


def place_array(host: np.ndarray, sharding: Any) -> Any:
    """Put a host array on devices with the given sharding, one block per device.

    `make_array_from_callback` hands each device only its block, and works the same when the mesh
    spans several processes.
    """
    import jax

    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])
