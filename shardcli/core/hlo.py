"""Which collectives the compiler put into a program: read from post-partitioning HLO text."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

HLO_COLLECTIVE_OPS = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")
_ELEMENT_BYTES = {
    "pred": 1,
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
}
# `%all-reduce.3 = f32[4]{0} all-reduce(...)`, also tuple results (whose long forms carry
# `/*index=5*/` comments) and async `-start` forms.
_OP_RE = re.compile(
    r"=\s*(?P<shape>\([^()]*\)|[a-z0-9]+\[[0-9,]*\](?:\{[^}]*\})?)\s+"
    r"(?P<op>" + "|".join(HLO_COLLECTIVE_OPS) + r")(?P<start>-start)?\("
)
_ARRAY_RE = re.compile(r"([a-z0-9]+)\[([0-9,]*)\]")


@dataclass(frozen=True)
class HloCollective:
    """One kind of collective op found in the HLO: how many, and the bytes of their results."""

    op: str
    count: int
    result_bytes: int


def _shape_bytes(shape: str) -> int:
    total = 0
    for dtype, dims in _ARRAY_RE.findall(shape):
        size = math.prod(int(d) for d in dims.split(",") if d) if dims else 1
        total += size * _ELEMENT_BYTES.get(dtype, 0)
    return total


def find_collectives(hlo_text: str) -> tuple[HloCollective, ...]:
    """Count the collective ops in compiled HLO text, in a fixed order of kinds."""
    counts: dict[str, list[int]] = {}
    for match in _OP_RE.finditer(hlo_text):
        counts.setdefault(match.group("op"), []).append(_shape_bytes(match.group("shape")))
    return tuple(
        HloCollective(op=op, count=len(counts[op]), result_bytes=sum(counts[op]))
        for op in HLO_COLLECTIVE_OPS
        if op in counts
    )
