"""`--plot-file`: the sweep's charts as a PNG or SVG image, with matplotlib (the `plot` extra).

The same two charts as in the terminal: busbw against bytes per device (log2 axis), and the p50
time against it (log-log), each collective and placement a line, with the latency-bandwidth fit
drawn dashed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardcli.playground.collective.run import CollectiveResult
from shardcli.playground.matmul.run import MatmulResult
from shardcli.specs.values import format_bytes

PLACEMENT_NAMES = {"out": "out-of-place", "in": "in-place"}


def write_plot_file(path: str, results: list[CollectiveResult]) -> None:
    """Draw every collective's sweep into `path` (.png or .svg)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    fig, (ax_bw, ax_t) = plt.subplots(1, 2, figsize=(12, 4.8), layout="constrained")
    for result in results:
        run0 = result.runs[0]
        ratio = (run0.algbw_bytes or run0.bytes_per_device) / run0.bytes_per_device
        factor = result.collective.bus_factor(result.group_size) if result.collective.bus_factor else None
        for placement, fit in result.fits.items():
            label = f"{result.collective.name} {PLACEMENT_NAMES[placement]}"
            rows = [
                (run.bytes_per_device, p.busbw, p.timing.stats.p50)
                for run in result.runs
                for p in run.placements
                if p.placement == placement and p.timing is not None
            ]
            sizes = np.array([r[0] for r in rows], dtype=np.float64)
            times = np.array([r[2] for r in rows]) * 1e6
            (line,) = ax_t.plot(sizes, times, "o-", label=label)
            if factor is not None:
                ax_bw.plot(sizes, [r[1] for r in rows], "o-", color=line.get_color(), label=label)
            if fit is None:
                continue
            dense = np.geomspace(np.min(sizes), np.max(sizes), 200)
            model = np.array([fit.time_at(b * ratio) for b in dense])
            ax_t.plot(dense, model * 1e6, "--", color=line.get_color(), alpha=0.6, label=f"{label} fit")
            if factor is not None:
                ax_bw.plot(
                    dense, dense * ratio / model * factor / 1e9, "--", color=line.get_color(), alpha=0.6
                )
    _axes(ax_bw, "busbw (GB/s)", log_y=False)
    _axes(ax_t, "p50 time (us)", log_y=True)
    rt = results[0].session.runtime
    fig.suptitle(
        f"shardcli: {', '.join(r.collective.name for r in results)} on {results[0].session.spec.describe()}, "
        f"{rt.describe_devices()}"
    )
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _axes(
    ax: Any,
    label: str,
    *,
    log_y: bool,
    x_label: str = "bytes per device",
    byte_ticks: bool = True,
    empty: str = "no busbw: nothing moves",  # e.g. axis_index
) -> None:
    """Log2 x axis (ticks as byte sizes unless told otherwise), labels, grid, legend."""
    ax.set_xscale("log", base=2)
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel(x_label)
    ax.set_ylabel(label)
    if byte_ticks:
        ticks = ax.get_xticks()
        ax.set_xticks(ticks)
        ax.set_xticklabels([format_bytes(int(t), short=True) if t >= 1 else "" for t in ticks])
    ax.grid(True, which="major", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes)


def write_matmul_plot_file(path: str, result: MatmulResult) -> None:
    """A matmul sweep: achieved TFLOP/s and p50 time against the product's FLOPs, a line per case
    and impl, with the t(F) = alpha + F / rate fit dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_rate, ax_t) = plt.subplots(1, 2, figsize=(12, 4.8), layout="constrained")
    for key, fit in result.fits.items():
        case, impl = key.split("/")
        rows = [
            (run.model_flops, i.timing.stats.p50)
            for run in result.runs
            if run.case.name == case
            for i in run.impls
            if i.impl == impl and i.timing is not None
        ]
        flops = np.array([r[0] for r in rows], dtype=np.float64)
        times = np.array([r[1] for r in rows], dtype=np.float64)
        (line,) = ax_t.plot(flops, times * 1e6, "o-", label=key)
        ax_rate.plot(flops, flops / times / 1e12, "o-", color=line.get_color(), label=key)
        if fit is not None:
            dense = np.geomspace(np.min(flops), np.max(flops), 200)
            model = np.array([fit.time_at(f) for f in dense])
            ax_t.plot(dense, model * 1e6, "--", color=line.get_color(), alpha=0.6)
            ax_rate.plot(dense, dense / model / 1e12, "--", color=line.get_color(), alpha=0.6)
    for ax, label, log_y in ((ax_rate, "achieved TFLOP/s", False), (ax_t, "p50 time (us)", True)):
        _axes(ax, label, log_y=log_y, x_label="FLOPs of the product", byte_ticks=False, empty="nothing ran")
    fig.suptitle(
        f"shardcli matmul on {result.session.spec.describe()}, {result.session.runtime.describe_devices()}"
    )
    fig.savefig(path, dpi=120)
    plt.close(fig)
