"""Rendering `shardcli inspect` (and `shardcli.inspect`'s report): rich for people, JSON for scripts."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from shardcli import json_schema as schema
from shardcli.core.inspect import ArrayFact, InspectResult
from shardcli.render import human, jsonout
from shardcli.render.console import Clauses, DataTable, make_console, prints_here, show_warnings
from shardcli.render.program import (
    collectives_table,
    cost_model_text,
    hardware_json,
    memory_clauses,
    model_json,
    program_json,
    step_time_json,
    step_time_text,
    verdict_json,
    verdict_text,
)
from shardcli.runtime import format_bytes
from shardcli.specs import RunOptions

FORMATS = ("table", "json")
# Pictures for at most this many arguments and results; the table lists every one.
MAX_PICTURES = 6


def _array_json(fact: ArrayFact) -> dict[str, Any]:
    return schema.INSPECT_ARRAY(
        name=fact.name,
        dtype=fact.dtype,
        shape=list(fact.shape),
        spec=jsonout.spec_json(fact.entries),
        bytes=fact.bytes_global,
        bytes_per_device=fact.bytes_per_device,
        replication=fact.layout.replication,
    )


def inspect_json(result: InspectResult) -> dict[str, Any]:
    hw = result.hardware
    return jsonout.document(
        "inspect",
        result.session,
        {
            "target": result.target,
            "compile_target": result.session.runtime.target,
            "arguments": [_array_json(a) for a in result.arguments],
            "results": [_array_json(r) for r in result.results],
            "program": program_json(result.analysis),
            "model": model_json(result.model),
            "hardware": hardware_json(hw),
            "fit": verdict_json(result.fit),
            "step_time": step_time_json(result.step),
            "findings": [schema.FINDING(kind=f.kind, message=f.message) for f in result.findings],
            "lower_s": result.lower_s,
            "compile_s": result.compile_s,
            "timing": jsonout.timing_json(result.timing),
        },
    )


def arrays_table(result: InspectResult) -> Table:
    table = DataTable(box=None, header_style="bold")
    # Left out first where narrow: the global bytes, then the copies.
    priorities = {"bytes": 2, "copies": 1}
    for name in ("", "name", "type", "spec", "bytes", "per device", "copies"):
        table.add_column(
            name,
            justify="right" if name in ("bytes", "per device", "copies") else "left",
            priority=priorities.get(name, 0),
        )
    for kind, facts in (("arg", result.arguments), ("result", result.results)):
        for f in facts:
            table.add_row(
                kind,
                f.name,
                f"{f.dtype}[{','.join(map(str, f.shape))}]",
                f.spec,
                format_bytes(f.bytes_global),
                format_bytes(f.bytes_per_device),
                str(f.layout.replication),
            )
    return table


def report_renderable(
    result: InspectResult, *, quiet: bool = False, pictures: bool = True, verbose: bool = False
) -> RenderableType:
    """The whole report as one renderable: the same for the terminal and for Jupyter (`verbose`:
    the header's versions and process count too)."""
    parts: list[RenderableType] = []

    def section(title: str, body: RenderableType) -> None:
        parts.extend([Text(""), Text(title, style="bold underline"), body])

    if not quiet:
        facts = {
            "program": result.target,
            "compiled": (
                f"from abstract shapes: lowered in {result.lower_s * 1e3:.0f} ms, compiled in "
                f"{result.compile_s * 1e3:.0f} ms; nothing of the arguments' size was allocated"
                if result.analysis is not None
                else f"lowered in {result.lower_s * 1e3:.0f} ms; the TPU compiler refused it as too big"
            ),
        }
        parts.append(human.header(result.session, facts, verbose=verbose))
    section("arguments and results", arrays_table(result))
    if pictures and not quiet:
        for f in (*result.arguments, *result.results)[:MAX_PICTURES]:
            if f.shape:
                section(
                    f"{f.name}: {f.dtype}{list(f.shape)}, spec {f.spec}", human.sharding_picture(f.layout)
                )
    a = result.analysis
    if a is not None:
        rows = [("", c) for c in a.collectives]
        section("collectives the compiler inserted", collectives_table(rows, label=""))
        trips = f" (at least: {len(a.unknown_trips)} loop(s) of unknown trips)" if a.unknown_trips else ""
        flops = f"{a.flops:,.0f}{trips}" if a.flops is not None else "unknown"
        accessed = format_bytes(a.bytes_accessed) + trips if a.bytes_accessed is not None else "unknown"
        section(
            "per device",
            Group(
                memory_clauses("memory", a.memory, style=""),
                Clauses(
                    [
                        f"FLOPs {flops}",
                        f"bytes accessed {accessed}",
                        f"sent by collectives {format_bytes(a.sent_bytes)}",
                    ]
                ),
            ),
        )
    if not quiet and result.model is not None:
        section(
            "cost model (roofline, per device)",
            cost_model_text(
                result.model,
                result.hardware,
                "the program",
                flops_known=getattr(result.analysis, "flops", None) is not None,
            ),
        )
    if result.timing is not None:
        s = result.timing.stats
        section(
            "run on generated inputs",
            Clauses(
                [
                    f"compile {human.compile_text(result.timing)}",
                    f"p50 {human.format_duration(s.p50)}, min {human.format_duration(s.min)} "
                    f"over {len(result.timing.samples)} iterations",
                ]
            ),
        )
    parts.append(Text(""))
    for line in a.missing if a is not None else ():
        parts.append(Text(f"missing: {line}", style="yellow"))
    if result.step is not None:
        parts.append(step_time_text(result.step))
    if result.fit is not None:
        parts.append(verdict_text(result.fit))
    if result.findings:
        for finding in result.findings:
            parts.append(Text(f"warning ({finding.kind}): {finding.message}", style="yellow"))
    else:
        parts.append(Text("no classic sharding mistakes found", style="green"))
    return Group(*parts)


def render_inspect(result: InspectResult, options: RunOptions) -> None:
    show_warnings(result.session.runtime)
    if not prints_here(options, result.session.runtime):
        return
    if options.format == "json":
        jsonout.write_json(inspect_json(result), options)
        return
    console = make_console(options)
    console.print(report_renderable(result, quiet=options.quiet, verbose=options.verbose))
