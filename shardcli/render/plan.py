"""Rendering `shardcli plan` of the preset decoder: the ranked table for people (80 columns), JSON with every
candidate (a user program's plan is `render.plan_program`'s)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import RenderableType
from rich.text import Text

from shardcli.analysis.step_time import StepEstimate
from shardcli.analysis.target import compile_options_words, compiler_options
from shardcli.hardware.compilers import compiler_versions
from shardcli.hardware.targets import TargetSpec
from shardcli.plan.compiled_figures import CompiledFigures
from shardcli.plan.search import RANK_ORDERS, PlanResult, PlanRow, inspect_command
from shardcli.render.console import emit, make_console
from shardcli.render.layout import Clauses, DataTable
from shardcli.render.plan_pipeline import pipeline_json, pipeline_lines
from shardcli.results import bodies, documents
from shardcli.specs.decoder import rules_text
from shardcli.specs.remat import parse_policy
from shardcli.specs.runs import RunOptions
from shardcli.specs.values import format_bytes

GIB = 1 << 30
EMIT_HINT = "winner.py"
# A row that fits with less than this share of the usable memory spare says "at risk": on a GPU the
# share shardcli.hardware.gpu_memory calls at risk (a BFC pool cut up by earlier arrays); on a TPU the same
# share, as a warning only (the TPU compiler's own verdict is exact, but nothing is left to grow).
TIGHT_SHARE = 0.90


@dataclass(frozen=True)
class CommandLine:
    """A command to paste: printed on one line whatever the terminal's width (never wrapped)."""

    text: str


def fit_word(f: CompiledFigures) -> Text:
    """`yes`, `at risk` (above TIGHT_SHARE of the usable memory) or `no`."""
    if not f.fits:
        return Text("no", style="red")
    if f.needed_bytes is not None and f.needed_bytes > TIGHT_SHARE * f.capacity_bytes:
        return Text("at risk", style="yellow")
    return Text("yes", style="green")


def used_share(f: CompiledFigures) -> str:
    """The memory per chip as a share of what one program may use there (HBM, or JAX's GPU pool)."""
    if f.needed_bytes is None or not f.capacity_bytes:
        return "?"
    return f"{f.needed_bytes / f.capacity_bytes:.0%}"


def seconds_text(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:,.2f} s"


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M"


def rules_by_axis(rules: tuple[tuple[str, tuple[str, ...]], ...], axes: tuple[str, ...]) -> list[str]:
    """`fsdp <- batch, embed` per mesh axis of the layout: the rules that take effect on it."""
    out = []
    for axis in axes:
        names = [name for name, mesh_axes in rules if axis in mesh_axes]
        if names:
            out.append(f"{axis} <- {', '.join(names)}")
    return out


def _bound(row: PlanRow) -> str:
    if row.estimate is None:
        return "-"
    return row.estimate.dominant or "-"


def ranked_table(result: PlanResult) -> DataTable:
    """The compiled candidates, best first: every figure from the compile."""
    table = DataTable(box=None, header_style="bold")
    unit = result.request.target.generation.chip  # "chip", "GPU"
    columns = (
        ("#", "right", 0),
        ("layout", "left", 0),
        ("remat", "left", 0),
        ("batch", "right", 0),
        ("fits", "left", 0),
        (f"GiB/{unit}", "right", 0),
        ("used", "right", 0),
        ("est step", "right", 0),
        ("MFU", "right", 0),
        ("bound", "left", 0),
        (f"tok/s/{unit}", "right", 1),
    )
    for name, justify, priority in columns:
        table.add_column(name, justify=justify, priority=priority)
    for i, row in enumerate(result.compiled, 1):
        f = row.compiled
        assert f is not None
        gib = f"{f.needed_bytes / GIB:.1f}" if f.needed_bytes is not None else "?"
        mfu = result.mfu(row)
        tokens = result.tokens_per_s_per_chip(row)
        table.add_row(
            str(i),
            row.candidate.label,
            row.candidate.remat,
            f"{row.candidate.global_batch}",
            fit_word(f),
            gib,
            used_share(f),
            seconds_text(row.step_s),
            f"{mfu:.0%}" if mfu is not None and f.fits else "-",
            _bound(row),
            f"{tokens:,.0f}" if tokens is not None and f.fits else "-",
        )
    return table


def _pool_advice(result: PlanResult) -> str | None:
    """On a GPU where no compiled layout fits: the JAX pool setting that makes the smallest of them
    fit, as its fit verdict (the JSON's `fit_text`) advises; None where no setting does, or a TPU."""
    import os

    from shardcli.hardware.gpu_memory import advise, read_gpu_pool

    generation = result.request.target.generation
    needs = [r.compiled.needed_bytes for r in result.compiled if r.compiled and r.compiled.needed_bytes]
    if generation.platform != "cuda" or not needs:
        return None
    advice = advise(min(needs), generation.hbm_bytes, read_gpu_pool(os.environ))
    return advice if advice is not None and "makes it fit" in advice else None


def winner_lines(result: PlanResult, emit_file: str | None) -> list[RenderableType | CommandLine]:
    """The winner's rules, its estimate's terms, its heaviest collective and how to reproduce it."""
    row = result.winner
    if row is None:
        where = "JAX's pool on each GPU" if result.chip.network_bytes_per_s is not None else "the chips' HBM"
        refused: list[RenderableType | CommandLine] = [
            Text(f"no compiled layout fits {where}", style="red bold")
        ]
        pool_advice = _pool_advice(result)
        if pool_advice is not None:  # the pool is what is small: the rows' own fit text says so
            refused.append(Text(f"to fit: {pool_advice}"))
        elif not any(parse_policy(r).offloads for r in result.request.remats):
            refused.append(
                Text(
                    "to fit: --remat minimal_offloaded keeps the projections in the host's memory "
                    "(custom:decoder_layer_input=offload the layers' inputs); or a smaller --batch, "
                    "or more chips"
                )
            )
        return refused
    c, est, f = row.candidate, row.estimate, row.compiled
    assert est is not None and f is not None
    comm = ", ".join(f"{t.name} {seconds_text(t.seconds)}" for t in est.comm[:3]) or "none"
    top = f.traffic[0] if f.traffic else None
    lines: list[RenderableType | CommandLine] = [
        Text(f"winner: {c.label}, remat {c.remat}, global batch {c.global_batch}", style="bold"),
        Clauses(
            [
                f"mesh {'x'.join(map(str, c.mesh.shape))} ({','.join(c.mesh.axes)})",
                *rules_by_axis(c.rules, c.mesh.axes),
            ]
        ),
        Clauses(_terms(est, comm)),
    ]
    if top is not None:
        lines.append(
            Text(
                f"most traffic: {top.top_kind} over {top.axes} from {top.top_op} "
                f"({format_bytes(int(top.sent_bytes))} per step on that axis)"
            )
        )
    program = emit_file or EMIT_HINT
    if emit_file:
        lines.append(Text(f"reproduce ({program} written):"))
    else:
        lines.append(
            Text(f"reproduce: add --emit {program} to this plan (its compiles come from the cache), then")
        )
    lines.append(CommandLine(inspect_command(result.request, row, program)))
    return lines


def _terms(est: StepEstimate, comm: str) -> list[str]:
    """The estimate's terms: the roofline's, or on a GPU the per-op roofline's parts."""
    host = [f"T_host {seconds_text(est.host.seconds)}"] if est.host is not None else []
    if est.ops is None:
        return [
            f"T_math {seconds_text(est.math.seconds)}",
            f"T_hbm {seconds_text(est.hbm.seconds)}",
            f"T_comm {comm}",
            *host,
            f"bound {est.dominant} {seconds_text(est.bound_s)} / efficiency {est.efficiency:.4g}",
        ]
    ops = est.ops
    parts = (
        f"{ops.kernels} library kernel calls {seconds_text(ops.kernels_math_s + ops.kernels_hbm_s)}, "
        f"other ops {seconds_text(ops.other_s)} ({ops.other_bound})"
    )
    kernels = f" ({ops.launches.kernels:,} kernels)" if ops.launches is not None else ""
    return [
        f"launches {seconds_text(ops.launch_s)}{kernels}, longer than the per-op roofline "
        f"{seconds_text(ops.roofline_s)}: {parts}"
        if ops.launch_bound
        else f"per-op roofline {seconds_text(ops.seconds)}: {parts}",
        f"T_comm {comm}",
        *host,
        f"bound {est.dominant}",
    ]


def summary_clauses(result: PlanResult) -> Clauses:
    rows = result.rows
    compiled = sum(r.compiled is not None for r in rows)
    cached = sum(r.status == "cached" for r in rows)
    modelled = sum(r.status == "modelled" for r in rows)
    pruned = sum(r.status == "pruned" for r in rows) + len(result.pruned)
    parts = [
        f"{len(rows) + len(result.pruned)} candidate{'' if len(rows) + len(result.pruned) == 1 else 's'}",
        f"{compiled} compiled ({cached} from the cache) in {result.compile_s:,.0f} s",
        f"{modelled} modelled only, {pruned} pruned (--format json lists every one)",
    ]
    if result.interrupted:
        parts.append("interrupted: the rest were not compiled")
    elif result.exhausted:
        parts.append(
            f"fewer than --compile {result.request.compile_n}: every layout is settled or expected not "
            "to fit (the model's memory corrected by these compiles)"
        )
    return Clauses(parts, style="dim")


def compiler_pairs(target: TargetSpec) -> tuple[tuple[str, str], ...]:
    """(package, version) of the target's compiler: jax, jaxlib, and libtpu or JAX's CUDA plugin."""
    return compiler_versions(target.generation.platform)


def compiler_text(target: TargetSpec) -> str:
    """`compiled by jax 0.10.2, ...`, with the options a GPU target's compiles change, and why."""
    text = "compiled by " + ", ".join(f"{package} {version}" for package, version in compiler_pairs(target))
    options = compile_options_words(target)
    return f"{text} with {options}" if options else text


def _hardware_clauses(result: PlanResult) -> list[str]:
    """The chips, the memory a layout is judged against, and what the estimate is."""
    chip = result.chip
    if result.request.target.generation.platform != "cuda":
        slices = result.request.target
        return [
            (f"{slices.slices_words()}, " if slices.slices > 1 else f"{result.chips} chips, ")
            + f"{format_bytes(chip.hbm_bytes)} HBM each",
            f"estimate = roofline / {result.calibration.efficiency:.2f} ({result.calibration.provenance})",
        ]
    hosts, gpus = chip.torus
    network = result.request.target.network_words()
    return [
        f"{result.chips} GPUs ({hosts} host{'s' * (hosts > 1)} x {gpus}), a layout judged against "
        f"{chip.usable_source} ({format_bytes(chip.usable_bytes)})",
        f"NVLink {chip.link_bytes_per_s / 1e9:g} GB/s within a host; between hosts {network}, times an "
        "axis's GPUs on each host (NCCL's rails)",
        f"estimate = {result.calibration.provenance}, or the transfers (communication, then the host's) "
        "where they take longer",
    ]


def plan_parts(
    result: PlanResult, emit_file: str | None, quiet: bool = False
) -> list[RenderableType | CommandLine]:
    """What `plan` prints, in order: the header, the ranked table, the winner, the summary."""
    req = result.request
    parts: list[RenderableType | CommandLine] = []
    if not quiet:
        m = req.model
        parts.append(
            Text(
                f"plan {m.name} ({_count(m.parameters())} parameters, seq {m.seq}, {m.attention} attention) "
                f"on {req.target.name}",
                style="bold",
            )
        )
        parts.append(Clauses([*_hardware_clauses(result), compiler_text(req.target)], style="dim"))
        parts.append(Clauses(_order_clauses(result), style="dim"))
        parts.append(Text(""))
    parts.append(ranked_table(result))
    parts.append(Text(""))
    parts.extend(winner_lines(result, emit_file))
    parts.extend(pipeline_lines(result))
    if not quiet:
        parts.append(summary_clauses(result))
    return parts


def _order_clauses(result: PlanResult) -> list[str]:
    """How the table is ordered and what its memory columns mean."""
    unit = result.request.target.generation.chip
    usable = "JAX's memory pool" if unit == "GPU" else "the chip's HBM"
    other = "step" if result.request.rank == "throughput" else "throughput"
    return [
        f"ranked by {RANK_ORDERS[result.request.rank]} (--rank {other} for the other order)",
        f"used: GiB/{unit} over {usable}; at risk: above {TIGHT_SHARE:.0%} of it",
    ]


def print_parts(console: Any, parts: list[RenderableType | CommandLine]) -> None:
    """Each part; a command on one line, never wrapped (a terminal folds it, a copy pastes it whole)."""
    for part in parts:
        if isinstance(part, CommandLine):
            console.print(Text(part.text), soft_wrap=True)
        else:
            console.print(part)


def compiled_json(f: CompiledFigures | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return bodies.PLAN_COMPILED(
        fits=f.fits,
        needed_bytes=f.needed_bytes,
        capacity_bytes=f.capacity_bytes,
        argument_bytes=f.argument_bytes,
        temp_bytes=f.temp_bytes,
        host_bytes=f.host_bytes,
        host_transfer_bytes=f.host_transfer_bytes,
        flops=f.flops,
        bytes_accessed=f.bytes_accessed,
        traffic=[
            bodies.PLAN_TRAFFIC(
                axes=t.axes,
                sent_bytes=t.sent_bytes,
                collectives=t.collectives,
                top_kind=t.top_kind,
                top_op=t.top_op,
            )
            for t in f.traffic
        ],
        method=f.method,
        compile_s=f.compile_s,
        fit_text=f.fit_text,
        notes=list(f.notes),
    )


def estimate_json(e: StepEstimate | None, step_s: float | None) -> dict[str, Any] | None:
    """The estimate's terms (a pipelined candidate's: its stage's microbatch) and the step (its
    pipeline's)."""
    if e is None:
        return None
    return bodies.PLAN_ESTIMATE(
        step_s=step_s,
        t_math_s=e.math.seconds,
        t_hbm_s=e.hbm.seconds,
        t_host_s=e.host.seconds if e.host is not None else None,
        t_comm_s={t.name: t.seconds for t in e.comm},
        bound=e.dominant,
        t_bound_s=e.bound_s,
        t_sum_s=e.sum_s,
        efficiency=e.efficiency,
        efficiency_source=e.efficiency_source,
    )


def _candidate_json(result: PlanResult, rank: int | None, row: PlanRow) -> dict[str, Any]:
    c, m, f, e = row.candidate, row.modelled, row.compiled, row.estimate
    return bodies.PLAN_CANDIDATE(
        rank=rank,
        layout=c.label,
        mesh={a: s for a, s in c.mesh.sizes},
        crosses_slices=dict(c.mesh.dcn),
        pipeline=pipeline_json(row),
        rule_set=c.rule_set,
        rules=rules_text(c.rules),
        remat=c.remat,
        global_batch=c.global_batch,
        per_device_batch=c.per_device_batch,
        status=row.status,
        why=row.why,
        model=bodies.PLAN_MODELLED(
            memory_bytes=m.memory_bytes,
            fits=m.fits,
            flops=m.flops,
            t_math_s=m.t_math_s,
            t_comm_s=dict(m.t_comm_s),
            t_host_s=m.t_host_s,
            comm_bytes=dict(m.comm_bytes),
            bound=m.bound,
        ),
        compiled=compiled_json(f),
        estimate=estimate_json(e, row.step_s),
        tokens_per_s_per_chip=result.tokens_per_s_per_chip(row),
        mfu=result.mfu(row),
    )


def _config_json(result: PlanResult) -> dict[str, Any]:
    """The plan's `config`: the model, the target and compiler, and every flag that shaped the search."""
    req, cfg = result.request, result.request.model
    return bodies.PLAN_CONFIG(
        model={
            "name": cfg.name,
            "layers": cfg.layers,
            "d_model": cfg.d_model,
            "heads": cfg.heads,
            "kv_heads": cfg.kv_heads,
            "head_dim": cfg.head_dim,
            "mlp_dim": cfg.mlp_dim,
            "vocab": cfg.vocab,
            "seq": cfg.seq,
            "activation": cfg.activation,
            "tied_embeddings": cfg.tied_embeddings,
            "attention": cfg.attention,
            "parameters": cfg.parameters(),
            "source": cfg.source,
        },
        target=req.target.name,
        slices=req.target.slices,
        chips=result.chips,
        compiler=dict(compiler_pairs(req.target)),
        compile_options=compiler_options(req.target) or {},
        global_batch=req.global_batch,
        per_device_batch=req.per_device_batch,
        remat=list(req.remats),
        rule_sets=list(req.rule_sets),
        sequence=req.sequence,
        mesh=None if req.mesh is None else dict(req.mesh),
        compile=req.compile_n,
        method=req.method,
        rank=req.rank,
        pipeline=None
        if req.pipeline is None
        else {
            "stages": list(req.pipeline.stages),
            "microbatches": req.pipeline.microbatches,
            "schedule": req.pipeline.schedule,
        },
    )


def plan_json(result: PlanResult, emit_file: str | None) -> dict[str, Any]:
    req, chip = result.request, result.chip
    ranks = {id(r): i for i, r in enumerate(result.compiled, 1)}
    winner = result.winner
    rows = result.rows
    return documents.document(
        "plan",
        config=_config_json(result),
        chip=bodies.PLAN_CHIP(
            peak_flop_per_s=chip.peak_flops,
            hbm_bytes_per_s=chip.hbm_bytes_per_s,
            hbm_bytes=chip.hbm_bytes,
            link_bytes_per_s=chip.link_bytes_per_s,
            torus=list(chip.torus),
            wraparound=list(chip.wraparound),
            usable_bytes=chip.usable_bytes,
            network_bytes_per_s=chip.network_bytes_per_s,
        ),
        calibration={
            "efficiency": result.calibration.efficiency,
            "provenance": result.calibration.provenance,
        },
        candidates=[_candidate_json(result, ranks.get(id(r)), r) for r in rows],
        unbuildable=[{"layout": p.label, "why": p.why} for p in result.pruned],
        winner=None
        if winner is None
        else bodies.PLAN_WINNER(
            layout=winner.candidate.label,
            mesh_shape=list(winner.candidate.mesh.shape),
            mesh_axes=list(winner.candidate.mesh.axes),
            rules=rules_text(winner.candidate.rules),
            remat=winner.candidate.remat,
            global_batch=winner.candidate.global_batch,
            inspect_command=inspect_command(req, winner, emit_file or EMIT_HINT),
        ),
        summary=bodies.PLAN_SUMMARY(
            candidates=len(rows) + len(result.pruned),
            compiled=sum(r.compiled is not None for r in rows),
            cached=result.cache_hits,
            modelled=sum(r.status == "modelled" for r in rows),
            pruned=sum(r.status == "pruned" for r in rows) + len(result.pruned),
            fits=sum(bool(r.fits) for r in rows),
            interrupted=result.interrupted,
            compile_s=result.compile_s,
        ),
    )


def render_plan(result: PlanResult, options: RunOptions, emit_file: str | None) -> None:
    if options.format == "json":
        import json

        emit(json.dumps(plan_json(result, emit_file), indent=2) + "\n", options)
        return
    print_parts(make_console(options), plan_parts(result, emit_file, quiet=options.quiet))
