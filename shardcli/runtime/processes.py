"""Combining what each process saw into one answer that every process agrees on.

In a multi-process run each process can read only its own devices' shards, and times only its own
calls. These helpers gather small host vectors from every process (JAX's own
`multihost_utils.process_allgather`), so a wrong shard anywhere fails the run everywhere and the
timing shown can be the slowest (or average) process per iteration.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from shardcli.runtime.timing import Timing, summarize

# (rows, axis) -> the rows reduced along axis
REDUCERS: dict[str, Callable[..., np.ndarray]] = {"max": np.max, "avg": np.mean}


def process_count() -> int:
    import jax

    return int(jax.process_count())


def gather_from_processes(values: np.ndarray) -> np.ndarray:
    """Every process's `values`, stacked: shape (process count, *values.shape), the same everywhere.

    Every process must call this at the same point of the run, with the same shape.
    """
    values = np.asarray(values)
    if process_count() == 1:
        return values[None]
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(values, tiled=False))


def combine_check(
    wrong: int, wrong_devices: Sequence[int], max_err: float, device_ids: Sequence[int]
) -> tuple[int, tuple[int, ...], float]:
    """Add up each process's #wrong, join its wrong devices, take the largest error.

    Args:
        wrong: wrong elements on this process's devices.
        wrong_devices: ids of this process's devices with a wrong element.
        max_err: the largest error seen here.
        device_ids: every device of the mesh, in the same order on every process.
    """
    if process_count() == 1:
        return wrong, tuple(sorted(wrong_devices)), max_err
    mine = set(wrong_devices)
    # Counts as integers: JAX gathers float64 as float32 unless x64 is on, which rounds above 2**24.
    counts = gather_from_processes(np.array([wrong, *(d in mine for d in device_ids)], dtype=np.int32))
    errors = gather_from_processes(np.array([max_err], dtype=np.float32))
    flagged = np.asarray(counts[:, 1:].any(axis=0))
    return (
        int(counts[:, 0].astype(np.int64).sum()),
        tuple(sorted(d for d, bad in zip(device_ids, flagged, strict=True) if bad)),
        float(errors.max()),
    )


def combine_timing(timing: Timing, how: str) -> Timing:
    """The timing of the whole run: per iteration, the max (or mean) over processes.

    Each process's own timing is kept in `per_process`; a single process returns `timing` as is.
    """
    if process_count() == 1:
        return timing
    rows = gather_from_processes(np.array([timing.compile_s, *timing.samples], dtype=np.float64))
    combined = REDUCERS[how](rows, axis=0)
    per_process = tuple(
        Timing(
            compile_s=float(row[0]),
            warmup=timing.warmup,
            samples=tuple(float(v) for v in row[1:]),
            stats=summarize(tuple(row[1:])),
        )
        for row in rows
    )
    samples = tuple(float(v) for v in combined[1:])
    return Timing(
        compile_s=float(combined[0]),
        warmup=timing.warmup,
        samples=samples,
        stats=summarize(samples),
        per_process=per_process,
        across_processes=how,
        compile_cached=timing.compile_cached,
    )
