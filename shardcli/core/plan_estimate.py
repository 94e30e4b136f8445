"""A compiled candidate's step time: the roofline of its compiled figures over one calibrated efficiency.

T_math = FLOPs / peak, T_hbm = bytes accessed / HBM bandwidth, T_comm per mesh axis = bytes that axis
carries / its ICI bandwidth (the links it runs along); the bound is the largest, the no-overlap sum
their total, and the estimate is bound / efficiency. Pure Python.

The efficiency is ONE number, calibrated on MaxText's published TPU rows of the plan issue (32B and
64B on v5p-128, 128B on v5p-256, 22B on v4-128; bench/plan_vs_published.py) and on nothing else: the
median of (roofline / measured step time) over those rows. See CALIBRATION.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardcli.core.plan_compile import CompiledFigures
from shardcli.core.plan_model import ChipFigures, axis_links


@dataclass(frozen=True)
class Calibration:
    """The one efficiency the roofline is divided by, and where it came from."""

    efficiency: float
    provenance: str


CALIBRATION = Calibration(
    efficiency=0.73,
    provenance="uncalibrated placeholder (0.70-0.76 in JAX_NOTES); bench/plan_vs_published.py sets it",
)


@dataclass(frozen=True)
class StepEstimate:
    """One step's time on the target, per chip."""

    t_math_s: float
    t_hbm_s: float
    t_comm_s: tuple[tuple[str, float], ...]  # (mesh axes, seconds), slowest first
    efficiency: float

    @property
    def t_bound_s(self) -> float:
        return max([self.t_math_s, self.t_hbm_s, *(t for _, t in self.t_comm_s)])

    @property
    def t_sum_s(self) -> float:
        return self.t_math_s + self.t_hbm_s + sum(t for _, t in self.t_comm_s)

    @property
    def step_s(self) -> float:
        return self.t_bound_s / self.efficiency

    @property
    def bound(self) -> str:
        """compute, memory (HBM) or the mesh axis whose communication takes longest."""
        terms = [("compute", self.t_math_s), ("hbm", self.t_hbm_s), *self.t_comm_s]
        return max(terms, key=lambda x: x[1])[0]


def axes_bandwidth(axes: str, mesh_sizes: tuple[tuple[str, int], ...], chip: ChipFigures) -> float:
    """Bytes/s one chip sends over a group of mesh axes: the links of every axis in it."""
    inner = 1
    links = 0.0
    names = set(axes.split("+"))
    for axis, size in reversed(mesh_sizes):
        if axis in names:
            links += axis_links(size, chip.torus, chip.wraparound, inner)
        inner *= size
    return chip.link_bytes_per_s * max(links, 1.0)


def estimate_step(
    figures: CompiledFigures,
    mesh_sizes: tuple[tuple[str, int], ...],
    chip: ChipFigures,
    calibration: Calibration = CALIBRATION,
) -> StepEstimate | None:
    """The step time of a compiled candidate; None where the compiler gave no FLOPs."""
    if figures.flops is None:
        return None
    comm = tuple(
        sorted(
            ((t.axes, t.sent_bytes / axes_bandwidth(t.axes, mesh_sizes, chip)) for t in figures.traffic),
            key=lambda x: -x[1],
        )
    )
    return StepEstimate(
        t_math_s=figures.flops / chip.peak_flops,
        t_hbm_s=(figures.bytes_accessed or 0.0) / chip.hbm_bytes_per_s,
        t_comm_s=comm,
        efficiency=calibration.efficiency,
    )
