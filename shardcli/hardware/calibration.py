"""How far real steps fall short of the roofline, per platform: the estimate's efficiencies, each with
its source. Pure data, stored once; `analysis.step_time` (inspect) and `plan.estimate` (plan) read it.

- TPU: ONE efficiency for training steps, the median roofline / measured step time of MaxText's
  published 32B and 64B (v5p-128), 128B (v5p-256) and 22B (v4-128) rows (`bench/plan_vs_published.py`
  compiles each at its published layout and prints it). The estimate is the roofline over it.
- GPU: the sum over the program's ops of each op's own roofline (XProf's roofline model, the scaling
  book's per-op reasoning): a library GEMM, attention or convolution kernel takes max(its FLOPs /
  (peak x the dot efficiency), its bytes / (HBM x the HBM efficiency)); every other op together the
  same with XLA's FLOPs and bytes. The efficiencies (`OpEfficiency`: a GEMM's read from a measured
  curve at its FLOPs) and the launch costs (`LaunchCosts`) are a measured profile's:
  `hardware.builtin_profiles` holds the one `shardcli calibrate` measured on an H200, `--hardware
  FILE` a user's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Calibration:
    """The one efficiency a TPU roofline is divided by, and where it came from."""

    efficiency: float
    provenance: str


@dataclass(frozen=True)
class OpEfficiency:
    """The share of the peak a GPU's GEMM kernels reach, and of its HBM bandwidth a streaming op
    reaches, with where each came from."""

    dot: float
    hbm: float
    dot_source: str
    hbm_source: str
    # A measured GEMM curve (`shardcli calibrate`'s profile): (dtype, FLOPs of one GEMM, efficiency);
    # empty: `dot` at every size
    curve: tuple[tuple[str, float, float], ...] = ()

    def dot_at(self, dtype: str | None, flops: float) -> float:
        """The dot efficiency of one GEMM of `flops` in `dtype`: the curve read at its FLOPs (log-linear
        between measured points, the nearest end's beyond them; float32's where `dtype` has none), else
        `dot`."""
        points = sorted((f, e) for d, f, e in self.curve if d == dtype) or sorted(
            (f, e) for d, f, e in self.curve if d == "float32"
        )
        if not points:
            return self.dot
        if flops <= points[0][0]:
            return points[0][1]
        for (f0, e0), (f1, e1) in zip(points, points[1:], strict=False):
            if flops <= f1:
                return e0 + math.log(flops / f0) / math.log(f1 / f0) * (e1 - e0)
        return points[-1][1]


# Refit 2026-11-29 from bench/plan_vs_published.py (scan method, splash attention as the published runs
# used it, jax 0.10.2, libtpu 0.0.52) once the estimate counted the communication the compiled schedule
# leaves exposed (analysis/exposed.py): roofline / measured = 1.014 (32B, v5p-128), 1.018 (64B,
# v5p-128), 1.055 (128B, v5p-256), 0.754 (22B, v4-128); median 1.0157, past the roofline itself, so the
# efficiency is 1.0: the estimate is the roofline. (With every collective taken as hidden the same rows
# gave 0.735, 0.721, 0.702, 0.712 and the efficiency was their median, 0.7166: the gap it stood for was
# the v5p rows' synchronous all-reduces.) No other row was used.
CALIBRATION = Calibration(
    efficiency=1.0,
    provenance=(
        "median roofline/measured of MaxText's published 32B, 64B, 128B (v5p) and 22B (v4) rows, 1.016, "
        "capped at the roofline"
    ),
)
ROOFLINE = Calibration(1.0, "none: the roofline as it is (1.0)")


@dataclass(frozen=True)
class LaunchCosts:
    """What a GPU step costs however little its kernels do: per call, per kernel launched, per loop
    trip (the predicate read back to the host) and per array buffer taken or returned."""

    call_s: float
    kernel_s: float
    trip_s: float
    buffer_s: float
    source: str
    # Whether the device runs ahead of the host (a GPU: the step takes the longer of its launches and
    # its kernels, its transfers hidden behind them); a CPU's devices share the host's cores, so there
    # the call's cost, the ops and the transfers come one after another
    overlaps: bool = True
