"""Rendering `shardcli mesh`."""

from __future__ import annotations

from shardcli.render import human, jsonout
from shardcli.render.console import make_console, prints_here, show_warnings
from shardcli.render.layout import DataTable
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
    """For a compile-only target: the chip of the torus (its coordinates and core) at each mesh position;
    for a GPU target its host and its GPU there (NVLink within a host, no torus)."""
    chip = {d.id: d for d in session.devices}
    if session.runtime.platform == "gpu":
        return _gpus_table(session, chip)
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


def _gpus_table(session: Session, gpu: dict[int, object]) -> DataTable:
    """The host and the GPU within it at each mesh position (the CUDA plugin's coordinates are
    (slice, host, GPU))."""
    table = DataTable(
        box=None, header_style="bold", title="GPUs at each mesh coordinate (NVLink within a host)"
    )
    for name in ("device", "mesh coords", "host", "GPU"):
        table.add_column(name)
    for cell in session.layout.cells:
        coords = tuple(getattr(gpu.get(cell.device_id), "coords", None) or ())
        host, index = (str(coords[-2]), str(coords[-1])) if len(coords) >= 2 else ("-", "-")
        table.add_row(str(cell.device_id), human.coords_text(session.layout.axes, cell.coords), host, index)
    return table
