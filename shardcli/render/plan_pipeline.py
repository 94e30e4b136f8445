"""`plan --pipeline`'s own lines and JSON: each pipelined layout's stages, microbatches and bubble.

The table ranks pipelined layouts (`pp2 fsdp4`) beside the others by their pipelined step
(`plan.pipeline.PipelineStep`); what follows the winner says how the best pipelined layout's step
is made, and that no published pipelined row checks it.
"""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from rich.text import Text

from shardcli.plan.pipeline import NO_PUBLISHED_ROW, bubble_words, stage_target
from shardcli.plan.search import PlanResult, PlanRow
from shardcli.render.console import format_duration
from shardcli.render.layout import Clauses
from shardcli.results import bodies


def pipeline_lines(result: PlanResult) -> list[RenderableType]:
    """Under a plan with --pipeline: the best pipelined layout compiled, its stages, bubble, stage
    transfers and memory in flight, and the note that no published row checks it."""
    if result.request.pipeline is None:
        return []
    row = next((r for r in result.compiled if r.pipeline is not None), None)
    if row is None or row.pipeline is None:
        return [
            Text("no pipelined layout was compiled (a larger --compile N reaches them)", style="dim"),
            Text(f"note: {NO_PUBLISHED_ROW}", style="dim"),
        ]
    step, c = row.pipeline, row.candidate
    p = step.choice
    stage = stage_target(result.request.target, p.stages)
    return [
        Text(f"pipelined: {c.label}, {p.stages} stages of {stage.chips} chips", style="bold"),
        Clauses(
            [
                bubble_words(p) + f" ({format_duration(step.bubble_s)})",
                f"one microbatch on a stage {format_duration(step.stage_s)} (its compile's estimate)",
                f"stage transfers {format_duration(step.exposed_transfer_s)} exposed over {step.link}",
                f"the first stage holds {p.in_flight} microbatch{'es' * (p.in_flight > 1)}' activations",
                f"step {format_duration(step.step_s)}",
            ],
            style="dim",
        ),
        Text(f"note: {NO_PUBLISHED_ROW}", style="dim"),
    ]


def pipeline_json(row: PlanRow) -> dict[str, Any] | None:
    """A candidate's `pipeline` object; null for an unpipelined one (bubble_s null until compiled)."""
    p = row.candidate.pipeline
    if p is None:
        return None
    step = row.pipeline
    return bodies.PLAN_PIPELINE(
        stages=p.stages,
        microbatches=p.microbatches,
        schedule=p.schedule,
        repeats=p.repeats,
        bubble_fraction=p.bubble_fraction,
        bubble_s=step.bubble_s if step is not None else None,
        stage_step_s=step.stage_s if step is not None else None,
        transfer_bytes=step.transfer_bytes if step is not None else None,
        exposed_transfer_s=step.exposed_transfer_s if step is not None else None,
        in_flight=p.in_flight,
    )
