"""Rendering `shardcli mesh`."""

from __future__ import annotations

from shardcli.render import human, jsonout
from shardcli.render.console import DataTable, make_console, prints_here, show_warnings
from shardcli.runtime.session import Session
from shardcli.specs.runs import RunOptions


def render_mesh(session: Session, options: RunOptions) -> None:
    show_warnings(session.runtime)
    if not prints_here(options, session.runtime):
        return
    if options.format == "json":
        jsonout.write_json(jsonout.document("mesh", session, {}), options)
        return
    console = make_console(options)
    if not options.quiet:
        console.print(human.header(session, verbose=options.verbose))
        console.print()
    console.print(human.mesh_grids(session.layout))
    if session.runtime.target is not None and not options.quiet:
        console.print()
        console.print(chips_table(session))


def chips_table(session: Session) -> DataTable:
    """For a compile-only target: the chip of the torus (its coordinates and core) at each mesh position."""
    chip = {d.id: d for d in session.devices}
    table = DataTable(box=None, header_style="bold", title="chips of the torus at each mesh coordinate")
    for name in ("device", "mesh coords", "chip coords", "core"):
        table.add_column(name)
    for cell in session.layout.cells:
        device = chip.get(cell.device_id)
        coords = getattr(device, "coords", None)
        table.add_row(
            str(cell.device_id),
            human.coords_text(session.layout.axes, cell.coords),
            ",".join(map(str, coords)) if coords is not None else "-",
            str(getattr(device, "core_on_chip", "-")),
        )
    return table
