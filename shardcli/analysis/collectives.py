"""Collectives read from compiled HLO text: their kinds, the mesh axes their groups run over (or
the slice of an axis a group takes), their bytes, how often they run, and the user's line.

Part of the one reading of compiled programs (`program_analysis`, which re-exports these names):
what JAX's own analyses do not give. No JAX import; tested on strings.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shardcli.analysis.hlo.arrays import array_bytes, array_types, shape_bytes
from shardcli.analysis.hlo.groups import device_groups
from shardcli.analysis.hlo.module import HloModuleText, Instruction, parse_module
from shardcli.analysis.hlo.sources import stack_table, user_stack
from shardcli.analysis.loops import runs_per_computation

HLO_COLLECTIVE_OPS = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")
# `%all-reduce.3 = f32[4]{0} all-reduce(...)`, also tuple results (whose long forms carry
# `/*index=5*/` comments) and async `-start` forms.
_OP_RE = re.compile(
    r"=\s*(?P<shape>\((?:[^()]|\([^()]*\))*\)|[a-z0-9]+\[[0-9,]*\](?:\{[^}]*\})?)\s+"
    r"(?P<op>" + "|".join(HLO_COLLECTIVE_OPS) + r")(?P<start>-start)?\("
)
_INSTRUCTION_RE = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=")
_OP_NAME_RE = re.compile(r'op_name="(?P<name>[^"]*)"')
_FRAME_RE = re.compile(r"stack_frame_id=(?P<id>\d+)")
_SOURCE_RE = re.compile(r'source_file="(?P<file>[^"]*)" source_line=(?P<line>\d+)')


# JAX's primitives under the names the user wrote: in jax 0.10 `lax.psum` and `lax.pmean` (a psum,
# then a division) trace to `psum_invariant`, and `lax.psum_scatter` to `reduce_scatter`.
USER_OP_NAMES = {"psum_invariant": "psum", "reduce_scatter": "psum_scatter"}


def user_op_name(primitive: str, source: str | None = None) -> str:
    """The op as the user wrote it: `psum` for `psum_invariant`; `pmean` where their line says so."""
    name = USER_OP_NAMES.get(primitive, primitive)
    if name == "psum" and source:
        import linecache

        path, _, line = source.rpartition(":")
        if line.isdigit() and "pmean(" in linecache.getline(path, int(line)):
            return "pmean"
    return name


@dataclass(frozen=True)
class OpCost:
    """One op the scheduler placed while a collective moves: what one run of it computes and moves.

    `share`: its runs per run of the collective (an op in a loop between them: its trips), divided
    among the collectives in flight beside it."""

    name: str
    flops: float
    bytes_accessed: float
    dtype: str | None  # NumPy's name of the dtype its maths runs in; None: no dot or convolution
    kernel: bool  # a library kernel (cuBLAS, cuDNN, splash attention): its own efficiency on a GPU
    share: float = 1.0


@dataclass(frozen=True)
class Overlap:
    """What the schedule placed between an async collective's start and its done.

    `ops_s`: their rooflines where already reckoned (`plan`'s cached figures keep the seconds, not
    the ops); None: time `ops`."""

    ops: tuple[OpCost, ...] = ()
    ops_s: float | None = None


@dataclass(frozen=True)
class HloCollective:
    """One kind of collective op found in the HLO: how many, and the bytes of their results."""

    op: str
    count: int
    result_bytes: int


@dataclass(frozen=True)
class CollectiveOp:
    """One collective the compiler put into the program.

    `mesh_axes` names the mesh axes its groups run over, read from its replica groups (or, for a
    collective-permute, the axes its source/target pairs step along); None where the groups do not
    follow mesh axes (or no mesh was given). A group that takes a regular part of an axis (every
    2nd device of it, or blocks of neighbours) still names that axis, with the part in
    `axis_slices`. `runs` counts how often one execution of the program
    runs it: a collective in a loop body counts the loop's trip count where the compiler knows it
    (`runs_known` False where it does not: then `runs` counts one trip).
    """

    kind: str
    shape: str  # the result's HLO type, e.g. "f32[4,16]"
    result_bytes: int  # per device, one run
    mesh_axes: tuple[str, ...] | None
    group_size: int | None
    runs: int
    runs_known: bool
    op_name: str | None  # the JAX operation, e.g. "jit(step)/dot_general"
    source: str | None  # "file.py:LINE" where JAX recorded it
    is_async: bool
    # Where a group takes part of an axis: each of `mesh_axes` as the slice of it one group takes
    # (`data[::2]`: every 2nd device along data); empty where the groups span their axes whole.
    axis_slices: tuple[str, ...] = ()
    # The program argument whose value it moves, followed back through copies, slices, casts and
    # loop tuples: JAX's name of that entry parameter (`params['wq']`) and its number; None where
    # its operand is computed.
    operand: str | None = None
    operand_parameter: int | None = None
    # The user's frames that led to it ("file.py:LINE", innermost first; `source` is the first)
    stack: tuple[str, ...] = ()
    # What it is for in the program (a key of `roles.ROLES`); None until `roles.assign_roles`
    role: str | None = None
    # Where it is in the text: its HLO instruction (an async one's start) and computation
    name: str | None = None
    computation: str | None = None
    # An async collective: what the schedule placed between its start and done (`analysis.exposed`);
    # None for a synchronous one (exposed whole) or where the schedule was not read
    overlap: Overlap | None = None

    @property
    def sent_bytes(self) -> int:
        """Bytes each device sends for one run, by the ring conventions of nccl-tests.

        all-reduce 2(n-1)/n S, all-gather (n-1)/n S of the gathered result, reduce-scatter
        (n-1)/n of the n-times-larger input, all-to-all (n-1)/n S, collective-permute S.
        """
        n = self.group_size or 1
        s = self.result_bytes
        if self.kind == "collective-permute":
            return s
        if n <= 1:
            return 0
        if self.kind == "all-reduce":
            return round(2 * (n - 1) / n * s)
        if self.kind == "reduce-scatter":
            return (n - 1) * s
        return round((n - 1) / n * s)

    @property
    def op(self) -> str | None:
        """The JAX operation alone: `dot_general` of `jit(step)/transpose(jvp(dot_general))`."""
        text = self.op_name or ""
        while re.search(r"\[[^\[\]]*\]", text):  # parameters: reshard[dst_sharding=...]
            text = re.sub(r"\[[^\[\]]*\]", "", text)
        names = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text.rsplit("/", 1)[-1])
        return user_op_name(names[-1], self.source) if names else None

    @property
    def axes_text(self) -> str:
        """`data+model`; a subgroup of an axis as its slice, `data[::2]`; `?` for groups along no axes."""
        if self.mesh_axes is None:
            return "?"
        return "+".join(self.axis_slices or self.mesh_axes) if self.mesh_axes else "-"


def operand_bytes(kind: str, result_bytes: float, group_size: int) -> float:
    """A collective's operand bytes from its result's: an all-gather's operand is 1/n of its result,
    a reduce-scatter's n times it, every other kind's the result's size."""
    n = max(1, group_size)
    return {"all-gather": result_bytes / n, "reduce-scatter": result_bytes * n}.get(kind, result_bytes)


def summarize_by_kind(collectives: Sequence[CollectiveOp]) -> tuple[HloCollective, ...]:
    counts: dict[str, list[int]] = {}
    for c in collectives:
        counts.setdefault(c.kind, []).append(c.result_bytes)
    return tuple(
        HloCollective(op=op, count=len(counts[op]), result_bytes=sum(counts[op]))
        for op in HLO_COLLECTIVE_OPS
        if op in counts
    )


def find_collectives(hlo_text: str) -> tuple[HloCollective, ...]:
    """Count the collective ops in compiled HLO text, per kind in a fixed order."""
    return summarize_by_kind(parse_collectives(hlo_text))


def parse_collectives(
    hlo_text: str,
    mesh_shape: tuple[int, ...] | None = None,
    axis_names: tuple[str, ...] | None = None,
    *,
    module: HloModuleText | None = None,
    user_files: tuple[str, ...] = (),
) -> tuple[CollectiveOp, ...]:
    """Every collective op in post-partitioning HLO text, in program order (`user_files`: the
    user's files or package folders, whose innermost line is each op's source)."""
    module = module if module is not None else parse_module(hlo_text)
    runs = runs_per_computation(module)
    stacks = stack_table(hlo_text, user_files)
    users: dict[str, dict[str, list[Instruction]]] = {}
    found = []
    # Lines outside any computation (a fragment of a module) run once.
    pieces = [("", module.prologue)] + [(c.name, c.text[1:]) for c in module.computations.values()]
    for computation, lines in pieces:
        for line in lines:
            match = _OP_RE.search(line)
            if match is None:
                continue
            count, known = runs.get(computation, (1, True))
            groups = device_groups(line)
            axes, size, slices = _mesh_axes(
                groups, mesh_shape, axis_names, permute=match.group("op") == "collective-permute"
            )
            shape = re.sub(r"\{[^}]*\}", "", match.group("shape"))
            metadata = _metadata_line(module, computation, line, users)
            op_name = _OP_NAME_RE.search(metadata)
            operand, parameter = _argument_fed(module, computation, line)
            stack = _stack_of(metadata, stacks)
            found.append(
                CollectiveOp(
                    kind=match.group("op"),
                    shape=shape,
                    result_bytes=_result_bytes(
                        match.group("op"), match.group("shape"), bool(match.group("start"))
                    ),
                    mesh_axes=axes,
                    group_size=size,
                    axis_slices=slices,
                    runs=count,
                    runs_known=known,
                    op_name=op_name.group("name") if op_name else None,
                    source=stack[0] if stack else None,
                    stack=stack,
                    is_async=bool(match.group("start")),
                    operand=operand,
                    operand_parameter=parameter,
                    name=_instruction_name(line),
                    computation=computation or None,
                )
            )
    return tuple(found)


def _instruction_name(line: str) -> str | None:
    match = _INSTRUCTION_RE.match(line)
    return match.group("name") if match else None


def _result_bytes(op: str, shape: str, is_async: bool) -> int:
    """The result's bytes; an async `-start` returns (operands, results) tuples: count the results."""
    if is_async and shape.startswith("(("):
        # XLA's GPU compiler: ((operands...), results...), as in reduce-scatter-start's
        # ((f32[4096,4096]), f32[512,4096]): what follows the operands' own tuple
        results = shape[_closing(shape, 1) + 1 :]
        return sum(array_bytes(a) for a in array_types(re.sub(r"\{[^}]*\}", "", results)) if a[1])
    if is_async and shape.startswith("("):
        # (operands..., results..., and on a TPU scalar u32 sync flags): the results' bytes
        arrays = [a for a in array_types(re.sub(r"\{[^}]*\}", "", shape)) if a[1]]
        if len(arrays) >= 2 and op in ("all-gather", "collective-permute", "all-to-all"):
            return sum(array_bytes(a) for a in arrays[len(arrays) // 2 :])
    return shape_bytes(shape)


def _closing(text: str, start: int) -> int:
    """The index of the parenthesis that closes the one at `start`."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return len(text)


def _metadata_line(
    module: HloModuleText, computation: str, line: str, users: dict[str, dict[str, list[Instruction]]]
) -> str:
    """The text whose metadata names a collective's JAX operation and line: its own, or where it has
    no line, that of the first instruction that uses its value (followed through the copies, async
    `-done`s and fusions that carry no line either).

    jax 0.10 gives a collective the partitioner inserted the metadata of the operation that needed
    it (`op_name="jit(step)/dot_general" stack_frame_id=3`); jax 0.12 (Shardy) gives one that
    reshards an argument the argument's (`op_name="params['w']"`, no line), and its user, the
    operation it was inserted for, still has the line. `users` caches each computation's users."""
    from shardcli.analysis.hlo.module import parse_instruction

    if _FRAME_RE.search(line) or _SOURCE_RE.search(line) or computation not in module.computations:
        return line
    own = parse_instruction(line)
    if own is None:
        return line
    if computation not in users:
        by_operand: dict[str, list[Instruction]] = {}
        for inst in module.computations[computation].instructions.values():
            for name in dict.fromkeys(inst.operands):
                by_operand.setdefault(name, []).append(inst)
        users[computation] = by_operand
    todo, seen = [own.name], {own.name}
    while todo:
        for user in users[computation].get(todo.pop(0), []):
            if _FRAME_RE.search(user.attributes) or _SOURCE_RE.search(user.attributes):
                return user.attributes
            if user.name not in seen and len(seen) < 64:
                seen.add(user.name)
                todo.append(user.name)
    return line


def _stack_of(line: str, frames: dict[int, tuple[str, ...]]) -> tuple[str, ...]:
    direct = _SOURCE_RE.search(line)
    if direct is not None:  # through user_stack: never a line of shardcli's own
        return user_stack([f"{direct.group('file')}:{direct.group('line')}"])
    frame = _FRAME_RE.search(line)
    return frames.get(int(frame.group("id")), ()) if frame else ()


# --- which argument a collective moves ------------------------------------------------------------

# Ops whose result is (a part of) their first operand's value, in another layout or type, or on
# another device (a collective-permute moves an argument's blocks between devices before a gather).
_MOVES_OPERAND = frozenset(
    {
        "collective-permute",
        "collective-permute-start",
        "collective-permute-done",
        "copy",
        "bitcast",
        "reshape",
        "transpose",
        "convert",
        "slice",
        "dynamic-slice",
        "copy-start",
        "copy-done",
        "bitcast-convert",
    }
)
_PARAMETER_NAME_RE = re.compile(r'op_name="(?P<name>(?:[^"\\]|\\.)*)"')


def _argument_fed(module: HloModuleText, computation: str, line: str) -> tuple[str | None, int | None]:
    """(JAX's name, number) of the entry parameter a collective's first operand is a copy or slice
    of: followed through layout changes, casts, fusions of those, and loop and call arguments."""
    from shardcli.analysis.hlo.module import parse_instruction

    own = parse_instruction(line)
    if own is None or not own.operands:
        return None, None
    at: tuple[str, str] | None = (computation, own.operands[0])
    pending: list[int] = []  # the tuple elements still to take, innermost last
    for _ in range(256):
        if at is None or at[0] not in module.computations:
            return None, None
        op = module.computations[at[0]].instructions.get(at[1])
        if op is None:
            return None, None
        if op.opcode == "parameter" and at[0] == module.entry:
            label = _PARAMETER_NAME_RE.search(op.attributes)
            text = label.group("name").replace("\\'", "'").replace('\\"', '"') if label else None
            number = op.literal.strip()
            return (text, int(number)) if number.isdigit() and not pending else (None, None)
        at = _one_step_back(module, at[0], op, pending)
    return None, None


def _one_step_back(
    module: HloModuleText, where: str, op: Instruction, pending: list[int]
) -> tuple[str, str] | None:
    """The (computation, instruction) whose value `op` passes on unchanged; None where it computes."""
    if op.opcode in _MOVES_OPERAND and op.operands:
        return where, op.operands[0]
    element = re.search(r"\bindex=(\d+)", op.attributes)
    if op.opcode == "get-tuple-element" and op.operands and element is not None:
        pending.append(int(element.group(1)))
        return where, op.operands[0]
    if op.opcode == "tuple" and pending:
        k = pending.pop()
        return (where, op.operands[k]) if k < len(op.operands) else None
    if op.opcode == "while" and pending and op.operands:
        # element k of a loop's result is its input's element k where the body passes it on
        return (where, op.operands[0]) if _passed_through(module, op, pending[-1]) else None
    if pending and op.opcode.endswith("-start"):  # (operands..., results...): the first are its operands
        k = pending.pop()
        return (where, op.operands[k]) if k < len(op.operands) else None
    if pending and _is_async_start(module, op):  # a TPU async collective fusion: the same, inside it
        started = _started_collective(module, op)
        k = pending.pop()
        return (started[0], started[1].operands[k]) if started and k < len(started[1].operands) else None
    if op.opcode == "optimization-barrier" and op.operands:
        return where, op.operands[0]
    callee = re.search(r"\b(?:calls|to_apply)=%([\w.\-]+)", op.attributes)
    if op.opcode in ("fusion", "call") and callee is not None:
        called = module.computations.get(callee.group(1))
        return (called.name, called.root) if called is not None and called.root else None
    number = op.literal.strip() if op.opcode == "parameter" else ""
    site = _call_site(module, where) if number.isdigit() else None
    if site is None:
        return None
    # a loop body's one parameter is its loop tuple, the while's one operand
    k = 0 if site[1].opcode == "while" else int(number)
    return (site[0], site[1].operands[k]) if k < len(site[1].operands) else None


def _passed_through(module: HloModuleText, loop: Instruction, k: int) -> bool:
    """Whether a while loop's body hands its loop tuple's element k on unchanged (a scan's stacked
    weights, carried through the forward loop into the backward one)."""
    body = re.search(r"\bbody=%([\w.\-]+)", loop.attributes)
    called = module.computations.get(body.group(1)) if body is not None else None
    if called is None or not called.root:
        return False
    root = called.instructions.get(called.root)
    if root is None or root.opcode != "tuple" or k >= len(root.operands):
        return False
    at = called.instructions.get(root.operands[k])
    for _ in range(64):
        if at is None:
            return False
        if at.opcode in ("copy", "bitcast", "optimization-barrier") and at.operands:
            at = called.instructions.get(at.operands[0])
            continue
        element = re.search(r"\bindex=(\d+)", at.attributes)
        source = called.instructions.get(at.operands[0]) if at.operands else None
        return (
            at.opcode == "get-tuple-element"
            and element is not None
            and int(element.group(1)) == k
            and source is not None
            and source.opcode == "parameter"
        )
    return False


def _is_async_start(module: HloModuleText, op: Instruction) -> bool:
    """A TPU async collective fusion: its computation's root is an `AsyncCollectiveStart`."""
    return op.opcode == "fusion" and "AsyncCollectiveStart" in _root_text(module, op)


def _root_text(module: HloModuleText, op: Instruction) -> str:
    callee = re.search(r"\bcalls=%([\w.\-]+)", op.attributes)
    called = module.computations.get(callee.group(1)) if callee is not None else None
    root = called.instructions.get(called.root) if called is not None and called.root else None
    return root.attributes if root is not None else ""


def _started_collective(module: HloModuleText, op: Instruction) -> tuple[str, Instruction] | None:
    """(computation, the collective) that a TPU async collective fusion's root starts."""
    callee = re.search(r"\bcalls=%([\w.\-]+)", op.attributes)
    called = module.computations.get(callee.group(1)) if callee is not None else None
    root = called.instructions.get(called.root) if called is not None and called.root else None
    if called is None or root is None or not root.operands:
        return None
    inner = called.instructions.get(root.operands[0])
    return (called.name, inner) if inner is not None else None


def _call_site(module: HloModuleText, callee: str) -> tuple[str, Instruction] | None:
    """(computation, instruction) of the one while (as its body), fusion or call that runs `callee`."""
    sites = module.call_sites(callee)
    return sites[0] if len(sites) == 1 else None


def _mesh_axes(
    groups: list[list[int]] | None,
    mesh_shape: tuple[int, ...] | None,
    axis_names: tuple[str, ...] | None,
    *,
    permute: bool,
) -> tuple[tuple[str, ...] | None, int | None, tuple[str, ...]]:
    """(the mesh axes the groups span, the group size, each axis's slice where a group takes part of
    it); (None, size, ()) where the groups follow no axes."""
    import numpy as np

    if mesh_shape is None or axis_names is None:
        return None, (len(groups[0]) if groups and not permute else None), ()
    n = math.prod(mesh_shape)
    if groups is None or groups == [[]] or not groups:  # one group of every device
        groups = [list(range(n))]
    if any(i >= n for g in groups for i in g):
        return None, None, ()
    varying: set[int] = set()
    coords_of = []
    for group in groups:
        coords = np.array(np.unravel_index(np.array(group), mesh_shape)).T
        coords_of.append(coords)
        varying |= {d for d in range(len(mesh_shape)) if len(set(coords[:, d].tolist())) > 1}
    axes = tuple(axis_names[d] for d in sorted(varying))
    size = math.prod(mesh_shape[d] for d in varying)
    if permute:
        return axes, size, ()
    if all(len(g) == size for g in groups):
        return axes, size, ()
    slices = _subgroup_slices(coords_of, mesh_shape, axis_names, sorted(varying))
    if slices is None:
        return None, len(groups[0]), ()
    return axes, len(groups[0]), slices


def _subgroup_slices(
    coords_of: list[Any], mesh_shape: tuple[int, ...], axis_names: tuple[str, ...], varying: list[int]
) -> tuple[str, ...] | None:
    """Each varying axis as the slice of it a group takes, in Python's slice notation: `data[::2]`
    (every 2nd device of the axis), `data[:2]` (blocks of 2 neighbours), `data[:8:2]` (4 devices
    2 apart within blocks of 8); None where the groups are no such product of slices."""
    patterns = {}
    for d in varying:
        seen = set()
        for coords in coords_of:
            values = sorted(set(coords[:, d].tolist()))
            steps = {b - a for a, b in zip(values, values[1:], strict=False)}
            if len(steps) > 1:
                return None
            seen.add((len(values), steps.pop() if steps else 1))
        if len(seen) != 1:
            return None
        patterns[d] = seen.pop()
    if any(len(c) != math.prod(patterns[d][0] for d in varying) for c in coords_of):
        return None
    names = []
    for d in varying:
        count, stride = patterns[d]
        axis = axis_names[d]
        if count == mesh_shape[d]:
            names.append(axis)
        elif stride == 1:
            names.append(f"{axis}[:{count}]")
        elif count * stride == mesh_shape[d]:
            names.append(f"{axis}[::{stride}]")
        else:
            names.append(f"{axis}[:{count * stride}:{stride}]")
    return tuple(names)
