"""What the compiler made of a program: the one reading of compiled programs every command shares.

`analyze_compiled(compiled, mesh)` returns a frozen `ProgramAnalysis`: every collective the
compiler put in (its kind, the mesh axes its replica groups run over, its result shape and bytes
per device, how many times it runs, the JAX operation and source line it came from), the
per-device memory from `compiled.memory_analysis()`, and FLOPs and bytes accessed from
`compiled.cost_analysis()`. What JAX returns is taken as it is; only what JAX does not give
(collectives, their groups, loop trip counts, source positions) is read from the HLO text, here and
nowhere else.

No JAX import: the functions take the compiled object and a mesh (or plain shapes), so the text
parsing is tested on strings.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shardcli.costmodel import CommCost, CostEstimate, Hardware, estimate

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
    "c64": 8,
    "c128": 16,
    "f8e4m3fn": 1,
    "f8e5m2": 1,
}
# `%all-reduce.3 = f32[4]{0} all-reduce(...)`, also tuple results (whose long forms carry
# `/*index=5*/` comments) and async `-start` forms.
_OP_RE = re.compile(
    r"=\s*(?P<shape>\((?:[^()]|\([^()]*\))*\)|[a-z0-9]+\[[0-9,]*\](?:\{[^}]*\})?)\s+"
    r"(?P<op>" + "|".join(HLO_COLLECTIVE_OPS) + r")(?P<start>-start)?\("
)
_ARRAY_RE = re.compile(r"([a-z0-9]+)\[([0-9,]*)\]")
_COMPUTATION_RE = re.compile(r"^(?P<entry>ENTRY )?%?(?P<name>[\w.\-]+) \(.*\{\s*$")
_CALLEE_RE = re.compile(
    r"\b(?P<kind>body|condition|to_apply|calls|true_computation|false_computation)=%(?P<name>[\w.\-]+)"
)
_BRANCHES_RE = re.compile(r"\b(?:branch_computations|called_computations)=\{(?P<names>[^}]*)\}")
_TRIP_RE = re.compile(r'"known_trip_count":\{"n":"(?P<n>\d+)"\}')
_OP_NAME_RE = re.compile(r'op_name="(?P<name>[^"]*)"')
_FRAME_RE = re.compile(r"stack_frame_id=(?P<id>\d+)")
_SOURCE_RE = re.compile(r'source_file="(?P<file>[^"]*)" source_line=(?P<line>\d+)')
_GROUPS_LIST_RE = re.compile(r"replica_groups=\{(?P<groups>(?:\{[0-9,]*\},?)*)\}")
_GROUPS_IOTA_RE = re.compile(
    r"replica_groups=\[(?P<shape>[0-9,]+)\]<=\[(?P<dims>[0-9,]+)\](?:T\((?P<perm>[0-9,]+)\))?"
)
_GROUPS_MESH_RE = re.compile(r"replica_groups=mesh\[(?P<axes>[^\]]*)\]\s*\{(?P<over>[^}]*)\}")
_PAIRS_RE = re.compile(r"source_target_pairs=\{(?P<pairs>(?:\{[0-9]+,[0-9]+\},?)*)\}")


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
    follow mesh axes (or no mesh was given). `runs` counts how often one execution of the program
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
    source: str | None  # "file.py:LINE": the innermost frame in the user's files JAX recorded
    is_async: bool
    # The program argument whose value it moves, followed back through copies, slices, casts and
    # loop tuples: JAX's name of that entry parameter (`params['wq']`) and its number; None where
    # its operand is computed.
    operand: str | None = None
    operand_parameter: int | None = None

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
        return names[-1] if names else None

    @property
    def axes_text(self) -> str:
        if self.mesh_axes is None:
            return "?"
        return "+".join(self.mesh_axes) if self.mesh_axes else "-"


@dataclass(frozen=True)
class MemoryUse:
    """Per-device memory of the compiled program, from `compiled.memory_analysis()`."""

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int
    code_bytes: int

    @property
    def total_bytes(self) -> int:
        """Arguments + outputs + temporaries + code, less the outputs that alias arguments."""
        return self.argument_bytes + self.output_bytes + self.temp_bytes + self.code_bytes - self.alias_bytes


@dataclass(frozen=True)
class ProgramAnalysis:
    """The facts every command reports about one compiled program, per device."""

    collectives: tuple[CollectiveOp, ...]
    memory: MemoryUse | None
    flops: float | None
    bytes_accessed: float | None

    def by_kind(self) -> tuple[HloCollective, ...]:
        """Per kind of collective: how many ops the program holds and their result bytes."""
        return summarize_by_kind(self.collectives)

    @property
    def sent_bytes(self) -> int:
        """Bytes each device sends in one execution, over every collective and its runs."""
        return sum(c.sent_bytes * c.runs for c in self.collectives)


def program_cost(analysis: ProgramAnalysis, hardware: Hardware, fallback_flops: float = 0.0) -> CostEstimate:
    """The cost model of a compiled program: T_math from its FLOPs per device (XLA's count, else
    `fallback_flops`), T_comm from what each collective sends per run times its runs."""
    comm = tuple(
        CommCost(
            op=c.kind, axis=c.axes_text, group_size=c.group_size or 1, bytes_per_device=c.sent_bytes * c.runs
        )
        for c in analysis.collectives
    )
    flops = analysis.flops if analysis.flops is not None else fallback_flops
    return estimate(int(flops), comm, hardware)


def summarize_by_kind(collectives: Sequence[CollectiveOp]) -> tuple[HloCollective, ...]:
    counts: dict[str, list[int]] = {}
    for c in collectives:
        counts.setdefault(c.kind, []).append(c.result_bytes)
    return tuple(
        HloCollective(op=op, count=len(counts[op]), result_bytes=sum(counts[op]))
        for op in HLO_COLLECTIVE_OPS
        if op in counts
    )


def analyze_compiled(compiled: Any, mesh: Any = None, user_files: tuple[str, ...] = ()) -> ProgramAnalysis:
    """Everything `ProgramAnalysis` holds, for a `jax.stages.Compiled`.

    Args:
        compiled: `jax.jit(f).lower(...).compile()`.
        mesh: the `jax.sharding.Mesh` the program was compiled for; its device order is the
            program's logical device ids, which names the mesh axes of each collective.
        user_files: the user's files or package folders: a collective's source is the innermost
            frame in them (else the innermost outside installed packages).
    """
    shape = tuple(mesh.devices.shape) if mesh is not None else None
    names = tuple(str(a) for a in mesh.axis_names) if mesh is not None else None
    flops, bytes_accessed = read_cost(compiled)
    return ProgramAnalysis(
        collectives=parse_collectives(compiled.as_text(), shape, names, user_files),
        memory=read_memory(compiled),
        flops=flops,
        bytes_accessed=bytes_accessed,
    )


def find_collectives(hlo_text: str) -> tuple[HloCollective, ...]:
    """Count the collective ops in compiled HLO text, per kind in a fixed order."""
    return summarize_by_kind(parse_collectives(hlo_text))


# --- what JAX returns -----------------------------------------------------------------------------


def read_memory(compiled: Any) -> MemoryUse | None:
    """`compiled.memory_analysis()` as plain numbers; None where the backend gives none."""
    try:
        stats = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - not every backend provides it
        return None
    if stats is None:
        return None
    return MemoryUse(
        argument_bytes=int(getattr(stats, "argument_size_in_bytes", 0) or 0),
        output_bytes=int(getattr(stats, "output_size_in_bytes", 0) or 0),
        temp_bytes=int(getattr(stats, "temp_size_in_bytes", 0) or 0),
        alias_bytes=int(getattr(stats, "alias_size_in_bytes", 0) or 0),
        code_bytes=int(getattr(stats, "generated_code_size_in_bytes", 0) or 0),
    )


def read_cost(compiled: Any) -> tuple[float | None, float | None]:
    """Per-device FLOPs and bytes accessed from `compiled.cost_analysis()`."""
    try:
        cost = compiled.cost_analysis()
    except Exception:  # noqa: BLE001 - not every backend provides it
        return None, None
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    if not isinstance(cost, dict):
        return None, None
    return _known(cost.get("flops")), _known(cost.get("bytes accessed"))


def _known(figure: Any) -> float | None:
    """A cost-analysis figure, or None where the backend has none: missing, or negative (XLA on a
    GPU gives -1 for a dot it hands to cuBLAS)."""
    if figure is None or not float(figure) >= 0:
        return None
    return float(figure)


# --- what only the HLO text says ------------------------------------------------------------------


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO type: an array (`f32[4,8]{1,0}`) or a tuple of them."""
    total = 0
    for dtype, dims in _ARRAY_RE.findall(shape):
        size = math.prod(int(d) for d in dims.split(",") if d) if dims else 1
        total += size * _ELEMENT_BYTES.get(dtype, 0)
    return total


def parse_collectives(
    hlo_text: str,
    mesh_shape: tuple[int, ...] | None = None,
    axis_names: tuple[str, ...] | None = None,
    user_files: tuple[str, ...] = (),
) -> tuple[CollectiveOp, ...]:
    """Every collective op in post-partitioning HLO text, in program order."""
    computations, calls, entry = _computations(hlo_text)
    runs = _runs_per_computation(calls, entry)
    sources = _source_table(hlo_text)
    instructions = _instruction_index(hlo_text)
    found = []
    for computation, line in computations:
        match = _OP_RE.search(line)
        if match is None:
            continue
        count, known = runs.get(computation, (1, True))
        groups = _groups(line)
        axes, size = _mesh_axes(
            groups, mesh_shape, axis_names, permute=match.group("op") == "collective-permute"
        )
        shape = re.sub(r"\{[^}]*\}", "", match.group("shape"))
        op_name = _OP_NAME_RE.search(line)
        operand, parameter = _argument_fed(line, computation, entry, instructions)
        found.append(
            CollectiveOp(
                kind=match.group("op"),
                shape=shape,
                result_bytes=_result_bytes(
                    match.group("op"), match.group("shape"), bool(match.group("start"))
                ),
                mesh_axes=axes,
                group_size=size,
                runs=count,
                runs_known=known,
                op_name=op_name.group("name") if op_name else None,
                source=_source_of(line, sources, user_files),
                is_async=bool(match.group("start")),
                operand=operand,
                operand_parameter=parameter,
            )
        )
    return tuple(found)


def _result_bytes(op: str, shape: str, is_async: bool) -> int:
    """The result's bytes; an async `-start` returns (operands, results) tuples: count the results."""
    if is_async and shape.startswith("("):
        # (operands..., results..., and on a TPU scalar u32 sync flags): the results' bytes
        arrays = [(t, d) for t, d in _ARRAY_RE.findall(re.sub(r"\{[^}]*\}", "", shape)) if d]
        if len(arrays) >= 2 and op in ("all-gather", "collective-permute", "all-to-all"):
            half = arrays[len(arrays) // 2 :]
            return sum(shape_bytes(f"{t}[{d}]") for t, d in half)
    return shape_bytes(shape)


def _computations(
    hlo_text: str,
) -> tuple[list[tuple[str, str]], dict[str, list[tuple[str, int | None]]], str]:
    """(computation, line) for every instruction line; caller -> [(callee, trip count)]; the entry."""
    lines: list[tuple[str, str]] = []
    calls: dict[str, list[tuple[str, int | None]]] = {}
    current = ""
    entry = ""
    for line in hlo_text.splitlines():
        header = _COMPUTATION_RE.match(line)
        if header is not None:
            current = header.group("name")
            if header.group("entry"):
                entry = current
            continue
        lines.append((current, line))
        trip = _TRIP_RE.search(line)
        for callee in _CALLEE_RE.finditer(line):
            is_body = callee.group("kind") == "body"
            times = (int(trip.group("n")) if trip else None) if is_body else 1
            calls.setdefault(current, []).append((callee.group("name"), times))
        for branches in _BRANCHES_RE.finditer(line):
            for name in branches.group("names").split(","):
                calls.setdefault(current, []).append((name.strip().lstrip("%"), 1))
    return lines, calls, entry


def _runs_per_computation(
    calls: dict[str, list[tuple[str, int | None]]], entry: str
) -> dict[str, tuple[int, bool]]:
    """How many times one execution runs each computation, and whether every trip count was known."""
    runs: dict[str, tuple[int, bool]] = {}

    def visit(name: str, times: int, known: bool, depth: int) -> None:
        if depth > 64:
            return
        before = runs.get(name, (0, True))
        runs[name] = (before[0] + times, before[1] and known)
        for callee, factor in calls.get(name, []):
            visit(callee, times * (factor or 1), known and factor is not None, depth + 1)

    if entry:
        visit(entry, 1, True, 0)
    return runs


def _source_table(hlo_text: str) -> dict[int, tuple[str, ...]]:
    """stack_frame_id -> its call chain as "file:line", innermost first, from the module's
    FileNames/FileLocations/StackFrames."""
    sections: dict[str, dict[int, str]] = {}
    current = None
    for line in hlo_text.splitlines():
        stripped = line.strip()
        if stripped in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            current = stripped
            sections[current] = {}
            continue
        if current is None:
            continue
        head, _, rest = stripped.partition(" ")
        if not head.isdigit():
            current = None
            continue
        sections[current][int(head)] = rest
    files = {k: v.strip('"') for k, v in sections.get("FileNames", {}).items()}
    locations = {}
    for k, v in sections.get("FileLocations", {}).items():
        file_id = re.search(r"file_name_id=(\d+)", v)
        line_no = re.search(r"\bline=(\d+)", v)
        if file_id and line_no:
            locations[k] = f"{files.get(int(file_id.group(1)), '?')}:{line_no.group(1)}"
    frames: dict[int, tuple[int | None, int]] = {}  # id -> (location, parent id; 0: none)
    for k, v in sections.get("StackFrames", {}).items():
        place = re.search(r"file_location_id=(\d+)", v)
        up = re.search(r"parent_frame_id=(\d+)", v)
        frames[k] = (int(place.group(1)) if place else None, int(up.group(1)) if up else 0)
    # XLA prints a parent as its id + 1 (the outermost frame, 1, names "parent 1"); a printer that
    # writes the id itself gives the outermost frame parent 0.
    shift = 1 if frames.get(1, (None, 0))[1] == 1 else 0
    chains = {}
    for k in frames:
        chain: list[str] = []
        at, seen = k, set[int]()
        while at in frames and at not in seen:
            seen.add(at)
            location_id, parent_id = frames[at]
            if location_id in locations:
                chain.append(locations[location_id])
            at = parent_id - shift
        if chain:
            chains[k] = tuple(chain)
    return chains


def _source_of(line: str, frames: dict[int, tuple[str, ...]], user_files: tuple[str, ...] = ()) -> str | None:
    """The op's source line: the innermost frame in `user_files` (files, or package folders), else
    the innermost outside installed packages (a library's line only where the user's code has
    none), else the innermost."""
    import os

    direct = _SOURCE_RE.search(line)
    if direct is not None:
        return f"{direct.group('file')}:{direct.group('line')}"
    frame = _FRAME_RE.search(line)
    chain = frames.get(int(frame.group("id")), ()) if frame else ()
    if not chain:
        return None
    roots = tuple(os.path.abspath(r) for r in user_files)

    def file_of(source: str) -> str:
        return os.path.abspath(source.rpartition(":")[0])

    def library(source: str) -> bool:
        parts = file_of(source).split(os.sep)
        return "site-packages" in parts or "dist-packages" in parts

    in_users = [s for s in chain if any(file_of(s) == r or file_of(s).startswith(r + os.sep) for r in roots)]
    outside_packages = [s for s in chain if not library(s)]
    return (in_users or outside_packages or list(chain))[0]


# --- which argument a collective moves ------------------------------------------------------------

# Ops whose result is (a part of) their first operand's value, in another layout or type.
_MOVES_OPERAND = frozenset(
    {
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
_INSTRUCTION_RE = re.compile(
    r"^\s*(?:ROOT\s+)?%(?P<name>[\w.\-]+)\s*=\s*(?:\((?:[^()]|\([^()]*\))*\)|\S+)\s+"
    r"(?P<opcode>[a-z][\w\-]*)\((?P<rest>.*)$"
)
_INDEX_RE = re.compile(r"\bindex=(\d+)")
_PARAMETER_NAME_RE = re.compile(r'op_name="(?P<name>(?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class _Instruction:
    opcode: str
    operands: tuple[str, ...]
    line: str


def _instruction_index(hlo_text: str) -> dict[str, dict[str, _Instruction]]:
    """computation -> instruction name -> (opcode, operand names, line); "ROOT" names each root."""
    index: dict[str, dict[str, _Instruction]] = {}
    current = ""
    for line in hlo_text.splitlines():
        header = _COMPUTATION_RE.match(line)
        if header is not None:
            current = header.group("name")
            continue
        found = _INSTRUCTION_RE.match(line)
        if found is None:
            continue
        inside = _parenthesized(found.group("rest"))
        operands = tuple(re.findall(r"%([\w.\-]+)", inside))
        if found.group("opcode") == "parameter":
            operands = (inside.strip(),)
        instruction = _Instruction(found.group("opcode"), operands, line)
        table = index.setdefault(current, {})
        table[found.group("name")] = instruction
        if line.lstrip().startswith("ROOT "):
            table["ROOT"] = instruction
    return index


def _parenthesized(rest: str) -> str:
    """The text up to the parenthesis that closes one already open: an instruction's operands."""
    depth = 1
    for at, char in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return rest[:at]
    return rest


def _argument_fed(
    line: str, computation: str, entry: str, index: dict[str, dict[str, _Instruction]]
) -> tuple[str | None, int | None]:
    """(JAX's name, number) of the entry parameter a collective's first operand is a copy or slice
    of: followed through layout changes, casts, fusions of those, and loop and call arguments."""
    found = _INSTRUCTION_RE.match(line)
    own = index.get(computation, {}).get(found.group("name")) if found else None
    if own is None or not own.operands:
        return None, None
    at: tuple[str, str] | None = (computation, own.operands[0])
    pending: list[int] = []  # the tuple elements still to take, innermost last
    for _ in range(256):
        if at is None:
            return None, None
        op = index.get(at[0], {}).get(at[1])
        if op is None:
            return None, None
        if op.opcode == "parameter" and at[0] == entry:
            label = _PARAMETER_NAME_RE.search(op.line)
            text = label.group("name").replace("\\'", "'").replace('\\"', '"') if label else None
            number = op.operands[0] if op.operands else ""
            return (text, int(number)) if number.isdigit() and not pending else (None, None)
        at = _one_step_back(at[0], op, pending, index)
    return None, None


def _one_step_back(
    where: str, op: _Instruction, pending: list[int], index: dict[str, dict[str, _Instruction]]
) -> tuple[str, str] | None:
    """The (computation, instruction) whose value `op` passes on unchanged; None where it computes."""
    if op.opcode in _MOVES_OPERAND and op.operands:
        return where, op.operands[0]
    element = _INDEX_RE.search(op.line)
    if op.opcode == "get-tuple-element" and op.operands and element is not None:
        pending.append(int(element.group(1)))
        return where, op.operands[0]
    if op.opcode == "tuple" and pending:
        k = pending.pop()
        return (where, op.operands[k]) if k < len(op.operands) else None
    if op.opcode == "optimization-barrier" and op.operands:
        return where, op.operands[0]
    callee = re.search(r"\b(?:calls|to_apply)=%([\w.\-]+)", op.line)
    if op.opcode in ("fusion", "call") and callee is not None and "ROOT" in index.get(callee.group(1), {}):
        return callee.group(1), "ROOT"
    number = op.operands[0] if op.opcode == "parameter" and op.operands else ""
    site = _call_site(where, index) if number.isdigit() else None
    if site is None:
        return None
    # a loop body's one parameter is its loop tuple, the while's one operand
    k = 0 if site[1].opcode == "while" else int(number)
    return (site[0], site[1].operands[k]) if k < len(site[1].operands) else None


def _call_site(callee: str, index: dict[str, dict[str, _Instruction]]) -> tuple[str, _Instruction] | None:
    """(computation, instruction) of the one while (as its body), fusion or call that runs `callee`."""
    pattern = re.compile(r"\b(?:body|calls|to_apply)=%" + re.escape(callee) + r"\b(?![\w.\-])")
    sites = [
        (where, op)
        for where, table in index.items()
        for key, op in table.items()
        if key != "ROOT" and op.opcode in ("while", "fusion", "call") and pattern.search(op.line)
    ]
    return sites[0] if len(sites) == 1 else None


def _groups(line: str) -> list[list[int]] | None:
    """The op's device groups (logical ids), from any of HLO's spellings; None where absent."""
    import numpy as np

    listed = _GROUPS_LIST_RE.search(line)
    if listed is not None:
        text = listed.group("groups")
        return [[int(i) for i in g.split(",") if i] for g in re.findall(r"\{([0-9,]*)\}", text)]
    iota = _GROUPS_IOTA_RE.search(line)
    if iota is not None:
        shape = [int(d) for d in iota.group("shape").split(",")]
        dims = [int(d) for d in iota.group("dims").split(",")]
        ids = np.arange(math.prod(dims)).reshape(dims)
        if iota.group("perm"):
            ids = ids.transpose([int(p) for p in iota.group("perm").split(",")])
        return ids.reshape(shape).tolist()
    named = _GROUPS_MESH_RE.search(line)
    if named is not None:
        axes = re.findall(r"'([^']*)'=(\d+)", named.group("axes"))
        over = re.findall(r"'([^']*)'", named.group("over"))
        names = [a for a, _ in axes]
        ids = np.arange(math.prod(int(s) for _, s in axes)).reshape([int(s) for _, s in axes])
        keep = [i for i, a in enumerate(names) if a not in over]
        moved = [names.index(a) for a in over]
        ids = ids.transpose(keep + moved)
        size = math.prod(int(axes[i][1]) for i in moved)
        return ids.reshape(-1, size).tolist()
    pairs = _PAIRS_RE.search(line)
    if pairs is not None:
        return [[int(a), int(b)] for a, b in re.findall(r"\{([0-9]+),([0-9]+)\}", pairs.group("pairs"))]
    return None


def _mesh_axes(
    groups: list[list[int]] | None,
    mesh_shape: tuple[int, ...] | None,
    axis_names: tuple[str, ...] | None,
    *,
    permute: bool,
) -> tuple[tuple[str, ...] | None, int | None]:
    """(the mesh axes the groups span, the group size); (None, size) where they follow no axes."""
    import numpy as np

    if mesh_shape is None or axis_names is None:
        return None, (len(groups[0]) if groups and not permute else None)
    n = math.prod(mesh_shape)
    if groups is None or groups == [[]] or not groups:  # one group of every device
        groups = [list(range(n))]
    if any(i >= n for g in groups for i in g):
        return None, None
    varying: set[int] = set()
    for group in groups:
        coords = np.array(np.unravel_index(np.array(group), mesh_shape)).T
        varying |= {d for d in range(len(mesh_shape)) if len(set(coords[:, d].tolist())) > 1}
    axes = tuple(axis_names[d] for d in sorted(varying))
    size = math.prod(mesh_shape[d] for d in varying)
    if permute:
        return axes, size
    if any(len(g) != size for g in groups):
        return None, len(groups[0])
    return axes, size
