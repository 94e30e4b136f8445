"""Rendering `shardcli pipeline`: the stages, the timeline, the bubble, the checks; JSON for scripts."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from shardcli.render import human, jsonout
from shardcli.render.console import make_console, prints_here, show_warnings
from shardcli.render.layout import Clauses, DataTable
from shardcli.results import bodies
from shardcli.specs.runs import RunOptions
from shardcli.training.pipeline.threads import Event, PipelineResult, bubble_text

TIMELINE_WIDTH = 96
DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
KIND_STYLE = {"F": "bold cyan", "B": "bold magenta", "send": "yellow", "send-grad": "yellow"}


def timeline(result: PipelineResult, width: int = TIMELINE_WIDTH) -> Text:
    """One row of forwards and one of backwards per stage, time left to right.

    A step shows as its microbatch's digit (0-9, then a-z) over the time it ran; `>` marks an
    activation sent to the next stage, `<` a gradient sent to the previous one.
    """
    run = result.mpmd
    assert run is not None
    span = run.makespan_s or 1.0
    t0 = min(e.start for e in run.events)
    forward_only = result.request.forward_only

    def cols(e: Event) -> range:
        a = int((e.start - t0) / span * (width - 1))
        b = max(int((e.end - t0) / span * (width - 1)), a)
        return range(a, b + 1)

    text = Text()
    rows = [("F", ("F", "send"))] + ([] if forward_only else [("B", ("B", "send-grad"))])
    for s in range(result.plan.stages):
        for label, kinds in rows:
            line: list[tuple[str, str]] = [("·", "dim")] * width
            for e in run.events:
                if e.stage != s or e.kind not in kinds:
                    continue
                if e.kind in ("F", "B"):
                    for c in cols(e):
                        line[c] = (DIGITS[e.microbatch % len(DIGITS)], KIND_STYLE[e.kind])
                else:
                    c = min(cols(e).stop - 1, width - 1)
                    if line[c][0] == "·":
                        line[c] = (">" if e.kind == "send" else "<", KIND_STYLE[e.kind])
            text.append(f"stage {s} {label} │", style="bold")
            for char, style in line:
                text.append(char, style=style)
            text.append("│\n")
    end = human.format_duration(run.makespan_s)
    text.append(f"{'':10}0{end:>{width + 1}}\n", style="dim")
    text.append(
        "digits: microbatch of a forward (F row) or backward (B row) step; > activation sent, "
        "< gradient sent; · idle",
        style="dim",
    )
    return text


def timeline_width(console: Any) -> int:
    """The timeline's columns of time that fit the console beside `stage 0 F │` and the closing `│`."""
    return max(16, min(TIMELINE_WIDTH, console.width - 13))


SPMD_SCHEDULE = "fill-drain (GPipe order; the backward by jax.value_and_grad through the loop)"


def schedule_text(result: PipelineResult) -> str:
    """What each implementation ran: mpmd follows --schedule; spmd is always fill-drain."""
    req = result.request
    if req.forward_only:
        mpmd = f"{req.schedule} (forward only{', the same as gpipe' if req.schedule == '1f1b' else ''})"
    else:
        mpmd = f"{req.schedule} (training)"
    if "mpmd" not in req.impls:
        return f"spmd: {SPMD_SCHEDULE}"
    return f"mpmd: {mpmd}" + (f"; spmd: {SPMD_SCHEDULE}" if "spmd" in req.impls else "")


def stage_table(result: PipelineResult) -> Table:
    table = DataTable(box=None, header_style="bold")
    priorities = {"sub-mesh": 1, "layers": 2, "devices": 3}
    for name in ("stage", "devices", "sub-mesh", "layers", "compute", "transfer", "busy"):
        table.add_column(
            name,
            justify="right" if name not in ("devices", "sub-mesh", "layers") else "left",
            priority=priorities.get(name, 0),
        )
    run = result.mpmd
    assert run is not None
    for st in run.stages:
        table.add_row(
            str(st.stage),
            ",".join(map(str, st.device_ids)),
            "x".join(map(str, st.sub_mesh)),
            f"{st.layers[0]}-{st.layers[1] - 1}",
            human.format_duration(st.compute_s),
            human.format_duration(st.transfer_s),
            f"{st.compute_s / run.makespan_s:.0%}" if run.makespan_s else "-",
        )
    return table


def pipeline_json(result: PipelineResult) -> dict[str, Any]:
    req, plan = result.request, result.plan
    body: dict[str, Any] = {
        "config": bodies.PIPELINE_CONFIG(
            stages=plan.stages,
            layers=req.layers,
            layers_per_stage=plan.layers_per_stage,
            width=req.width,
            batch=req.batch,
            microbatches=req.microbatches,
            microbatch_size=plan.microbatch_size,
            schedule=req.schedule,
            forward_only=req.forward_only,
            impls=list(req.impls),
            spmd_schedule=SPMD_SCHEDULE if "spmd" in req.impls else None,
            steps_per_stage=[[f"{k}{m}" for k, m in steps] for steps in plan.schedule],
        ),
        "reference_loss": result.reference_loss,
        "mpmd": None,
        "spmd": None,
        "checks": jsonout.checks_json(result.checks),
        "ok": not result.failed,
    }
    if result.mpmd is not None:
        run = result.mpmd
        measured, textbook = bubble_text(result)
        body["mpmd"] = bodies.MPMD(
            makespan_s=run.makespan_s,
            compile_s=run.compile_s,
            loss=run.loss,
            bubble=bodies.BUBBLE(measured=measured, textbook=textbook),
            stages=[
                bodies.PIPELINE_STAGE(
                    stage=st.stage,
                    device_ids=list(st.device_ids),
                    sub_mesh=list(st.sub_mesh),
                    layers=list(st.layers),
                    compute_s=st.compute_s,
                    transfer_s=st.transfer_s,
                )
                for st in run.stages
            ],
            events=[
                bodies.PIPELINE_EVENT(
                    stage=e.stage, kind=e.kind, microbatch=e.microbatch, start_s=e.start, end_s=e.end
                )
                for e in run.events
            ],
        )
    if result.spmd is not None:
        body["spmd"] = bodies.SPMD(
            step_s=result.spmd.step_s, compile_s=result.spmd.compile_s, loss=result.spmd.loss
        )
    return jsonout.document("pipeline", result.session, body)


def processes_text(result: PipelineResult) -> Text:
    """Over several processes: which process owns each stage, and how activations cross."""
    owner = {c.device_id: c.process_index for c in result.session.layout.cells}
    assert result.mpmd is not None
    where = ", ".join(f"stage {i.stage} on process {owner[i.device_ids[0]]}" for i in result.mpmd.stages)
    return Text(
        f"{where}; between processes an activation moves by a ppermute over the two stages' joint mesh "
        f"(JAX's send/recv), within one by device_put; each process runs its stages in one global order",
        style="dim",
    )


def render_pipeline(result: PipelineResult, options: RunOptions) -> None:
    show_warnings(result.session.runtime)
    if not prints_here(options, result.session.runtime):
        return
    if options.format == "json":
        jsonout.write_json(pipeline_json(result), options)
        return
    console = make_console(options)
    req, plan = result.request, result.plan
    if not options.quiet:
        console.print(
            human.header(
                result.session,
                {
                    "pipeline": f"{plan.stages} stages x {plan.layers_per_stage} layers (width {req.width}), "
                    f"{req.microbatches} microbatches of {plan.microbatch_size} rows",
                    "schedule": schedule_text(result),
                    "impls": ", ".join(req.impls),
                },
                verbose=options.verbose,
            )
        )
    if result.mpmd is not None:
        run = result.mpmd
        human.section(
            console, "stages (mpmd: one jitted program per stage, on its own sub-mesh)", stage_table(result)
        )
        if result.session.runtime.process_count > 1:
            console.print(processes_text(result))
        # The picture is folded to the terminal (time squeezed into fewer columns), never wrapped.
        wide = getattr(console, "wide", False)
        human.section(
            console, "timeline (mpmd)", timeline(result, TIMELINE_WIDTH if wide else timeline_width(console))
        )
        measured, textbook = bubble_text(result)
        console.print(
            Clauses(
                [
                    f"makespan {human.format_duration(run.makespan_s)} "
                    f"(compile {human.format_duration(run.compile_s)}, separate)",
                    f"bubble {measured:.0%} measured, {textbook:.0%} textbook (S-1)/(M+S-1)",
                ]
            )
        )
    if result.spmd is not None:
        human.section(
            console,
            "spmd (one shard_map, ppermute between stages)",
            Clauses(
                [
                    f"step p50 {human.format_duration(result.spmd.step_s)} "
                    f"(compile {human.format_duration(result.spmd.compile_s)})",
                    f"mpmd makespan {human.format_duration(result.mpmd.makespan_s)}" if result.mpmd else "",
                ]
            ),
        )
    console.print()
    human.print_checks(console, result.checks, human.checked_where(result.session))
