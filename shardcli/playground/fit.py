"""The latency-bandwidth model t(S) = alpha + S / beta, fitted to a size sweep.

alpha is the fixed cost of one call (launch, synchronisation, per-hop latency) and beta the
bandwidth the time grows with. The fit is least squares on the relative error, (t_i - model_i) / t_i,
so a sweep over sizes from kilobytes to hundreds of megabytes weighs every size alike rather than
letting the largest decide; alpha and 1/beta are kept non-negative.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LatencyBandwidthFit:
    """t(S) = alpha + S / beta over `points` sizes, with how well it fits."""

    alpha_s: float
    beta_bytes_per_s: float | None  # None: the time does not grow with the size
    r2: float  # coefficient of determination of t (1 is a perfect fit)
    max_rel_residual: float  # the worst |t_i - model_i| / t_i
    points: int

    def time_at(self, size: float) -> float:
        slope = 0.0 if self.beta_bytes_per_s is None else size / self.beta_bytes_per_s
        return self.alpha_s + slope


def fit_latency_bandwidth(sizes: Sequence[float], times: Sequence[float]) -> LatencyBandwidthFit | None:
    """Fit t = alpha + S / beta; None with fewer than two distinct sizes."""
    s = np.asarray(sizes, dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    if len(np.unique(s)) < 2 or not (np.all(np.isfinite(t)) and np.all(t > 0)):
        return None
    w = 1.0 / t
    design = np.stack([w, w * s], axis=1)  # rows: [1/t_i, S_i/t_i]; target: 1
    target = np.ones_like(t)
    solution, *_ = np.linalg.lstsq(design, target, rcond=None)
    alpha, slope = float(solution[0]), float(solution[1])
    if alpha < 0:  # refit through the origin: no fixed cost
        alpha, slope = 0.0, float(np.dot(w * s, target) / np.dot(w * s, w * s))
    if slope < 0:  # refit as a constant: no bandwidth term
        alpha, slope = float(np.dot(w, target) / np.dot(w, w)), 0.0
    model = alpha + slope * s
    total = float(np.sum((t - t.mean()) ** 2))
    r2 = 1.0 - float(np.sum((t - model) ** 2)) / total if total > 0 else 1.0
    return LatencyBandwidthFit(
        alpha_s=float(alpha),
        beta_bytes_per_s=1.0 / slope if slope > 0 else None,
        r2=r2,
        max_rel_residual=float(np.max(np.abs(t - model) / t)),
        points=len(s),
    )


def fit_each(points: dict[str, list[tuple[float, float]]]) -> dict[str, LatencyBandwidthFit | None]:
    """t(x) = alpha + x / beta for each named series of (x, seconds) points (None under two points)."""
    return {key: fit_latency_bandwidth([x for x, _ in p], [t for _, t in p]) for key, p in points.items()}
