"""Rendering `shardcli collective`: rich for people, JSON and CSV for scripts."""

from __future__ import annotations

import csv
import io
import sys
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from shardcli.errors import ShardcliError
from shardcli.playground.collective import CollectiveResult
from shardcli.playground.collective_placement import PlacementRun, Roofline
from shardcli.playground.collective_request import CollectiveRequest
from shardcli.playground.collective_size import SizeRun
from shardcli.playground.fit import LatencyBandwidthFit
from shardcli.render import human, jsonout
from shardcli.render.console import Clauses, DataTable, emit, make_console, prints_here, show_warnings
from shardcli.render.plot import Series, text_chart
from shardcli.results import bodies, documents
from shardcli.specs.runs import RunOptions
from shardcli.specs.values import format_bytes

FORMATS = ("table", "json", "csv")


def _us(seconds: float) -> float:
    return seconds * 1e6


def _fmt(value: float | None) -> str:
    """Bandwidths: two decimals, or three significant digits when small."""
    if value is None:
        return "-"
    return f"{value:.2f}" if value >= 1 else f"{value:.3g}"


def _pct(fraction: float | None) -> str:
    """A roofline fraction as a percentage; '-' where there is no roofline."""
    if fraction is None:
        return "-"
    return f"{fraction:.0%}" if fraction >= 0.01 else f"{fraction:.2%}"


def roofline_label(roofline: Roofline | None) -> str:
    """Which bandwidth the roofline % column holds the run against."""
    if roofline is None or roofline.basis is None:
        return "roofline: n/a"
    if roofline.basis == "host memory":
        return "roofline % = (min bytes / host copy bandwidth) / p50"
    return "roofline % = busbw / link bandwidth (device table)"


# --- JSON -----------------------------------------------------------------------------------------


def _placement_json(run: PlacementRun) -> dict[str, Any]:
    return bodies.COLLECTIVE_PLACEMENT(
        placement=run.placement,
        not_run=run.not_run,
        timing=jsonout.timing_json(run.timing),
        algbw_gbps=run.algbw,
        busbw_gbps=run.busbw,
        wrong=run.wrong,
        wrong_devices=list(run.wrong_devices),
        max_abs_err=run.max_abs_err,
        out_buffer=run.out_buffer,
        aliased=run.aliased,
        hlo_collectives=jsonout.hlo_json(run.hlo),
        roofline_fraction=run.roofline_fraction,
    )


def roofline_json(roofline: Roofline | None) -> dict[str, Any] | None:
    """The bandwidth a run is held against: host memory (CPU), link (device table) or none."""
    if roofline is None:
        return None
    return bodies.ROOFLINE(
        basis=roofline.basis,
        bandwidth_gbps=None
        if roofline.bandwidth_bytes_per_s is None
        else roofline.bandwidth_bytes_per_s / 1e9,
        source=roofline.source,
        min_bytes_rule=roofline.rule,
        measured_at=roofline.measured_at,
        cached=roofline.cached,
    )


def _size_json(run: SizeRun, result: CollectiveResult) -> dict[str, Any]:
    axes = result.session.layout.axes
    return bodies.COLLECTIVE_SIZE(
        bytes_per_device=run.bytes_per_device,
        count=run.count,
        global_shape=list(run.global_shape),
        local_shape=list(run.local_shape),
        out_global_shape=list(run.out_global_shape),
        out_local_shape=list(run.out_local_shape),
        in_spec=jsonout.spec_json(run.in_entries),
        out_spec=jsonout.spec_json(run.out_entries),
        algbw_bytes=run.algbw_bytes,
        sent_bytes_per_device=run.sent_bytes,
        tolerance=run.tolerance,
        wrong=run.wrong,
        missing_hlo_op=run.missing_op,
        min_bytes=None
        if run.min_bytes is None
        else bodies.MIN_BYTES(read=run.min_bytes.read, written=run.min_bytes.written),
        roofline_time_s=run.roofline_s,
        placements=[_placement_json(p) for p in run.placements],
        values=None
        if run.global_input is None
        else bodies.COLLECTIVE_VALUES(
            global_input=jsonout.values_json(run.global_input),
            global_output=jsonout.values_json(run.global_output),
            devices=[
                bodies.COLLECTIVE_DEVICE_VALUES(
                    device_id=d.device_id,
                    coords=dict(zip(axes, d.coords, strict=True)),
                    group=d.group,
                    position=d.position,
                    input=jsonout.values_json(d.input),
                    output=jsonout.values_json(d.output),
                )
                for d in run.devices
            ],
        ),
    )


def collective_json(result: CollectiveResult) -> dict[str, Any]:
    req = result.request
    return jsonout.document(
        "collective",
        result.session,
        {
            "config": bodies.COLLECTIVE_CONFIG(
                collective=result.collective.name,
                params=req.params.describe(result.collective, result.group_size),
                dtype=req.dtype.name,
                init=req.init if req.values is None else "values",
                placement=req.placement,
                out_buffer=None if req.placement == "in" else req.out_buffer,
                warmup=req.warmup,
                iters=req.iters,
                group_size=result.group_size,
                groups=result.n_groups,
                busbw_factor=result.collective.bus_factor(result.group_size)
                if result.collective.bus_factor
                else None,
                expected_hlo_op=result.collective.hlo_op,
                roofline=roofline_json(result.roofline),
                allocator=_allocator_json(result),
            ),
            "sizes": [_size_json(r, result) for r in result.runs],
            "summary": bodies.COLLECTIVE_SUMMARY(
                avg_busbw_gbps=result.avg_busbw,
                avg_over=result.avg_over,
                min_busbw_gbps=req.min_busbw,
                below_min_busbw=result.below_min_busbw,
                wrong=result.wrong,
                fit={placement: fit_json(fit) for placement, fit in result.fits.items()},
            ),
        },
    )


def _allocator_json(result: CollectiveResult) -> dict[str, Any] | None:
    state = result.session.runtime.allocator
    if state is None:
        return None
    return bodies.ALLOCATOR(mode=state.mode, applied=state.applied, note=state.note)


def fit_json(fit: LatencyBandwidthFit | None) -> dict[str, Any] | None:
    """t(S) = alpha + S / beta, in microseconds and GB/s (1e9 B/s)."""
    if fit is None:
        return None
    return bodies.FIT(
        model="t(S) = alpha + S / beta, least squares on relative error",
        alpha_us=fit.alpha_s * 1e6,
        beta_gbps=fit.beta_bytes_per_s / 1e9 if fit.beta_bytes_per_s is not None else None,
        r2=fit.r2,
        max_rel_residual=fit.max_rel_residual,
        points=fit.points,
    )


def collectives_json(results: list[CollectiveResult]) -> dict[str, Any]:
    """One collective: its document. Several: the envelope with each one's document in order."""
    if len(results) == 1:
        return collective_json(results[0])
    docs = [collective_json(r) for r in results]
    return documents.document(
        "collective",
        runtime=docs[0]["runtime"],
        mesh=docs[0]["mesh"],
        collectives=docs,
        summary=bodies.COLLECTIVES_SUMMARY(wrong=sum(r.wrong for r in results)),
    )


# --- CSV ------------------------------------------------------------------------------------------

CSV_COLUMNS = (
    "collective",
    "size_bytes",
    "count",
    "dtype",
    "placement",
    "time_p50_us",
    "algbw_gbps",
    "busbw_gbps",
    "wrong",
    "roofline_fraction",
    "out_buffer",  # out of place: preallocated or fresh; empty in place
)


def collectives_csv(results: list[CollectiveResult]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for result in results:
        _csv_rows(writer, result)
    return buffer.getvalue()


def _csv_rows(writer: Any, result: CollectiveResult) -> None:
    for run in result.runs:
        for p in run.placements:
            writer.writerow(
                [
                    result.collective.name,
                    run.bytes_per_device,
                    run.count,
                    result.request.dtype.name,
                    p.placement,
                    "" if p.timing is None else f"{_us(p.timing.stats.p50):.3f}",
                    "" if p.algbw is None else f"{p.algbw:.4f}",
                    "" if p.busbw is None else f"{p.busbw:.4f}",
                    p.wrong,
                    "" if p.roofline_fraction is None else f"{p.roofline_fraction:.4f}",
                    p.out_buffer or "",
                ]
            )


# --- people ---------------------------------------------------------------------------------------


def sweep_table(result: CollectiveResult) -> Table:
    """One row per size (nccl-tests style), one column group per placement."""
    placements = [p.placement for p in result.runs[0].placements]
    table = DataTable(
        box=None,
        header_style="bold",
        title="time is the p50 of per-iteration times, each iteration blocked until ready; "
        + roofline_label(result.roofline),
    )
    # The key columns: size, p50, busbw and #wrong; in a narrow terminal the rest go first.
    table.add_column("size", justify="right")
    table.add_column("count", justify="right", priority=2)
    table.add_column("dtype", justify="right", priority=3)
    for placement in placements:
        tag = f" {placement}" if len(placements) > 1 else ""
        table.add_column(f"time p50{tag}", justify="right")
        table.add_column(f"algbw (GB/s){tag}", justify="right", priority=1)
        table.add_column(f"busbw (GB/s){tag}", justify="right")
        table.add_column(f"roofline %{tag}", justify="right", priority=1)
    table.add_column("#wrong", justify="right")
    for run in result.runs:
        row: list[str | Text] = [
            format_bytes(run.bytes_per_device, short=True),
            f"{run.count:,}",
            result.request.dtype.name,
        ]
        for p in run.placements:
            if p.timing is None:
                row += ["n/a", "n/a", "n/a", "n/a"]
            else:
                row += [
                    human.format_duration(p.timing.stats.p50),
                    _fmt(p.algbw),
                    _fmt(p.busbw),
                    _pct(p.roofline_fraction),
                ]
        wrong = Text(str(run.wrong), style="bold red" if run.wrong else "green")
        row.append(wrong)
        table.add_row(*row)
    return table


def placement_label(p: PlacementRun) -> str:
    """`out` (into the preallocated buffer, as the header says), `out (fresh)`, `in (aliased)`;
    `(not aliased)` where XLA did not write into the donated buffer and allocated after all."""
    if p.aliased is False:
        return f"{p.placement} (not aliased)"
    if p.placement == "in":
        return "in (aliased)" if p.aliased else "in"
    return "out (fresh)" if p.out_buffer == "fresh" else "out"


def buffers_text(req: CollectiveRequest) -> str:
    """The header's line on where results are written."""
    out = {
        "preallocated": "out of place into one preallocated output buffer, donated to every call and "
        "reused (nccl-tests' recvbuff); checked by one more call into a poisoned buffer",
        "fresh": "out of place into a fresh output every call (its allocation is timed)",
    }[req.out_buffer]
    inside = "in place: the input is donated and each result fed back as the next input"
    return {"out": out, "in": inside, "both": f"{out}; {inside}"}[req.placement]


def timing_table(run: SizeRun, roofline: Roofline | None = None) -> Table:
    """One row per placement; every time is per iteration, each iteration blocked until ready."""
    table = DataTable(
        box=None,
        header_style="bold",
        collapse_padding=True,  # eleven columns: one space between them keeps 100 columns enough
        title="per-iteration times, each iteration blocked until ready; " + roofline_label(roofline),
    )
    # (name, priority): placement, p50, busbw and #wrong always; the spread goes first.
    for name, priority in (
        ("placement", 0),
        ("compile", 2),
        ("min", 4),
        ("p50", 0),
        ("p90", 3),
        ("max", 5),
        ("stdev", 6),
        ("algbw (GB/s)", 1),
        ("busbw (GB/s)", 0),
        ("roofline %", 1),
        ("#wrong", 0),
    ):
        table.add_column(
            name,
            justify="left" if name == "placement" else "right",
            no_wrap=name == "placement",
            priority=priority,
        )
    for p in run.placements:
        if p.timing is None:
            table.add_row(p.placement, *["n/a"] * 9, "-")
            continue
        s = p.timing.stats
        label = placement_label(p)
        table.add_row(
            label,
            human.compile_text(p.timing),
            human.format_duration(s.min),
            human.format_duration(s.p50),
            human.format_duration(s.p90),
            human.format_duration(s.max),
            human.format_duration(s.stdev),
            _fmt(p.algbw),
            _fmt(p.busbw),
            _pct(p.roofline_fraction),
            Text(str(p.wrong), style="bold red" if p.wrong else "green"),
        )
    return table


def blocks_table(run: SizeRun, result: CollectiveResult) -> Table:
    axes = result.session.layout.axes
    table = DataTable(box=None, header_style="bold")
    # (name, priority): where too wide even so, each device becomes `column  value` lines.
    for name, priority in (
        ("device", 0),
        ("mesh coords", 1),
        ("group", 2),
        ("pos", 2),
        ("BEFORE (input block)", 0),
        ("AFTER (output block)", 0),
        ("#wrong", 0),
    ):
        table.add_column(
            name,
            justify="right" if name in ("device", "group", "pos", "#wrong") else "left",
            priority=priority,
        )
    for d in run.devices:
        table.add_row(
            str(d.device_id),
            human.coords_text(axes, d.coords),
            str(d.group),
            str(d.position),
            human.format_values(d.input, human.CELL_VALUES_WIDTH) if d.input is not None else "-",
            human.format_values(d.output, human.CELL_VALUES_WIDTH) if d.output is not None else "-",
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
    else:
        human.section(console, f"{coll.name} sweep", sweep_table(result))
        if coll.bus_factor:
            values = ", ".join(
                f"{k}-of-place {_fmt(v)}" if k == "out" else f"in-place {_fmt(v)}"
                for k, v in result.avg_busbw.items()
            )
            console.print(f"average busbw over {result.avg_over}: {values} GB/s")
        human.section(console, "compiled HLO collectives (largest size)", _hlo_text(result.runs[-1]))
        if len(result.runs) > 1:
            if coll.bus_factor:
                human.section(console, "busbw against size", busbw_chart([result]))
            human.section(console, "time against size (log-log)", time_chart(result))
            console.print(fit_text(result))
    console.print()
    _verdict(console, result)


def _roofline_header(result: CollectiveResult) -> str:
    roofline = result.roofline
    if roofline is None or roofline.basis is None:
        return roofline.source if roofline is not None else "not available"
    if roofline.basis == "host memory":
        rule = roofline.rule or "none, it moves no data"
        return f"host memory, min bytes = {rule}; {roofline.source}"
    return f"link: {roofline.source}"


def _series_name(result: CollectiveResult, placement: str, several: bool) -> str:
    name = result.collective.name if several else ""
    where = {"out": "out-of-place", "in": "in-place"}[placement]
    return f"{name} {where}".strip() if several or len(result.avg_busbw) > 1 else (name or where)


def busbw_chart(results: list[CollectiveResult]) -> Text:
    """busbw against bytes per device, a series per collective and placement, with the fit's curve."""
    series = []
    several = len(results) > 1
    for result in results:
        if not result.collective.bus_factor:
            continue
        for placement in result.avg_busbw:
            pts = tuple(
                (run.bytes_per_device, p.busbw)
                for run in result.runs
                for p in run.placements
                if p.placement == placement and p.busbw is not None
            )
            if pts:  # a placement that did not run (in place for all_gather) has nothing to draw
                series.append(
                    Series(_series_name(result, placement, several), pts, _busbw_model(result, placement))
                )
    return text_chart(series, y_label="busbw (GB/s)")


def _busbw_model(result: CollectiveResult, placement: str) -> Any:
    fit = result.fits.get(placement)
    run = result.runs[0]
    bus_factor = result.collective.bus_factor
    if fit is None or run.algbw_bytes is None or bus_factor is None:
        return None
    ratio = run.algbw_bytes / run.bytes_per_device  # S per byte per device, the same at every size
    factor = bus_factor(result.group_size)
    return lambda b: b * ratio / fit.time_at(b * ratio) * factor / 1e9


def time_chart(result: CollectiveResult) -> Text:
    """p50 time against bytes per device, log-log, with the fitted t(S) = alpha + S / beta."""
    series = []
    run0 = result.runs[0]
    ratio = (run0.algbw_bytes or run0.bytes_per_device) / run0.bytes_per_device
    for placement in result.avg_busbw:
        pts = tuple(
            (run.bytes_per_device, p.timing.stats.p50 * 1e6)
            for run in result.runs
            for p in run.placements
            if p.placement == placement and p.timing is not None
        )
        fit = result.fits.get(placement)
        curve = (lambda b, f=fit: f.time_at(b * ratio) * 1e6) if fit is not None else None
        if pts:
            series.append(Series(_series_name(result, placement, False), pts, curve))
    return text_chart(series, y_label="p50 (us)", log_y=True)


def fit_text(result: CollectiveResult) -> RenderableType:
    """One line per placement: alpha, beta and how well the model fits (lines broken between
    clauses, never inside a figure)."""
    if not result.fits:
        return Text(f"no fit: {result.collective.name} moves no data, so its time has no bandwidth term")
    lines: list[RenderableType] = []
    size = "nccl-tests' S" if result.runs[0].algbw_bytes is not None else "bytes per device"
    for placement, fit in result.fits.items():
        label = {"out": "out-of-place", "in": "in-place"}[placement]
        if fit is None:
            lines.append(Text(f"fit {label}: needs two sizes or more", style="dim"))
            continue
        beta = (
            "none (time does not grow with size)"
            if fit.beta_bytes_per_s is None
            else (f"{fit.beta_bytes_per_s / 1e9:.3g} GB/s")
        )
        lines.append(
            Clauses(
                [
                    f"fit {label}: t(S) = alpha + S / beta",
                    f"alpha = {human.format_duration(fit.alpha_s)}",
                    f"beta = {beta}",
                ],
                sep=", ",
            )
        )
        lines.append(
            Text(
                f"  R^2 {fit.r2:.3f}, worst residual {fit.max_rel_residual:.0%}, "
                f"{fit.points} sizes, S = {size}",
                style="dim",
            )
        )
    return Group(*lines)
