"""The charts of a `shardcli collective` sweep: busbw and time against size, each with the curve of
its latency-bandwidth fit, and the fit in words."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from shardcli.playground.collective.run import CollectiveResult
from shardcli.render import human
from shardcli.render.layout import Clauses
from shardcli.render.plot import Series, text_chart


def _series_name(result: CollectiveResult, placement: str, several: bool) -> str:
    name = result.collective.name if several else ""
    where = {"out": "out-of-place", "in": "in-place"}[placement]
    return f"{name} {where}".strip() if several or len(result.avg_busbw) > 1 else (name or where)


def busbw_chart(results: list[CollectiveResult]) -> Text:
    """busbw against bytes per device, a series per collective and placement, with the fit's curve."""
    series = []
    several = len(results) > 1
    for result in results:
        if not result.collective.bus_factor:
            continue
        for placement in result.avg_busbw:
            pts = tuple(
                (run.bytes_per_device, p.busbw)
                for run in result.runs
                for p in run.placements
                if p.placement == placement and p.busbw is not None
            )
            if pts:  # a placement that did not run (in place for all_gather) has nothing to draw
                series.append(
                    Series(_series_name(result, placement, several), pts, _busbw_model(result, placement))
                )
    return text_chart(series, y_label="busbw (GB/s)")


def _busbw_model(result: CollectiveResult, placement: str) -> Any:
    fit = result.fits.get(placement)
    run = result.runs[0]
    bus_factor = result.collective.bus_factor
    if fit is None or run.algbw_bytes is None or bus_factor is None:
        return None
    ratio = run.algbw_bytes / run.bytes_per_device  # S per byte per device, the same at every size
    factor = bus_factor(result.group_size)
    return lambda b: b * ratio / fit.time_at(b * ratio) * factor / 1e9


def time_chart(result: CollectiveResult) -> Text:
    """p50 time against bytes per device, log-log, with the fitted t(S) = alpha + S / beta."""
    series = []
    run0 = result.runs[0]
    ratio = (run0.algbw_bytes or run0.bytes_per_device) / run0.bytes_per_device
    for placement in result.avg_busbw:
        pts = tuple(
            (run.bytes_per_device, p.timing.stats.p50 * 1e6)
            for run in result.runs
            for p in run.placements
            if p.placement == placement and p.timing is not None
        )
        fit = result.fits.get(placement)
        curve = (lambda b, f=fit: f.time_at(b * ratio) * 1e6) if fit is not None else None
        if pts:
            series.append(Series(_series_name(result, placement, False), pts, curve))
    return text_chart(series, y_label="p50 (us)", log_y=True)


def fit_text(result: CollectiveResult) -> RenderableType:
    """One line per placement: alpha, beta and how well the model fits (lines broken between
    clauses, never inside a figure)."""
    if not result.fits:
        return Text(f"no fit: {result.collective.name} moves no data, so its time has no bandwidth term")
    lines: list[RenderableType] = []
    size = "nccl-tests' S" if result.runs[0].algbw_bytes is not None else "bytes per device"
    for placement, fit in result.fits.items():
        label = {"out": "out-of-place", "in": "in-place"}[placement]
        if fit is None:
            lines.append(Text(f"fit {label}: needs two sizes or more", style="dim"))
            continue
        beta = (
            "none (time does not grow with size)"
            if fit.beta_bytes_per_s is None
            else (f"{fit.beta_bytes_per_s / 1e9:.3g} GB/s")
        )
        lines.append(
            Clauses(
                [
                    f"fit {label}: t(S) = alpha + S / beta",
                    f"alpha = {human.format_duration(fit.alpha_s)}",
                    f"beta = {beta}",
                ],
                sep=", ",
            )
        )
        lines.append(
            Text(
                f"  R^2 {fit.r2:.3f}, worst residual {fit.max_rel_residual:.0%}, "
                f"{fit.points} sizes, S = {size}",
                style="dim",
            )
        )
    return Group(*lines)
