"""Rich renderables for people. Functions here build renderables; `show_*` print them."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from shardcli import __version__
from shardcli.analysis.arguments import shown_path
from shardcli.render.console import format_duration
from shardcli.render.layout import (
    Clauses,
    ColumnBlocks,
    DataTable,
    SideBySide,
    WholeLines,
    phrase_split,
    phrases,
)
from shardcli.runtime.arrays import ShownValues
from shardcli.runtime.mesh import MeshLayout
from shardcli.runtime.session import Session
from shardcli.runtime.timing import Timing
from shardcli.specs.meshes import ShardingSpec
from shardcli.tile_math import GridView, ShardingLayout, format_index, grid_views, spec_layout


def coords_text(axes: tuple[str, ...], coords: tuple[int, ...]) -> str:
    """`data=1 model=2`."""
    return " ".join(f"{a}={c}" for a, c in zip(axes, coords, strict=True))


def header(
    session: Session,
    extra: dict[str, str] | None = None,
    *,
    details: dict[str, str] | None = None,
    verbose: bool = False,
) -> RenderableType:
    """The facts every human run starts with: what was run, on what mesh and platform.

    Args:
        session: the run's runtime and mesh.
        extra: the command's own facts, always shown (what it runs, on what input).
        details: provenance shown only under --verbose (how it was timed, the buffer policy, the
            tolerance, the allocator); JSON always holds it.
        verbose: --verbose: also shardcli's and JAX's versions, the process count and `details`.

    Returns:
        A grid of `key  value` rows.
    """
    rt = session.runtime
    rows = [
        *([("shardcli", __version__)] if verbose else []),
        ("platform", f"{rt.platform}, {rt.describe_devices()}, kind {rt.device_kind}"),
        ("compiler", rt.describe_compiler()),
        ("mesh", f"{session.spec.describe()}, {session.mode} axes"),
        *(
            [("processes", f"{rt.process_count} (this is process {rt.process_index})")]
            if verbose or rt.process_count > 1
            else []
        ),
        *([("note", rt.note)] if rt.note else []),
        *(extra or {}).items(),
        *((details or {}).items() if verbose else ()),
    ]
    table = Table.grid(padding=(0, 2))
    # In a narrow terminal the values wrap; a key is never cut ("process…").
    table.add_column(style="bold", no_wrap=True, min_width=max(len(key) for key, _ in rows))
    table.add_column(overflow="fold")
    for key, value in rows:
        table.add_row(key, phrases(value))  # a value wraps between its phrases, never inside one
    return table


def _titled(*parts: str | None) -> str | None:
    """Non-empty parts joined by '; ', or None."""
    return "; ".join(p for p in parts if p) or None


def mesh_grids(layout: MeshLayout) -> RenderableType:
    """The mesh as grids over its last two axes, one grid per position on the leading axes."""
    axes, shape = layout.axes, layout.shape
    if len(shape) == 1:
        lead_shape: tuple[int, ...] = ()
        rows, cols = 1, shape[0]
    else:
        lead_shape, (rows, cols) = shape[:-2], shape[-2:]

    def grid(lead: tuple[int, ...]) -> RenderableType:
        def build(columns: range, note: str | None, folded: bool = False) -> Table:
            title = _titled(coords_text(axes[: len(lead)], lead) if lead else None, note)
            table = Table(show_header=len(shape) > 1, box=box.SQUARE, show_lines=True, title=title)
            if len(shape) > 1:
                table.add_column(f"{axes[-2]} \\ {axes[-1]}", style="bold", justify="center")
                for c in columns:
                    table.add_column(f"{axes[-1]}={c}", justify="center")
            else:
                for _ in columns:
                    table.add_column(justify="center")
            for r in range(rows):
                row_cells: list[RenderableType] = []
                if len(shape) > 1:
                    row_cells.append(f"{axes[-2]}={r}")
                for c in columns:
                    coords = (*lead, r, c) if len(shape) > 1 else (c,)
                    cell = layout.cell_at(coords)
                    text = Text(f"dev {cell.device_id}", style="bold cyan")
                    if not folded:  # folded: the row and column headers (and title) give the coords
                        text.append(f"\n{coords_text(axes, cell.coords)}", style="")
                    text.append(f"\nproc {cell.process_index}", style="dim")
                    row_cells.append(text)
                table.add_row(*row_cells)
            return table

        def fold(columns: range, note: str | None) -> Table:
            table = build(columns, note, folded=True)
            # the cells leave out what the mesh command shows: say so, as a DataTable would
            table.caption = Text("not shown: mesh coords (--wide shows them)", style="dim")
            table.caption_justify = "left"
            return table

        return ColumnBlocks(build, cols, f"{axes[-1]} =", folded=fold if len(shape) > 1 else None)

    grids = [grid(lead) for lead in (np.ndindex(*lead_shape) if lead_shape else [()])]
    return SideBySide(grids) if len(grids) > 1 else grids[0]


def _grid_title(view: GridView) -> str:
    drawn = f"dims ({view.row_dim}, {view.col_dim})" if view.row_dim is not None else "dim 0"
    if not view.fixed:
        return drawn
    fixed = ", ".join(f"dim {d} = {a}:{b}" for d, (a, b) in view.fixed)
    return f"{drawn}; {fixed}"


def sharding_picture(layout: ShardingLayout, view_dims: tuple[int, int] | None = None) -> RenderableType:
    """Our picture: each tile labelled with the devices holding it and its index ranges."""
    if not layout.shape:  # a scalar has no dims to draw
        held = sorted({d for t in layout.tiles for d in t.device_ids})
        return Text(f"a scalar: one value, held whole by device(s) {', '.join(map(str, held))}")

    def grid(view: GridView) -> RenderableType:
        def build(columns: range, note: str | None) -> Table:
            table = Table(
                show_header=False, box=box.SQUARE, show_lines=True, title=_titled(_grid_title(view), note)
            )
            for _ in columns:
                table.add_column(justify="center")
            for row in view.cells:
                cells = []
                for tile in (row[c] for c in columns):
                    ids = ",".join(map(str, tile.device_ids))
                    text = Text(f"dev {ids}", style="bold cyan")
                    text.append(f"\n{format_index(tile.index)}")
                    cells.append(text)
                table.add_row(*cells)
            return table

        return ColumnBlocks(build, len(view.col_ranges), "tile columns")

    tables = [grid(view) for view in grid_views(layout, view_dims)]
    rep = layout.replication
    caption = Text(
        f"{len(layout.tiles)} distinct tile(s) of shape {layout.local_shape}; "
        + ("each held by one device" if rep == 1 else f"each replicated on {rep} devices"),
        style="dim",
    )
    body = SideBySide(tables) if len(tables) > 1 else tables[0]
    return Group(body, caption)


def spec_text(entries: tuple | None) -> str:
    """A spec in the user's spelling (`data,None`); `P() (replicated)` when no dim is split."""
    if entries is None:
        return "-"
    if not any(entries):
        return "P() (replicated)"
    return ShardingSpec(tuple(entries)).describe()


def spec_tiles(shape: tuple[int, ...], entries: tuple, session: Session) -> ShardingLayout:
    """The tiles of an array of `shape` laid out by `entries` on the session's mesh."""
    axes = session.layout.axes
    coords = {c.device_id: dict(zip(axes, c.coords, strict=True)) for c in session.layout.cells}
    return spec_layout(shape, entries, session.spec.axis_sizes, coords)


def jax_picture(shape: tuple[int, ...], sharding: Any) -> RenderableType | None:
    """`jax.debug.visualize_sharding`'s own picture, captured instead of printed around our output.

    Drawn as JAX draws it (its own width, at most 80 columns) and printed whole: in a narrower
    terminal the terminal wraps its lines, as it would JAX's own print. Asking JAX for a narrower
    picture would make its table cut the device labels.

    Returns None for arrays of rank 3 or more, which JAX does not draw.
    """
    if len(shape) > 2:
        return None
    import jax

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        jax.debug.visualize_sharding(shape, sharding, use_color=False)
    # JAX's console may emit escape codes (FORCE_COLOR); parse them so ours decides what is shown.
    return WholeLines(Text.from_ansi(buffer.getvalue().rstrip("\n")))


# A block of values in a table column wraps at this width (as NumPy wraps a long row), so the
# column that carries the lesson fits beside the device column in 80 columns.
CELL_VALUES_WIDTH = 40


def format_values(values: np.ndarray, width: int = 100) -> Text:
    """Compact NumPy text for small arrays, rows wrapped at `width`, as plain text (`[nan 1.]` is
    not rich markup)."""
    arr = np.asarray(values)
    if arr.dtype.name == "bfloat16":
        arr = arr.astype(np.float32)
    return Text(
        np.array2string(
            arr, separator=" ", max_line_width=width, threshold=10_000, suppress_small=True, precision=4
        )
    )


class ValuesText:
    """An array's values as `format_values` prints them, its rows wrapped at the console's width by
    NumPy (continuation lines indented), never by rich mid-row."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = values

    def _text(self, width: int) -> Text:
        return format_values(self.values, max(width, CELL_VALUES_WIDTH // 2))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self._text(options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self._text(options.max_width))


def compile_text(timing: Timing) -> str:
    """Compile time, marked when the program came from the persistent compile cache."""
    return format_duration(timing.compile_s) + (" (cache)" if timing.compile_cached else "")


def values_table(shown: ShownValues) -> DataTable:
    """Each device's block of a small result: device, its global index range, its values."""
    table = DataTable(box=None, header_style="bold")
    table.add_column("device", justify="right", priority=0)
    table.add_column("index", priority=1)
    table.add_column("block values", priority=0)
    for block in shown.blocks:
        table.add_row(
            str(block.device_id), format_index(block.index), format_values(block.values, CELL_VALUES_WIDTH)
        )
    return table


def show_values(console: Console, name: str, shown: ShownValues | None, where: str = "") -> None:
    """A small result as the tutorials print it: the global array, then every device's block."""
    if shown is None:
        return
    section(console, f"{name}: global values{where}", ValuesText(shown.global_values))
    section(console, f"{name}: each device's block", values_table(shown))


def timing_across(session: Session) -> str:
    """How the timing shown combines several processes; empty for one process."""
    rt = session.runtime
    if rt.process_count == 1:
        return ""
    how = "the slowest" if rt.process_timing == "max" else "the average"
    return f"; shown: {how} of the {rt.process_count} processes per iteration (--process-timing)"


def checked_where(session: Session) -> str:
    """How a multi-process run's verdict was reached; empty for one process."""
    count = session.runtime.process_count
    if count == 1:
        return ""
    return f" (each of the {count} processes checked its own devices; the verdict combines them)"


def this_process_only(session: Session) -> str:
    """A title suffix for tables that can only show this process's devices."""
    rt = session.runtime
    if rt.process_count == 1:
        return ""
    return f"; process {rt.process_index}'s devices only (--all-processes prints every process)"


def print_checks(console: Console, checks: Sequence[Any], verified_suffix: str = "") -> None:
    """One line per check (`ok` or `FAIL`, what, the measured detail), then the verdict."""
    failed = [c for c in checks if not c.ok]
    for check in checks:
        mark = Text("ok  ", style="green") if check.ok else Text("FAIL", style="bold red")
        # broken only between phrases where narrow (`0.0001 x` never parted from `max|output|`)
        detail = [Text(p, style="dim") for p in phrase_split(f"({check.detail})")]
        console.print(Clauses([Text.assemble(mark, " ", check.what), *detail], sep=" "))
    if failed:
        console.print(Text(f"WRONG: {len(failed)} check(s) failed", style="bold red"))
    else:
        console.print(Text("verified: every check passed" + verified_suffix, style="green"))


def section(console: Console, title: str, body: RenderableType) -> None:
    console.print()
    console.print(Text(title, style="bold underline"))
    console.print(body)


# A pytree path's parts: its head (an argument's name), then `.attr`, `[0]` or `['key']` entries.
_PATH_PART = re.compile(r"\.[^.\[]+|\[[^\]]*\]")


# The parts of a path that say what kind of array it is (a parameter, an optimizer moment, a
# gradient): kept where the parts around them are left out, so `state.params…Dense_0.kernel` and
# `state.mu…Dense_0.kernel` still read as a weight and its first moment.
STATE_PARTS = frozenset(
    {"params", "param", "mu", "nu", "m", "v", "momentum", "trace", "ema", "grads", "batch_stats", "cache"}
)


def shorten_paths(paths: Sequence[str], width: int) -> list[str]:
    """Pytree paths (`state.opt_state[0].mu['layers']['kernel'].value`) shortened towards `width`
    cells each, every one still told apart from the others: string keys written as attributes
    (`.layers`), then the parts after the head left out from the left (`state.mu….kernel`), those
    that name a parameter or an optimizer moment kept (STATE_PARTS), as far as the paths stay
    distinct. A path is never cut inside a part; one that cannot be made
    short enough without two paths reading alike stays longer (`paths_in_cells` breaks it into lines)."""
    compact = [shown_path(p) for p in paths]
    parts = [_path_parts(p) for p in compact]

    def shown(i: int, dropped: int) -> str:
        head, rest = parts[i][0], parts[i][1:]
        if not dropped:
            return head + "".join(rest)
        kept = "".join(p for p in rest[:dropped] if p.lstrip(".") in STATE_PARTS)
        return head + kept + "…" + "".join(rest[dropped:])

    drops = []
    for i in range(len(compact)):
        most = max(len(parts[i]) - 2, 0)  # the head and the last part always stay
        d = 0
        while d < most and cell_len(shown(i, d)) > width:
            d += 1
        drops.append(d)
    while True:
        names = [shown(i, d) for i, d in enumerate(drops)]
        seen: dict[str, list[int]] = {}
        for i, n in enumerate(names):
            seen.setdefault(n, []).append(i)
        clashing = [i for same in seen.values() if len(same) > 1 for i in same if drops[i] > 0]
        if not clashing:
            return names
        for i in clashing:
            drops[i] -= 1


def paths_in_cells(paths: Sequence[str], width: int) -> list[str]:
    """`shorten_paths` for a table's cells: a path still wider than `width` (where only its middle
    tells it from the others: penzai's `sublayers[3]...branches[0]`) broken into lines between its
    parts, so the row stays a row a few lines tall."""
    return [_wrapped_at_parts(p, width) for p in shorten_paths(paths, width)]


_PART_START = re.compile(r"(?=[.\[…])")


def _wrapped_at_parts(path: str, width: int) -> str:
    """A path still wider than `width` broken into lines between its parts (never inside one), so a
    table keeps its rows a few lines tall where no shorter name tells them apart."""
    if cell_len(path) <= width:
        return path
    lines = [""]
    for part in (p for p in _PART_START.split(path) if p):
        if lines[-1] and cell_len(lines[-1] + part) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(lines)


def _path_parts(path: str) -> list[str]:
    first = _PATH_PART.search(path)
    head = path[: first.start()] if first else path
    return [head, *_PATH_PART.findall(path[len(head) :])] if first else [path]
