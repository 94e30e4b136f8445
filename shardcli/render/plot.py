"""Charts in the terminal: values against message size on a log2 axis, drawn with characters.

Each series has its own marker character, so the chart reads the same without colour (`--no-color`,
a pipe, a CI log); colour only adds to it. Model curves (the latency-bandwidth fit) are drawn with
dots under the measured points.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.text import Text

from shardcli.specs.values import format_bytes

MARKERS = "ox+*#@%&"
STYLES = ("cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta")
CURVE = "·"


@dataclass(frozen=True)
class Series:
    """Measured points (size in bytes, value), and optionally a model curve to draw under them."""

    name: str
    points: tuple[tuple[float, float], ...]
    curve: Callable[[float], float] | None = None


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
        ticks = [10**e for e in decades if lo <= 10**e <= hi]
        if len(ticks) < 3:  # a narrow range: 1, 2 and 5 of each decade
            ticks = [m * 10**e for e in decades for m in (1, 2, 5) if lo <= m * 10**e <= hi]
        return ticks
    return [lo + (hi - lo) * k / 4 for k in range(5)]


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{value:.2g}"


def text_chart(
    series: Sequence[Series],
    *,
    y_label: str,
    log_y: bool = False,
    width: int = 64,
    height: int = 14,
    x_label: str = "size per device (log2)",
    x_format: Callable[[float], str] = lambda v: format_bytes(int(v), short=True),
) -> Text:
    """A chart of every series against log2(x) (by default bytes per device), with axes and a legend."""
    points = [p for s in series for p in s.points if p[1] > 0 or not log_y]
    if not points:
        return Text("(nothing to draw)")
    xs = [math.log2(p[0]) for p in points]
    ys = [p[1] for p in points]
    x_lo, x_hi = min(xs), max(xs)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    samples = [x_lo + (x_hi - x_lo) * k / (4 * width) for k in range(4 * width + 1)]
    curves = [(s, [(x, s.curve(2**x)) for x in samples]) for s in series if s.curve is not None]
    ys += [y for _, pts in curves for _, y in pts if y > 0 or not log_y]
    y_lo, y_hi = min(ys), max(ys)
    if not log_y:
        y_lo = min(0.0, y_lo)
    if y_hi == y_lo:
        y_hi = y_lo + (abs(y_lo) or 1.0)
    f = math.log10 if log_y else (lambda v: v)
    fy_lo, fy_hi = f(y_lo), f(y_hi)

    def cell(x: float, y: float) -> tuple[int, int] | None:
        if log_y and y <= 0:
            return None
        col = round((x - x_lo) / (x_hi - x_lo) * (width - 1))
        row = round((fy_hi - f(y)) / (fy_hi - fy_lo) * (height - 1))
        return (row, col) if 0 <= row < height and 0 <= col < width else None

    grid: list[list[tuple[str, str]]] = [[(" ", "")] * width for _ in range(height)]
    index = {s.name: k for k, s in enumerate(series)}
    for s, pts in curves:
        style = STYLES[index[s.name] % len(STYLES)]
        for x, y in pts:
            at = cell(x, y)
            if at is not None and grid[at[0]][at[1]][0] == " ":
                grid[at[0]][at[1]] = (CURVE, f"dim {style}")
    for k, s in enumerate(series):
        for size, value in s.points:
            at = cell(math.log2(size), value)
            if at is not None:
                grid[at[0]][at[1]] = (MARKERS[k % len(MARKERS)], f"bold {STYLES[k % len(STYLES)]}")

    labels = {}
    for tick in _ticks(y_lo, y_hi, log_y) if not log_y or y_lo > 0 else []:
        at = cell(x_lo, tick)
        if at is not None:
            labels[at[0]] = _fmt(tick)
    label_width = max([len(v) for v in labels.values()] + [len(y_label)])
    out = Text()
    out.append(f"{y_label:>{label_width}}\n", style="bold")
    for r, row in enumerate(grid):
        out.append(f"{labels.get(r, ''):>{label_width}} ┤" if r in labels else f"{'':>{label_width}} │")
        for char, style in row:
            out.append(char, style=style or None)
        out.append("\n")
    out.append(" " * label_width + " └" + "─" * width + "\n")
    axis = [" "] * (width + 2)
    for e in range(math.ceil(x_lo), math.floor(x_hi) + 1, max(1, math.ceil((x_hi - x_lo) / 6))):
        col = round((e - x_lo) / (x_hi - x_lo) * (width - 1))
        label = x_format(2**e)
        start = min(max(col - len(label) // 2, 0), width + 2 - len(label))
        if all(c == " " for c in axis[max(start - 1, 0) : start + len(label) + 1]):
            axis[start : start + len(label)] = list(label)
    out.append(" " * (label_width + 2) + "".join(axis).rstrip() + "\n")
    out.append(" " * (label_width + 2) + x_label + "\n")
    for k, s in enumerate(series):
        out.append(" " * (label_width + 2))
        out.append(MARKERS[k % len(MARKERS)], style=f"bold {STYLES[k % len(STYLES)]}")
        out.append(f" {s.name}")
        if s.curve is not None:
            out.append(f"   {CURVE} model", style="dim")
        out.append("\n")
    out.rstrip()
    return out
