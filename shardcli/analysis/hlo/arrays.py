"""HLO element and array types: their bytes, their NumPy names, and the dtype a module's dots run in."""

from __future__ import annotations

import math
import re

from shardcli.analysis.hlo.module import INT64_MAX, HloModuleText, ModuleTextError

# HLO element types under NumPy's (and ml_dtypes') names, for the dtypes of dots.
NUMPY_NAMES = {
    "pred": "bool",
    "s2": "int2",
    "u2": "uint2",
    "s4": "int4",
    "u4": "uint4",
    "s8": "int8",
    "u8": "uint8",
    "s16": "int16",
    "u16": "uint16",
    "s32": "int32",
    "u32": "uint32",
    "s64": "int64",
    "u64": "uint64",
    "bf16": "bfloat16",
    "f16": "float16",
    "f32": "float32",
    "f64": "float64",
    "c64": "complex64",
    "c128": "complex128",
    "f4e2m1fn": "float4_e2m1fn",
    "f8e3m4": "float8_e3m4",
    "f8e4m3": "float8_e4m3",
    "f8e4m3fn": "float8_e4m3fn",
    "f8e4m3fnuz": "float8_e4m3fnuz",
    "f8e4m3b11fnuz": "float8_e4m3b11fnuz",
    "f8e5m2": "float8_e5m2",
    "f8e5m2fnuz": "float8_e5m2fnuz",
    "f8e8m0fnu": "float8_e8m0fnu",
}


# Integer element types (a mask's or an index table's constants).
INTEGER_TYPES = frozenset(
    {"s1", "u1", "s2", "u2", "s4", "u4", "s8", "u8", "s16", "u16", "s32", "u32", "s64", "u64"}
)

# Bits per element of every XLA primitive type (xla_data.proto's PrimitiveType;
# primitive_util::BitWidth). Arrays of sub-byte types are packed, as XLA lays them out on GPUs and
# TPUs: 64 f4e2m1fn take 32 bytes. A token or an opaque value holds no array data.
ELEMENT_BITS = {
    "pred": 8,
    "s1": 1,
    "u1": 1,
    "s2": 2,
    "u2": 2,
    "s4": 4,
    "u4": 4,
    "s8": 8,
    "u8": 8,
    "s16": 16,
    "u16": 16,
    "s32": 32,
    "u32": 32,
    "s64": 64,
    "u64": 64,
    "f16": 16,
    "bf16": 16,
    "f32": 32,
    "f64": 64,
    "c64": 64,
    "c128": 128,
    "f4e2m1fn": 4,
    "f8e3m4": 8,
    "f8e4m3": 8,
    "f8e4m3fn": 8,
    "f8e4m3fnuz": 8,
    "f8e4m3b11fnuz": 8,
    "f8e5m2": 8,
    "f8e5m2fnuz": 8,
    "f8e8m0fnu": 8,
    "token": 0,
    "opaque": 0,
}
# Bytes per element of the types of a byte or more (a sub-byte type's is a fraction: ELEMENT_BITS).
ELEMENT_BYTES = {name: bits // 8 for name, bits in ELEMENT_BITS.items() if bits % 8 == 0}
_ARRAY_RE = re.compile(r"(?<![\w])([a-z][a-z0-9]*)\[([0-9,]*)\]")
Array = tuple[str, tuple[int, ...]]  # an HLO array type: ("bf16", (1024, 2048))


def array_types(shape: str) -> list[Array]:
    """Every array type in an HLO type (`f32[4,8]{1,0}`, or a tuple of them), in order.

    Raises:
        ModuleTextError: an array of more elements than XLA allows (an int64's worth).
    """
    found = []
    for element, dims in _ARRAY_RE.findall(shape):
        sizes = [d for d in dims.split(",") if d]
        if any(len(d) > 19 for d in sizes) or math.prod(int(d) for d in sizes) > INT64_MAX:
            short = dims if len(dims) <= 40 else dims[:20] + "..." + dims[-10:]
            raise ModuleTextError(
                f"its array type {element}[{short}] has more elements than XLA allows (2^63 - 1)"
            )
        found.append((element, tuple(int(d) for d in sizes)))
    return found


_QUOTED_RE = re.compile(r'"(?:[^"\\]|\\.)*"')


def array_kinds(hlo_text: str) -> list[tuple[str, str]]:
    """(element type, dimensions text) of every array type a module's text writes outside its
    quoted strings (metadata, backend configs), unchecked: what an element type XLA lacks is found by."""
    return _ARRAY_RE.findall(_QUOTED_RE.sub('""', hlo_text))


def array_bytes(array: Array) -> int:
    """Bytes of one array type, sub-byte elements packed (0 for an element type XLA does not have)."""
    return -(-math.prod(array[1]) * ELEMENT_BITS.get(array[0], 0) // 8)


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
