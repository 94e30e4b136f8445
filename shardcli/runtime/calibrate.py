"""Measured peak FLOP/s and copy bandwidth for devices with no nominal figures (faked CPU devices).

Both run on every device at once, as the sharded matmuls do: faked CPU devices share the host's
cores and memory, so one device alone would overstate what each gets when all of them work.
"""

from __future__ import annotations

import functools
from typing import Any

from shardcli.runtime.timing import summarize, time_iterations

CALIBRATION_DIM = 256  # local matmul M = N = K
CALIBRATION_COPY_BYTES = 4 * 1024 * 1024  # per device
CALIBRATION_ITERS = 10


@functools.lru_cache(maxsize=8)
def _measure(device_ids: tuple[int, ...], dtype_name: str) -> tuple[float, float]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    by_id = {d.id: d for d in jax.devices()}
    devices = [by_id[i] for i in device_ids]
    n = len(devices)
    mesh = jax.make_mesh((n,), ("d",), axis_types=(AxisType.Auto,), devices=devices)
    sharding = NamedSharding(mesh, P("d"))
    dim = CALIBRATION_DIM
    dtype = jnp.dtype(dtype_name)

    a = jax.device_put(jnp.ones((n * dim, dim), dtype), sharding)
    matmul = jax.jit(
        jax.shard_map(lambda x: x @ x.T, mesh=mesh, in_specs=P("d"), out_specs=P("d")),
    )
    matmul(a).block_until_ready()
    samples, _ = time_iterations(matmul, a, warmup=2, iters=CALIBRATION_ITERS, chain=False)
    flops = 2 * dim**3 / summarize(samples).p50

    count = CALIBRATION_COPY_BYTES // 4
    x = jax.device_put(np.zeros(n * count, np.float32), sharding)
    ring = [(i, (i + 1) % n) for i in range(n)]
    shift = jax.jit(
        jax.shard_map(lambda v: lax.ppermute(v, "d", ring), mesh=mesh, in_specs=P("d"), out_specs=P("d"))
    )
    shift(x).block_until_ready()
    samples, _ = time_iterations(shift, x, warmup=2, iters=CALIBRATION_ITERS, chain=False)
    copy = CALIBRATION_COPY_BYTES / summarize(samples).p50
    return flops, copy


def calibrate(devices: tuple[Any, ...], dtype_name: str) -> tuple[float, float, str, str]:
    """Per-device FLOP/s and bytes/s measured on these devices, with labels saying how.

    Measured once per process for each device set and dtype.
    """
    flops, copy = _measure(tuple(d.id for d in devices), dtype_name)
    dim = CALIBRATION_DIM
    n = len(devices)
    return (
        flops,
        copy,
        f"measured: {dim}x{dim}x{dim} {dtype_name} matmul on all {n} devices at once",
        f"measured: ppermute ring of {CALIBRATION_COPY_BYTES >> 20} MiB per device on all {n} devices",
    )
