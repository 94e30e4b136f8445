"""A compiled candidate's step time: the project's one estimate (`core.step_time`), calibrated once.

`plan` keeps each compile's figures on disk (`plan_compile.CompiledFigures`: FLOPs and bytes per
step, the bytes each set of mesh axes carries); `estimate_of` hands them to `step_time.estimate_step`
with the mesh's axis bandwidths (`step_time.axis_links`, from where each chip sits on the torus),
the hardware table's chip, and the TPU calibration (`shardcli.calibration`): T_math, T_hbm, T_comm
per axis, the bound max(T_math, T_hbm, sum of T_comm), and the estimate = bound / efficiency.

CALIBRATION (kept in `shardcli.calibration`, beside the GPU's efficiencies) is ONE efficiency for TPU
training steps, set from MaxText's published rows named in the plan issue (32B and 64B on v5p-128,
128B on v5p-256, 22B on v4-128; sequence 2048) and nothing else: `bench/plan_vs_published.py`
compiles each at its published layout and prints the median of roofline / measured step time over
those rows; that median is the efficiency.
"""

from __future__ import annotations

from typing import Any

from shardcli.calibration import CALIBRATION as CALIBRATION
from shardcli.calibration import ROOFLINE as ROOFLINE
from shardcli.calibration import Calibration as Calibration
from shardcli.core.plan_compile import CompiledFigures
from shardcli.core.program_analysis import CollectiveOp, ProgramAnalysis
from shardcli.core.step_time import StepEstimate


def analysis_of(figures: CompiledFigures) -> ProgramAnalysis:
    """The figures `step_time` reads, as a ProgramAnalysis: each set of mesh axes' bytes per step as
    one point-to-point transfer (whose bytes sent are its bytes)."""
    collectives = tuple(
        CollectiveOp(
            kind="collective-permute",
            shape="",
            result_bytes=int(t.sent_bytes),
            mesh_axes=None if t.axes == "?" else tuple(t.axes.split("+")),
            group_size=None,
            runs=1,
            runs_known=True,
            op_name=t.top_op,
            source=None,
            is_async=False,
        )
        for t in figures.traffic
        if t.sent_bytes > 0
    )
    return ProgramAnalysis(
        collectives=collectives, memory=None, flops=figures.flops, bytes_accessed=figures.bytes_accessed
    )


def estimate_of(
    figures: CompiledFigures, mesh: Any, calibration: Calibration = CALIBRATION
) -> StepEstimate | None:
    """The step time of a compiled candidate on `mesh` (a JAX mesh over the target's devices); None
    where the compiler gave no FLOPs (it refused the program)."""
    from shardcli.core.step_time import axis_links, devices_per_chip, estimate_step, places_of_mesh
    from shardcli.hardware import chip_for_kind

    if figures.flops is None:
        return None
    device = next(iter(mesh.devices.flat))
    chip = chip_for_kind(device.device_kind)
    if chip is None:
        return None
    places = places_of_mesh(mesh, chip)
    names = tuple(str(a) for a in mesh.axis_names)
    links = axis_links(chip, tuple(mesh.devices.shape), names, places)
    return estimate_step(
        analysis_of(figures),
        chip,
        links,
        "bfloat16",
        per_chip=devices_per_chip(places, chip),
        efficiency=calibration.efficiency,
        efficiency_source=calibration.provenance,
    )
