"""What one of XLA's own ops computes and reads, from the shapes the text gives it.

- a dot's or convolution's FLOPs and the dtype its maths runs in (`dot_flops`, `operand_dtype`), and
  every one of them with how many times an execution runs it (`xla_dots`): a profile's GEMM curve is
  read at each dot's own FLOPs;
- what a fusion reads of a parameter it only takes slices of (`sliced_bytes`), and how much more
  XLA's cost analysis charges for such parameters (`slice_overcharge`): `HloCostAnalysis` charges a
  slice or dynamic-slice of a fusion parameter as the slice, but a slice of a bitcast or reshape of
  it as the whole parameter (measured with jax 0.10.2: a fusion slicing 1 MiB of an 8 MiB parameter
  through a bitcast is charged 8 MiB read, the same slice taken directly 1 MiB).

No JAX import; tested on strings and on small compiles.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from shardcli.analysis.hlo.arrays import NUMPY_NAMES, Array, array_bytes, array_types
from shardcli.analysis.hlo.module import Computation, HloModuleText, Instruction, instruction_callees

# Ops that read only part of their operand: a fusion parameter used only by these (through the views
# below) is read as what they take of it, not whole.
PARTIAL_READS = frozenset({"slice", "dynamic-slice", "gather"})
# Ops that index an array another way and read nothing themselves inside a fusion.
_VIEWS = frozenset({"bitcast", "reshape"})
# What XLA's cost analysis charges as the slice when it takes a fusion parameter itself.
_XLA_SLICES = frozenset({"slice", "dynamic-slice"})


@dataclass(frozen=True)
class DotOp:
    """One of XLA's own dots or convolutions (not a library call): one run's FLOPs, the dtype its
    operands are in (NumPy's name) and how many times one execution runs it (loops per trip)."""

    name: str
    flops: float
    dtype: str | None
    runs: int


def first_array(comp: Computation, name: str) -> Array | None:
    """The (first) array type of instruction `name` of `comp`, or None where it has none."""
    op = comp.instructions.get(name)
    arrays = array_types(op.shape) if op is not None else []
    return arrays[0] if arrays else None


def dot_flops(comp: Computation, inst: Instruction) -> float:
    """2 x result elements x the contracting size: a dot's from `lhs_contracting_dims`, a
    convolution's from its kernel (elements over output features, over feature groups)."""
    results = array_types(inst.shape)
    operands = [first_array(comp, name) for name in inst.operands[:2]]
    if not results or len(operands) < 2 or any(a is None for a in operands):
        return 0.0
    out = math.prod(results[0][1])
    lhs, rhs = operands[0][1], operands[1][1]  # type: ignore[index]
    if inst.opcode == "dot":
        found = re.search(r"lhs_contracting_dims=\{([0-9,]*)\}", inst.attributes)
        dims = [int(d) for d in found.group(1).split(",") if d] if found else []
        return 2.0 * out * math.prod(lhs[d] for d in dims if d < len(lhs))
    labels = re.search(r"dim_labels=[0-9a-z]+_(?P<rhs>[0-9a-z]+)->", inst.attributes)
    groups = re.search(r"feature_group_count=(\d+)", inst.attributes)
    out_features = rhs[labels.group("rhs").index("o")] if labels and "o" in labels.group("rhs") else 1
    contracted = math.prod(rhs) / max(1, out_features) / (int(groups.group(1)) if groups else 1)
    return 2.0 * out * contracted if len(rhs) == len(labels.group("rhs") if labels else rhs) else 0.0


def operand_dtype(comp: Computation, inst: Instruction) -> str | None:
    """The dtype of an op's first operand (NumPy's name)."""
    found = first_array(comp, inst.operands[0]) if inst.operands else None
    return NUMPY_NAMES.get(found[0], found[0]) if found is not None else None


def xla_dots(module: HloModuleText, runs: Mapping[str, tuple[int, bool]]) -> tuple[DotOp, ...]:
    """Every dot and convolution XLA computes itself (in fusions too), each with its runs per
    execution (`runs_per_computation`); those of computations nothing runs are left out."""
    found = []
    for comp in module.computations.values():
        times = runs.get(comp.name, (0, True))[0]
        for inst in comp.instructions.values() if times else ():
            if inst.opcode in ("dot", "convolution"):
                found.append(DotOp(inst.name, dot_flops(comp, inst), operand_dtype(comp, inst), times))
    return tuple(found)


def _parameter(fused: Computation, number: int) -> Instruction | None:
    params = (i for i in fused.instructions.values() if i.opcode == "parameter")
    return next((i for i in params if i.literal.strip() == str(number)), None)


def _users(fused: Computation, name: str) -> list[Instruction]:
    return [i for i in fused.instructions.values() if name in i.operands]


def partial_reads(fused: Computation, number: int) -> list[Instruction] | None:
    """The ops that read fusion parameter `number`, followed through bitcasts and reshapes, where
    each takes part of it (`PARTIAL_READS`, the parameter as its operand 0); None where one use reads
    it whole, or it has no use."""
    param = _parameter(fused, number)
    if param is None:
        return None
    reads: list[Instruction] = []
    todo, seen = [param.name], {param.name}
    while todo:
        name = todo.pop()
        users = _users(fused, name)
        if not users:
            return None  # the parameter (or a view of it) is the fusion's result: read whole
        for user in users:
            if user.opcode in PARTIAL_READS and user.operands[0] == name and name not in user.operands[1:]:
                reads.append(user)
            elif user.opcode in _VIEWS and user.name not in seen:
                seen.add(user.name)
                todo.append(user.name)
            elif user.opcode not in _VIEWS:
                return None
    return reads or None


def sliced_bytes(fused: Computation, number: int) -> int | None:
    """What a fusion's parameter `number` is read as where every use of it takes a slice (through
    bitcasts and reshapes); None where one use reads it whole."""
    reads = partial_reads(fused, number)
    return sum(array_bytes(a) for u in reads for a in array_types(u.shape)) if reads else None


def slice_overcharge(module: HloModuleText, runs: Mapping[str, tuple[int, bool]]) -> float:
    """Bytes per execution XLA's cost analysis charges fusions beyond what they read of parameters
    they only slice or dynamic-slice: it reads a parameter whole once for any use that is not a
    slice of the parameter itself (a bitcast on the way to one), plus each such slice's result."""
    bodies = {
        c
        for comp in module.computations.values()
        for i in comp.instructions.values()
        if i.opcode == "fusion"
        for k, c in instruction_callees(i)
        if k == "calls"
    }
    total = 0.0
    for comp in module.computations.values():
        times = runs.get(comp.name, (0, True))[0]
        if not times or comp.name in bodies:  # a fusion in a fusion: XLA counts it with its caller
            continue
        for inst in comp.instructions.values():
            fused = next((c for k, c in instruction_callees(inst) if k == "calls"), None)
            if inst.opcode != "fusion" or fused not in module.computations:
                continue
            for number in range(len(inst.operands)):
                total += times * _overcharge(module.computations[fused], number)
    return total


def _overcharge(fused: Computation, number: int) -> float:
    """What XLA's cost analysis charges a fusion's parameter beyond the slices it reads of it."""
    reads = partial_reads(fused, number)
    param = _parameter(fused, number)
    if not reads or param is None or any(u.opcode not in _XLA_SLICES for u in reads):
        return 0.0
    direct = [u for u in _users(fused, param.name) if u.opcode in _XLA_SLICES]
    whole = sum(map(array_bytes, array_types(param.shape)))
    charged = (whole if len(direct) < len(_users(fused, param.name)) else 0) + sum(
        array_bytes(a) for u in direct for a in array_types(u.shape)
    )
    read = sum(array_bytes(a) for u in reads for a in array_types(u.shape))
    return float(max(0, charged - read))
