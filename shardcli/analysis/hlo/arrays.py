"""HLO element and array types: their bytes, their NumPy names, and the dtype a module's dots run in."""

from __future__ import annotations

import math
import re

from shardcli.analysis.hlo.module import HloModuleText

# HLO element types under NumPy's names, for the dtypes of dots.
NUMPY_NAMES = {
    "bf16": "bfloat16",
    "f16": "float16",
    "f32": "float32",
    "f64": "float64",
    "s8": "int8",
    "u8": "uint8",
    "s32": "int32",
    "f8e4m3fn": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
}


# Integer element types (a mask's or an index table's constants).
INTEGER_TYPES = frozenset({"s4", "u4", "s8", "u8", "s16", "u16", "s32", "u32", "s64", "u64"})

# Bytes per element of each HLO element type.
ELEMENT_BYTES = {
    "pred": 1,
    "s4": 1,
    "u4": 1,
    "s8": 1,
    "u8": 1,
    "s16": 2,
    "u16": 2,
    "f16": 2,
    "bf16": 2,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "s64": 8,
    "u64": 8,
    "f64": 8,
    "c64": 8,
    "c128": 16,
    "f8e4m3fn": 1,
    "f8e5m2": 1,
}
_ARRAY_RE = re.compile(r"(?<![\w])([a-z][a-z0-9]*)\[([0-9,]*)\]")
Array = tuple[str, tuple[int, ...]]  # an HLO array type: ("bf16", (1024, 2048))


def array_types(shape: str) -> list[Array]:
    """Every array type in an HLO type (`f32[4,8]{1,0}`, or a tuple of them), in order."""
    return [(t, tuple(int(d) for d in dims.split(",") if d)) for t, dims in _ARRAY_RE.findall(shape)]


def array_bytes(array: Array) -> int:
    """Bytes of one array type (0 for an element type the table does not know)."""
    return math.prod(array[1]) * ELEMENT_BYTES.get(array[0], 0)


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO type: an array (`f32[4,8]{1,0}`) or a tuple of them."""
    return sum(array_bytes(a) for a in array_types(shape))


def dot_dtype(module: HloModuleText) -> str | None:
    """The dtype most of the program's matrix maths runs in: the left operands' element type of its
    dots and convolutions, weighted by their result sizes (NumPy's name); None without any."""
    weights: dict[str, int] = {}
    for comp in module.computations.values():
        for inst in comp.instructions.values():
            if inst.opcode not in ("dot", "convolution") or not inst.operands:
                continue
            lhs = comp.instructions.get(inst.operands[0])
            kind = re.match(r"\(?([a-z0-9]+)\[", lhs.shape) if lhs is not None else None
            size = re.match(r"[a-z0-9]+\[([0-9,]*)\]", inst.shape)
            if kind is None or size is None:
                continue
            elements = math.prod(int(d) for d in size.group(1).split(",") if d)
            weights[kind.group(1)] = weights.get(kind.group(1), 0) + elements
    if not weights:
        return None
    most = max(weights, key=lambda k: weights[k])
    return NUMPY_NAMES.get(most, most)
