"""`shardcli pipeline`."""

from __future__ import annotations

from typing import Annotated

import typer

from shardcli import options as opt
from shardcli.errors import ExitCode, ShardcliError
from shardcli.specs import RunOptions, parse_mesh

IMPL_CHOICES = ("mpmd", "spmd", "both")


@opt.with_run_options(mode=False, processes=False)
def pipeline(
    microbatches: Annotated[int, typer.Option("--microbatches", "-M", help="Microbatches per step.")] = 8,
    schedule: Annotated[
        str, typer.Option("--schedule", help="gpipe (all forwards, then all backwards) or 1f1b.")
    ] = "1f1b",
    layers: Annotated[
        int, typer.Option("--layers", help="MLP layers in all, split evenly over the stages.")
    ] = 8,
    width: Annotated[int, typer.Option("--width", help="Layer width (W is width x width).")] = 256,
    batch: Annotated[int, typer.Option("--batch", help="Rows per step, split into the microbatches.")] = 32,
    stages: Annotated[
        int | None,
        typer.Option(
            "--stages", help="Pipeline stages, each a slice of the leading mesh axis. \\[default: its size]"
        ),
    ] = None,
    forward_only: Annotated[
        bool, typer.Option("--forward-only", help="Inference: forwards only, no backward steps.")
    ] = False,
    impl: Annotated[
        str,
        typer.Option(
            "--impl",
            help="mpmd (a program per stage on its sub-mesh, device_put between them), spmd (one shard_map "
            "with ppermute along the leading axis) or both.",
        ),
    ] = "mpmd",
    mesh: Annotated[
        str, typer.Option("--mesh", "-m", help="Mesh shape; the leading axis holds the stages.")
    ] = "4x2",
    axes: Annotated[
        str | None,
        typer.Option("--axes", "-a", help="Axis names, one per mesh dim. \\[default: stage,model]"),
    ] = None,
    *,
    options: RunOptions,
) -> None:
    """Run pipeline parallelism: each stage its own program on its own sub-mesh (MPMD), activations
    and gradients moved between stages, on a schedule you can see as a timeline; verified against
    the same model run unpipelined on one device.

    Example: shardcli pipeline --mesh 4x2 --axes stage,model --microbatches 8 --schedule 1f1b
    """
    from shardcli.core.pipeline import PipelineRequest, run_pipeline

    if impl not in IMPL_CHOICES:
        raise ShardcliError(f"--impl {impl!r} is not valid; choose one of {', '.join(IMPL_CHOICES)}")
    mesh_spec = parse_mesh(mesh, axes if axes is not None else _default_axes(mesh))
    request = PipelineRequest(
        mesh=mesh_spec,
        stages=stages,
        microbatches=microbatches,
        batch=batch,
        layers=layers,
        width=width,
        schedule=schedule,
        forward_only=forward_only,
        impls=("mpmd", "spmd") if impl == "both" else (impl,),
        options=options,
    )
    from shardcli.render.pipeline import render_pipeline

    result = run_pipeline(request)
    render_pipeline(result, options)
    raise typer.Exit(ExitCode.WRONG_RESULT if result.failed else ExitCode.OK)


def _default_axes(mesh: str) -> str | None:
    """stage,model for a 2-D mesh, stage for 1-D; otherwise the usual names."""
    rank = len(mesh.split("x"))
    return {1: "stage", 2: "stage,model"}.get(rank)
