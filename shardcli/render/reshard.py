"""Rendering `shardcli reshard`: rich for people, JSON and CSV for scripts."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from shardcli.playground.reshard import WAY_TEXT, ReshardResult, ReshardWay
from shardcli.render import human, jsonout
from shardcli.render.console import csv_text, emit, make_console, prints_here, show_warnings
from shardcli.render.layout import Clauses, DataTable
from shardcli.render.program import (
    collectives_cell,
    collectives_table,
    memory_clauses,
    program_json,
    status_text,
    verdict_json,
    verdict_text,
)
from shardcli.results import bodies
from shardcli.specs.runs import RunOptions
from shardcli.specs.values import format_bytes
from shardcli.tile_math import format_index

FORMATS = ("table", "json", "csv")


def _way_json(way: ReshardWay) -> dict[str, Any]:
    return bodies.RESHARD_IMPL(
        impl=way.way,
        status=way.status,
        message=way.message,
        out_spec=jsonout.spec_json(way.out_entries),
        program=program_json(way.analysis),
        timing=jsonout.timing_json(way.timing),
        algbw_gbps=way.algbw / 1e9 if way.algbw is not None else None,
        wrong=way.wrong,
        wrong_devices=list(way.wrong_devices),
        fit=verdict_json(way.fit),
        values_before=jsonout.shown_values_json(way.values_before),
        values=jsonout.shown_values_json(way.values),
    )


def blocks_table(way: ReshardWay) -> DataTable:
    """Each device's block before (--from) and after (--to) the move, with their index ranges."""
    assert way.values_before is not None and way.values is not None
    table = DataTable(box=None, header_style="bold")
    for name, priority in (
        ("device", 0),
        ("before", 1),
        ("BEFORE (block)", 0),
        ("after", 1),
        ("AFTER (block)", 0),
    ):
        table.add_column(name, justify="right" if name == "device" else "left", priority=priority)
    after = {b.device_id: b for b in way.values.blocks}
    for b in way.values_before.blocks:
        a = after[b.device_id]
        table.add_row(
            str(b.device_id),
            format_index(b.index),
            human.format_values(b.values, human.CELL_VALUES_WIDTH // 2),
            format_index(a.index),
            human.format_values(a.values, human.CELL_VALUES_WIDTH // 2),
        )
    return table


def reshard_json(result: ReshardResult) -> dict[str, Any]:
    req = result.request
    return jsonout.document(
        "reshard",
        result.session,
        {
            "config": bodies.RESHARD_CONFIG(
                shape=list(req.array.shape),
                dtype=req.array.dtype.name,
                init=req.array.init if req.array.values is None else "values",
                nbytes=req.array.nbytes,
                from_spec=jsonout.spec_json(req.source.entries),
                to_spec=jsonout.spec_json(req.target.entries),
                impls=list(req.ways),
                warmup=req.warmup,
                iters=req.iters,
                compile_target=req.compile_target.name if req.compile_target is not None else None,
            ),
            "devices": [
                bodies.RESHARD_DEVICE(
                    device_id=m.device_id,
                    before=jsonout.index_json(m.before),
                    after=jsonout.index_json(m.after),
                    receive_bytes=m.receive_bytes,
                )
                for m in result.moves
            ],
            "impls": [_way_json(w) for w in result.ways],
            "summary": bodies.RESHARD_SUMMARY(
                wrong=result.wrong,
                needs_communication=result.needs_communication,
                min_receive_bytes_per_device=result.min_receive_bytes,
            ),
        },
    )


CSV_COLUMNS = (
    "impl",
    "shape",
    "dtype",
    "from_spec",
    "to_spec",
    "status",
    "collectives",
    "sent_bytes_per_device",
    "min_receive_bytes_per_device",
    "p50_us",
    "algbw_gbps",
    "wrong",
)


def reshard_csv(result: ReshardResult) -> str:
    req = result.request
    rows = (
        [
            w.way,
            "x".join(map(str, req.array.shape)),
            req.array.dtype.name,
            req.source.describe(),
            req.target.describe(),
            w.status,
            collectives_cell(w.analysis),
            w.analysis.sent_bytes if w.analysis else "",
            result.min_receive_bytes,
            f"{w.timing.stats.p50 * 1e6:.3f}" if w.timing else "",
            f"{w.algbw / 1e9:.6g}" if w.algbw is not None else "",
            w.wrong,
        ]
        for w in result.ways
    )
    return csv_text(CSV_COLUMNS, rows)


def moves_table(result: ReshardResult) -> Table:
    axes = result.session.layout.axes
    coords = {c.device_id: c.coords for c in result.session.layout.cells}
    table = DataTable(box=None, header_style="bold")
    for name in ("device", "mesh coords", "holds before", "holds after", "must receive"):
        table.add_column(
            name,
            justify="right" if name == "must receive" else "left",
            no_wrap=True,
            priority=1 if name == "mesh coords" else 0,
        )
    for m in result.moves:
        table.add_row(
            str(m.device_id),
            human.coords_text(axes, coords[m.device_id]),
            format_index(m.before),
            format_index(m.after),
            format_bytes(m.receive_bytes),
        )
    return table


def ways_table(result: ReshardResult) -> Table:
    table = DataTable(box=None, header_style="bold")
    numbers = ("sends/device", "memory/device", "compile", "p50", "algbw (GB/s)", "#wrong")
    # Left out first where narrow: a column of `-` alone, then compile, memory/device, result spec
    # and algbw. Never the status, which says why a row is `-`.
    priorities = {"algbw (GB/s)": 1, "result spec": 2, "memory/device": 3, "compile": 4}
    for name in ("impl", "status", "result spec", *numbers):
        table.add_column(
            name,
            justify="right" if name in numbers else "left",
            no_wrap=True,
            priority=priorities.get(name, 0),
        )
    for w in result.ways:
        a = w.analysis
        table.add_row(
            w.way,
            status_text(w.status),
            human.spec_text(w.out_entries),
            format_bytes(a.sent_bytes) if a else "-",
            format_bytes(a.memory.total_bytes) if a and a.memory else "-",
            human.compile_text(w.timing) if w.timing and a else "-",
            human.format_duration(w.timing.stats.p50) if w.timing else "-",
            f"{w.algbw / 1e9:.3g}" if w.algbw is not None else "-",
            Text(str(w.wrong), style="bold red" if w.wrong else "green") if w.timing else Text("-"),
        )
    return table


def render_reshard(result: ReshardResult, options: RunOptions) -> None:
    show_warnings(result.session.runtime)
    if not prints_here(options, result.session.runtime):
        return
    if options.format == "json":
        jsonout.write_json(reshard_json(result), options)
        return
    if options.format == "csv":
        emit(reshard_csv(result), options)
        return
    console = make_console(options)
    if not options.quiet:
        _print_setup(console, result, options)
    shown = next((w for w in result.ways if w.values is not None and w.values_before is not None), None)
    if shown is not None and shown.values_before is not None:
        human.section(console, "global values", human.ValuesText(shown.values_before.global_values))
        human.section(
            console,
            f"each device's block, before and after ({shown.way}){human.this_process_only(result.session)}",
            blocks_table(shown),
        )
    rows = [(w.way, c) for w in result.ways if w.analysis for c in w.analysis.collectives]
    human.section(console, "collectives the compiler used", collectives_table(rows))
    human.section(console, "each way", ways_table(result))
    if not options.quiet:
        for w in result.ways:
            if w.analysis is not None:
                console.print(memory_clauses(f"{w.way} memory:", w.analysis.memory))
    console.print()
    _print_verdict(console, result)


def _print_setup(console: Any, result: ReshardResult, options: RunOptions) -> None:
    """The header, the before and after pictures, and what each device holds and must receive."""
    req = result.request
    shape = req.array.shape
    facts = {
        "array": f"{'x'.join(map(str, shape))} {req.array.dtype.name} "
        f"({format_bytes(req.array.nbytes)}), {req.array.source}",
        "move": f"{req.source.describe()}  ->  {req.target.describe()}",
    }
    details = {
        "impls": "; ".join(f"{w}: {WAY_TEXT[w]}" for w in req.ways),
        "timing": f"{req.warmup} warm-up + {req.iters} timed moves; algbw = array bytes / p50"
        + human.timing_across(result.session),
        "verify": "exact (bit for bit) against the NumPy array",
    }
    console.print(human.header(result.session, facts, details=details, verbose=options.verbose))
    for title, entries in (("before", req.source.entries), ("after", req.target.entries)):
        human.section(
            console,
            f"{title}: spec {human.spec_text(entries)}",
            human.sharding_picture(human.spec_tiles(shape, entries, result.session)),
        )
    human.section(
        console,
        "what each device holds and must receive" + human.this_process_only(result.session),
        moves_table(result),
    )


def _print_verdict(console: Any, result: ReshardResult) -> None:
    """What any way must move, each way's refusal or fit, and whether every block matched NumPy."""
    if not result.needs_communication:
        console.print("no communication needed: every device already holds its new block")
    else:
        console.print(
            Clauses(
                [
                    f"every way must bring at least {format_bytes(result.min_receive_bytes)} "
                    "to the busiest device",
                    "(the part of its new block it did not hold)",
                ],
                sep=" ",
            )
        )
    for w in result.ways:
        if w.status == "refused":
            console.print(Text(f"{w.way} refused: {w.message}", style="yellow"))
        if w.fit is not None:
            console.print(verdict_text(w.fit, f"{w.way}: "))
    target = result.request.compile_target
    if target is not None:
        left = "; device_put (eager) left out" if "device_put" not in result.request.ways else ""
        console.print(
            Text(f"compile-only for {target.name}: nothing ran, nothing was verified{left}", style="dim")
        )
    elif result.wrong:
        bad = [
            f"{w.way} ({w.wrong} on device(s) {', '.join(map(str, w.wrong_devices))})"
            for w in result.ways
            if w.wrong
        ]
        console.print(Text(f"WRONG: elements differ from NumPy in {'; '.join(bad)}", style="bold red"))
    else:
        console.print(
            Text(
                "verified: every device's new block matches NumPy exactly"
                + human.checked_where(result.session),
                style="green",
            )
        )
