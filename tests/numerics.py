"""Test helpers for numerics: rounding as accelerators do it, emulated in NumPy."""

from __future__ import annotations

import numpy as np


def tf32(a: np.ndarray, mode: str = "nearest") -> np.ndarray:
    """`a` as float32 with TF32's 10 mantissa bits: what a recent GPU's tensor cores multiply at
    XLA's default float32 dot precision. `nearest` rounds to nearest even; `truncate` drops the low
    13 bits, as Hopper's wgmma instructions may."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    if mode == "truncate":
        return (bits & np.uint32(0xFFFFE000)).view(np.float32)
    rounded = (bits + np.uint32(0x0FFF) + ((bits >> np.uint32(13)) & np.uint32(1))) & np.uint32(0xFFFFE000)
    return rounded.view(np.float32)
