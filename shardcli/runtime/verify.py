"""Comparing device results with NumPy references, and the tolerances the comparisons use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shardcli.tile_math import normalize_index

EPS32 = float(np.finfo(np.float32).eps)
# |err| <= RTOL * max|reference| per array: float32 sums taken in another order (pipeline, model).
RTOL = 1e-4


@dataclass(frozen=True)
class Comparison:
    """How many elements differ beyond the tolerance, and the largest absolute error."""

    wrong: int
    max_abs_err: float


def float_eps(dtype: np.dtype) -> float:
    """Machine epsilon of a float dtype (bfloat16 through ml_dtypes)."""
    if dtype.name == "bfloat16":
        import ml_dtypes

        return float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps)
    return float(np.finfo(dtype).eps)


def dot_input_roundoff(platform: str, dtype_name: str) -> tuple[float, str]:
    """Unit roundoff of the values a dot really multiplies at JAX's default precision.

    0 where the inputs are used as they are; a float32 dot on a GPU rounds them to TF32 (10-bit
    mantissa), on a TPU to bf16. Verification adds 2 u_in |a| . |b| for that.
    """
    if dtype_name == "float32" and platform == "gpu":
        return 2.0**-11, "TF32 inputs (XLA's default float32 dot precision on recent GPUs)"
    if dtype_name == "float32" and platform == "tpu":
        return 2.0**-8, "bf16 inputs (DEFAULT float32 dot precision on TPU)"
    return 0.0, "exact products"


def element_errors(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """|actual - expected| in float64, 0 where the two are the same value: equal (the same infinity
    too) or both NaN, as NumPy's `equal_nan` says. NaN where one of them alone is NaN."""
    got = np.asarray(actual).astype(np.float64)
    want = np.asarray(expected).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        return np.where(same, 0.0, np.abs(got - want))


def compare_exact(actual: np.ndarray, expected: np.ndarray) -> Comparison:
    """Bit-for-bit equality (data movement, max/min, integer arithmetic)."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    if actual.shape != expected.shape:
        return Comparison(wrong=max(actual.size, expected.size), max_abs_err=float("inf"))
    equal = actual == expected.astype(actual.dtype)
    if actual.dtype.kind in "fcV":  # NaN in is NaN out: a NaN where NumPy has one is right
        equal = equal | (np.isnan(actual.astype(np.float64)) & np.isnan(expected.astype(np.float64)))
    wrong = int(actual.size - np.count_nonzero(equal))
    diff = element_errors(actual, expected) if wrong else np.zeros(1)
    return Comparison(wrong=wrong, max_abs_err=float(np.max(diff)) if diff.size else 0.0)


def compare_within(actual: np.ndarray, expected: np.ndarray, bound: np.ndarray) -> Comparison:
    """|actual - expected| <= bound elementwise (expected in float64)."""
    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        return Comparison(wrong=max(actual.size, expected.size), max_abs_err=float("inf"))
    diff = element_errors(actual, expected)
    bad = ~((diff == 0) | (diff <= bound))  # a NaN where NumPy has none is wrong (a NaN bound too)
    return Comparison(wrong=int(np.count_nonzero(bad)), max_abs_err=float(np.max(diff)) if diff.size else 0.0)


def compare_blocks(array: Any, expected: np.ndarray, bound: np.ndarray | float) -> Comparison:
    """|block - expected| <= bound over this process's blocks of a JAX `array` (expected in float64).

    Args:
        array: a JAX array, possibly sharded over several processes.
        expected: the whole array in float64.
        bound: the largest |error| allowed, per element (broadcast to `expected`) or for all.

    Returns:
        How many of this process's elements are off (NaN counts as off), and the largest error.
    """
    wrong, worst = 0, 0.0
    bound_arr = np.broadcast_to(np.asarray(bound, dtype=np.float64), expected.shape)
    for shard in array.addressable_shards:
        index = tuple(slice(a, b) for a, b in normalize_index(shard.index, tuple(array.shape)))
        err = element_errors(np.asarray(shard.data), expected[index])
        wrong += int(np.count_nonzero(~((err == 0) | (err <= bound_arr[index]))))
        if err.size:
            worst = max(worst, float(np.max(err)))
    return Comparison(wrong=wrong, max_abs_err=worst)


def sum_error_bound(blocks: list[np.ndarray], out_dtype: np.dtype, n: int, scale: float = 1.0) -> np.ndarray:
    """Error bound for a sum of n float blocks in any order, rounded to `out_dtype`.

    (n - 1) * eps * sum|x_j| bounds any summation order; one more eps * |result| covers the final
    rounding; `scale` divides for a mean.
    """
    in_eps = float_eps(np.asarray(blocks[0]).dtype) if np.asarray(blocks[0]).dtype.kind in "fV" else 0.0
    out_eps = float_eps(out_dtype)
    abs_sum = np.sum(np.abs(np.stack(blocks).astype(np.float64)), axis=0)
    return (max(n - 1, 1) * max(in_eps, out_eps) * abs_sum + out_eps * abs_sum) * scale + 1e-30
