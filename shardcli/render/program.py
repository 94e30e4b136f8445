"""Rendering a `ProgramAnalysis`: the same collectives table, memory line and JSON for every command
that reads a compiled program (einsum, reshard; inspect to come)."""

from __future__ import annotations

import os
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from shardcli.analysis.program import CollectiveOp, MemoryUse, ProgramAnalysis
from shardcli.analysis.step_time import StepEstimate, Term
from shardcli.analysis.target import FitVerdict
from shardcli.hardware.costmodel import CostEstimate, Hardware
from shardcli.render.console import format_flops, format_seconds
from shardcli.render.layout import Clauses, DataTable, phrases
from shardcli.results import records
from shardcli.specs.files import is_own_file
from shardcli.specs.values import format_bytes


def program_json(analysis: ProgramAnalysis | None) -> dict[str, Any] | None:
    if analysis is None:
        return None
    return records.PROGRAM(
        collectives=[collective_json(c) for c in analysis.collectives],
        memory=memory_json(analysis.memory),
        flops_per_device=analysis.flops,
        bytes_accessed_per_device=analysis.bytes_accessed,
        sent_bytes_per_device=analysis.sent_bytes,
        xla_flops_per_device=analysis.xla_flops,
        xla_bytes_accessed_per_device=analysis.xla_bytes_accessed,
        loops=[
            records.PROGRAM_LOOP(
                name=loop.name,
                trips=loop.trips,
                runs=loop.runs,
                body_flops=loop.body_flops,
                body_bytes=loop.body_bytes,
                op_name=loop.op_name,
                source=loop.source,
            )
            for loop in analysis.loops
        ],
        kernels=kernels_json(analysis),
        trips_known=analysis.trips_known,
        missing=list(analysis.missing),
    )


def kernels_json(analysis: ProgramAnalysis) -> list[dict[str, Any]]:
    """The library kernel calls, one record per (target, dtype), every call counted per run."""
    groups: dict[tuple[str, str, str | None], list[float]] = {}
    for call in analysis.kernels.calls:
        group = groups.setdefault((call.target, call.kind, call.dtype), [0, 0.0, 0.0])
        group[0] += call.runs
        group[1] += call.flops * call.runs
        group[2] += call.bytes_accessed * call.runs
    return [
        records.PROGRAM_KERNELS(
            target=target, kind=kind, dtype=dtype, calls=int(calls), flops=flops, bytes_accessed=accessed
        )
        for (target, kind, dtype), (calls, flops, accessed) in groups.items()
    ]


def step_time_json(step: StepEstimate | None) -> dict[str, Any] | None:
    """The step-time estimate with every term's amount, rate and source."""
    if step is None:
        return None

    def term(t: Term) -> dict[str, Any]:
        return records.STEP_TERM(
            name=t.name, amount=t.amount, rate=t.rate, seconds=t.seconds, source=t.source
        )

    ops = step.ops
    return records.STEP_TIME(
        chip=step.chip,
        method=step.method,
        ops=records.STEP_OPS(
            kernel_calls=ops.kernels,
            kernels_math_s=ops.kernels_math_s,
            kernels_hbm_s=ops.kernels_hbm_s,
            other_flops=ops.other_flops,
            other_bytes=ops.other_bytes,
            other_s=ops.other_s,
            other_bound=ops.other_bound,
            launch_s=ops.launch_s,
            kernel_launches=ops.launches.kernels if ops.launches is not None else None,
            loop_trips=ops.launches.loop_trips if ops.launches is not None else None,
            buffers=ops.launches.buffers if ops.launches is not None else None,
            launch_source=ops.launch_source,
            dot_efficiency=ops.efficiency.dot,
            dot_efficiency_source=ops.efficiency.dot_source,
            hbm_efficiency=ops.efficiency.hbm,
            hbm_efficiency_source=ops.efficiency.hbm_source,
        )
        if ops is not None
        else None,
        math=term(step.math),
        hbm=term(step.hbm),
        comm=[term(t) for t in step.comm],
        host=term(step.host) if step.host is not None else None,
        t_comm_s=step.t_comm_s,
        t_exposed_s=step.t_exposed_s,
        bound_s=step.bound_s,
        sum_s=step.sum_s,
        dominant=step.dominant,
        efficiency=step.efficiency,
        efficiency_source=step.efficiency_source,
        estimate_s=step.estimate_s,
        compiler_seconds=step.compiler_seconds,
        compiler_note=step.compiler_note,
        notes=list(step.notes),
    )


def step_time_text(step: StepEstimate) -> Text:
    """One line: the estimate, its dominant term, and the terms."""
    if step.estimate_s is None:
        return Text(f"step time: unknown ({step.math.source})", style="dim")
    clauses = step_clauses(step)
    at_least = " at least" if step.notes and any("unknown trip" in n for n in step.notes) else ""
    return Text(f"step time{at_least} {clauses[0]}: " + ", ".join(clauses[1:]))


def step_clauses(step: StepEstimate) -> list[str]:
    """The estimate with its dominant term first, then the terms it is made of: a GPU's per-op
    roofline (library kernels, other ops), or a TPU's roofline terms and no-overlap sum."""
    assert step.estimate_s is not None
    comm = ", ".join(f"{t.name} {format_seconds(t.seconds)}" for t in step.comm) or "none"
    exposed = [clause] if (clause := exposed_clause(step)) else []
    host = [f"host transfers {format_seconds(step.host.seconds)}"] if step.host is not None else []
    head = f"{format_seconds(step.estimate_s)}, {step.dominant}-bound on {step.chip}"
    if step.ops is not None:
        ops = step.ops
        kernels_s = ops.kernels_math_s + ops.kernels_hbm_s
        per_op = [
            f"{ops.kernels} library kernel calls {format_seconds(kernels_s)}",
            f"other ops {format_seconds(ops.other_s)} ({ops.other_bound})",
        ]
        if not ops.kernels:  # no cuBLAS or cuDNN call: its 0 s says nothing
            per_op = per_op[1:]
        launched = []
        if ops.launches is not None and ops.launch_s:
            n = ops.launches
            call = f"a call {format_seconds(ops.call_s)}, " if ops.call_s and ops.launch_overlaps else ""
            launched = [
                f"launches {format_seconds(ops.launch_s)} ({call}{n.kernels:,} kernels, {n.loop_trips:,} "
                f"loop trips, {n.buffers:,} buffers)"
            ]
        return [
            head,
            f"per op: {per_op[0]}",
            *per_op[1:],
            *launched,
            f"communication {comm}",
            *exposed,
            *host,
        ]
    clauses = [
        head,
        f"math {format_seconds(step.math.seconds)}",
        f"HBM {format_seconds(step.hbm.seconds)}",
        f"communication {comm}",
        *exposed,
        *host,
        f"no overlap {format_seconds(step.sum_s)}",
    ]
    if step.efficiency != 1.0:
        clauses.append(f"roofline / {step.efficiency:.2f}")
    if step.compiler_seconds is not None:
        clauses.append(f"the TPU compiler's own {format_seconds(step.compiler_seconds)}")
    return clauses


def exposed_clause(step: StepEstimate) -> str | None:
    """How much of the communication the compiled schedule leaves exposed, and the group (kind, mesh
    axes, line) that exposes most: `4.0 ms exposed, most by all-reduce over model at mlp.py:12`; None
    without collectives of known bandwidth."""
    from shardcli.analysis.summary import group_collectives

    timed = [e for e in step.exposure if e.seconds]
    if not timed or any(e.exposed_s is None for e in timed):
        return None
    if step.t_exposed_s <= 0:
        return "all hidden behind the ops"
    groups = group_collectives([e.collective for e in timed], timed)
    top = max(groups, key=lambda g: g.exposed_s or 0.0)
    where = f" at {top.source.rsplit('/', 1)[-1]}" if top.source else ""
    return f"{format_seconds(step.t_exposed_s)} exposed, most by {top.kind} over {top.axes_text}{where}"


def collective_json(c: CollectiveOp) -> dict[str, Any]:
    return records.PROGRAM_COLLECTIVE(
        kind=c.kind,
        mesh_axes=list(c.mesh_axes) if c.mesh_axes is not None else None,
        axis_slices=list(c.axis_slices),
        group_size=c.group_size,
        shape=c.shape,
        result_bytes=c.result_bytes,
        sent_bytes=c.sent_bytes,
        runs=c.runs,
        runs_known=c.runs_known,
        op_name=c.op_name,
        source=c.source,
        operand=c.operand,
        stack=list(c.stack),
        role=c.role,
    )


def memory_json(memory: MemoryUse | None) -> dict[str, Any] | None:
    if memory is None:
        return None
    return records.MEMORY(
        argument_bytes=memory.argument_bytes,
        output_bytes=memory.output_bytes,
        temp_bytes=memory.temp_bytes,
        alias_bytes=memory.alias_bytes,
        code_bytes=memory.code_bytes,
        total_bytes=memory.total_bytes,
        host_bytes=memory.host_bytes,
        host_transfer_bytes=memory.host_transfer_bytes,
    )


def hardware_json(hw: Hardware) -> dict[str, Any]:
    """The cost model's figures and where each came from."""
    return records.HARDWARE(
        peak_flop_per_s=hw.peak_flops,
        peak_source=hw.peak_source,
        link_bytes_per_s=hw.link_bytes_per_s,
        link_source=hw.link_source,
    )


def model_json(model: CostEstimate | None) -> dict[str, Any] | None:
    if model is None:
        return None
    return records.COST_MODEL(
        flops_per_device=model.flops_per_device,
        comm=[
            records.COMM(op=c.op, axis=c.axis, group_size=c.group_size, bytes_per_device=c.bytes_per_device)
            for c in model.comm
        ],
        comm_bytes_per_device=model.comm_bytes_per_device,
        t_math_s=model.t_math_s,
        t_comm_s=model.t_comm_s,
        t_bound_s=model.t_bound_s,
        t_sum_s=model.t_sum_s,
        dominant=model.dominant,
    )


def _where(c: CollectiveOp) -> str:
    """Where it came from, and the user's frames that called that line (`at layers.py:56 <
    model.py:12`): the full view's table is printed at its natural width."""
    callers = [f"{os.path.basename(s.rpartition(':')[0])}:{s.rpartition(':')[2]}" for s in c.stack[1:]]
    return " < ".join([collective_where(c.op, c.source), *callers])


def collective_where(op: str | None, source: str | None) -> str:
    """`dot_general at step.py:12`: the JAX operation without its jit(...) path, and the user's line
    (a line of shardcli's own programs, as einsum and reshard build them, says nothing new)."""
    op = op or "inserted by the partitioner"
    if source is None or is_own_file(source):
        return op
    path, _, line = source.rpartition(":")
    return f"{op} at {os.path.basename(path)}:{line}"


def collectives_cell(analysis: ProgramAnalysis | None) -> str:
    """A CSV cell of a program's collectives: `all-reduce@model x1;all-gather@data x3`."""
    if analysis is None:
        return ""
    return ";".join(f"{c.kind}@{c.axes_text}x{c.runs}" for c in analysis.collectives)


_STATUS_STYLES = {"ok": "green", "compiled": "green", "does not fit": "bold red"}


def status_text(status: str, refused: str = "refused", refused_style: str = "yellow") -> Text:
    """A way's status as the tables show it: ok and compiled in green, does not fit in red, and a
    refusal by JAX as `refused` (each command words its own)."""
    if status in _STATUS_STYLES:
        return Text(status, style=_STATUS_STYLES[status])
    return Text(refused, style=refused_style)


def runs_text(c: CollectiveOp) -> str:
    return f"{c.runs}" if c.runs_known else f"{c.runs}?"


def collectives_table(rows: list[tuple[str, CollectiveOp]], label: str = "impl") -> Table | Text:
    """One row per collective the compiler inserted: kind, mesh axes, result shape, bytes per device
    (its result, and what it sends by the ring conventions), how often it runs, where it came from."""
    if not rows:
        return Text("none: every device computes its block from what it holds", style="dim")
    table = DataTable(box=None, header_style="bold")
    numbers = ("bytes/device", "sends/device", "runs")
    # (name, priority): what, over which axes and how much it sends always; the line it came from next.
    for name, priority in (
        (label, 0),
        ("collective", 0),
        ("mesh axes", 0),
        ("result", 3),
        ("bytes/device", 2),
        ("sends/device", 0),
        ("runs", 4),
        ("from", 1),
    ):
        table.add_column(name, justify="right" if name in numbers else "left", priority=priority)
    for owner, c in rows:
        table.add_row(
            owner,
            c.kind,
            c.axes_text,
            c.shape,
            format_bytes(c.result_bytes),
            format_bytes(c.sent_bytes),
            runs_text(c),
            _where(c),
        )
    return table


def memory_clauses(label: str, memory: MemoryUse | None, style: str = "dim") -> RenderableType:
    """`auto memory: 1.2 MiB per device (arguments 512 KiB, ...)`, broken only between its parts."""
    return Clauses(f"{label} {memory_text(memory)}".split(", "), sep=", ", style=style)


def memory_text(memory: MemoryUse | None) -> str:
    if memory is None:
        return "memory: the backend gives no memory analysis"
    parts = [
        f"arguments {format_bytes(memory.argument_bytes)}",
        f"outputs {format_bytes(memory.output_bytes)}",
        f"temporaries {format_bytes(memory.temp_bytes)}",
    ]
    if memory.code_bytes:
        parts.append(f"code {format_bytes(memory.code_bytes)}")
    if memory.alias_bytes:
        parts.append(f"aliased -{format_bytes(memory.alias_bytes)}")
    host = f"; {format_bytes(memory.host_bytes)} in the host's memory" if memory.host_bytes else ""
    return f"{format_bytes(memory.total_bytes)} per device ({', '.join(parts)}){host}"


def _figures(hw: Hardware) -> list[RenderableType]:
    """The model's peak and link lines, with their sources; a figure not known reads "unknown"."""
    peak = format_flops(hw.peak_flops) if hw.peak_flops is not None else "unknown"
    link = format_flops(hw.link_bytes_per_s, "B/s") if hw.link_bytes_per_s is not None else "unknown"
    return [  # a source that says "unknown for ..." would say it twice
        phrases(f"peak {peak} ({hw.peak_source.removeprefix('unknown ')})", style="dim"),
        phrases(f"link {link} ({hw.link_source.removeprefix('unknown ')})", style="dim"),
    ]


def cost_model_text(model: CostEstimate, hw: Hardware, what: str, flops_known: bool = True) -> RenderableType:
    """The roofline per device: FLOPs and what each collective sends, the peak and link figures
    with their sources, T_math, T_comm and the bounds (lines broken between clauses where the
    terminal is narrow, never inside a figure). `flops_known` False: the compiler counted no FLOPs,
    so they, and T_math, are "unknown" (never 0)."""

    if not flops_known:
        flops = f"per device: FLOPs of {what} unknown (the compiler's cost analysis gave none)"
        comm_only = [
            f"{c.op} over {c.axis} (n={c.group_size}): sends {format_bytes(c.bytes_per_device)}"
            for c in model.comm
        ]
        return Group(
            Clauses([flops, *(comm_only or ["no communication"])]),
            *_figures(hw),
            Text("T_math unknown, so no bound: the FLOPs are unknown", style="yellow"),
        )

    comm = [
        f"{c.op} over {c.axis} (n={c.group_size}): sends {format_bytes(c.bytes_per_device)}"
        for c in model.comm
    ]
    lines: list[RenderableType] = [
        Clauses(
            [
                f"per device: {format_flops(model.flops_per_device, 'FLOP')} of {what}",
                *(comm or ["no communication"]),
            ]
        ),
        *_figures(hw),
    ]
    if model.t_bound_s is None:
        lines.append(Text("T_math / T_comm: n/a without a peak and a link bandwidth", style="yellow"))
        return Group(*lines)
    lines.append(
        Clauses(
            [
                f"T_math = FLOPs / peak = {format_seconds(model.t_math_s)}",
                f"T_comm = bytes / link = {format_seconds(model.t_comm_s)}",
            ]
        )
    )
    lines.append(
        Clauses(
            [
                f"bound max(T_math, T_comm) = {format_seconds(model.t_bound_s)} ({model.dominant})",
                f"no overlap at all: {format_seconds(model.t_sum_s)}",
            ]
        )
    )
    return Group(*lines)


def verdict_json(fit: FitVerdict | None) -> dict[str, Any] | None:
    if fit is None:
        return None
    gpu = fit.gpu
    return records.FIT_VERDICT(
        fits=fit.fits,
        status=fit.status,
        capacity_bytes=fit.capacity_bytes,
        capacity_source=fit.capacity_source,
        needed_bytes=fit.needed_bytes,
        arguments_bytes=fit.arguments_bytes,
        temporaries_bytes=fit.temporaries_bytes,
        compiler_message=fit.compiler_message,
        margin_bytes=gpu.margin_bytes if gpu is not None else None,
        advice=gpu.advice if gpu is not None else None,
        gpu_pool=None
        if gpu is None
        else records.GPU_POOL(
            allocator=gpu.pool.allocator,
            fraction=gpu.pool.fraction if gpu.pool.pooled else None,
            preallocate=gpu.pool.preallocate,
            environment=list(gpu.pool.settings),
            device_bytes=gpu.device_bytes,
        ),
        text=fit.text,
    )


def verdict_text(fit: FitVerdict, label: str = "") -> RenderableType:
    """The fit verdict after a bold `label`, broken between its clauses where narrow (`16.0 GiB
    free` stays whole)."""
    first, *rest = fit.text.split(", ")
    clauses: list[str | Text] = [Text.assemble((label, "bold"), first), *rest]
    style = {"fits": "green", "at risk": "bold yellow"}.get(fit.status, "bold red")
    return Clauses(clauses, sep=", ", style=style)
