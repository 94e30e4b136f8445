"""Rendering `shardcli collective`: rich for people, JSON and CSV for scripts.

Each collective's header, pictures and verdict are drawn here; its tables are `collective.tables`,
a sweep's charts `collective.charts`, the JSON document and CSV rows `collective.documents`.
"""

from __future__ import annotations

import sys

from rich.console import Console, RenderableType
from rich.text import Text

from shardcli.errors import ShardcliError
from shardcli.playground.collective.run import CollectiveResult
from shardcli.playground.collective.size import SizeRun
from shardcli.render import human, jsonout
from shardcli.render.collective.charts import busbw_chart, fit_text, time_chart
from shardcli.render.collective.documents import collectives_csv, collectives_json
from shardcli.render.collective.tables import (
    bandwidth_text,
    blocks_table,
    buffers_text,
    sweep_table,
    timing_table,
)
from shardcli.render.console import emit, make_console, prints_here, show_warnings
from shardcli.render.layout import Clauses
from shardcli.specs.runs import RunOptions
from shardcli.specs.values import format_bytes

FORMATS = ("table", "json", "csv")


def render_collectives(
    results: list[CollectiveResult], options: RunOptions, plot_file: str | None = None
) -> None:
    """Every collective of the command (one, or several joined by commas), then the chart of them all.

    Args:
        results: the command's runs, in the order named.
        options: the run options the requests carried.
        plot_file: --plot-file: the sweep's charts are drawn into it too (by the process that prints).

    Raises:
        ShardcliError: the plot file could not be written.
    """
    _print_collectives(results, options)
    if plot_file is not None and prints_here(options, results[0].session.runtime):
        _write_plot(plot_file, results)


def _write_plot(plot_file: str, results: list[CollectiveResult]) -> None:
    from shardcli.render.plotfile import write_plot_file

    try:
        write_plot_file(plot_file, results)
    except OSError as error:
        raise ShardcliError(f"could not write --plot-file {plot_file}: {error.strerror or error}") from error


def _print_collectives(results: list[CollectiveResult], options: RunOptions) -> None:
    show_warnings(results[0].session.runtime)
    _warn(results)
    if not prints_here(options, results[0].session.runtime):
        return
    if options.format == "json":
        jsonout.write_json(collectives_json(results), options)
        return
    if options.format == "csv":
        emit(collectives_csv(results), options)
        return
    console = make_console(options)
    for k, result in enumerate(results):
        if k:
            console.print()
            console.rule(style="dim")
        _render_one(console, result, options)
    if len(results) > 1 and results[0].request.sweep:
        human.section(
            console, f"busbw of {', '.join(r.collective.name for r in results)}", busbw_chart(results)
        )


def _warn(results: list[CollectiveResult]) -> None:
    """The runs' warnings on stderr, each once (the collectives of one command share a roofline)."""
    warnings = [r.roofline.warning for r in results if r.roofline is not None and r.roofline.warning]
    for warning in dict.fromkeys(warnings):
        sys.stderr.write(f"{warning}\n")


def _render_one(console: Console, result: CollectiveResult, options: RunOptions) -> None:
    """One collective: its header, then its one size or its sweep, then the verdict."""
    if not options.quiet:
        console.print(_header(result, options))
    if not result.request.sweep:
        _one_size(console, result, options)
    else:
        _sweep(console, result)
    console.print()
    _verdict(console, result)


def _header(result: CollectiveResult, options: RunOptions) -> RenderableType:
    """What ran: the collective over its axes, its groups, its input; with -v how it was timed,
    where results are written, the tolerance and the roofline."""
    req = result.request
    coll = result.collective
    n = result.group_size
    first = result.runs[0]
    axes_text = "+".join(req.params.axes)
    others = [a for a in req.mesh.axes if a not in req.params.axes]
    params = {k: v for k, v in req.params.describe(coll, n).items() if k != "axes"}
    return human.header(
        result.session,
        {
            "collective": f"{coll.name} over {axes_text}" + (f" ({params})" if params else ""),
            "groups": f"{result.n_groups} group(s) of {n} device(s)"
            + (f"; {', '.join(others)} stay(s) independent" if others else ""),
            "input": f"{req.dtype.name}, "
            + ("--values" if req.values is not None else f"init {req.init}")
            + f", spec {human.spec_text(first.in_entries)}",
        },
        details={
            "timing": f"compile separately, then {req.warmup} warm-up + {req.iters} timed "
            "iterations, each blocked until ready" + human.timing_across(result.session),
            "buffers": buffers_text(req),
            "verify": first.tolerance,
            "roofline": _roofline_header(result),
            **(
                {"allocator": result.session.runtime.allocator.note}
                if result.session.runtime.allocator is not None
                else {}
            ),
        },
        verbose=options.verbose,
    )


def _one_size(console: Console, result: CollectiveResult, options: RunOptions) -> None:
    """One size: the input and output sharding, the blocks before and after, the HLO, the timings."""
    coll = result.collective
    n = result.group_size
    first = result.runs[0]
    if not options.quiet:
        human.section(
            console,
            f"input sharding: global {first.global_shape}, spec {human.spec_text(first.in_entries)}",
            human.sharding_picture(human.spec_tiles(first.global_shape, first.in_entries, result.session)),
        )
        human.section(
            console,
            f"output sharding: global {first.out_global_shape}, spec {human.spec_text(first.out_entries)}",
            human.sharding_picture(
                human.spec_tiles(first.out_global_shape, first.out_entries, result.session)
            ),
        )
    # -q drops the header and the pictures (provenance), never the values: they are the lesson
    if first.global_input is not None:
        human.section(
            console,
            f"BEFORE and AFTER (per device{human.this_process_only(result.session)})",
            blocks_table(first, result),
        )
        if first.global_output is not None:
            human.section(console, "global result", human.ValuesText(first.global_output))
    human.section(console, "compiled HLO collectives", _hlo_text(first))
    facts = [f"{format_bytes(first.bytes_per_device)} per device ({first.count:,} elements)"]
    if coll.bus_factor:
        facts += [
            f"S = {first.algbw_bytes:,} B",
            f"busbw factor {coll.bus_factor(n):.3f}",
            f"each device sends {first.sent_bytes:,} B",
        ]
    human.section(console, "timing", Clauses(facts, style="dim"))
    console.print(timing_table(first, result.roofline))
    for p in first.placements:
        if p.not_run:
            console.print(Text(f"in-place: n/a ({p.not_run})", style="yellow"))


def _sweep(console: Console, result: CollectiveResult) -> None:
    """Every size: the sweep's table, the average busbw, the HLO of the largest, the charts and fit."""
    coll = result.collective
    human.section(console, f"{coll.name} sweep", sweep_table(result))
    if coll.bus_factor:
        values = ", ".join(
            f"{k}-of-place {bandwidth_text(v)}" if k == "out" else f"in-place {bandwidth_text(v)}"
            for k, v in result.avg_busbw.items()
        )
        console.print(f"average busbw over {result.avg_over}: {values} GB/s")
    human.section(console, "compiled HLO collectives (largest size)", _hlo_text(result.runs[-1]))
    if len(result.runs) > 1:
        if coll.bus_factor:
            human.section(console, "busbw against size", busbw_chart([result]))
        human.section(console, "time against size (log-log)", time_chart(result))
        console.print(fit_text(result))


def _roofline_header(result: CollectiveResult) -> str:
    roofline = result.roofline
    if roofline is None or roofline.basis is None:
        return roofline.source if roofline is not None else "not available"
    if roofline.basis == "host memory":
        rule = roofline.rule or "none, it moves no data"
        return f"host memory, min bytes = {rule}; {roofline.source}"
    return f"link: {roofline.source}"


def _hlo_text(run: SizeRun) -> Text:
    ops = next((p.hlo for p in run.placements if p.timing is not None), ())
    if not ops:
        text = Text("none")
    else:
        text = Text(", ".join(f"{h.op} x{h.count} ({h.result_bytes:,} B result)" for h in ops))
    if run.missing_op:
        text.append(f"\nwarning: expected {run.missing_op} but the compiler left it out", style="bold yellow")
    return text


def _verdict(console: Console, result: CollectiveResult) -> None:
    if result.wrong:
        bad = sorted({d for r in result.runs for p in r.placements for d in p.wrong_devices})
        console.print(
            Text(
                f"WRONG: {result.wrong} element(s) differ from NumPy on device(s) {', '.join(map(str, bad))}",
                style="bold red",
            )
        )
    else:
        console.print(
            Text(
                "verified: every device's result matches NumPy" + human.checked_where(result.session),
                style="green",
            )
        )
    if result.request.min_busbw is not None:
        values = ", ".join(f"{k} {bandwidth_text(v)}" for k, v in result.avg_busbw.items())
        if result.below_min_busbw:
            console.print(
                Text(
                    f"FAIL: average busbw ({values} GB/s) is below --min-busbw {result.request.min_busbw}",
                    style="bold red",
                )
            )
        else:
            console.print(
                Text(
                    f"ok: average busbw ({values} GB/s) >= --min-busbw {result.request.min_busbw}",
                    style="green",
                )
            )
