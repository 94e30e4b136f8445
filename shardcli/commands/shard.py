"""`shardcli shard`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from shardcli.commands import options as opt
from shardcli.errors import ExitCode

if TYPE_CHECKING:
    from shardcli.specs.runs import RunOptions


@opt.with_run_options(compile_cache=False, process_timing=False)
def shard(
    shape: Annotated[
        str | None,
        typer.Option(
            "--shape",
            "-s",
            help="Global array shape: 8x8, 16, 4x8x8. \\[default: 8x8, or the --values given]",
        ),
    ] = None,
    spec: Annotated[
        str | None,
        typer.Option(
            "--spec",
            "-p",
            help="PartitionSpec: one entry per dim, an axis, None (or _), or axes joined by + "
            "(data+model,None). \\[default: replicated]",
        ),
    ] = None,
    dtype: opt.Dtype = "float32",
    init: opt.Init = None,
    values: opt.Values = None,
    values_file: opt.ValuesFile = None,
    show_values: opt.ShowValues = None,
    view_dims: Annotated[
        str | None,
        typer.Option(
            "--view-dims",
            help="For 3-D+ arrays: the two dims the picture draws, ROW,COL. \\[default: the last two]",
        ),
    ] = None,
    mesh: opt.Mesh = "8",
    axes: opt.Axes = None,
    *,
    options: RunOptions,
) -> None:
    """Place an array on the mesh with a PartitionSpec and show which device holds what.

    Example: shardcli shard --mesh 2x4 --axes data,model --shape 8x8 --spec data,model
    """
    from shardcli.commands.requests.parsing import parse_input_values
    from shardcli.specs.meshes import parse_mesh, parse_sharding, parse_view_dims
    from shardcli.specs.runs import ShardRequest
    from shardcli.specs.values import ArraySpec, parse_dtype, parse_init, parse_shape

    mesh_spec = parse_mesh(mesh, axes)
    parsed_shape, numbers = parse_input_values(values, values_file, shape, init)
    array_shape = parsed_shape or parse_shape("8x8")
    request = ShardRequest(
        mesh=mesh_spec,
        array=ArraySpec(
            shape=array_shape, dtype=parse_dtype(dtype), init=parse_init(init or "arange"), values=numbers
        ),
        sharding=parse_sharding(spec, mesh_spec),
        show_values=show_values,
        view_dims=parse_view_dims(view_dims, len(array_shape)),
        options=options,
    )

    from shardcli.playground.shard import run_shard
    from shardcli.render.shard import render_shard

    result = run_shard(request)
    render_shard(result, options)
    raise typer.Exit(ExitCode.OK if result.ok else ExitCode.WRONG_RESULT)
