"""`shardcli pipeline`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from shardcli.commands import options as opt
from shardcli.errors import ExitCode

if TYPE_CHECKING:
    from shardcli.specs.runs import RunOptions

Microbatches = Annotated[int, typer.Option("--microbatches", "-M", help="Microbatches per step.")]
Schedule = Annotated[
    str, typer.Option("--schedule", help="gpipe (all forwards, then all backwards) or 1f1b.")
]
Layers = Annotated[int, typer.Option("--layers", help="MLP layers in all, split evenly over the stages.")]
Width = Annotated[int, typer.Option("--width", help="Layer width (W is width x width).")]
Batch = Annotated[int, typer.Option("--batch", help="Rows per step, split into the microbatches.")]
Stages = Annotated[
    int | None,
    typer.Option(
        "--stages", help="Pipeline stages, each a slice of the leading mesh axis. \\[default: its size]"
    ),
]
ForwardOnly = Annotated[
    bool, typer.Option("--forward-only", help="Inference: forwards only, no backward steps.")
]
Impl = Annotated[
    str,
    typer.Option(
        "--impl",
        help="mpmd (a program per stage on its sub-mesh, device_put between them), spmd (one shard_map "
        "with ppermute along the leading axis) or both.",
    ),
]
Mesh = Annotated[str, typer.Option("--mesh", "-m", help="Mesh shape; the leading axis holds the stages.")]
Axes = Annotated[
    str | None,
    typer.Option("--axes", "-a", help="Axis names, one per mesh dim. \\[default: stage,model]"),
]


@opt.with_run_options(mode=False, process_timing=False)
def pipeline(
    microbatches: Microbatches = 8,
    schedule: Schedule = "1f1b",
    layers: Layers = 8,
    width: Width = 256,
    batch: Batch = 32,
    stages: Stages = None,
    forward_only: ForwardOnly = False,
    impl: Impl = "mpmd",
    mesh: Mesh = "4x2",
    axes: Axes = None,
    *,
    options: RunOptions,
) -> None:
    """Run pipeline parallelism: each stage its own program on its own sub-mesh (MPMD), activations
    and gradients moved between stages, on a schedule you can see as a timeline; verified against
    the same model run unpipelined on one device.

    Under `shardcli launch -n N` each stage's sub-mesh is on its own process, and activations move
    between processes by a ppermute over the two stages' joint mesh (JAX's send/recv).

    Example: shardcli pipeline --mesh 4x2 --axes stage,model --microbatches 8 --schedule 1f1b
    """
    from shardcli.commands.requests.training import build_pipeline_request  # not at import: --help is light

    request = build_pipeline_request(
        microbatches=microbatches,
        schedule=schedule,
        layers=layers,
        width=width,
        batch=batch,
        stages=stages,
        forward_only=forward_only,
        impl=impl,
        mesh=mesh,
        axes=axes,
        options=options,
    )
    from shardcli.render.pipeline import render_pipeline
    from shardcli.training.pipeline.threads import run_pipeline

    result = run_pipeline(request)
    render_pipeline(result, options)
    raise typer.Exit(ExitCode.WRONG_RESULT if result.failed else ExitCode.OK)
