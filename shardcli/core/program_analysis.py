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

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from shardcli.core.hlo_text import HloModuleText, Loop, parse_module
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
_OP_NAME_RE = re.compile(r'op_name="(?P<name>[^"]*)"')
_FRAME_RE = re.compile(r"stack_frame_id=(?P<id>\d+)")
_SOURCE_RE = re.compile(r'source_file="(?P<file>[^"]*)" source_line=(?P<line>\d+)')
_GROUPS_LIST_RE = re.compile(r"replica_groups=\{(?P<groups>(?:\{[0-9,]*\},?)*)\}")
_GROUPS_IOTA_RE = re.compile(
    r"replica_groups=\[(?P<shape>[0-9,]+)\]<=\[(?P<dims>[0-9,]+)\](?:T\((?P<perm>[0-9,]+)\))?"
)
_GROUPS_MESH_RE = re.compile(r"replica_groups=mesh\[(?P<axes>[^\]]*)\]\s*\{(?P<over>[^}]*)\}")
_PAIRS_RE = re.compile(r"source_target_pairs=\{(?P<pairs>(?:\{[0-9]+,[0-9]+\},?)*)\}")


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
class LoopCount:
    """One while loop of the program: how many times it runs and what one trip costs."""

    name: str  # the HLO while instruction
    trips: int | None  # per run of the computation holding it; None where the text does not say
    runs: int  # trips times the trips of the loops around it (1 where unknown)
    body_flops: float | None  # one trip, as XLA counts it; None where XLA could not analyse it
    body_bytes: float | None
    op_name: str | None
    source: str | None


@dataclass(frozen=True)
class ProgramAnalysis:
    """The facts every command reports about one compiled program, per device.

    `flops` and `bytes_accessed` count every loop body once per trip (where its trip count is
    known); `xla_flops` and `xla_bytes_accessed` are `cost_analysis()` as XLA gives them, each
    loop body counted once. `missing` holds one line per part of the analysis that could not be
    had and why (empty when complete).
    """

    collectives: tuple[CollectiveOp, ...]
    memory: MemoryUse | None
    flops: float | None
    bytes_accessed: float | None
    xla_flops: float | None = None
    xla_bytes_accessed: float | None = None
    loops: tuple[LoopCount, ...] = ()
    compiler_seconds: float | None = None  # the TPU compiler's optimal_seconds, where positive
    missing: tuple[str, ...] = ()
    cost_source: str = "cost_analysis()"  # where xla_flops and xla_bytes_accessed came from
    text_source: str | None = "as_text()"  # where the HLO text came from; None: it could not be had

    def by_kind(self) -> tuple[HloCollective, ...]:
        """Per kind of collective: how many ops the program holds and their result bytes."""
        return summarize_by_kind(self.collectives)

    @property
    def sent_bytes(self) -> int:
        """Bytes each device sends in one execution, over every collective and its runs."""
        return sum(c.sent_bytes * c.runs for c in self.collectives)

    @property
    def unknown_trips(self) -> tuple[LoopCount, ...]:
        """The loops whose trip count is unknown: their bodies are counted once."""
        return tuple(loop for loop in self.loops if loop.trips is None)

    @property
    def trips_known(self) -> bool:
        """Whether every figure counts every trip (no loop of unknown trip count)."""
        return not self.unknown_trips and all(c.runs_known for c in self.collectives)


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


def analyze_compiled(
    compiled: Any, mesh: Any = None, *, hlo_text: str | None = None, text_source: str = "given"
) -> ProgramAnalysis:
    """Everything `ProgramAnalysis` holds, for a `jax.stages.Compiled`.

    Args:
        compiled: `jax.jit(f).lower(...).compile()`.
        mesh: the `jax.sharding.Mesh` the program was compiled for; its device order is the
            program's logical device ids, which names the mesh axes of each collective.
        hlo_text: the optimized HLO, where the caller has it (`dump_hlo_text`); else it is asked
            of `compiled`.
        text_source: where `hlo_text` came from, for `ProgramAnalysis.text_source`.

    Never raises for a part that cannot be had: that part is None or empty and `missing` says why.
    """
    shape = tuple(mesh.devices.shape) if mesh is not None else None
    names = tuple(str(a) for a in mesh.axis_names) if mesh is not None else None
    cost = read_cost_figures(compiled)
    xla_flops, xla_bytes = _known(cost.get("flops")), _known(cost.get("bytes accessed"))
    optimal = cost.get("optimal_seconds")
    missing: list[str] = []
    memory = read_memory(compiled)
    if memory is None:
        missing.append("memory: the backend gives no memory_analysis()")
    text, how = (hlo_text, text_source) if hlo_text is not None else read_hlo_text(compiled)
    if text is None:
        missing.append(f"collectives and loop trip counts: XLA's text of the program failed ({how})")
        return ProgramAnalysis(
            collectives=(),
            memory=memory,
            flops=xla_flops,
            bytes_accessed=xla_bytes,
            xla_flops=xla_flops,
            xla_bytes_accessed=xla_bytes,
            compiler_seconds=float(optimal) if optimal is not None and float(optimal) > 0 else None,
            missing=tuple(missing),
            text_source=None,
        )
    module = parse_module(text)
    cost_source = "cost_analysis()"
    if xla_flops is None:  # a GPU target's compiler gives no cost_analysis(): XLA's analysis of its text
        try:
            xla_flops, xla_bytes = xla_cost_of_text(text)
            cost_source = "XLA's HloCostAnalysis of the compiled HLO (the backend gives no cost_analysis())"
        except Exception as error:  # noqa: BLE001 - then there are no FLOPs, and that is said
            missing.append(
                f"FLOPs and bytes: no cost_analysis() and XLA could not analyse the text ({error})"
            )
    counted = count_trips(module, xla_flops, xla_bytes)
    missing.extend(counted.missing)
    return ProgramAnalysis(
        collectives=parse_collectives(text, shape, names, module=module),
        memory=memory,
        flops=counted.flops,
        bytes_accessed=counted.bytes_accessed,
        xla_flops=xla_flops,
        xla_bytes_accessed=xla_bytes,
        loops=counted.loops,
        compiler_seconds=float(optimal) if optimal is not None and float(optimal) > 0 else None,
        missing=tuple(missing),
        cost_source=cost_source,
        text_source=how,
    )


def reanalyze_from_dump(
    first: ProgramAnalysis, compiled: Any, mesh: Any, dump: Callable[[], tuple[str | None, str]]
) -> ProgramAnalysis:
    """`first` again with XLA's dumped text, where `first` had none (`compiled.as_text()` failed).

    Args:
        dump: lowers the program again as it was lowered and returns `dump_hlo_text` of it (the
            caller's context: its mesh, libtpu kept quiet).

    Returns:
        The full analysis, or `first` with the dump's failure added to its missing line.
    """
    if first.text_source is not None:
        return first
    try:
        text, how = dump()
    except Exception as error:  # noqa: BLE001 - lowering again failed: keep the first answer
        text, how = None, f"lowering again for --xla_dump_to: {type(error).__name__}"
    if text is None:
        missing = tuple(
            line[:-1] + f"; {how})" if line.startswith("collectives and loop trip counts") else line
            for line in first.missing
        )
        return dataclasses.replace(first, missing=missing)
    return analyze_compiled(compiled, mesh, hlo_text=text, text_source=how)


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
    """Per-device FLOPs and bytes accessed from `compiled.cost_analysis()`, as XLA counts them
    (each loop body once)."""
    cost = read_cost_figures(compiled)
    return _known(cost.get("flops")), _known(cost.get("bytes accessed"))


def read_cost_figures(compiled: Any) -> dict[str, float]:
    """`compiled.cost_analysis()` as a plain dict; empty where the backend gives none."""
    try:
        cost = compiled.cost_analysis()
    except Exception:  # noqa: BLE001 - not every backend provides it
        return {}
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    if not isinstance(cost, dict):
        return {}
    return {str(k): float(v) for k, v in cost.items() if isinstance(v, (int, float))}


def read_hlo_text(compiled: Any) -> tuple[str | None, str]:
    """(the optimized HLO text, which way gave it), or (None, why not in one line).

    `compiled.as_text()` first; where it raises (libtpu's RET_CHECK on async updates of big
    programs), the executable's own HLO modules.
    """
    reasons = []
    for how, read in (
        ("as_text()", lambda: compiled.as_text()),
        ("hlo_modules()", lambda: compiled.runtime_executable().hlo_modules()[0].to_string()),
    ):
        try:
            text = read()
        except Exception as error:  # noqa: BLE001 - the next way, or the reason
            lines = str(error).strip().splitlines()
            reasons.append(f"{how}: {type(error).__name__}: {lines[0][:160] if lines else ''}".rstrip(": "))
            continue
        if text:
            return str(text), how
        reasons.append(f"{how} gave no text")
    return None, "; ".join(reasons)


def dump_hlo_text(lowered: Any) -> tuple[str | None, str]:
    """The optimized HLO of `lowered` as XLA dumps it (`--xla_dump_to`), compiling it once more.

    For a program whose `as_text()` fails: the dump's `*.after_optimizations.txt` is the same text.
    Returns (text, "--xla_dump_to") or (None, why not in one line).
    """
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="shardcli-hlo-") as folder:
        try:
            lowered.compile(compiler_options={"xla_dump_to": folder})
        except Exception as error:  # noqa: BLE001 - the reason, as one line
            lines = str(error).strip().splitlines()
            return None, f"--xla_dump_to: {type(error).__name__}: {lines[0][:160] if lines else ''}"
        dumped = sorted(Path(folder).glob("*after_optimizations.txt"))  # the CPU's: cpu_after_...
        if not dumped:
            return None, "--xla_dump_to wrote no optimized HLO"
        return max(dumped, key=lambda p: p.stat().st_size).read_text(), "--xla_dump_to"


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
    *,
    module: HloModuleText | None = None,
) -> tuple[CollectiveOp, ...]:
    """Every collective op in post-partitioning HLO text, in program order."""
    module = module if module is not None else parse_module(hlo_text)
    runs = runs_per_computation(module)
    sources = _source_table(hlo_text)
    found = []
    for computation in module.computations.values():
        for line in computation.text[1:]:
            match = _OP_RE.search(line)
            if match is None:
                continue
            count, known = runs.get(computation.name, (1, True))
            groups = _groups(line)
            axes, size, slices = _mesh_axes(
                groups, mesh_shape, axis_names, permute=match.group("op") == "collective-permute"
            )
            shape = re.sub(r"\{[^}]*\}", "", match.group("shape"))
            op_name = _OP_NAME_RE.search(line)
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
                    source=_source_of(line, sources),
                    is_async=bool(match.group("start")),
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


def runs_per_computation(module: HloModuleText) -> dict[str, tuple[int, bool]]:
    """How many times one execution runs each computation, and whether every trip count was known."""
    trips = {loop.body: loop.trips for loop in module.loops()}
    callees = {name: list(module.callees(name)) for name in module.computations}
    runs: dict[str, tuple[int, bool]] = {}

    def visit(name: str, times: int, known: bool, depth: int) -> None:
        if depth > 64:
            return
        before = runs.get(name, (0, True))
        runs[name] = (before[0] + times, before[1] and known)
        for kind, callee in callees.get(name, []):
            factor = trips.get(callee) if kind == "body" else 1
            visit(callee, times * (factor or 1), known and factor is not None, depth + 1)

    if module.entry:
        visit(module.entry, 1, True, 0)
    return runs


# --- loops counted per trip -----------------------------------------------------------------------

BodyCost = Callable[[str], tuple[float, float]]


@dataclass(frozen=True)
class TripCounts:
    """FLOPs and bytes with every loop counted per trip, and the loops."""

    flops: float | None
    bytes_accessed: float | None
    loops: tuple[LoopCount, ...]
    missing: tuple[str, ...]


def count_trips(
    module: HloModuleText,
    xla_flops: float | None,
    xla_bytes: float | None,
    body_cost: BodyCost | None = None,
) -> TripCounts:
    """XLA's figures plus, for each loop, (trips - 1) times its body's cost and the extra trips of
    the loops inside it.

    With X(B) XLA's count of body B (its own loops once) and E(B) what that count leaves out, a
    computation's loops add E = sum over loops L of (n_L - 1) X(B_L) + n_L E(B_L). A loop of
    unknown trips is counted once (n_L = 1). The condition is counted once, as XLA counts it.

    Args:
        body_cost: (FLOPs, bytes accessed) of a module's text; default XLA's own cost analysis.
    """
    loops = module.loops()
    if not loops:
        return TripCounts(xla_flops, xla_bytes, (), ())
    cost_of = body_cost or xla_cost_of_text
    runs = runs_per_computation(module)
    sources = _source_table("\n".join(module.prologue))
    costs: dict[str, tuple[float, float] | None] = {}
    failures: list[str] = []

    def cost(body: str) -> tuple[float, float] | None:
        if body not in costs:
            try:
                costs[body] = cost_of(module.module_of(body))
            except Exception as error:  # noqa: BLE001 - the loop is then counted once, and said so
                costs[body] = None
                failures.append(
                    f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:120]}"
                )
        return costs[body]

    held: dict[str, list[Loop]] = {}
    for loop in loops:
        held.setdefault(loop.computation, []).append(loop)

    def extra(name: str, depth: int) -> tuple[float, float]:
        flops = accessed = 0.0
        if depth > 32:
            return flops, accessed
        for local in _without_loops(module, name):
            for loop in held.get(local, []):
                one = cost(loop.body)
                inner = extra(loop.body, depth + 1)
                n = loop.trips if loop.trips is not None else 1
                if one is not None:
                    flops += (n - 1) * one[0]
                    accessed += (n - 1) * one[1]
                flops += n * inner[0]
                accessed += n * inner[1]
        return flops, accessed

    added = extra(module.entry, 0) if module.entry else (0.0, 0.0)
    counted = tuple(
        LoopCount(
            name=loop.name,
            trips=loop.trips,
            runs=runs.get(loop.computation, (1, True))[0] * (loop.trips or 1),
            body_flops=(costs.get(loop.body) or (None, None))[0],
            body_bytes=(costs.get(loop.body) or (None, None))[1],
            op_name=loop.op_name,
            source=sources.get(loop.source_frame) if loop.source_frame is not None else None,
        )
        for loop in loops
    )
    missing = []
    if failures:
        missing.append(
            f"loop bodies counted once in FLOPs and bytes: XLA could not analyse {len(failures)} of them "
            f"({failures[0]})"
        )
    return TripCounts(
        flops=xla_flops + added[0] if xla_flops is not None else None,
        bytes_accessed=xla_bytes + added[1] if xla_bytes is not None else None,
        loops=counted,
        missing=tuple(missing),
    )


def _without_loops(module: HloModuleText, start: str) -> list[str]:
    """`start` and what it calls other than as a loop's body or condition (calls, branches)."""
    seen = {start}
    todo = [start]
    while todo:
        for kind, callee in module.callees(todo.pop()):
            if kind not in ("body", "condition") and callee in module.computations and callee not in seen:
                seen.add(callee)
                todo.append(callee)
    return list(seen)


def xla_cost_of_text(module_text: str) -> tuple[float, float]:
    """(FLOPs, bytes accessed) of an HLO module's text, by XLA's own cost analysis.

    XLA's parser and `HloCostAnalysis` as jaxlib exposes them (private names: where they move, the
    caller counts the loop once and says so). The CPU client's analysis counts what the compiled
    program's backend counts for FLOPs (dots, convolutions, elementwise ops); its byte count uses the
    host's shape sizes (no TPU tiling).
    """
    import jax
    from jax._src.lib import xla_client
    from jaxlib import _hlo  # type: ignore[attr-defined]

    module = _hlo.hlo_module_from_text(module_text)
    try:
        client = jax.devices("cpu")[0].client
    except RuntimeError:
        client = jax.devices()[0].client
    cost = xla_client._xla.hlo_module_cost_analysis(client, module)
    return float(cost.get("flops", 0.0)), float(cost.get("bytes accessed", 0.0))


def _source_table(hlo_text: str) -> dict[int, str]:
    """stack_frame_id -> "file:line", from the module's FileNames/FileLocations/StackFrames."""
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
    frames = {}
    for k, v in sections.get("StackFrames", {}).items():
        location = re.search(r"file_location_id=(\d+)", v)
        if location and int(location.group(1)) in locations:
            frames[k] = locations[int(location.group(1))]
    return frames


def _source_of(line: str, frames: dict[int, str]) -> str | None:
    direct = _SOURCE_RE.search(line)
    if direct is not None:
        return f"{direct.group('file')}:{direct.group('line')}"
    frame = _FRAME_RE.search(line)
    return frames.get(int(frame.group("id"))) if frame else None


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
