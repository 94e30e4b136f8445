"""Timing: compile separately, then warm-up and timed iterations, each blocked until ready."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TimingStats:
    """Per-iteration time in seconds."""

    min: float
    p50: float
    p90: float
    max: float
    mean: float
    stdev: float


@dataclass(frozen=True)
class Timing:
    """Compile time and the steady-state samples of one program."""

    compile_s: float
    warmup: int
    samples: tuple[float, ...]
    stats: TimingStats
    # Several processes: each one's own timing, and how `samples` combine them ("max" or "avg").
    per_process: tuple[Timing, ...] = ()
    across_processes: str | None = None
    compile_cached: bool | None = None  # read from the persistent cache; None: the cache is off


def summarize(samples: tuple[float, ...]) -> TimingStats:
    arr = np.asarray(samples, dtype=np.float64)
    return TimingStats(
        min=float(np.min(arr)),
        p50=float(np.percentile(arr, 50)),
        p90=float(np.percentile(arr, 90)),
        max=float(np.max(arr)),
        mean=float(arr.mean()),
        stdev=float(statistics.stdev(samples)) if len(samples) > 1 else 0.0,
    )


def compile_timed(jitted: Any, *args: Any) -> tuple[Any, float, bool | None]:
    """Lower and compile.

    Returns:
        The executable, the seconds it took, and whether it came from the persistent compile
        cache (None when the cache is off).
    """
    from shardcli.runtime.cache import cache_enabled, cache_hits

    before = cache_hits()
    start = time.perf_counter()
    compiled = jitted.lower(*args).compile()
    seconds = time.perf_counter() - start
    return compiled, seconds, (cache_hits() > before) if cache_enabled() else None


def time_iterations(
    step: Callable[..., Any],
    x: Any,
    *,
    warmup: int,
    iters: int,
    chain: bool = False,
    out: Any = None,
    fresh: Callable[[], Any] | None = None,
) -> tuple[tuple[float, ...], Any]:
    """Run `step` warmup + iters times, blocking on each result; time the last `iters`.

    Args:
        step: the compiled program.
        x: its input.
        chain: feed each output back as the next input (in-place runs, whose input is donated).
        out: an output buffer. Each call is `step(x, out)` with `out` donated to it, and the
            result becomes the next call's `out`: out of place into one preallocated buffer,
            like nccl-tests' recvbuff. None: `step(x)` allocates a fresh output every call.
        fresh: makes each call's input afresh, untimed, in place of `x` (a copy back to the host,
            which a jax.Array keeps after the first: the calls after it would copy nothing).

    Returns:
        The per-iteration seconds and the last output.
    """
    if chain and out is not None:
        raise ValueError("chain feeds outputs back as inputs, out as output buffers; not both")
    samples: list[float] = []
    y = None
    for i in range(warmup + iters):
        if not chain and out is None:
            # Free the previous result first: holding it makes every call fault in fresh pages
            # (measured: all_gather 1 MiB x 8 took 13-14 ms instead of 6-7 ms).
            y = None
        if fresh is not None:
            x = fresh()
            if hasattr(x, "block_until_ready"):
                x.block_until_ready()
        start = time.perf_counter()
        y = step(x) if out is None else step(x, out)
        if hasattr(y, "block_until_ready"):
            y.block_until_ready()
        else:  # a program with several results (inspect --run)
            import jax

            jax.block_until_ready(y)
        seconds = time.perf_counter() - start
        if i >= warmup:
            samples.append(seconds)
        if chain:
            x = y
        elif out is not None:
            out = y
    return tuple(samples), y
