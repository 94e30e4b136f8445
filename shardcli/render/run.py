"""Rendering `shardcli run`: each device's blocks before and after (as `collective` shows them),
the probes' values per device, the global result, and its check against one device."""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.console import Console, Group, RenderableType
from rich.text import Text

from shardcli.program.run import ArrayValues, DeviceBlock, ProbeValues, RunResult
from shardcli.render import human, jsonout
from shardcli.render.console import make_console, prints_here, show_warnings
from shardcli.render.layout import Clauses, DataTable
from shardcli.results import bodies
from shardcli.specs.runs import RunOptions

# --- JSON -----------------------------------------------------------------------------------------


def _block_json(block: DeviceBlock, axes: tuple[str, ...]) -> dict[str, Any]:
    return bodies.RUN_BLOCK(
        device_ids=list(block.device_ids),
        coords=dict(zip(axes, block.coords, strict=False)),
        index=jsonout.index_json(block.index) if block.index else None,
        values=jsonout.values_json(block.values),
    )


def _array_json(array: ArrayValues, axes: tuple[str, ...]) -> dict[str, Any]:
    return bodies.RUN_ARRAY(
        name=array.name,
        dtype=array.dtype,
        shape=list(array.shape),
        spec=array.spec,
        filled_with=array.filled_with,
        values=jsonout.values_json(array.global_values),
        blocks=[_block_json(b, axes) for b in array.blocks],
    )


def run_json(result: RunResult) -> dict[str, Any]:
    req = result.request
    axes = result.session.spec.axes
    return jsonout.document(
        "run",
        result.session,
        {
            "config": bodies.RUN_CONFIG(
                function=req.target,
                args=[a.describe() for a in req.args],
                inputs=req.inputs,
                init=req.init,
                show_values=req.show_values,
                tolerance=result.tolerance_text,
            ),
            "inputs": [_array_json(a, axes) for a in result.inputs],
            "probes": [
                bodies.RUN_PROBE(
                    name=p.name, manual_axes=list(p.axes), blocks=[_block_json(b, axes) for b in p.blocks]
                )
                for p in result.probes
            ],
            "results": [_array_json(a, axes) for a in result.results],
            "checks": [
                bodies.RUN_CHECK(
                    name=c.name,
                    compared=c.compared,
                    wrong=c.wrong,
                    max_abs_err=c.max_abs_err,
                    bound=c.bound,
                    reference=jsonout.values_json(c.reference)
                    if c.reference is not None and c.reference.size <= 256
                    else None,
                    note=c.note,
                )
                for c in result.checks
            ],
            "ok": result.wrong == 0,
        },
    )


# --- people ---------------------------------------------------------------------------------------


def _values_text(values: Any) -> str:
    return str(human.format_values(values))


def _block_text(array: ArrayValues, device: int) -> str:
    block = next((b for b in array.blocks if device in b.device_ids), None)
    if block is None:
        return "-"
    if block.values is None:
        local = "x".join(str(b - a) for a, b in block.index) or "scalar"
        return f"{local} block (not shown)"
    return _values_text(block.values)


def _array_line(array: ArrayValues) -> str:
    kind = f"{array.dtype}[{','.join(map(str, array.shape))}]"
    filled = "" if array.filled_with == "result" else f", {array.filled_with}"
    if array.layout is None:
        return f"{array.name}: {kind}{filled}, {array.spec}"
    tiles = len(array.layout.tiles)
    copies = array.layout.replication
    spread = f"{tiles} block(s) of {array.layout.local_shape}" + (
        f", each on {copies} devices" if copies > 1 else ""
    )
    return f"{array.name}: {kind}{filled}, spec {array.spec}: {spread}"


def _probe_text(probe: ProbeValues, device: int) -> str:
    block = next((b for b in probe.blocks if device in b.device_ids), None)
    if block is None:
        return "-"
    return "(not shown)" if block.values is None else _values_text(block.values)


def blocks_table(result: RunResult) -> DataTable:
    """One row per device: its block of every input (BEFORE), the probes' values inside shard_map,
    and its block of every result (AFTER)."""
    axes = result.session.spec.axes
    inputs = [a for a in result.inputs if a.layout is not None]
    probes = [p for p in result.probes if p.axes]
    outputs = [a for a in result.results if a.layout is not None]
    table = DataTable(box=None, header_style="bold")
    table.add_column("device", justify="right")
    table.add_column("mesh coords", priority=1)
    for array in inputs:
        table.add_column(f"{array.name} (input block)")
    for probe in probes:
        table.add_column(f"{probe.name} (probe)")
    for array in outputs:
        table.add_column(f"{array.name} (output block)")
    for cell in result.session.layout.cells:
        d = cell.device_id
        table.add_row(
            str(d),
            human.coords_text(axes, cell.coords),
            *(Text(_block_text(a, d)) for a in inputs),
            *(Text(_probe_text(p, d)) for p in probes),
            *(Text(_block_text(a, d)) for a in outputs),
        )
    return table


def _global_probes(probes: list[ProbeValues]) -> RenderableType:
    lines: list[RenderableType] = []
    for p in probes:
        for k, block in enumerate(p.blocks):
            label = p.name if len(p.blocks) == 1 else f"{p.name} (call {k + 1})"
            lines.append(Text(f"{label}:", style="bold"))
            lines.append(Text("(not shown)") if block.values is None else human.ValuesText(block.values))
    return Group(*lines)


def _verdict(console: Console, result: RunResult) -> None:
    for check in result.checks:
        if not check.compared:
            console.print(Text(f"{check.name}: {check.note}", style="yellow"))
    compared = [c for c in result.checks if c.compared]
    if not compared:
        return
    wrong = [c for c in compared if c.wrong]
    if wrong:
        for c in wrong:
            console.print(
                Text(
                    f"WRONG: {c.wrong} element(s) of {c.name} differ from the function run on one device "
                    f"(max |err| {c.max_abs_err:.3g}; {c.note})",
                    style="bold red",
                )
            )
        return
    names = ", ".join(c.name for c in compared)
    worst = max(c.max_abs_err for c in compared)
    how = (
        ["(exactly)"]
        if all(c.note == "exactly" for c in compared)
        else [f"(max |err| {worst:.3g},", f"within {result.tolerance_text})"]
    )
    # broken only between its phrases where narrow
    verdict = [f"verified: {names} matches the same function", "on one device", *how]
    console.print(Clauses(verdict, sep=" ", style="green"))


def render_run(result: RunResult, options: RunOptions) -> None:
    """`shardcli run`'s report: JSON for scripts, else the tables for people."""
    show_warnings(result.session.runtime)
    if not prints_here(options, result.session.runtime):
        return
    if options.format == "json":
        jsonout.write_json(run_json(result), options)
        return
    console = make_console(options)
    if not options.quiet:
        console.print(
            human.header(
                result.session,
                {"function": result.request.target},
                details={
                    "compared with": "the same function on one device, every mesh axis of size 1; "
                    + result.tolerance_text
                },
                verbose=options.verbose,
            )
        )
        human.section(
            console,
            "arrays",
            Text("\n".join(_array_line(a) for a in (*result.inputs, *result.results))),
        )
    _values_sections(console, result, options.quiet)
    console.print()
    _verdict(console, result)


def _values_sections(console: Console, result: RunResult, quiet: bool) -> None:
    """The lesson: blocks per device, probes, the global result (kept under --quiet)."""
    shown = any(b.values is not None for a in (*result.inputs, *result.results) for b in a.blocks)
    per_device = any(p.axes for p in result.probes)
    if shown or per_device:
        title = "BEFORE, probes inside shard_map, AFTER" if per_device else "BEFORE and AFTER"
        human.section(console, f"{title} (per device)", blocks_table(result))
    global_ = [p for p in result.probes if not p.axes]
    if global_:
        human.section(console, "probes (global values, under jit)", _global_probes(global_))
    for array in result.inputs if not quiet else ():
        if array.layout is None and array.global_values is not None:
            human.section(console, f"{array.name} (a host array)", human.ValuesText(array.global_values))
    for array in result.results:
        if array.global_values is not None:
            human.section(console, f"global {array.name}", human.ValuesText(array.global_values))
    for check in result.checks:
        differs = not check.compared or check.wrong
        if differs and check.reference is not None and check.reference.size <= 256:
            human.section(
                console, f"{check.name} on one device", human.ValuesText(np.asarray(check.reference))
            )
