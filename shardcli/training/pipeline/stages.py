"""What both MPMD pipelines share (in one process: threads; over processes: lock-step): the plan,
the model, the stage sub-meshes, the timeline's records and the result checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from shardcli.analysis.report import Check
from shardcli.runtime.verify import RTOL
from shardcli.training.pipeline.schedules import Schedule

if TYPE_CHECKING:
    from shardcli.runtime.session import Session


@dataclass(frozen=True)
class Plan:
    stages: int
    rows_per_stage: int  # positions of the leading axis each stage's sub-mesh has
    layers_per_stage: int
    microbatch_size: int
    schedule: Schedule


@dataclass(frozen=True)
class Event:
    """One step or transfer of the timeline, in seconds from the start of the timed pass."""

    stage: int
    kind: str  # "F", "B", "send" (activation to the next stage), "send-grad" (gradient to the previous)
    microbatch: int
    start: float
    end: float


@dataclass(frozen=True)
class StageInfo:
    stage: int
    device_ids: tuple[int, ...]
    sub_mesh: tuple[int, ...]
    layers: tuple[int, int]  # [first, last) layer index
    compute_s: float
    transfer_s: float


@dataclass(frozen=True)
class MpmdRun:
    events: tuple[Event, ...]
    stages: tuple[StageInfo, ...]
    makespan_s: float
    bubble: float  # measured idle fraction of the stages' compute over the makespan
    compile_s: float
    loss: float | None


def forward(params: Any, h: Any) -> Any:
    """The layers of one stage (or of the whole model): h = tanh(h @ W + b)."""
    import jax.numpy as jnp

    for w, b in params:
        h = jnp.tanh(h @ w + b)
    return h


def loss_of(y: Any, target: Any) -> Any:
    import jax.numpy as jnp

    return 0.5 * jnp.mean((y - target) ** 2)


def stage_meshes(session: Session, plan: Plan) -> list[Any]:
    from jax.sharding import Mesh

    devices = np.asarray(session.mesh.devices)
    k = plan.rows_per_stage
    return [
        Mesh(devices[s * k : (s + 1) * k], session.spec.axes, axis_types=session.mesh.axis_types)
        for s in range(plan.stages)
    ]


def error_of(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    """The largest |got - want| and the bound it must stay under (RTOL x max|want|)."""
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    err = float(np.max(np.abs(np.asarray(got, np.float64) - want))) if want.size else 0.0
    return err, RTOL * (scale or 1.0)


def close_check(what: str, got: np.ndarray, want: np.ndarray) -> Check:
    err, bound = error_of(got, want)
    ok = bool(err <= bound)
    return Check(what, ok, f"max |err| {err:.2e} {'<=' if ok else '>'} {bound:.2e} (1e-4 x max|ref|)")


def layer_errors(grads: list, reference: list) -> np.ndarray:
    """Per layer and part (W, b): (max |err|, bound); NaN for a layer this process does not hold."""
    errors = np.full((len(reference), 2, 2), np.nan)
    for i, (got, want) in enumerate(zip(grads, reference, strict=True)):
        if got is not None:
            for k in (0, 1):
                errors[i, k] = error_of(got[k], want[k])
    return errors


def grad_check(name: str, errors: np.ndarray) -> Check:
    bad = sorted({int(i) for i in np.nonzero(errors[:, :, 0] > errors[:, :, 1])[0]})
    ratio = errors[:, :, 0] / errors[:, :, 1]
    i, k = np.unravel_index(int(np.nanargmax(ratio)), ratio.shape)
    err, bound = errors[i, k]
    detail = (
        f"{len(errors)} layers; worst layer {i} {'Wb'[k]}: max |err| {err:.2e} vs bound {bound:.2e} "
        f"(1e-4 x max|ref|)"
    )
    if bad:
        detail = f"wrong in layers {bad}; " + detail
    return Check(f"{name}: every layer's gradients match the unpipelined run", not bad, detail)
