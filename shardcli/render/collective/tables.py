"""The tables of `shardcli collective`: a sweep's sizes, one size's timings per placement and its
devices' blocks, with the words their headers use (roofline, placement, buffers)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from shardcli.playground.collective.placement import PlacementRun, Roofline
from shardcli.playground.collective.request import CollectiveRequest
from shardcli.playground.collective.run import CollectiveResult
from shardcli.playground.collective.size import SizeRun
from shardcli.render import human
from shardcli.render.layout import DataTable
from shardcli.specs.values import format_bytes


def bandwidth_text(value: float | None) -> str:
    """Bandwidths: two decimals, or three significant digits when small."""
    if value is None:
        return "-"
    return f"{value:.2f}" if value >= 1 else f"{value:.3g}"


def percent_text(fraction: float | None) -> str:
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
                    bandwidth_text(p.algbw),
                    bandwidth_text(p.busbw),
                    percent_text(p.roofline_fraction),
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
            bandwidth_text(p.algbw),
            bandwidth_text(p.busbw),
            percent_text(p.roofline_fraction),
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
