"""`shardcli pipeline`'s flags turned into its frozen request: pure Python, no JAX.

The layout checks (stages, layers, batch and width against the mesh) need the whole request and run
once, in shardcli/training/pipeline/request.py's `validate_request`, when the pipeline runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardcli.errors import ShardcliError
from shardcli.specs.meshes import parse_mesh
from shardcli.specs.runs import RunOptions

if TYPE_CHECKING:
    from shardcli.training.pipeline.request import PipelineRequest


def default_pipeline_axes(mesh: str) -> str | None:
    """stage,model for a 2-D mesh, stage for 1-D; otherwise the usual names (None)."""
    rank = len(mesh.split("x"))
    return {1: "stage", 2: "stage,model"}.get(rank)


def build_pipeline_request(
    *,
    microbatches: int = 8,
    schedule: str = "1f1b",
    layers: int = 8,
    width: int = 256,
    batch: int = 32,
    stages: int | None = None,
    forward_only: bool = False,
    impl: str = "mpmd",
    mesh: str = "4x2",
    axes: str | None = None,
    options: RunOptions | None = None,
) -> PipelineRequest:
    """`shardcli pipeline`'s flags as its request.

    The layout checks (stages, layers, batch and width against the mesh) need the whole request and
    run once, in the core's `validate_request`, when the pipeline runs.

    Args:
        impl: mpmd, spmd or both (the two, in that order).
        axes: the mesh's axis names; default: stage,model on a 2-D mesh, stage on a 1-D one.
        options: the shared run options.
        The rest: the flags of the same names.

    Raises:
        ShardcliError: --impl is none of the three, or the mesh flags are not valid.
    """
    from shardcli.training.pipeline.request import IMPLS, PipelineRequest

    choices = (*IMPLS, "both")
    if impl not in choices:
        raise ShardcliError(f"--impl {impl!r} is not valid; choose one of {', '.join(choices)}")
    return PipelineRequest(
        mesh=parse_mesh(mesh, axes if axes is not None else default_pipeline_axes(mesh)),
        stages=stages,
        microbatches=microbatches,
        batch=batch,
        layers=layers,
        width=width,
        schedule=schedule,
        forward_only=forward_only,
        impls=IMPLS if impl == "both" else (impl,),
        options=options or RunOptions(),
    )
