"""Rendering `shardcli plan PROGRAM`: the user's own program's compiled layouts, best first, for people
and as JSON (the preset decoder's plan is `render.plan`'s)."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from rich.text import Text

from shardcli.analysis.target import compiler_options
from shardcli.plan.program_rows import ProgramPlanResult
from shardcli.plan.user_program import inspect_command as program_inspect_command
from shardcli.render.console import emit, make_console
from shardcli.render.layout import Clauses, DataTable
from shardcli.render.plan import (
    GIB,
    CommandLine,
    compiled_json,
    compiler_pairs,
    compiler_text,
    estimate_json,
    print_parts,
    rules_by_axis,
    seconds_text,
)
from shardcli.results import bodies, documents
from shardcli.specs.decoder import rules_text
from shardcli.specs.runs import RunOptions


def program_table(result: ProgramPlanResult) -> DataTable:
    """The compiled layouts of the user's program, best first."""
    table = DataTable(box=None, header_style="bold")
    for name, justify in (
        ("#", "right"),
        ("layout", "left"),
        ("fits", "left"),
        ("GiB/chip", "right"),
        ("args GiB", "right"),
        ("est step", "right"),
        ("HFU", "right"),
        ("bound", "left"),
    ):
        table.add_column(name, justify=justify)
    for i, row in enumerate((r for r in result.rows if r.compiled is not None), 1):
        f, e = row.compiled, row.estimate
        assert f is not None
        step = e.estimate_s if e is not None else None
        hfu = f.flops / step / result.peak_flops if step and f.flops else None
        table.add_row(
            str(i),
            row.label,
            Text("yes", style="green") if f.fits else Text("no", style="red"),
            f"{f.needed_bytes / GIB:.1f}" if f.needed_bytes is not None else "?",
            f"{row.argument_bytes / GIB:.1f}",
            seconds_text(step),
            f"{hfu:.0%}" if hfu is not None and f.fits else "-",
            (e.dominant or "-") if e is not None else "-",
        )
    return table


def program_parts(result: ProgramPlanResult, quiet: bool = False) -> list[RenderableType | CommandLine]:
    req = result.request
    parts: list[RenderableType | CommandLine] = []
    if not quiet:
        parts.append(Text(f"plan {req.program} on {req.target.name}", style="bold"))
        parts.append(
            Clauses(
                [
                    compiler_text(req.target),
                    f"lays itself out ({result.own_layout}): its inputs called on each layout's mesh"
                    if result.own_layout
                    else f"{result.named_leaves} of {result.leaves} argument leaves carry logical axis names",
                    "HFU: the compiled FLOPs over the estimated step at the chip's peak",
                ],
                style="dim",
            )
        )
        parts.append(Text(""))
    parts.append(program_table(result))
    parts.append(Text(""))
    row = result.winner
    if row is None:
        parts.append(Text("no compiled layout fits the chips' HBM", style="red bold"))
    else:
        parts.append(Text(f"winner: {row.label}", style="bold"))
        parts.append(
            Clauses(
                [
                    f"mesh {'x'.join(map(str, row.mesh.shape))} ({','.join(row.mesh.axes)})",
                    *rules_by_axis(tuple(r for r in row.rules if r[0] in result.names_used), row.mesh.axes),
                ]
            )
        )
        parts.append(Text("reproduce:"))
        parts.append(CommandLine(program_inspect_command(result, row)))
    if not quiet:
        compiled = sum(r.compiled is not None for r in result.rows)
        parts.append(
            Clauses(
                [
                    f"{len(result.rows)} layouts",
                    f"{compiled} compiled ({result.cache_hits} from the cache) in {result.compile_s:,.0f} s",
                    "interrupted: the rest were not compiled" if result.interrupted else "",
                ],
                style="dim",
            )
        )
    return parts


def program_json(result: ProgramPlanResult) -> dict[str, Any]:
    req = result.request
    ranked = [r for r in result.rows if r.compiled is not None]
    ranks = {id(r): i for i, r in enumerate(ranked, 1)}
    winner = result.winner
    return documents.document(
        "plan",
        config={
            "program": req.program,
            "inputs": req.inputs,
            "target": req.target.name,
            "chips": req.target.chips,
            "compiler": dict(compiler_pairs(req.target)),
            "compile_options": compiler_options(req.target) or {},
            "rules": rules_text(req.rules) if req.rules is not None else None,
            "compile": req.compile_n,
            "cache": req.use_cache,
            "named_leaves": result.named_leaves,
            "leaves": result.leaves,
        },
        candidates=[
            bodies.PLAN_PROGRAM_CANDIDATE(
                rank=ranks.get(id(r)),
                layout=r.label,
                mesh={a: s for a, s in r.mesh.sizes},
                rule_set=r.rule_set,
                rules=rules_text(r.rules),
                argument_bytes=r.argument_bytes,
                status=r.status,
                why=r.why,
                compiled=compiled_json(r.compiled),
                estimate=estimate_json(r.estimate, r.estimate.estimate_s if r.estimate else None),
            )
            for r in result.rows
        ],
        winner=None
        if winner is None
        else {
            "layout": winner.label,
            "mesh_shape": list(winner.mesh.shape),
            "mesh_axes": list(winner.mesh.axes),
            "rules": rules_text(winner.rules),
            "inspect_command": program_inspect_command(result, winner),
        },
        summary={
            "candidates": len(result.rows),
            "compiled": len(ranked),
            "cached": result.cache_hits,
            "fits": sum(bool(r.compiled and r.compiled.fits) for r in ranked),
            "interrupted": result.interrupted,
            "compile_s": result.compile_s,
        },
    )


def render_program_plan(result: ProgramPlanResult, options: RunOptions) -> None:
    import sys

    for warning in result.warnings:
        sys.stderr.write(f"shardcli: warning: {warning}\n")
    if options.format == "json":
        import json

        emit(json.dumps(program_json(result), indent=2) + "\n", options)
        return
    print_parts(make_console(options), program_parts(result, quiet=options.quiet))
