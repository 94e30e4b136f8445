"""While loops in compiled HLO text, with their trip counts where the text says them.

Trip counts: the CPU and GPU compilers write `"known_trip_count":{"n":"8"}` into a while's
backend config; the TPU compiler (libtpu 0.0.52) writes none, so the count is read the way XLA's
own loop analysis reads it: the condition compares a counter in the loop's tuple with a bound
(`counter < 8`), the counter starts at a constant (the while's operand) and the body adds a constant
to it each trip. With jax_enable_x64 on, libtpu splits a 64-bit counter into two u32 halves
(`hi < 0 or (hi == 0 and lo < 8)`): the low half is read as the counter where the high one starts at 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shardcli.analysis.hlo.module import INT64_MAX, Computation, HloModuleText, Instruction

_TRIP_RE = re.compile(r'"known_trip_count":\{"n":"(?P<n>\d{1,19})"\}')
_INDEX_RE = re.compile(r"\bindex=(?P<i>\d{1,18})(?!\d)")
_DIRECTION_RE = re.compile(r"\bdirection=(?P<d>[A-Z]+)")
_CONSTANT_RE = re.compile(r"^-?\d{1,20}$")  # an integer constant: at most u64's 20 digits
# Ops that pass a scalar through unchanged, followed when looking for a constant or a tuple element.
_PASS_THROUGH = ("copy", "bitcast", "convert", "reshape")


@dataclass(frozen=True)
class Loop:
    """One while loop: the instruction, the computations it runs, and its trip count where known."""

    name: str
    computation: str  # the computation holding the while
    body: str
    condition: str
    trips: int | None
    op_name: str | None
    source_frame: int | None


def find_loops(module: HloModuleText) -> list[Loop]:
    """Every while instruction of the module, with its trip count where it can be read."""
    found = []
    for comp in module.computations.values():
        for inst in comp.instructions.values():
            if inst.opcode != "while":
                continue
            body = re.search(r"\bbody=%([\w.\-]+)", inst.attributes)
            cond = re.search(r"\bcondition=%([\w.\-]+)", inst.attributes)
            if body is None or cond is None:
                continue
            op_name = re.search(r'op_name="([^"]*)"', inst.attributes)
            frame = re.search(r"stack_frame_id=(\d{1,18})(?!\d)", inst.attributes)
            found.append(
                Loop(
                    name=inst.name,
                    computation=comp.name,
                    body=body.group(1),
                    condition=cond.group(1),
                    trips=trip_count(module, comp, inst, body.group(1), cond.group(1)),
                    op_name=op_name.group(1) if op_name else None,
                    source_frame=int(frame.group(1)) if frame else None,
                )
            )
    return found


def trip_count(
    module: HloModuleText, comp: Computation, loop: Instruction, body: str, cond: str
) -> int | None:
    """The compiler's `known_trip_count`, else the counted-loop pattern; None where neither."""
    known = _TRIP_RE.search(loop.attributes)
    if known is not None:  # an int64; a count past it (or of more digits) is read as unknown
        return int(known.group("n")) if int(known.group("n")) <= INT64_MAX else None
    if body not in module.computations or cond not in module.computations or not loop.operands:
        return None
    init_tuple = comp.instructions.get(loop.operands[0])
    if init_tuple is None or init_tuple.opcode != "tuple":
        return None
    bound = _bound(module, module.computations[cond]) or _wide_bound(module, comp, init_tuple, cond)
    if bound is None:
        return None
    index, direction, bound_value = bound
    if index >= len(init_tuple.operands):
        return None
    start = _constant(comp, init_tuple.operands[index])
    limit: int | None
    if isinstance(bound_value, str):  # the bound is another element of the loop's tuple
        at = int(bound_value)
        limit = _constant(comp, init_tuple.operands[at]) if at < len(init_tuple.operands) else None
    else:
        limit = bound_value
    step = _step(module.computations[body], index)
    if start is None or limit is None or step is None:
        return None
    return _trips(start, limit, step, direction)


def _bound(module: HloModuleText, cond: Computation) -> tuple[int, str, int | str] | None:
    """(counter's tuple index, direction as `counter OP bound`, the bound or its tuple index)."""
    root = cond.instructions.get(cond.root or "")
    if root is None:
        return None
    where, compare = cond, root
    args: list[str | None] = list(root.operands)
    if root.opcode == "fusion":  # the compare inside a fused computation: map its parameters back
        called = re.search(r"\bcalls=%([\w.\-]+)", root.attributes)
        fused = module.computations.get(called.group(1)) if called else None
        inner = fused.instructions.get(fused.root or "") if fused else None
        if fused is None or inner is None or inner.opcode != "compare":
            return None
        args = [_fused_argument(fused, name, root.operands) for name in inner.operands]
        compare = inner
    if compare.opcode != "compare" or len(args) != 2 or any(a is None for a in args):
        return None
    direction = _DIRECTION_RE.search(compare.attributes)
    if direction is None:
        return None
    sides = []
    for arg in args:
        assert arg is not None
        index = _tuple_index(where, arg)
        value = _constant(where, arg)
        sides.append((index, value))
    (li, lv), (ri, rv) = sides
    d = direction.group("d")
    if li is not None and (rv is not None or ri is not None):
        return li, d, rv if rv is not None else str(ri)
    if ri is not None and (lv is not None or li is not None):
        flipped = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE"}.get(d, d)
        return ri, flipped, lv if lv is not None else str(li)
    return None


def _wide_bound(
    module: HloModuleText, comp: Computation, init_tuple: Instruction, cond: str
) -> tuple[int, str, int] | None:
    """The bound of a 64-bit counter the TPU compiler split into two u32 halves (jax_enable_x64 on):
    `hi < 0 or (hi == 0 and lo < N)`. Where the high half starts at 0 and N fits the low half,
    the high half stays 0 and the low half is the counter: (its index, direction, N)."""
    where = module.computations[cond]
    root = where.instructions.get(where.root or "")
    if root is None or root.opcode != "or":
        return None
    sides: list[tuple[int, str, int]] = []
    for inst in where.instructions.values():
        if inst.opcode != "compare":
            continue
        direction = _DIRECTION_RE.search(inst.attributes)
        a, b = (inst.operands + ("", ""))[:2]
        index = _tuple_index(where, _through(where, a, "bitcast-convert"))
        value = _constant(where, b)
        if direction is None or index is None or value is None:
            return None
        sides.append((index, direction.group("d"), value))
    high = {i for i, d, v in sides if d == "EQ" and v == 0}
    low = [(i, d, v) for i, d, v in sides if i not in high]
    if len(high) != 1 or len(low) != 1 or low[0][1] not in ("LT", "LE") or not 0 <= low[0][2] < 2**31:
        return None
    if any(d not in ("EQ", "LT") or v != 0 for i, d, v in sides if i in high):
        return None
    (hi,) = high
    if hi >= len(init_tuple.operands) or _constant(comp, init_tuple.operands[hi]) != 0:
        return None
    return low[0]


def _step(body: Computation, index: int) -> int | None:
    """What the body adds to tuple element `index` each trip (a constant), or None."""
    root = body.instructions.get(body.root or "")
    if root is None or root.opcode != "tuple" or index >= len(root.operands):
        return None
    update = _follow(body, root.operands[index])
    if update is None or update.opcode not in ("add", "subtract") or len(update.operands) != 2:
        return None
    a, b = update.operands
    if _tuple_index(body, a) == index and _constant(body, b) is not None:
        step = _constant(body, b)
    elif update.opcode == "add" and _tuple_index(body, b) == index and _constant(body, a) is not None:
        step = _constant(body, a)
    else:
        return None
    assert step is not None
    return -step if update.opcode == "subtract" else step


def _follow(comp: Computation, name: str) -> Instruction | None:
    """The instruction `name`, through copies and bitcasts."""
    inst = comp.instructions.get(name)
    for _ in range(16):
        if inst is None or inst.opcode not in _PASS_THROUGH or not inst.operands:
            return inst
        inst = comp.instructions.get(inst.operands[0])
    return inst


def _through(comp: Computation, name: str, opcode: str) -> str:
    """`name`, or its operand where `name` is an `opcode`."""
    inst = comp.instructions.get(name)
    return inst.operands[0] if inst is not None and inst.opcode == opcode and inst.operands else name


def _constant(comp: Computation, name: str) -> int | None:
    inst = _follow(comp, name)
    if inst is None or inst.opcode != "constant" or not _CONSTANT_RE.match(inst.literal.strip()):
        return None
    return int(inst.literal.strip())


def _tuple_index(comp: Computation, name: str) -> int | None:
    """i where `name` is element i of the computation's (tuple) parameter."""
    inst = _follow(comp, name)
    if inst is None or inst.opcode != "get-tuple-element" or not inst.operands:
        return None
    source = comp.instructions.get(inst.operands[0])
    if source is None or source.opcode != "parameter":
        return None
    index = _INDEX_RE.search(inst.attributes)
    return int(index.group("i")) if index else None


def _fused_argument(fused: Computation, name: str, outer: tuple[str, ...]) -> str | None:
    """The caller's operand that fused parameter `name` stands for."""
    inst = fused.instructions.get(name)
    if inst is None or inst.opcode != "parameter" or not _CONSTANT_RE.match(inst.literal.strip()):
        return None
    i = int(inst.literal.strip())
    return outer[i] if i < len(outer) else None


def _trips(start: int, limit: int, step: int, direction: str) -> int | None:
    """How many times `counter OP limit` holds, the counter going from `start` by `step`."""
    trips: int | None = None
    if step == 0:
        return None
    if direction == "LT" and step > 0:
        trips = max(0, -((start - limit) // step))  # whole numbers only: a float overflows
    elif direction == "LE" and step > 0:
        trips = max(0, (limit - start) // step + 1)
    elif direction == "GT" and step < 0:
        trips = max(0, -((limit - start) // -step))
    elif direction == "GE" and step < 0:
        trips = max(0, (start - limit) // -step + 1)
    elif direction == "NE" and (limit - start) % step == 0 and (limit - start) // step >= 0:
        trips = (limit - start) // step
    return trips if trips is not None and trips <= INT64_MAX else None
