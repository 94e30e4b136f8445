"""A compiled candidate's step time: the project's one estimate (`analysis.step_time`), calibrated once.

`plan` keeps each compile's figures on disk (`plan.compiled_figures.CompiledFigures`: FLOPs and bytes per
step, the bytes each set of mesh axes carries); `estimate_of` hands them to `step_time.estimate_step`
with the mesh's axis bandwidths (`step_time.axis_links`, from where each chip sits on the torus),
the hardware table's chip, and the platform's calibration (`shardcli.hardware.calibration`), exactly as
`inspect` does (`step_time.step_time_of`): T_math, T_hbm, T_comm per axis, the bound max(T_math,
T_hbm, sum of T_comm), and on a TPU the estimate = bound / efficiency; on a GPU the per-op roofline
of the library kernels the figures keep and every other op, with T_comm per axis over NVLink or the
network.

CALIBRATION (kept in `shardcli.hardware.calibration`, beside the GPU's efficiencies) is ONE efficiency for TPU
training steps, set from MaxText's published rows named in the plan issue (32B and 64B on v5p-128,
128B on v5p-256, 22B on v4-128; sequence 2048) and nothing else: `bench/plan_vs_published.py`
compiles each at its published layout and prints the median of roofline / measured step time over
those rows; that median is the efficiency.
"""

from __future__ import annotations

import math
from typing import Any

from shardcli.analysis.exposed import Overlap
from shardcli.analysis.kernels import Launches
from shardcli.analysis.program import CollectiveOp, KernelCall, KernelCalls, ProgramAnalysis
from shardcli.analysis.step_time import StepEstimate
from shardcli.hardware.calibration import CALIBRATION as CALIBRATION
from shardcli.hardware.calibration import ROOFLINE as ROOFLINE
from shardcli.hardware.calibration import Calibration as Calibration
from shardcli.hardware.chips import Figure
from shardcli.plan.compiled_figures import CompiledFigures


def _exposed_and_hidden(sent: float, exposed: float) -> tuple[tuple[int, bool], tuple[int, bool]]:
    """An axis's bytes split into (exposed, False) and (hidden, True) whole bytes that add up to all
    it sends (each part cut to a whole byte on its own would lose one)."""
    whole = round(sent)
    shown = min(whole, max(0, round(exposed)))
    return (shown, False), (whole - shown, True)


def analysis_of(figures: CompiledFigures) -> ProgramAnalysis:
    """The figures `step_time` reads, as a ProgramAnalysis: each set of mesh axes' bytes per step as
    point-to-point transfers (whose bytes sent are their bytes; what the compiled schedule exposed as
    a synchronous one, the rest as one it hid), a GPU's library kernels, and the bytes moved to and
    from the host's memory."""
    collectives = tuple(
        CollectiveOp(
            kind="collective-permute",
            shape="",
            result_bytes=int(amount),
            mesh_axes=None if t.axes == "?" else tuple(t.axes.split("+")),
            group_size=None,
            runs=1,
            runs_known=True,
            op_name=t.top_op,
            source=None,
            is_async=hidden,
            # the part the compiled schedule hid: as async, beside ops that outlast it
            overlap=Overlap(ops_s=math.inf) if hidden else None,
        )
        for t in figures.traffic
        for amount, hidden in _exposed_and_hidden(t.sent_bytes, t.exposed_bytes)
        if amount > 0
    )
    kernels = KernelCalls(
        tuple(
            KernelCall(
                k.kind, "", k.kind, k.kind, k.flops, k.bytes_accessed, k.dtype, "DEFAULT", k.runs, k.narrowest
            )
            for k in figures.kernels
        ),
        (),
    )
    return ProgramAnalysis(
        collectives=collectives,
        memory=None,
        flops=figures.flops,
        bytes_accessed=figures.bytes_accessed,
        kernels=kernels,
        launches=Launches(*figures.launches) if figures.launches is not None else None,
        host_transfer_bytes=figures.host_transfer_bytes,
    )


def estimate_of(
    figures: CompiledFigures,
    mesh: Any,
    calibration: Calibration | None = None,
    network: Figure | None = None,
) -> StepEstimate | None:
    """The step time of a compiled candidate on `mesh` (a JAX mesh over the target's devices), made
    as `inspect` makes it (`step_time.step_time_of`): on a TPU the roofline over `calibration`
    (default the platform's, `shardcli.hardware.calibration`), on a GPU the per-op roofline. None where the
    compiler gave no FLOPs (it refused the program) or the hardware table does not know the device.
    `network`: on GPU hosts one GPU's share of the network between hosts (the target's)."""
    from shardcli.analysis.step_time import step_time_of

    if figures.flops is None:
        return None
    device = next(iter(mesh.devices.flat))
    if calibration is None:
        return step_time_of(analysis_of(figures), mesh, device.device_kind, "bfloat16", network=network)
    return step_time_of(
        analysis_of(figures),
        mesh,
        device.device_kind,
        "bfloat16",
        efficiency=calibration.efficiency,
        efficiency_source=calibration.provenance,
        network=network,
    )
