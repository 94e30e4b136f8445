"""Renderables that fit the console: `DataTable` leaves columns out rather than cut a cell,
`ColumnBlocks` draws a grid of many columns (a mesh, an array's tiles) in blocks that fit,
`Clauses` breaks prose only between its clauses, `WholeLines` prints another's picture unwrapped,
`SideBySide` puts pictures next to each other where they fit; each cell measured once
(`MeasuredOnce`)."""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

from rich.cells import cell_len
from rich.columns import Columns
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

# The width natural widths are measured at: wide enough never to bound one (rich caps a measurement
# at the width it is given, and a terminal may be wider than any small figure chosen here).
WIDEST_TABLE = 1 << 16
# The narrowest a DataTable's prose column (a sentence) is wrapped to before columns are left out.
PROSE_WIDTH = 24


class MeasuredOnce:
    """A table cell measured once: rich measures every cell of a table for each width it tries
    (fitting 7,000 rows to the console took 15 s); a string or Text is as wide at any width, so its
    natural measurement is taken once and capped at each width asked; anything else is measured
    once per width. Renders as the cell itself."""

    __slots__ = ("renderable", "vertical", "_natural", "_by_width")

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable
        self.vertical = getattr(renderable, "vertical", None)  # rich reads a cell's own alignment
        self._natural: Measurement | None = None
        self._by_width: dict[tuple[int, bool | None, bool | None], Measurement] = {}

    def _text(self, console: Console, options: ConsoleOptions) -> Measurement | None:
        """A string's or Text's measurement at an unbounded width (taken once); None for anything else."""
        if not isinstance(self.renderable, (str, Text)):
            return None
        if self._natural is None:
            self._natural = Measurement.get(console, options.update_width(WIDEST_TABLE), self.renderable)
        return self._natural

    def natural(self, console: Console, options: ConsoleOptions) -> int | None:
        """A string's or Text's natural width (measured once); None for anything else."""
        text = self._text(console, options)
        return text.maximum if text is not None else None

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        text = self._text(console, options)
        if text is not None:
            return text.with_maximum(options.max_width)
        key = (options.max_width, options.markup, options.highlight)
        if key not in self._by_width:
            self._by_width[key] = Measurement.get(console, options, self.renderable)
        return self._by_width[key]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.renderable

    def __str__(self) -> str:
        return str(self.renderable)


def natural_width(console: Console, options: ConsoleOptions, table: Table) -> int | None:
    """rich's natural width of `table` (`Measurement.get` at an unbounded width: its `maximum`),
    added up from each column's widest cell and the table's padding and edges as rich adds them;
    rich itself measures every cell twice a call (a table is asked once for each set of columns
    tried). None where a cell is not a string or a Text (its width may depend on the width it is
    given), where a column has no cells, or where the table expands or has a set width: rich's own
    measurement then."""
    if table.width is not None or table.expand:
        return None
    wide = options.update_width(WIDEST_TABLE)
    total = 0
    for column in table.columns:
        padding_width = table._get_padding_width(column._index)
        if column.width is not None:
            total += column.width + padding_width
            continue
        first = next(iter(table._get_cells(console, column._index, column)), None)
        if first is None:
            return None
        edges = first.renderable.left + first.renderable.right if isinstance(first.renderable, Padding) else 0
        cells = [column.header] if table.show_header else []
        cells += column._cells
        cells += [column.footer] if table.show_footer else []
        widest = 0
        for cell in cells:
            width = _text_width(console, wide, cell)
            if width is None:
                return None
            widest = max(widest, width)
        width = widest + edges
        if column.min_width is not None:
            width = max(width, column.min_width + padding_width)
        if column.max_width is not None:
            width = min(width, column.max_width + padding_width)
        total += width
    natural = total + table._extra_width
    return natural if table.min_width is None else max(natural, table.min_width)


def _text_width(console: Console, wide: ConsoleOptions, cell: RenderableType) -> int | None:
    """A string's or Text's natural width (a `MeasuredOnce` cell's, taken once); None for anything else."""
    return (cell if isinstance(cell, MeasuredOnce) else MeasuredOnce(cell)).natural(console, wide)


class DataTable(Table):
    """A rich Table that fits the console by leaving columns out, and never cuts a cell.

    Each column has a priority (`add_column(..., priority=N)`): 0, the default, is a key column,
    always shown; a higher number is left out sooner. Where the console is narrower than the
    table's natural width, every column that is `-` in every row (it says nothing in this run) is
    left out first, then the columns of the highest priority, the rightmost first, until the
    table fits, and one dim line under it names them and says `--wide` shows them.
    Where even the key columns do not fit, every row is printed as `column  value` lines instead
    (one block per row), so nothing wraps mid-row.

    rich itself would shrink the columns and end what no longer fits with '…' ("4.78e…" for
    4.78e-05), so a figure is printed whole or not at all. Under --wide (a console made with
    `wide=True`, see `make_console`) every column is printed at its natural width, one line per
    row, however wide the console; the consoles of `make_console` do not crop such lines. Only for
    tables printed on their own: inside another layout (Columns, a grid) the parent would crop a
    wider table.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.priorities: list[int] = []
        self.prose: set[int] = set()
        self.shorteners: dict[int, Callable[[Sequence[str], int], list[str]]] = {}
        self._measured: tuple[int, list[list[RenderableType]]] | None = None
        super().__init__(*args, **kwargs)

    def add_column(  # type: ignore[override]
        self,
        header: RenderableType = "",
        *,
        priority: int = 0,
        prose: bool = False,
        shorten: Callable[[Sequence[str], int], list[str]] | None = None,
        **kwargs: Any,
    ) -> None:
        """`Table.add_column`, with the column's priority (0 always shown, higher left out sooner);
        a `prose` column (a sentence, not a figure) wraps at its words, down to PROSE_WIDTH, before
        any column is left out. A `shorten` column (its cells plain strings: pytree paths) has its
        cells shortened by `shorten(cells, width)` where even the key columns do not fit, before the
        rows are printed as records."""
        if shorten is not None:
            self.shorteners[len(self.columns)] = shorten
        if prose:
            self.prose.add(len(self.columns))
        super().add_column(header, **kwargs)
        self.priorities.append(priority)

    def _natural(self, console: Console, options: ConsoleOptions, table: Table) -> int:
        natural = natural_width(console, options, table)
        if natural is None:
            return Measurement.get(console, options.update_width(WIDEST_TABLE), table).maximum
        return natural

    def _keeping(self, kept: list[int], prose_width: int | None = None) -> Table:
        """This table with only the columns at the indexes `kept` (their cells shared, each measured
        once: `MeasuredOnce`), its prose columns at most `prose_width` wide."""
        cells = self._measured_cells()
        table = copy.copy(self)
        table.columns = [
            dataclasses.replace(
                self.columns[i],
                _index=n,
                max_width=prose_width if i in self.prose else self.columns[i].max_width,
                _cells=cells[i],
            )
            for n, i in enumerate(kept)
        ]
        return table

    def _measured_cells(self) -> list[list[RenderableType]]:
        """Every column's cells as `MeasuredOnce`, made once for the table's rows: fitting a table
        measures it again for each set of columns tried, every cell each time."""
        if self._measured is None or self._measured[0] != self.row_count:
            wrapped: list[list[RenderableType]] = [
                [MeasuredOnce(cell) for cell in column._cells] for column in self.columns
            ]
            self._measured = (self.row_count, wrapped)
            return wrapped
        return self._measured[1]

    def _fitting(self, console: Console, options: ConsoleOptions, kept: list[int]) -> Table | None:
        """The table of the `kept` columns if it fits, its prose columns narrowed if need be."""
        table = self._keeping(kept)
        if self._natural(console, options, table) <= options.max_width:
            return table
        prose = [i for i in kept if i in self.prose]
        if not prose:
            return None
        rest = self._natural(console, options, self._keeping(kept, 1)) - len(prose)
        width = (options.max_width - rest) // len(prose)
        return self._keeping(kept, width) if width >= PROSE_WIDTH else None

    def fitted(self, console: Console, options: ConsoleOptions) -> tuple[Table, list[str]] | None:
        """The table cut down to fit `options.max_width` and the headers left out; None when even
        its key columns do not fit."""
        kept = list(range(len(self.columns)))
        left_out: list[int] = []
        if self._fitting(console, options, kept) is None:
            # every column that says nothing in this run (`-` in every row) goes first, together
            left_out = [i for i in kept if self._blank(i)]
            kept = [i for i in kept if i not in left_out]
        # then the highest priority first, the rightmost first among equals
        rest = (i for i in kept if self.priorities[i] > 0)
        order = sorted(rest, key=lambda i: (-self.priorities[i], -i))
        while (table := self._fitting(console, options, kept)) is None:
            if not order:
                return None
            left_out.append(order.pop(0))
            kept = [i for i in kept if i != left_out[-1]]
        return table, [_plain(self.columns[i].header) for i in sorted(left_out)]

    def _shortened(self, console: Console, options: ConsoleOptions) -> tuple[Table, list[str]] | None:
        """The table fitted with its `shorten` columns' cells shortened by what the key columns
        overflow the console; None where that is not enough."""
        if not self.shorteners:
            return None
        keys = [i for i, p in enumerate(self.priorities) if p == 0]
        over = self._natural(console, options, self._keeping(keys)) - options.max_width
        table = copy.copy(self)
        table.columns = list(self.columns)
        table.shorteners = {}
        table._measured = None  # its cells are the shortened ones
        share = -(-over // len(self.shorteners))  # each shortened column gives up its part
        for i, shorten in self.shorteners.items():
            cells = [str(c) for c in self.columns[i].cells]
            widest = max((cell_len(c) for c in cells), default=0)
            short: list[RenderableType] = list(shorten(cells, max(widest - share, PROSE_WIDTH)))
            table.columns[i] = dataclasses.replace(self.columns[i], _cells=short)
        return table.fitted(console, options)

    def _title_lines(self) -> RenderableType:
        """The title, its lines broken only between its `; ` clauses (rich would centre it over the
        table and wrap it at any space, "host copy" on one line and "bandwidth" on the next)."""
        if not isinstance(self.title, str):
            return self.title or Text()
        return Clauses(self.title.split("; "), style="italic")

    def _blank(self, index: int) -> bool:
        """Whether every row of the column at `index` is `-` (nothing to say in this run)."""
        cells = list(self.columns[index].cells)
        return bool(cells) and all(_plain(cell) == "-" for cell in cells)

    def _records(self) -> RenderableType:
        """Every row as `column  value` lines, a blank line between rows."""
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        headers = [_plain(column.header) for column in self.columns]
        cells = [list(column.cells) for column in self.columns]
        for row in range(len(self.rows)):
            if row:
                grid.add_row("", "")
            for header, column in zip(headers, cells, strict=True):
                grid.add_row(header, column[row])
        parts: list[RenderableType] = []
        if self.title:
            parts.append(self._title_lines())
        parts.append(grid)
        if self.caption:
            parts.append(self.caption)
        return Group(*parts)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.width is not None:
            yield from super().__rich_console__(console, options)
            return
        if getattr(console, "wide", False):
            whole = self._keeping(list(range(len(self.columns))))
            natural = self._natural(console, options, whole)
            if natural > options.max_width:
                options = options.update_width(natural)
            yield from Table.__rich_console__(whole, console, options)
            return
        fitted = self.fitted(console, options) or self._shortened(console, options)
        if fitted is None:
            yield from console.render(self._records(), options)
            return
        table, left_out = fitted
        if isinstance(self.title, str):  # over the table, broken only between its clauses
            yield from console.render(self._title_lines(), options)
            table.title = None
        yield from Table.__rich_console__(table, console, options)
        if left_out:
            them = "them" if len(left_out) > 1 else "it"
            note = Clauses(
                [f"not shown: {', '.join(left_out)}", f"(--wide shows {them})"], sep=" ", style="dim"
            )
            yield from console.render(note, options)


def _plain(header: RenderableType) -> str:
    """A column header as plain text, on one line."""
    text = header.plain if isinstance(header, Text) else str(header)
    return " ".join(text.split())


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

    def __init__(
        self,
        build: Callable[[range, str | None], Table],
        count: int,
        what: str,
        folded: Callable[[range, str | None], Table] | None = None,
    ) -> None:
        """`folded` draws the same grid with less in each cell: where the whole grid does not fit,
        it is drawn folded (one picture) before the columns are split into blocks."""
        self.build, self.count, self.what = build, count, what
        self.folded = ColumnBlocks(folded, count, what) if folded is not None else None
        # Natural widths by (first, stop, note, console width): rich measures a renderable several
        # times (Columns, then the render), and a grid of 512 devices is not cheap to measure.
        self._widths: dict[tuple[int, int, str | None, int], int] = {}

    def _table(self, columns: range, note: str | None, width: int) -> Table:
        table = self.build(columns, note)
        if isinstance(table.title, str):
            # A block of one or two columns would otherwise wrap its title over several lines.
            table.min_width = min(cell_len(table.title), width)
        return table

    def _width(self, console: Console, options: ConsoleOptions, columns: range, note: str | None) -> int:
        key = (columns.start, columns.stop, note, options.max_width)
        if key not in self._widths:
            table = self._table(columns, note, options.max_width)
            self._widths[key] = Measurement.get(console, options.update_width(WIDEST_TABLE), table).maximum
        return self._widths[key]

    def _note(self, columns: range) -> str:
        first, last = columns.start, columns.stop - 1
        return f"{self.what} {first}{'' if first == last else f'..{last}'} of {self.count}"

    def _fits(self, console: Console, options: ConsoleOptions, start: int, count: int) -> bool:
        columns = range(start, start + count)
        return self._width(console, options, columns, self._note(columns)) <= options.max_width

    def _longest(self, console: Console, options: ConsoleOptions, start: int, guess: int) -> int:
        """How many columns from `start` fit in one labelled block (at least one).

        A block only widens as it takes more columns, so the count is found by stepping up from
        `guess` in doubling steps while it fits (or down from it when it does not), then halving
        the gap: with a good guess (the previous block's count) two or three measurements.
        """
        left = self.count - start
        guess = max(1, min(guess, left))
        if guess == 1 or self._fits(console, options, start, guess):
            fit, step = guess, 1  # `fit` columns fit
            while fit + step <= left and self._fits(console, options, start, fit + step):
                fit, step = fit + step, step * 2
            over = min(fit + step, left + 1)  # `over` columns do not (or there are not that many)
        else:
            fit, over = 1, guess
        while over - fit > 1:
            middle = (fit + over) // 2
            if self._fits(console, options, start, middle):
                fit = middle
            else:
                over = middle
        return fit

    def blocks(self, console: Console, options: ConsoleOptions) -> list[range]:
        """Runs of consecutive columns, each as many as fit the console's width (at least one)."""
        # Whether the whole grid fits, from doubling prefixes: a 512-device mesh in 80 columns is
        # known not to after measuring 16 columns, not 512.
        prefix = 1
        while True:
            columns = range(min(prefix, self.count))
            width = self._width(console, options, columns, None)
            if width > options.max_width:
                break
            if len(columns) == self.count:
                return [columns]
            prefix *= 2
        blocks: list[range] = []
        # First guess: the columns that fit if each is as wide as the prefix's average.
        start, guess = 0, max(1, len(columns) * options.max_width // width)
        while start < self.count:
            guess = self._longest(console, options, start, guess)
            blocks.append(range(start, start + guess))
            start += guess
        return blocks

    def _drawn(self, console: Console, options: ConsoleOptions) -> ColumnBlocks:
        """This grid, or its folded form where this one is too wide whole and that one is not (where
        neither fits, this one split into blocks: each cell keeps all it says)."""
        whole = range(self.count)
        if self.folded is None or self._width(console, options, whole, None) <= options.max_width:
            return self
        if self.folded._width(console, options, whole, None) <= options.max_width:
            return self.folded
        return self

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if getattr(console, "wide", False):  # --wide: every column whole, at its natural width
            whole = range(self.count)
            width = max(self._width(console, options, whole, None), options.max_width)
            yield from console.render(self._table(whole, None, width), options.update_width(width))
            return
        drawn = self._drawn(console, options)
        if drawn is not self:
            yield from drawn.__rich_console__(console, options)
            return
        blocks = self.blocks(console, options)
        for columns in blocks:
            note = None if len(blocks) == 1 else self._note(columns)
            width = self._width(console, options, columns, note)
            table = self._table(columns, note, options.max_width)
            yield from console.render(table, options.update_width(width))

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        # Columns (several grids side by side) gives each grid what it needs, down to one column.
        widest = self._width(console, options, range(self.count), None)
        if self.folded is not None:  # the folded grid whole, where it is narrower than a block of one
            folded = self.folded._width(console, options, range(self.count), None)
            singles_full = (range(i, i + 1) for i in range(self.count))
            narrow = max(self._width(console, options, one, self._note(one)) for one in singles_full)
            return Measurement(min(narrow, folded, widest), widest)
        singles = (range(i, i + 1) for i in range(self.count))
        narrowest = max(self._width(console, options, one, self._note(one)) for one in singles)
        return Measurement(min(narrowest, widest), widest)


class WholeLines:
    """Text printed line for line, never wrapped or cut by rich, however narrow the console.

    For a picture someone else drew (JAX's): rich would fold each long line at the console's width
    even with no_wrap, breaking the box into pieces; printed whole, the terminal wraps it as it
    would the original print.
    """

    def __init__(self, text: Text) -> None:
        self.text = text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widest = max((cell_len(line) for line in self.text.plain.splitlines()), default=0)
        width = max(widest, options.max_width)
        yield from console.render(self.text, options.update(width=width, no_wrap=True))


class Clauses:
    """Clauses joined by `sep` (`16 B per device; S = 16 B; ...`), a line broken only between them.

    rich wraps prose at any space, which parts a figure from its unit ("24" at the end of one line,
    "B" at the start of the next); here each clause stays whole on its line, unless it alone is
    wider than the console, when it wraps at its words.
    """

    def __init__(
        self, clauses: Sequence[str | Text], sep: str = "; ", style: str = "", indent: int = 0
    ) -> None:
        self.clauses = [c if isinstance(c, Text) else Text(c) for c in clauses if c]
        self.sep, self.style, self.indent = sep, style, indent

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines: list[Text] = []
        width = max(options.max_width - self.indent, 1)  # every line starts with `indent` spaces
        line = Text()
        tail = self.sep.rstrip()  # what ends a line that more clauses follow (`,` of `, `)
        for n, clause in enumerate(self.clauses):
            # a clause that more follow must fit with that mark too (`0 B,` must not part `0` from `B`)
            mark = tail if n < len(self.clauses) - 1 else ""
            if line and cell_len(line.plain + self.sep + clause.plain + mark) > width:
                line.append(self.sep.rstrip())
                lines.append(line)
                line = Text()
            elif line:
                line.append(self.sep)
            line.append_text(clause)
        lines.append(line)
        text = Text("\n", style=self.style).join(Text(" " * self.indent) + line for line in lines)
        text.stylize(self.style)
        yield from console.render(text, options)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        # at most one line of every clause; at least the longest clause (with its mark)
        whole = cell_len(self.sep.join(c.plain for c in self.clauses))
        longest = max((cell_len(c.plain) for c in self.clauses), default=0) + len(self.sep.rstrip())
        longest, whole = longest + self.indent, whole + self.indent
        return Measurement(min(longest, options.max_width), min(whole, options.max_width))


# Where a sentence may break: after `, ` or `; `, and before ` (`.
_PHRASE_BREAK = re.compile(r"(?<=[,;]) | (?=\()")


def phrase_split(text: str) -> list[str]:
    """`text`'s phrases: it split after each `, ` and `; ` and before each ` (`."""
    return _PHRASE_BREAK.split(text)


def phrases(text: str, style: str = "") -> Clauses:
    """`text` broken only at its phrase boundaries (after a comma or semicolon, before a
    parenthesis) where the console is narrow: a figure stays with its unit, a name with its value."""
    return Clauses(phrase_split(text), sep=" ", style=style)


class SideBySide:
    """Pictures side by side where they fit (rich's Columns), else one under the other.

    Columns crops a renderable wider than its cell without a mark; a picture that cannot fit even
    one column to a line is therefore printed one under the other, each at its natural width.
    """

    def __init__(self, renderables: list[Any]) -> None:
        self.renderables = renderables

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # Measurement.get caps what it returns at the width it is given: measure unbounded.
        unbounded = options.update_width(WIDEST_TABLE)
        narrowest = max(Measurement.get(console, unbounded, r).minimum for r in self.renderables)
        if narrowest <= options.max_width:
            yield Columns(self.renderables)
        else:
            yield from self.renderables
