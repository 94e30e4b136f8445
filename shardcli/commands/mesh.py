"""`shardcli mesh`."""

from __future__ import annotations

import typer

from shardcli import options as opt
from shardcli.specs import parse_mesh


def mesh(
    mesh: opt.Mesh = "8",
    axes: opt.Axes = None,
    platform: opt.Platform = "auto",
    devices: opt.Devices = None,
    mode: opt.Mode = "auto",
    format: opt.Format = "table",
    no_color: opt.NoColor = False,
    quiet: opt.Quiet = False,
    save: opt.Save = None,
    coordinator: opt.Coordinator = None,
    num_processes: opt.NumProcesses = None,
    process_id: opt.ProcessId = None,
    distributed: opt.Distributed = "off",
    join_timeout: opt.JoinTimeout = 300,
    coordinator_bind: opt.CoordinatorBind = None,
    all_processes: opt.AllProcesses = False,
) -> None:
    """Show a device mesh: each device's id, mesh coordinates and process.

    Example: shardcli mesh --mesh 2x4 --axes data,model
    """
    options = opt.run_options(
        platform,
        devices,
        mode,
        format,
        no_color,
        quiet,
        coordinator=coordinator,
        num_processes=num_processes,
        process_id=process_id,
        distributed=distributed,
        join_timeout=join_timeout,
        coordinator_bind=coordinator_bind,
        all_processes=all_processes,
        save=save,
    )
    spec = parse_mesh(mesh, axes)

    from shardcli.core.session import open_session
    from shardcli.render.mesh import render_mesh

    render_mesh(open_session(spec, options), options)
    raise typer.Exit(0)
