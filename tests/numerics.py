"""Test helpers for numerics: rounding as accelerators do it, emulated in NumPy."""

from __future__ import annotations

import numpy as np


def tf32(a: np.ndarray) -> np.ndarray:
    """`a` as float32 rounded to TF32 (10 mantissa bits, to nearest even): what a recent GPU's
    tensor cores multiply at XLA's default float32 dot precision."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x0FFF) + ((bits >> np.uint32(13)) & np.uint32(1))) & np.uint32(0xFFFFE000)
    return rounded.view(np.float32)
