"""Rendering `shardcli einsum`: rich for people, JSON and CSV for scripts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from shardcli.playground.einsum import WAY_TEXT, EinsumArray, EinsumResult, EinsumSize, WayRun
from shardcli.render import human, jsonout
from shardcli.render.console import csv_text, emit, make_console, prints_here, show_warnings
from shardcli.render.layout import DataTable
from shardcli.render.matmul import below_bound_note, flop_fit_json, format_flops, ratio_text
from shardcli.render.program import (
    collectives_cell,
    collectives_table,
    cost_model_text,
    hardware_json,
    memory_clauses,
    model_json,
    program_json,
    status_text,
    verdict_json,
    verdict_text,
)
from shardcli.results import bodies
from shardcli.specs.runs import RunOptions
from shardcli.specs.values import format_bytes

FORMATS = ("table", "json", "csv")


def _array_json(array: EinsumArray) -> dict[str, Any]:
    return bodies.EINSUM_ARRAY(
        name=array.name,
        subscripts=array.letters,
        shape=list(array.shape),
        spec=jsonout.spec_json(array.entries),
    )


def _way_json(run: WayRun) -> dict[str, Any]:
    return bodies.EINSUM_IMPL(
        impl=run.way,
        status=run.status,
        message=run.message,
        out_spec=jsonout.spec_json(run.out_entries),
        program=program_json(run.analysis),
        model=model_json(run.model),
        timing=jsonout.timing_json(run.timing),
        achieved_flop_per_s=run.achieved_flops,
        max_rel_err=run.max_rel_err,
        wrong=run.wrong,
        wrong_devices=list(run.wrong_devices),
        fit=verdict_json(run.fit),
        values=jsonout.shown_values_json(run.values),
    )


def einsum_json(result: EinsumResult) -> dict[str, Any]:
    req = result.request
    hw = result.hardware
    notation = req.notation
    return jsonout.document(
        "einsum",
        result.session,
        {
            "config": bodies.EINSUM_CONFIG(
                subscripts=notation.text,
                canonical=notation.canonical,
                shapes=[list(notation.operand_shape(i)) for i in range(len(notation.inputs))],
                in_specs=[jsonout.spec_json(s.entries) for s in req.in_specs],
                out_spec=jsonout.spec_json(req.out_spec.entries) if req.out_spec is not None else None,
                impls=list(req.ways),
                dtype=req.dtype.name,
                init=req.init,
                scales=list(req.scales) if req.scales is not None else [1.0],
                warmup=req.warmup,
                iters=req.iters,
                compile_target=req.compile_target.name if req.compile_target is not None else None,
                hardware=hardware_json(hw),
            ),
            "sizes": [
                bodies.EINSUM_SIZE(
                    scale=size.scale,
                    subscripts=size.notation.canonical,
                    operands=[_array_json(a) for a in size.operands],
                    result=_array_json(size.result),
                    model_flops=size.model_flops,
                    tolerance_text=size.tolerance_text,
                    impls=[_way_json(w) for w in size.ways],
                    wrong=size.wrong,
                )
                for size in result.sizes
            ],
            "summary": bodies.EINSUM_SUMMARY(
                wrong=result.wrong,
                refused=[
                    bodies.EINSUM_REFUSED(scale=size.scale, impl=w.way, message=w.message)
                    for size in result.sizes
                    for w in size.ways
                    if w.status == "refused"
                ],
                fit={key: flop_fit_json(fit) for key, fit in result.fits.items()},
            ),
        },
    )


CSV_COLUMNS = (
    "subscripts",
    "impl",
    "scale",
    "shapes",
    "dtype",
    "status",
    "out_spec",
    "p50_us",
    "tflops",
    "flops_per_device",
    "memory_bytes_per_device",
    "collectives",
    "sent_bytes_per_device",
    "t_bound_us",
    "max_rel_err",
    "wrong",
)


def einsum_csv(result: EinsumResult) -> str:
    return csv_text(CSV_COLUMNS, _csv_rows(result))


def _csv_rows(result: EinsumResult) -> Iterator[list[Any]]:
    for size in result.sizes:
        shapes = ",".join("x".join(map(str, a.shape)) for a in size.operands)
        for w in size.ways:
            a = w.analysis
            yield [
                size.notation.canonical,
                w.way,
                f"{size.scale:g}",
                shapes,
                result.request.dtype.name,
                w.status,
                human.spec_text(w.out_entries) if w.out_entries is not None else "",
                f"{w.timing.stats.p50 * 1e6:.3f}" if w.timing else "",
                f"{w.achieved_flops / 1e12:.6g}" if w.achieved_flops else "",
                f"{a.flops:.6g}" if a and a.flops is not None else "",
                a.memory.total_bytes if a and a.memory else "",
                collectives_cell(a),
                a.sent_bytes if a else "",
                f"{w.model.t_bound_s * 1e6:.3f}" if w.model and w.model.t_bound_s is not None else "",
                f"{w.max_rel_err:.3e}" if w.timing else "",
                w.wrong,
            ]


# --- people ---------------------------------------------------------------------------------------


def ways_table(size: EinsumSize) -> Table:
    """Per way: the result's sharding, what the compiled program needs and moves, timing, #wrong."""
    table = DataTable(box=None, header_style="bold")
    numbers = ("memory/device", "FLOPs/device", "sends/device", "p50", "FLOP/s", "x bound", "#wrong")
    # Left out first where narrow: a column of `-` alone (p50 and #wrong of a compile-only run), then
    # FLOPs/device, FLOP/s, memory/device and x bound. Never the status, which says why a row is `-`.
    priorities = {"memory/device": 2, "x bound": 2, "FLOP/s": 3, "FLOPs/device": 4}
    for name in ("impl", "status", "result spec", *numbers):
        table.add_column(
            name,
            justify="right" if name in numbers else "left",
            no_wrap=True,
            priority=priorities.get(name, 0),
        )
    for w in size.ways:
        a = w.analysis
        bound = w.model.t_bound_s if w.model else None
        ratio = w.timing.stats.p50 / bound if w.timing and bound else None
        table.add_row(
            w.way,
            status_text(w.status, "refused (lesson)"),
            human.spec_text(w.out_entries),
            format_bytes(a.memory.total_bytes) if a and a.memory else "-",
            format_flops(a.flops, "") if a and a.flops is not None else "-",
            format_bytes(a.sent_bytes) if a else "-",
            human.format_duration(w.timing.stats.p50) if w.timing else "-",
            format_flops(w.achieved_flops, "") if w.achieved_flops else "-",
            ratio_text(ratio),
            Text(str(w.wrong), style="bold red" if w.wrong else "green") if w.timing else Text("-"),
        )
    return table


def _pictures(console: Console, size: EinsumSize, result: EinsumResult) -> None:
    for array in size.operands:
        human.section(
            console,
            f"{array.name} [{array.letters}]: global {array.shape}, spec {human.spec_text(array.entries)}",
            # an operand always has its entries (only the result's wait for the compiler)
            human.sharding_picture(human.spec_tiles(array.shape, array.entries or (), result.session)),
        )
    shown: set[tuple] = set()
    for w in size.ways:
        entries = w.out_entries if w.out_entries is not None else size.result.entries
        if entries is None or entries in shown:
            continue
        shown.add(entries)
        chosen = " (the compiler's choice)" if result.request.out_spec is None else ""
        human.section(
            console,
            f"{size.result.name} [{size.result.letters}] from {w.way}: global {size.result.shape}, "
            f"spec {human.spec_text(entries)}{chosen}",
            human.sharding_picture(human.spec_tiles(size.result.shape, entries, result.session)),
        )


def render_einsum(result: EinsumResult, options: RunOptions) -> None:
    show_warnings(result.session.runtime)
    if not prints_here(options, result.session.runtime):
        return
    if options.format == "json":
        jsonout.write_json(einsum_json(result), options)
        return
    if options.format == "csv":
        emit(einsum_csv(result), options)
        return
    console = make_console(options)
    req = result.request
    first = result.sizes[0]
    if not options.quiet:
        facts = {
            "einsum": f"{req.notation.text}  ({req.notation.canonical}; "
            f"summed: {req.notation.summed or 'none'})",
            "operands": ", ".join(
                f"{a.name} {'x'.join(map(str, a.shape))} @ {human.spec_text(a.entries)}"
                for a in first.operands
            ),
            "result": f"{'x'.join(map(str, first.result.shape))} @ "
            + (
                human.spec_text(req.out_spec.entries) if req.out_spec is not None else "the compiler's choice"
            ),
            "input": f"{req.dtype.name}, init {req.init}"
            + (f"; scales {', '.join(f'{s:g}' for s in req.scales)}" if req.scales else ""),
        }
        details = {
            "impls": "; ".join(f"{w}: {WAY_TEXT[w]}" for w in req.ways),
            "timing": f"compile separately, then {req.warmup} warm-up + {req.iters} timed iterations"
            + human.timing_across(result.session),
            "verify": first.tolerance_text,
        }
        console.print(human.header(result.session, facts, details=details, verbose=options.verbose))
        _pictures(console, first, result)
    for size in result.sizes:
        where = f" (scale {size.scale:g}: {', '.join('x'.join(map(str, a.shape)) for a in size.operands)})"
        suffix = where if req.scales else ""
        human.section(console, "what each way compiled to, per device" + suffix, ways_table(size))
        rows = [(w.way, c) for w in size.ways if w.analysis for c in w.analysis.collectives]
        human.section(console, "collectives the compiler inserted" + suffix, collectives_table(rows))
        shown = next((w for w in size.ways if w.values is not None), None)
        if shown is not None:
            human.show_values(console, size.result.name, shown.values, f" (from {shown.way})")
        if not options.quiet:
            for w in size.ways:
                if w.analysis is not None:
                    console.print(memory_clauses(f"{w.way} memory:", w.analysis.memory))
    if not options.quiet:
        last = result.sizes[-1]
        model_way = next((w for w in last.ways if w.model is not None), None)
        if model_way is not None and model_way.model is not None:
            human.section(
                console,
                f"cost model (roofline, per device, from {model_way.way}'s compiled program)",
                cost_model_text(model_way.model, result.hardware, "einsum"),
            )
    console.print()
    below = [
        f"{w.way} {ratio_text(w.timing.stats.p50 / w.model.t_bound_s)}"
        for size in result.sizes
        for w in size.ways
        if w.timing and w.model and w.model.t_bound_s and w.timing.stats.p50 < w.model.t_bound_s
    ]
    if below:
        console.print(below_bound_note(below, result.hardware, options.verbose))
    for size in result.sizes:
        for w in size.ways:
            if w.status == "refused":
                console.print(
                    Text(f"{w.way} refused this layout (JAX's lesson): {w.message}", style="yellow")
                )
            if w.fit is not None:
                console.print(verdict_text(w.fit, f"{w.way}: "))
    _verdict(console, result)


def _verdict(console: Console, result: EinsumResult) -> None:
    if result.wrong:
        bad = [
            f"{w.way} ({w.wrong} on device(s) {', '.join(map(str, w.wrong_devices))})"
            for size in result.sizes
            for w in size.ways
            if w.wrong
        ]
        console.print(Text(f"WRONG: elements beyond the tolerance in {'; '.join(bad)}", style="bold red"))
    elif result.request.compile_target is not None:
        console.print(
            Text(
                f"compile-only for {result.request.compile_target.name}: nothing ran, nothing was verified",
                style="dim",
            )
        )
    elif not any(w.timing for size in result.sizes for w in size.ways):
        console.print(Text("nothing ran: JAX refused every way asked for (see above)", style="yellow"))
    else:
        console.print(
            Text(
                "verified: every device's block of the result matches NumPy"
                + human.checked_where(result.session),
                style="green",
            )
        )
