"""`shardcli pipeline`'s request, and its checks before any device is touched (`validate_request`: the
schedule, the stages, microbatches, batch, layers and width against the mesh)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from shardcli.errors import ShardcliError
from shardcli.specs.meshes import MeshSpec
from shardcli.specs.runs import RunOptions
from shardcli.training.pipeline.schedules import SCHEDULES
from shardcli.training.pipeline.stages import Plan

IMPLS = ("mpmd", "spmd")


@dataclass(frozen=True)
class PipelineRequest:
    """Everything `shardcli pipeline` needs, validated before JAX starts."""

    mesh: MeshSpec
    stages: int | None = None  # default: the size of the leading mesh axis
    microbatches: int = 8
    batch: int = 32
    layers: int = 8
    width: int = 256
    schedule: str = "1f1b"
    forward_only: bool = False
    impls: tuple[str, ...] = ("mpmd",)
    options: RunOptions = field(default_factory=RunOptions)


def validate_request(request: PipelineRequest) -> Plan:
    """Every check that needs no devices.

    Raises:
        ShardcliError: a pipeline that cannot be laid out as asked.
    """
    if request.schedule not in SCHEDULES:
        raise ShardcliError(
            f"--schedule {request.schedule!r} is not valid; choose one of {', '.join(SCHEDULES)}"
        )
    for name in request.impls:
        if name not in IMPLS:
            raise ShardcliError(f"--impl {name!r} is not valid; choose one of {', '.join(IMPLS)} or both")
    for flag, value in (
        ("--microbatches", request.microbatches),
        ("--batch", request.batch),
        ("--layers", request.layers),
        ("--width", request.width),
    ):
        if value < 1:
            raise ShardcliError(f"{flag} {value} is not valid; give a positive number")
    lead_axis, leading = request.mesh.axes[0], request.mesh.shape[0]
    stages = request.stages if request.stages is not None else leading
    if stages < 2:
        given = (
            f"--stages is {stages}"
            if request.stages is not None
            else f"the leading mesh axis is {lead_axis}={stages}"
        )
        raise ShardcliError(
            f"a pipeline needs at least 2 stages, but {given}; give a mesh such as 4x2 (stage,model)"
        )
    if stages > leading:
        raise ShardcliError(
            f"--stages {stages} is more than the leading mesh axis ({lead_axis}={leading}) allows; "
            f"give at most {leading} stages or a larger leading axis"
        )
    if leading % stages:
        raise ShardcliError(
            f"--stages {stages} does not divide the leading mesh axis ({lead_axis}={leading}); each stage "
            f"needs the same share of it"
        )
    if request.layers % stages:
        raise ShardcliError(
            f"--layers {request.layers} is not divisible by {stages} stages; give a multiple of {stages}"
        )
    if request.batch % request.microbatches:
        raise ShardcliError(
            f"--microbatches {request.microbatches} does not divide --batch {request.batch}; every "
            f"microbatch must have the same size"
        )
    rows = leading // stages
    mb = request.batch // request.microbatches
    if mb % rows:
        raise ShardcliError(
            f"a microbatch of {mb} rows does not split over the {rows} positions of {lead_axis} each stage "
            f"has; give a --batch / --microbatches that is a multiple of {rows}"
        )
    rest = math.prod(request.mesh.shape[1:])
    if request.width % rest:
        raise ShardcliError(
            f"--width {request.width} does not split over the other mesh axes ({rest} devices); give a "
            f"multiple of {rest}"
        )
    if "spmd" in request.impls and stages != leading:
        raise ShardcliError(
            f"--impl spmd puts one stage on each position of {lead_axis}, so it needs --stages {leading}, "
            f"not {stages}"
        )
    schedule = SCHEDULES[request.schedule](stages, request.microbatches, request.forward_only)
    return Plan(
        stages=stages,
        rows_per_stage=rows,
        layers_per_stage=request.layers // stages,
        microbatch_size=mb,
        schedule=schedule,
    )
