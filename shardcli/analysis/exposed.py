"""Exposed communication: how much of each collective the compiled schedule hides behind compute.

XLA's schedulers split an asynchronous collective into a start and a done (a GPU's
`all-reduce-start`/`all-reduce-done`, `all-gather-start`, `collective-permute-start`,
`reduce-scatter-start`, `all-to-all-start`, a collective wrapped in `async-start`/`async-done`; a
TPU's fusions whose root is an `AsyncCollectiveStart` or `AsyncCollectiveDone` custom call, with
"async collective fusions" between them that carry the transfer on beside their compute). What the
scheduler placed between a start and its done, in the order of its computation (the entry, or a loop
body: per trip), runs while the collective moves. Per collective and run:

    exposed = max(0, t_collective - t_ops_between)

where t_ops_between adds the ops' own rooflines (`OpCost`, timed by the step estimate's per-op
model); an op beside several collectives in flight at once is shared among them. A synchronous
collective (no start and done: a CPU's, most of a TPU's all-reduces) is exposed whole. The step
estimate (`analysis.step_time`) is then the ops' roofline plus what is exposed.

Two halves: `read_overlaps` reads the schedule (no hardware: an `Overlap` per async collective, the
ops between as FLOPs and bytes), and `exposures` times it with the step estimate's rates. A TPU's
async collective appears three times in the text (in its start fusion, in each fusion that carries it
on and in its done fusion): the copies past the start are the same transfer and are dropped. No JAX
import; tested on strings.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shardcli.analysis.collectives import CollectiveOp, OpCost, Overlap
from shardcli.analysis.hlo.arrays import array_bytes, array_types
from shardcli.analysis.hlo.module import Computation, HloModuleText, Instruction, instruction_callees
from shardcli.analysis.hlo.ops import dot_flops, operand_dtype, sliced_bytes
from shardcli.analysis.hlo.trips import find_loops
from shardcli.hardware.calibration import OpEfficiency
from shardcli.hardware.chips import Chip, Figure

if TYPE_CHECKING:
    from shardcli.analysis.kernels import KernelCall

__all__ = ["Exposure", "OpCost", "Overlap", "exposed_by_axes", "exposures", "op_seconds", "read_overlaps"]

# A GPU's async collectives, by the opcodes of their two halves.
ASYNC_STARTS = frozenset(
    {
        "all-reduce-start",
        "all-gather-start",
        "collective-permute-start",
        "reduce-scatter-start",
        "all-to-all-start",
        "async-start",  # a collective wrapped whole (reduce-scatter, all-to-all in older XLA)
    }
)
ASYNC_DONES = frozenset({name.replace("-start", "-done") for name in ASYNC_STARTS})
_TPU_START, _TPU_DONE = "AsyncCollectiveStart", "AsyncCollectiveDone"
_CHANNEL_RE = re.compile(r"\bchannel_id=(\d+)")
_COLLECTIVE_RE = re.compile(r"\b(?:all-reduce|all-gather|reduce-scatter|collective-permute|all-to-all)\(")

# Ops that compute nothing a device waits on: values passed along, control, and other transfers
# (copies and slices a TPU's DMA engines run, host transfers) that move beside the compute.
_FREE = frozenset(
    {
        "parameter",
        "constant",
        "get-tuple-element",
        "tuple",
        "bitcast",
        "after-all",
        "partition-id",
        "replica-id",
        "opt-barrier",
        "optimization-barrier",
        "copy-start",
        "copy-done",
        "slice-start",
        "slice-done",
        "send",
        "send-done",
        "recv",
        "recv-done",
        "async-update",
        "add-dependency",
        "domain",
    }
)
# Ops of a window expanded past this many are counted as one (a window of a whole unrolled program)
MAX_WINDOW_OPS = 20_000


# --- reading the schedule -------------------------------------------------------------------------


@dataclass
class _Window:
    start: str
    ops: list[OpCost]
    continuations: set[str]  # computations of the fusions that carry the transfer on (a TPU's)


def read_overlaps(
    module: HloModuleText,
    collectives: Sequence[CollectiveOp],
    kernels: Sequence[KernelCall] = (),
) -> tuple[CollectiveOp, ...]:
    """`collectives` with each async one's `overlap` read from the schedule, and the copies of a TPU
    async collective past its start fusion (the same transfer) left out.

    Args:
        module: the parsed optimized (scheduled) HLO.
        collectives: `parse_collectives` of it, each with its `computation` and `name`.
        kernels: its library kernel calls, whose FLOPs and bytes XLA's text does not say.
    """
    calls = {(k.computation, k.name): k for k in kernels}
    trips = {loop.name: loop.trips for loop in find_loops(module)}
    overlaps: dict[str, Overlap] = {}  # by the computation and name of a collective the start owns
    dropped: set[str] = set()  # computations of the fusions that carry a transfer on or finish it
    for comp in module.computations.values():
        if not any(_is_start(module, i) for i in comp.instructions.values()):
            continue
        for start, window, done in _windows(module, comp, calls, trips):
            owned = {f"{comp.name}/{start.name}"} | {
                f"{callee}/*" for _, callee in instruction_callees(start)
            }
            for key in owned:
                overlaps[key] = Overlap(ops=tuple(window.ops))
            dropped |= window.continuations | {callee for _, callee in instruction_callees(done)}
    starts = {key.split("/")[0] for key in overlaps if key.endswith("/*")}
    out = []
    for c in collectives:
        where = c.computation or ""
        if where in dropped and where not in starts:
            continue  # a TPU async collective's copy past its start: the same transfer
        found = overlaps.get(f"{where}/{c.name}") or overlaps.get(f"{where}/*")
        out.append(dataclasses.replace(c, overlap=found) if found is not None else c)
    return tuple(out)


def _windows(
    module: HloModuleText,
    comp: Computation,
    calls: Mapping[tuple[str, str], KernelCall],
    trips: Mapping[str, int | None],
) -> list[tuple[Instruction, _Window, Instruction]]:
    """(start, what ran between, done) for every async collective of one computation, in its order."""
    open_: dict[str, _Window] = {}
    starts: dict[str, Instruction] = {}
    closed = []
    for inst in comp.instructions.values():
        if _is_start(module, inst):
            open_[inst.name] = _Window(inst.name, [], set())
            starts[inst.name] = inst
            continue
        if _is_done(module, inst):
            begun = _started_by(comp, inst, set(open_))
            if begun is not None:
                closed.append((starts[begun], open_.pop(begun), inst))
            continue
        if not open_:
            continue
        carrier = _started_by(comp, inst, set(open_)) if inst.opcode == "fusion" else None
        if carrier is not None and _channels(module, inst) & _channels(module, starts[carrier]):
            # a TPU fusion that carries the transfer on beside its own compute
            open_[carrier].continuations |= {callee for _, callee in instruction_callees(inst)}
        ops = op_costs(module, comp, inst, calls, trips)
        for window in open_.values():
            if len(window.ops) < MAX_WINDOW_OPS:
                window.ops.extend(dataclasses.replace(op, share=op.share / len(open_)) for op in ops)
            else:
                window.ops.append(_merged(window.ops, ops, len(open_)))
                del window.ops[:-1]
    return closed


def _merged(before: list[OpCost], ops: list[OpCost], sharing: int) -> OpCost:
    """A window's ops past `MAX_WINDOW_OPS` as one op of their FLOPs and bytes."""
    everything = [*before, *(dataclasses.replace(op, share=op.share / sharing) for op in ops)]
    return OpCost(
        "(many ops)",
        sum(op.flops * op.share for op in everything),
        sum(op.bytes_accessed * op.share for op in everything),
        next((op.dtype for op in everything if op.dtype), None),
        False,
    )


def _is_start(module: HloModuleText, inst: Instruction) -> bool:
    if inst.opcode == "async-start":
        return _holds_collective(module, inst)
    if inst.opcode in ASYNC_STARTS:
        return True
    return inst.opcode == "fusion" and _root_target(module, inst) == _TPU_START


def _is_done(module: HloModuleText, inst: Instruction) -> bool:
    if inst.opcode in ASYNC_DONES:
        return True
    return inst.opcode == "fusion" and _root_target(module, inst) == _TPU_DONE


def _root_target(module: HloModuleText, inst: Instruction) -> str | None:
    """The custom call target of a fusion's root, where its root is a custom call."""
    for _, callee in instruction_callees(inst):
        called = module.computations.get(callee)
        root = called.instructions.get(called.root) if called is not None and called.root else None
        if root is not None and root.opcode == "custom-call":
            found = re.search(r'custom_call_target="([^"]*)"', root.attributes)
            return found.group(1) if found else None
    return None


def _channels(module: HloModuleText, inst: Instruction) -> set[str]:
    """The channel ids of the collectives an instruction is or calls (a TPU async collective's start,
    the fusions that carry it on and its done share one)."""
    lines = [f"{inst.opcode}({inst.attributes}"]
    for _, callee in instruction_callees(inst):
        called = module.computations.get(callee)
        lines.extend(called.text if called is not None else ())
    return {m.group(1) for line in lines if _COLLECTIVE_RE.search(line) for m in _CHANNEL_RE.finditer(line)}


def _holds_collective(module: HloModuleText, inst: Instruction) -> bool:
    for _, callee in instruction_callees(inst):
        called = module.computations.get(callee)
        if called is not None and any(_COLLECTIVE_RE.search(line) for line in called.text):
            return True
    return False


def _started_by(comp: Computation, inst: Instruction, starts: set[str]) -> str | None:
    """The open start whose value `inst` takes, followed back through tuple elements, bitcasts and
    the fusions that carry a transfer on (a done's operands on a TPU); None where it takes none."""
    todo, seen = list(inst.operands), set(inst.operands)
    while todo and len(seen) < 256:
        name = todo.pop(0)
        if name in starts:
            return name
        op = comp.instructions.get(name)
        if op is None or op.opcode not in ("get-tuple-element", "bitcast", "tuple", "fusion", "async-update"):
            continue
        for operand in op.operands:
            if operand not in seen:
                seen.add(operand)
                todo.append(operand)
    return None


# --- what one op costs ----------------------------------------------------------------------------


def op_costs(
    module: HloModuleText,
    comp: Computation,
    inst: Instruction,
    calls: Mapping[tuple[str, str], KernelCall],
    trips: Mapping[str, int | None],
    depth: int = 0,
) -> list[OpCost]:
    """What one instruction runs, as ops with their FLOPs and bytes: a library kernel as its call
    says, a fusion or a dot from its shapes, a loop's body once per trip, a call's callee; nothing
    for the ops that compute nothing (`_FREE`) and for other collectives."""
    call = calls.get((comp.name, inst.name))
    if call is not None:
        return [OpCost(inst.name, call.flops, call.bytes_accessed, call.dtype, True)]
    if inst.opcode in _FREE or inst.opcode in ASYNC_STARTS or inst.opcode in ASYNC_DONES:
        return []
    if _COLLECTIVE_RE.search(f"{inst.opcode}(") or inst.opcode == "custom-call" or depth > 8:
        return []  # another collective, a custom call of unknown cost
    callees = [module.computations[c] for _, c in instruction_callees(inst) if c in module.computations]
    if inst.opcode in ("while", "call", "conditional") and callees:
        bodies = callees if inst.opcode != "while" else [c for k, c in _kinds(inst, module) if k == "body"]
        if inst.opcode == "conditional":  # the costliest branch
            bodies = [max(bodies, key=lambda b: sum(op.flops + op.bytes_accessed for op in _all(module, b)))]
        times = (trips.get(inst.name) or 1) if inst.opcode == "while" else 1
        ops = [op for body in bodies for op in _body_ops(module, body, calls, trips, depth + 1)]
        return [dataclasses.replace(op, share=op.share * times) for op in ops]
    if inst.opcode == "fusion" and _root_target(module, inst) in (_TPU_START, _TPU_DONE):
        return []
    flops, dtype = _maths(module, comp, inst, callees)
    if inst.opcode == "fusion" and not flops and _holds_collective(module, inst):
        return []  # a synchronous collective in a fusion (a TPU's all-reduce-scatter): timed as one
    moved = _bytes_moved(comp, inst, callees[0] if inst.opcode == "fusion" and callees else None)
    return [OpCost(inst.name, flops, moved, dtype, False)]


def _kinds(inst: Instruction, module: HloModuleText) -> list[tuple[str, Computation]]:
    return [(k, module.computations[c]) for k, c in instruction_callees(inst) if c in module.computations]


def _all(module: HloModuleText, comp: Computation) -> list[OpCost]:
    return _body_ops(module, comp, {}, {}, 8)


def _body_ops(
    module: HloModuleText,
    comp: Computation,
    calls: Mapping[tuple[str, str], KernelCall],
    trips: Mapping[str, int | None],
    depth: int,
) -> list[OpCost]:
    return [
        op for inst in comp.instructions.values() for op in op_costs(module, comp, inst, calls, trips, depth)
    ]


def _maths(
    module: HloModuleText, comp: Computation, inst: Instruction, callees: list[Computation]
) -> tuple[float, str | None]:
    """FLOPs of the dots and convolutions an op runs (a fusion's, inside it), and their dtype."""
    if inst.opcode in ("dot", "convolution"):
        return dot_flops(comp, inst), operand_dtype(comp, inst)
    if inst.opcode != "fusion":
        return 0.0, None
    flops, dtype = 0.0, None
    todo, seen = list(callees), {c.name for c in callees}
    while todo:
        fused = todo.pop()
        for inner in fused.instructions.values():
            if inner.opcode in ("dot", "convolution"):
                flops += dot_flops(fused, inner)
                dtype = dtype or operand_dtype(fused, inner)
            for _, callee in instruction_callees(inner):
                if callee in module.computations and callee not in seen:
                    seen.add(callee)
                    todo.append(module.computations[callee])
    return flops, dtype


def _bytes_moved(comp: Computation, inst: Instruction, fused: Computation | None) -> float:
    """The bytes an op reads and writes: its result and its operands, where a fusion only slices an
    operand what it takes of it."""
    written = sum(array_bytes(a) for a in array_types(inst.shape))
    read = 0
    for k, name in enumerate(inst.operands):
        op = comp.instructions.get(name)
        whole = sum(array_bytes(a) for a in array_types(op.shape)) if op is not None else 0
        taken = sliced_bytes(fused, k) if fused is not None else None
        read += min(whole, taken) if taken is not None else whole
    return float(written + read)


# --- timing it ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exposure:
    """One collective in one step: its transfer's seconds over all its runs, and what of them the
    ops beside it do not hide. None where its axes' bandwidth is unknown."""

    collective: CollectiveOp
    seconds: float | None
    exposed_s: float | None

    @property
    def hidden_s(self) -> float | None:
        if self.seconds is None or self.exposed_s is None:
            return None
        return self.seconds - self.exposed_s


def exposures(
    collectives: Sequence[CollectiveOp],
    transfer_s: Callable[[CollectiveOp], float | None],
    op_s: Callable[[OpCost], float],
) -> tuple[Exposure, ...]:
    """Each collective's exposed time per step: its runs x max(0, one run's transfer - the ops'
    rooflines between its start and done); a synchronous one whole.

    Args:
        transfer_s: one run of a collective, in seconds (its bytes sent over its axes' bandwidth).
        op_s: one op's own roofline, in seconds (the step estimate's per-op model).
    """
    out = []
    for c in collectives:
        one = transfer_s(c)
        if one is None:
            out.append(Exposure(c, None, None))
            continue
        exposed = one
        if c.overlap is not None:
            between = c.overlap.ops_s
            if between is None:
                between = sum(op.share * op_s(op) for op in c.overlap.ops)
            exposed = max(0.0, one - between)
        out.append(Exposure(c, one * c.runs, exposed * c.runs))
    return tuple(out)


def op_seconds(
    chip: Chip | None, peak: Figure | None, hbm: Figure | None, per_chip: int, eff: OpEfficiency | None
) -> Callable[[OpCost], float]:
    """One op's own roofline, as the per-op model times it: max(FLOPs / the peak of its dtype (times
    the dot efficiency on a GPU), bytes / HBM (times its efficiency)); 0 without the figures."""

    def seconds(op: OpCost) -> float:
        own = chip.peak_flops(op.dtype) if chip is not None and op.dtype else None
        rate = own or peak
        if rate is None or hbm is None:
            return 0.0
        math_rate = rate.value / per_chip * (eff.dot_at(op.dtype, op.flops) if eff is not None else 1.0)
        hbm_rate = hbm.value / per_chip * (eff.hbm if eff is not None else 1.0)
        return max(op.flops / math_rate, op.bytes_accessed / hbm_rate)

    return seconds


def exposed_by_axes(found: Sequence[Exposure]) -> dict[str, float]:
    """Exposed seconds per set of mesh axes (`data+model`, `?` for groups along no axes)."""
    by: dict[str, float] = {}
    for e in found:
        if e.exposed_s:
            axes = "+".join(e.collective.mesh_axes) if e.collective.mesh_axes is not None else "?"
            by[axes] = by.get(axes, 0.0) + e.exposed_s
    return by
