"""Running one compiled program the way every command runs it: timed, then checked block by block.

matmul, einsum and reshard all compile a program, time it, and compare every device's block of
its result with a NumPy reference; this is that, once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardcli.runtime.processes import combine_check, combine_timing
from shardcli.runtime.timing import Timing, summarize, time_iterations
from shardcli.runtime.verify import element_errors


@dataclass(frozen=True)
class BlockCheck:
    """How many elements of the result were outside their bound, on which devices, and the largest
    error relative to its scale (every process's, combined)."""

    wrong: int
    wrong_devices: tuple[int, ...]
    max_rel_err: float


def check_blocks(
    y: Any, ref: np.ndarray, bound: np.ndarray, scale: np.ndarray, device_ids: Sequence[int]
) -> BlockCheck:
    """Compare each addressable block of `y` with `ref` at its index: |y - ref| <= bound.

    NaN counts as wrong. `scale` is what the reported relative error divides by.
    """
    wrong, wrong_devices, max_rel = 0, [], 0.0
    for shard in y.addressable_shards:
        index = shard.index
        err = element_errors(np.asarray(shard.data), ref[index])  # NaN where NumPy has NaN is right
        bad = ~((err == 0) | (err <= bound[index]))
        count = int(np.count_nonzero(bad))
        if err.size:
            max_rel = max(max_rel, float(np.max(err / np.maximum(scale[index], 1e-300))))
        if count:
            wrong += count
            wrong_devices.append(shard.device.id)
    total, devices, largest = combine_check(wrong, wrong_devices, max_rel, list(device_ids))
    return BlockCheck(wrong=total, wrong_devices=devices, max_rel_err=largest)


def time_compiled(
    compiled: Any,
    args: tuple[Any, ...],
    *,
    compile_s: float,
    cached: bool | None,
    warmup: int,
    iters: int,
    process_timing: str,
) -> tuple[Timing, Any]:
    """Run `compiled(*args)` warmup + iters times; the timing (combined over processes) and the
    last result."""
    samples, y = time_iterations(lambda xs: compiled(*xs), args, warmup=warmup, iters=iters, chain=False)
    timing = Timing(
        compile_s=compile_s, warmup=warmup, samples=samples, stats=summarize(samples), compile_cached=cached
    )
    return combine_timing(timing, process_timing), y
