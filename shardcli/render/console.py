"""Consoles for the two streams: results on stdout, logs and progress on stderr."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.cells import cell_len
from rich.columns import Columns
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table

from shardcli.runtime import RuntimeInfo
from shardcli.specs import RunOptions

WIDEST_TABLE = 1000  # columns a table may take when it does not fit the terminal


class DataTable(Table):
    """A rich Table that never cuts a cell: figures are printed whole or not at all.

    Where the console is narrower than the table, rich shrinks columns and ends what no longer
    fits with '…' ("4.78e…" for 4.78e-05, in an 80-column terminal and the collective's eleven
    timing columns), or cuts a column that may not wrap without a mark. Such a table is laid out
    at its natural width instead, one line per row, and the terminal wraps the lines; the
    consoles of `make_console` do not crop them. Only for tables printed on their own: inside
    another layout (Columns, a grid) the parent would crop the wider table.
    """

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.width is None:
            natural = Measurement.get(console, options.update_width(WIDEST_TABLE), self).maximum
            if natural > options.max_width:
                options = options.update_width(natural)
        yield from super().__rich_console__(console, options)


class ColumnBlocks:
    """A picture of many columns (a mesh, an array's tiles) split into blocks that fit the console.

    rich would shrink every column of a grid wider than the terminal and end each label with '…'
    ("d…" for "dev 3" on a 16-device mesh in 80 columns), so nobody could read which device sits
    where. Here the columns are cut into runs of consecutive columns instead, each drawn whole as
    its own grid under a line saying which columns it holds, left to right, one under the other.
    A single column wider than the console is drawn at its natural width (see DataTable).

    `build(columns, note)` draws the grid of the given columns; `note` is None when all of them
    fit at once, else the block's label (`{what} 0..7 of 16`).
    """

    def __init__(self, build: Callable[[range, str | None], Table], count: int, what: str) -> None:
        self.build, self.count, self.what = build, count, what

    def _table(self, columns: range, note: str | None, width: int) -> Table:
        table = self.build(columns, note)
        if isinstance(table.title, str):
            # A block of one or two columns would otherwise wrap its title over several lines.
            table.min_width = min(cell_len(table.title), width)
        return table

    def _width(self, console: Console, options: ConsoleOptions, columns: range, note: str | None) -> int:
        table = self._table(columns, note, options.max_width)
        return Measurement.get(console, options.update_width(WIDEST_TABLE), table).maximum

    def blocks(self, console: Console, options: ConsoleOptions) -> list[range]:
        """Runs of consecutive columns, each as many as fit the console's width (at least one)."""
        everything = range(self.count)
        if self._width(console, options, everything, None) <= options.max_width:
            return [everything]
        blocks: list[range] = []
        start = 0
        while start < self.count:
            end = start + 1
            # The note's numbers only grow with `end`, so the widest label is measured each time.
            while end < self.count and (
                self._width(console, options, range(start, end + 1), self._note(range(start, end + 1)))
                <= options.max_width
            ):
                end += 1
            blocks.append(range(start, end))
            start = end
        return blocks

    def _note(self, columns: range) -> str:
        first, last = columns.start, columns.stop - 1
        return f"{self.what} {first}{'' if first == last else f'..{last}'} of {self.count}"

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        blocks = self.blocks(console, options)
        for columns in blocks:
            note = None if len(blocks) == 1 else self._note(columns)
            width = self._width(console, options, columns, note)
            table = self._table(columns, note, options.max_width)
            yield from console.render(table, options.update_width(width))

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        # Columns (several grids side by side) gives each grid what it needs, down to one column.
        widest = self._width(console, options, range(self.count), None)
        narrowest = max(self._width(console, options, range(i, i + 1), self._note(range(i, i + 1)))
                        for i in range(self.count))  # fmt: skip
        return Measurement(min(narrowest, widest), widest)


class SideBySide:
    """Pictures side by side where they fit (rich's Columns), else one under the other.

    Columns crops a renderable wider than the console; a picture that cannot fit even one column
    to a line is then printed below the others at its natural width instead.
    """

    def __init__(self, renderables: list[Any]) -> None:
        self.renderables = renderables

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        narrowest = [Measurement.get(console, options, r).minimum for r in self.renderables]
        if max(narrowest, default=0) <= options.max_width:
            yield Columns(self.renderables)
        else:
            yield from self.renderables


class _Console(Console):
    """A console whose print does not crop lines at the terminal's width (see DataTable)."""

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
        width=width,
        # None lets rich honour NO_COLOR; --no-color turns colour (and every escape code) off.
        no_color=True if not options.color else None,
        color_system="auto" if options.color else None,
        highlight=False,
        record=record,
    )
    if record:
        _recording.update(console=console, path=options.save)
    return console


# What this run printed, for --save: written by the CLI once the command has finished.
_recording: dict[str, Console | str | None] = {"console": None, "path": None}


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
        console.save_text(path)
    return path


def prints_here(options: RunOptions, runtime: RuntimeInfo) -> bool:
    """Only process 0 prints a multi-process run's report, unless --all-processes."""
    return options.all_processes or runtime.process_index == 0
