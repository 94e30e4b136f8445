"""Loops counted per trip: how many times each computation runs, and the FLOPs and bytes XLA's
cost analysis leaves out by counting a loop body once.

XLA's `cost_analysis()` counts a while body once however many times it runs. `count_trips` adds,
for every loop, (trips - 1) times XLA's own count of its body (the body made the entry of a module
of its own, `xla_cost_of_text`); nested loops multiply. Part of the one reading of compiled
programs (`program_analysis` re-exports these names).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardcli.analysis.hlo.module import HloModuleText, ModuleTextError
from shardcli.analysis.hlo.sources import source_table
from shardcli.analysis.hlo.trips import Loop, find_loops


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


# More runs of one computation per execution than any program makes (and than a float counts).
MAX_RUNS = 10**30


def runs_per_computation(module: HloModuleText) -> dict[str, tuple[int, bool]]:
    """How many times one execution runs each computation, and whether every trip count was known.

    One pass over the call graph, callers first (`call_order`): a graph that fans out (each
    computation calling the next twice, 2**40 paths through 40 of them) costs its edges, not its paths.

    Raises:
        ModuleTextError: a call of no computation, a computation that calls itself, or loops that
            run a computation more than `MAX_RUNS` times.
    """
    trips = {loop.body: loop.trips for loop in find_loops(module)}
    runs: dict[str, tuple[int, bool]] = {}
    order = module.call_order()
    if order:
        runs[order[0]] = (1, True)
    for name in order:
        times, known = runs.get(name, (0, True))
        for kind, callee in module.callees(name):
            factor = trips.get(callee) if kind == "body" else 1
            count = times * (factor if factor is not None else 1)
            before = runs.get(callee, (0, True))
            runs[callee] = (before[0] + count, before[1] and known and factor is not None)
            if runs[callee][0] > MAX_RUNS:
                raise ModuleTextError(
                    f"its loops run %{callee} more than 10^30 times per execution, which no program does"
                )
    return runs


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
    loops = find_loops(module)
    if not loops:
        return TripCounts(xla_flops, xla_bytes, (), ())
    cost_of = body_cost or xla_cost_of_text
    runs = runs_per_computation(module)
    sources = source_table("\n".join(module.prologue))
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

    added_by: dict[str, tuple[float, float]] = {}  # each computation's once: a graph fans out

    def extra(name: str, depth: int) -> tuple[float, float]:
        if name in added_by:
            return added_by[name]
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
        added_by[name] = (flops, accessed)
        return flops, accessed

    added = extra(module.entry, 0) if module.entry else (0.0, 0.0)
    counted = tuple(
        LoopCount(
            name=loop.name,
            trips=loop.trips,
            runs=runs.get(loop.computation, (1, True))[0] * (loop.trips if loop.trips is not None else 1),
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

    calls = _check_xla_reads(module_text)
    module = _parse_hlo_module(module_text)
    try:
        client = jax.devices("cpu")[0].client
    except RuntimeError:
        client = jax.devices()[0].client
    cost = xla_client._xla.hlo_module_cost_analysis(client, module)
    # HloCostAnalysis counts a custom call as -1 FLOP and -1 byte ("unknown"): added back, so a
    # module's figure is what its other instructions do (each cuBLAS GEMM was read one short). A
    # figure still negative is XLA's unknown: no figure, never -1.
    flops = float(cost.get("flops", 0.0)) + calls
    accessed = float(cost.get("bytes accessed", 0.0)) + calls
    if flops < 0 or accessed < 0:
        raise ValueError(f"XLA's cost analysis gave no figure ({flops - calls:g} FLOPs)")
    return flops, accessed


# Computations XLA's cost analysis may walk: it analyses a called computation at every call, so
# calls that fan out (each computation calling the next twice) would take it 2**depth walks.
MAX_XLA_WALK = 100_000


def _check_xla_reads(module_text: str) -> int:
    """What XLA's parser and cost analysis are not handed, because they abort the process or never
    end on it: an element type XLA does not have, a token or opaque value with dimensions, mesh
    replica groups of axes the mesh does not have, calls that fan out past `MAX_XLA_WALK` walks.

    Returns:
        The custom calls XLA's cost analysis visits (those its entry reaches; a loop body's once).

    Raises:
        ValueError: the text is one of those (the caller counts without XLA's figure, and says so).
    """
    from shardcli.analysis.hlo.arrays import ELEMENT_BITS, array_kinds
    from shardcli.analysis.hlo.groups import has_groups_of_no_mesh
    from shardcli.analysis.hlo.module import parse_module

    for element, dims in array_kinds(module_text):
        if element not in ELEMENT_BITS:
            raise ValueError(f"{element}[{dims[:20]}] is no XLA element type")
        if ELEMENT_BITS[element] == 0 and dims:
            raise ValueError(f"a {element} has no dimensions ({element}[{dims[:20]}])")
    if has_groups_of_no_mesh(module_text):
        raise ValueError("replica groups over axes their mesh does not have")
    module = parse_module(module_text)
    walks = dict.fromkeys(module.computations, 0)
    order = module.call_order()
    if order:
        walks[order[0]] = 1
    for name in order:
        for _, callee in module.callees(name):
            walks[callee] += walks[name]
        if walks[name] > MAX_XLA_WALK:
            raise ValueError(f"its calls reach %{name} more than {MAX_XLA_WALK:,} times")
    return sum(
        inst.opcode == "custom-call"
        for name in order
        for inst in module.computations[name].instructions.values()
    )


_REFUSED_ATTRIBUTE_RE = re.compile(
    r'was parsing (?P<line>\d+):\d+: error: unexpected attribute "(?P<name>[\w\-]+)"'
)


def _parse_hlo_module(module_text: str) -> Any:
    """XLA's parse of a module's text. An attribute XLA prints but its parser refuses is left out of
    every instruction of that opcode and the text parsed again: jaxlib 0.12 prints
    `output_to_operand_aliasing` on a GPU target's `all-reduce-start` and then refuses to read it."""
    from jaxlib import _hlo  # type: ignore[attr-defined]

    from shardcli.analysis.hlo.module import parse_instruction

    lines = module_text.splitlines()
    refused: set[tuple[str, str]] = set()
    while True:
        try:
            return _hlo.hlo_module_from_text("\n".join(lines))
        except Exception as error:
            match = _REFUSED_ATTRIBUTE_RE.search(str(error))
            at = int(match.group("line")) - 1 if match else -1
            inst = parse_instruction(lines[at]) if match and 0 <= at < len(lines) else None
            if match is None or inst is None or (inst.opcode, match.group("name")) in refused:
                raise
            name = match.group("name")
            refused.add((inst.opcode, name))
            call = re.compile(rf"\s{re.escape(inst.opcode)}\(")
            lines = [_without_attribute(line, name) if call.search(line) else line for line in lines]


def _without_attribute(line: str, name: str) -> str:
    """`line` without its `, name=value` (a value of balanced brackets and quotes)."""
    start = line.find(f", {name}=")
    if start < 0:
        return line
    i = start + len(name) + 3
    depth, quoted = 0, False
    while i < len(line):
        ch = line[i]
        if quoted:
            quoted = ch != '"' or line[i - 1] == "\\"
        elif ch == '"':
            quoted = True
        elif ch in "{([":
            depth += 1
        elif ch in "})]":
            depth -= 1
        elif ch == "," and depth == 0:
            break
        i += 1
    return line[:start] + line[i:]
