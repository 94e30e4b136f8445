"""`shardcli mesh`."""

from __future__ import annotations

import typer

from shardcli import options as opt
from shardcli.specs import RunOptions, parse_mesh


@opt.with_run_options(compile_cache=False, process_timing=False)
def mesh(mesh: opt.Mesh = "8", axes: opt.Axes = None, *, options: RunOptions) -> None:
    """Show a device mesh: each device's id, mesh coordinates and process.

    Example: shardcli mesh --mesh 2x4 --axes data,model
    """
    spec = parse_mesh(mesh, axes)

    from shardcli.core.session import open_session
    from shardcli.render.mesh import render_mesh

    render_mesh(open_session(spec, options), options)
    raise typer.Exit(0)
