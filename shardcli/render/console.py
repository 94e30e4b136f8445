"""Consoles for the two streams: results on stdout, logs and progress on stderr."""

from __future__ import annotations

import csv
import io
import math
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any, cast

from rich.cells import cell_len
from rich.console import Console

from shardcli.runtime.devices import RuntimeInfo
from shardcli.runtime.line_ends import UnpaddedStream, unpadded_text
from shardcli.specs.runs import RunOptions


class _Console(Console):
    """A console whose print does not crop lines at the terminal's width (see `render.layout.DataTable`).

    `wide` (--wide): DataTables show every column at their natural width instead of fitting.
    """

    wide = False

    def print(self, *objects: Any, **kwargs: Any) -> None:
        kwargs.setdefault("crop", False)
        super().print(*objects, **kwargs)


def make_console(options: RunOptions, *, stderr: bool = False) -> Console:
    """A console honouring --no-color (rich itself honours NO_COLOR)."""
    # Piped output (logs, CI) gets a readable width rather than rich's 80-column fallback.
    stream_is_tty = (sys.stderr if stderr else sys.stdout).isatty()
    width = None if stream_is_tty or "COLUMNS" in os.environ else 120
    record = options.save is not None and not stderr
    console = _Console(
        stderr=stderr,
        # Off a terminal (a pipe, a file, a CI log) no line ends in spaces.
        file=None if stream_is_tty else cast(IO[str], UnpaddedStream(stderr)),
        width=width,
        # None lets rich honour NO_COLOR; --no-color turns colour (and every escape code) off.
        no_color=True if not options.color else None,
        color_system="auto" if options.color else None,
        highlight=False,
        record=record,
    )
    console.wide = options.wide
    if record:
        _recording.update(console=console, path=options.save)
    return console


# What this run printed, for --save: written by the CLI once the command has finished.
_recording: dict[str, Console | str | None] = {"console": None, "path": None}


def csv_text(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A CSV document: the header row, then `rows`, with `\n` line ends."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(rows)
    return buffer.getvalue()


def emit(text: str, options: RunOptions) -> None:
    """Output for scripts (JSON, CSV): to stdout as is, and to --save when asked."""
    sys.stdout.write(text)
    if options.save is not None:
        console = Console(file=io.StringIO(), record=True, color_system=None, highlight=False, width=200)
        console.out(text, end="")
        _recording.update(console=console, path=options.save)


def save_recording() -> str | None:
    """Write what the run printed to the --save file (SVG, HTML or text by its suffix), if asked.

    Returns:
        The file written, or None.

    Raises:
        OSError: the file cannot be written.
    """
    console, path = _recording["console"], _recording["path"]
    if not isinstance(console, Console) or not isinstance(path, str):
        return None
    _recording.update(console=None, path=None)
    suffix = Path(path).suffix.lower()
    if suffix == ".svg":
        # rich draws the SVG terminal at the console's width and crops longer lines: widen it to
        # the widest line printed (a table wider than the terminal, see DataTable).
        widest = max((cell_len(line) for line in console.export_text(clear=False).splitlines()), default=0)
        console.width = max(console.width, widest)
        console.save_svg(path, title="shardcli")
    elif suffix == ".html":
        console.save_html(path)
    else:
        text = console.export_text()
        if isinstance(console, _Console):  # a report, as printed off a terminal: unpadded (runtime.line_ends)
            text = unpadded_text(text)
        Path(path).write_text(text, encoding="utf-8")  # JSON and CSV (emit) exactly as written
    return path


def prints_here(options: RunOptions, runtime: RuntimeInfo) -> bool:
    """Only process 0 prints a multi-process run's report, unless --all-processes."""
    return options.all_processes or runtime.process_index == 0


def show_warnings(runtime: RuntimeInfo) -> None:
    """The run's warnings (an unusable compile cache, ...), one line each on stderr, in every process."""
    for warning in runtime.warnings:
        sys.stderr.write(f"shardcli: warning: {warning}\n")


def format_flops(value: float | None, unit: str = "FLOP/s") -> str:
    """`8.94 GFLOP/s`: SI prefixes, three significant digits."""
    if value is None:
        return "-"
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def format_duration(seconds: float | None) -> str:
    """A duration in the unit a person reads, three significant figures: 2.14 s, 12.5 ms, 380 us, 850 ns.

    The one duration formatter of every table and line (a column of mixed units reads fine: each
    cell carries its unit). None, NaN or infinity is "unknown", never a number.
    """
    if seconds is None or not math.isfinite(seconds):
        return "unknown"
    size = abs(seconds)
    unit, scale = next(
        ((u, f) for u, f in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)) if size >= f * 0.9995), ("ns", 1e-9)
    )
    value = seconds / scale
    digits = 0 if abs(value) >= 99.95 else 1 if abs(value) >= 9.995 else 2
    return f"{value:,.{digits}f} {unit}"


def format_seconds(value: float | None) -> str:
    """A duration (human.format_duration), or '-' where there is none."""
    return "-" if value is None else format_duration(value)
