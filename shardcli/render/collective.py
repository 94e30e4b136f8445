"""Rendering `shardcli collective`: rich for people, JSON and CSV for scripts."""

from __future__ import annotations

import csv
import io
import sys
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from shardcli.core.collective import CollectiveResult, PlacementRun, SizeRun
from shardcli.render import human, jsonout
from shardcli.render.console import make_console, prints_here
from shardcli.runtime import format_bytes
from shardcli.specs import RunOptions, format_size

FORMATS = ("table", "json", "csv")


def _us(seconds: float) -> float:
    return seconds * 1e6


def _fmt(value: float | None) -> str:
    """Bandwidths: two decimals, or three significant digits when small."""
    if value is None:
        return "-"
    return f"{value:.2f}" if value >= 1 else f"{value:.3g}"


# --- JSON -----------------------------------------------------------------------------------------


def _placement_json(run: PlacementRun) -> dict[str, Any]:
    return {
        "placement": run.placement,
        "not_run": run.not_run,
        "timing": jsonout.timing_json(run.timing),
        "algbw_gbps": run.algbw,
        "busbw_gbps": run.busbw,
        "wrong": run.wrong,
        "wrong_devices": list(run.wrong_devices),
        "max_abs_err": run.max_abs_err,
        "aliased": run.aliased,
        "hlo_collectives": [{"op": h.op, "count": h.count, "result_bytes": h.result_bytes} for h in run.hlo],
    }


def _size_json(run: SizeRun, result: CollectiveResult) -> dict[str, Any]:
    axes = result.session.layout.axes
    return {
        "bytes_per_device": run.bytes_per_device,
        "count": run.count,
        "global_shape": list(run.global_shape),
        "local_shape": list(run.local_shape),
        "out_global_shape": list(run.out_global_shape),
        "out_local_shape": list(run.out_local_shape),
        "in_spec": [list(e) if e else None for e in run.in_entries],
        "out_spec": [list(e) if e else None for e in run.out_entries],
        "algbw_bytes": run.algbw_bytes,
        "sent_bytes_per_device": run.sent_bytes,
        "tolerance": run.tolerance,
        "wrong": run.wrong,
        "missing_hlo_op": run.missing_op,
        "placements": [_placement_json(p) for p in run.placements],
        "values": None
        if run.global_input is None
        else {
            "global_input": jsonout.values_json(run.global_input),
            "global_output": jsonout.values_json(run.global_output),
            "devices": [
                {
                    "device_id": d.device_id,
                    "coords": dict(zip(axes, d.coords, strict=True)),
                    "group": d.group,
                    "position": d.position,
                    "input": jsonout.values_json(d.input),
                    "output": jsonout.values_json(d.output),
                }
                for d in run.devices
            ],
        },
    }


def collective_json(result: CollectiveResult) -> dict[str, Any]:
    req = result.request
    return jsonout.document(
        "collective",
        result.session,
        {
            "config": {
                "collective": result.collective.name,
                "params": req.params.describe(result.collective, result.group_size),
                "dtype": req.dtype.name,
                "init": req.init if req.values is None else "values",
                "placement": req.placement,
                "warmup": req.warmup,
                "iters": req.iters,
                "group_size": result.group_size,
                "groups": result.n_groups,
                "busbw_factor": result.collective.bus_factor(result.group_size)
                if result.collective.bus_factor
                else None,
                "expected_hlo_op": result.collective.hlo_op,
            },
            "sizes": [_size_json(r, result) for r in result.runs],
            "summary": {
                "avg_busbw_gbps": result.avg_busbw,
                "avg_over": result.avg_over,
                "min_busbw_gbps": req.min_busbw,
                "below_min_busbw": result.below_min_busbw,
                "wrong": result.wrong,
            },
        },
    )


# --- CSV ------------------------------------------------------------------------------------------

CSV_COLUMNS = (
    "size_bytes",
    "count",
    "dtype",
    "placement",
    "time_p50_us",
    "algbw_gbps",
    "busbw_gbps",
    "wrong",
)


def collective_csv(result: CollectiveResult) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for run in result.runs:
        for p in run.placements:
            writer.writerow(
                [
                    run.bytes_per_device,
                    run.count,
                    result.request.dtype.name,
                    p.placement,
                    "" if p.timing is None else f"{_us(p.timing.stats.p50):.3f}",
                    "" if p.algbw is None else f"{p.algbw:.4f}",
                    "" if p.busbw is None else f"{p.busbw:.4f}",
                    p.wrong,
                ]
            )
    return buffer.getvalue()


# --- people ---------------------------------------------------------------------------------------


def sweep_table(result: CollectiveResult) -> Table:
    """One row per size (nccl-tests style), one column group per placement."""
    placements = [p.placement for p in result.runs[0].placements]
    table = Table(box=None, header_style="bold", title="time is the p50 of per-iteration times")
    for name in ("size", "count", "dtype"):
        table.add_column(name, justify="right")
    for placement in placements:
        tag = f" {placement}" if len(placements) > 1 else ""
        table.add_column(f"time p50 (us){tag}", justify="right")
        table.add_column(f"algbw (GB/s){tag}", justify="right")
        table.add_column(f"busbw (GB/s){tag}", justify="right")
    table.add_column("#wrong", justify="right")
    for run in result.runs:
        row = [format_size(run.bytes_per_device), f"{run.count:,}", result.request.dtype.name]
        for p in run.placements:
            if p.timing is None:
                row += ["n/a", "n/a", "n/a"]
            else:
                row += [f"{_us(p.timing.stats.p50):.1f}", _fmt(p.algbw), _fmt(p.busbw)]
        wrong = Text(str(run.wrong), style="bold red" if run.wrong else "green")
        row.append(wrong)
        table.add_row(*row)
    return table


def timing_table(run: SizeRun) -> Table:
    table = Table(box=None, header_style="bold")
    for name in (
        "placement",
        "compile (ms)",
        "min (us)",
        "p50 (us)",
        "p90 (us)",
        "max (us)",
        "stdev (us)",
        "algbw (GB/s)",
        "busbw (GB/s)",
        "#wrong",
    ):
        table.add_column(
            name, justify="left" if name == "placement" else "right", no_wrap=name == "placement"
        )
    for p in run.placements:
        if p.timing is None:
            table.add_row(p.placement, *["n/a"] * 8, "-")
            continue
        s = p.timing.stats
        label = p.placement
        if p.aliased is not None:
            label += " (aliased)" if p.aliased else " (not aliased)"
        table.add_row(
            label,
            f"{p.timing.compile_s * 1e3:.1f}",
            f"{_us(s.min):.1f}",
            f"{_us(s.p50):.1f}",
            f"{_us(s.p90):.1f}",
            f"{_us(s.max):.1f}",
            f"{_us(s.stdev):.1f}",
            _fmt(p.algbw),
            _fmt(p.busbw),
            Text(str(p.wrong), style="bold red" if p.wrong else "green"),
        )
    return table


def blocks_table(run: SizeRun, result: CollectiveResult) -> Table:
    axes = result.session.layout.axes
    table = Table(box=None, header_style="bold")
    for name in (
        "device",
        "mesh coords",
        "group",
        "pos",
        "BEFORE (input block)",
        "AFTER (output block)",
        "#wrong",
    ):
        table.add_column(name, justify="right" if name in ("device", "group", "pos", "#wrong") else "left")
    for d in run.devices:
        table.add_row(
            str(d.device_id),
            human.coords_text(axes, d.coords),
            str(d.group),
            str(d.position),
            human.format_values(d.input) if d.input is not None else "-",
            human.format_values(d.output) if d.output is not None else "-",
            Text(str(d.wrong), style="bold red" if d.wrong else "green"),
        )
    return table


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
        values = ", ".join(f"{k} {_fmt(v)}" for k, v in result.avg_busbw.items())
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


def render_collective(result: CollectiveResult, options: RunOptions) -> None:
    if not prints_here(options, result.session.runtime):
        return
    if options.format == "json":
        jsonout.write_json(collective_json(result))
        return
    if options.format == "csv":
        sys.stdout.write(collective_csv(result))
        return
    console = make_console(options)
    req = result.request
    coll = result.collective
    n = result.group_size
    first = result.runs[0]
    axes_text = "+".join(req.params.axes)
    others = [a for a in req.mesh.axes if a not in req.params.axes]
    if not options.quiet:
        params = {k: v for k, v in req.params.describe(coll, n).items() if k != "axes"}
        console.print(
            human.header(
                result.session,
                {
                    "collective": f"{coll.name} over {axes_text}" + (f" ({params})" if params else ""),
                    "groups": f"{result.n_groups} group(s) of {n} device(s)"
                    + (f"; {', '.join(others)} stay(s) independent" if others else ""),
                    "input": f"{req.dtype.name}, "
                    + ("--values" if req.values is not None else f"init {req.init}")
                    + f", spec {human.spec_text(first.in_entries)}",
                    "timing": f"compile separately, then {req.warmup} warm-up + {req.iters} timed "
                    "iterations, each blocked until ready" + human.timing_across(result.session),
                    "verify": first.tolerance,
                },
            )
        )
    if not req.sweep:
        if not options.quiet:
            human.section(
                console,
                f"input sharding: global {first.global_shape}, spec {human.spec_text(first.in_entries)}",
                human.sharding_picture(
                    human.spec_tiles(first.global_shape, first.in_entries, result.session)
                ),
            )
            human.section(
                console,
                f"output sharding: global {first.out_global_shape}, "
                f"spec {human.spec_text(first.out_entries)}",
                human.sharding_picture(
                    human.spec_tiles(first.out_global_shape, first.out_entries, result.session)
                ),
            )
            if first.global_input is not None:
                human.section(
                    console,
                    f"BEFORE and AFTER (per device{human.this_process_only(result.session)})",
                    blocks_table(first, result),
                )
                if first.global_output is not None:
                    human.section(console, "global result", human.format_values(first.global_output))
        human.section(console, "compiled HLO collectives", _hlo_text(first))
        fact = f"{format_bytes(first.bytes_per_device)} per device ({first.count:,} elements)" + (
            f"; S = {first.algbw_bytes:,} B; busbw factor {coll.bus_factor(n):.3f}; "
            f"each device sends {first.sent_bytes:,} B"
            if coll.bus_factor
            else ""
        )
        human.section(console, "timing", Text(fact, style="dim"))
        console.print(timing_table(first))
        for p in first.placements:
            if p.not_run:
                console.print(Text(f"in-place: n/a ({p.not_run})", style="yellow"))
    else:
        human.section(console, f"{coll.name} sweep", sweep_table(result))
        if coll.bus_factor:
            values = ", ".join(
                f"{k}-of-place {_fmt(v)}" if k == "out" else f"in-place {_fmt(v)}"
                for k, v in result.avg_busbw.items()
            )
            console.print(f"average busbw over {result.avg_over}: {values} GB/s")
        human.section(console, "compiled HLO collectives (largest size)", _hlo_text(result.runs[-1]))
    console.print()
    _verdict(console, result)
