"""`shardcli mesh`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from shardcli.commands import options as opt

if TYPE_CHECKING:
    from shardcli.specs.runs import RunOptions

Target = Annotated[
    str | None,
    typer.Option(
        "--target",
        help="Show the mesh over a TPU topology you don't own (tpu-v5e:16x16; the tpu extra): which chip "
        "of the torus sits at each mesh coordinate.",
    ),
]
Mesh = Annotated[
    str | None,
    typer.Option(
        "--mesh", "-m", help="Mesh shape: 8, 2x4 or 2x2x2. \\[default: 8, or the --target topology's]"
    ),
]


@opt.with_run_options(compile_cache=False, process_timing=False)
def mesh(mesh: Mesh = None, axes: opt.Axes = None, target: Target = None, *, options: RunOptions) -> None:
    """Show a device mesh: each device's id, mesh coordinates and process.

    Example: shardcli mesh --mesh 2x4 --axes data,model
    """
    from shardcli.render.mesh import render_mesh
    from shardcli.specs.meshes import parse_mesh

    if target is not None:
        from shardcli.analysis.target import open_target_session
        from shardcli.hardware.targets import parse_target

        hardware = parse_target(target)
        if mesh is not None:
            parse_mesh(mesh, axes)  # flags first: one line before libtpu starts
        render_mesh(open_target_session(hardware, mesh, axes, options), options)
        raise typer.Exit(0)
    spec = parse_mesh(mesh if mesh is not None else "8", axes)

    from shardcli.runtime.session import open_session

    render_mesh(open_session(spec, options), options)
    raise typer.Exit(0)
