"""Rendering `shardcli compare`: a rich table for people, one JSON document for scripts."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from shardcli.render.console import emit, make_console
from shardcli.render.layout import Clauses, DataTable, phrases
from shardcli.results import bodies, documents
from shardcli.results.compare.metrics import Metric
from shardcli.results.compare.run import CompareResult, CompareRow, DocFacts
from shardcli.specs.runs import RunOptions

FORMATS = ("table", "json")

# Values are read in the documents' units (GB/s, seconds); people read time in microseconds.
_SHOWN_UNIT = {"busbw": "GB/s", "time": "us", "memory": "bytes", "sent": "bytes", "collectives": "ops"}
_STATUS_STYLE = {"regression": "bold red", "ok": "", "n/a": "dim"}  # an improvement is green


def format_value(value: float | None, metric: Metric) -> str:
    """`0.00353` GB/s (three significant digits when small) or `435.0` us; `-` where there is none."""
    if value is None:
        return "-"
    if metric.name == "time":
        return f"{value * 1e6:,.1f}"
    if metric.unit in ("B", "ops"):
        return f"{value:,.0f}"
    return f"{value:.2f}" if value >= 1 else f"{value:.3g}"


def format_ratio(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def format_tolerance(tolerance: float) -> str:
    return f"{tolerance * 100:g}%"


def summary_text(result: CompareResult) -> str:
    """`6 rows, 1 regression, worst new/base 0.80x (size 1K, placement out); tolerance 10%`."""
    return ", ".join(summary_clauses(result))


def summary_clauses(result: CompareResult) -> list[str]:
    """The verdict's clauses, `6 rows`, `1 regression`, ..., the last ending `; tolerance 10%`."""
    n = len(result.rows)
    bad = len(result.regressions)
    clauses = [f"{n} row{'s' if n != 1 else ''}", f"{bad} regression{'s' if bad != 1 else ''}"]
    worst = result.worst
    if worst is None:
        clauses.append(
            "none with a value in both files"
            + (" (--metric time compares times)" if result.metric.name == "busbw" else "")
        )
    else:
        clauses.append(f"worst new/base {format_ratio(worst.ratio)} ({result.describe_key(worst.key)})")
        if n > result.compared:
            clauses.append(f"{n - result.compared} without a value in both (-)")
    clauses[-1] += f"; tolerance {format_tolerance(result.tolerance)}"
    return clauses


# --- JSON -----------------------------------------------------------------------------------------


def _row_json(row: CompareRow, result: CompareResult) -> dict[str, Any]:
    return bodies.COMPARE_ROW(
        keys={f.name: f.to_json(v) for f, v in zip(result.key_fields, row.key, strict=True)},
        base=row.base,
        new=row.new,
        ratio=row.ratio,
        status=row.status,
    )


def _facts_json(facts: DocFacts) -> dict[str, Any]:
    return bodies.COMPARE_FILE(
        file=facts.file,
        shardcli_version=facts.shardcli_version,
        platform=facts.platform,
        device_kind=facts.device_kind,
        dtype=facts.dtype,
    )


def compare_json(result: CompareResult) -> dict[str, Any]:
    worst = result.worst
    return documents.document(
        "compare",
        compared_command=result.command,
        what=result.what,
        mesh=result.mesh,
        base=_facts_json(result.base),
        new=_facts_json(result.new),
        metric=result.metric.name,
        unit=result.metric.unit,
        better=result.metric.better,
        tolerance=result.tolerance,
        rows=[_row_json(r, result) for r in result.rows],
        compared=result.compared,
        regressions=len(result.regressions),
        worst_ratio=None if worst is None else worst.ratio,
    )


# --- people ---------------------------------------------------------------------------------------


def _facts_text(facts: DocFacts) -> str:
    about = [
        x
        for x in (
            facts.dtype,
            facts.platform and f"{facts.platform} (kind {facts.device_kind})",
            facts.shardcli_version and f"shardcli {facts.shardcli_version}",
        )
        if x
    ]
    return facts.file + (f": {', '.join(about)}" if about else "")


def header(result: CompareResult) -> Table:
    metric = result.metric
    table = Table.grid(padding=(0, 2))
    # In a narrow terminal the values wrap at their words (a long file name folds, never ends in '…').
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    table.add_row("compare", f"{result.command} {result.what}")
    table.add_row("mesh", result.mesh)
    table.add_row("base", _facts_text(result.base))
    table.add_row("new", _facts_text(result.new))
    table.add_row(
        "metric",
        phrases(
            f"{metric.title} ({_SHOWN_UNIT[metric.name]}), {metric.better} is better; "
            f"a regression is new worse than base by more than {format_tolerance(result.tolerance)}"
        ),
    )
    return table


def rows_table(result: CompareResult) -> Table:
    metric = result.metric
    unit = _SHOWN_UNIT[metric.name]
    table = DataTable(box=None, header_style="bold")
    for f in result.key_fields:
        table.add_column(f.title, justify="right" if f.name == "bytes_per_device" else "left")
    table.add_column(f"base {metric.title} ({unit})", justify="right")
    table.add_column(f"new {metric.title} ({unit})", justify="right")
    table.add_column("new/base", justify="right")
    table.add_column("status", justify="left")
    for row in result.rows:
        table.add_row(
            *(f.text(v) for f, v in zip(result.key_fields, row.key, strict=True)),
            format_value(row.base, metric),
            format_value(row.new, metric),
            format_ratio(row.ratio),
            Text(
                "REGRESSION" if row.status == "regression" else row.status,
                style=_STATUS_STYLE.get(row.status, "green"),
            ),
        )
    return table


def _verdict(console: Console, result: CompareResult) -> None:
    style = "bold red" if result.regressions else "green"
    # One line where it fits, else broken between its clauses (never inside a figure).
    console.print(Clauses(summary_clauses(result), sep=", ", style=style))


def render_compare(result: CompareResult, options: RunOptions) -> None:
    """Write the comparison to stdout in the chosen format."""
    if options.format == "json":
        # Not render.jsonout.write_json: that module imports NumPy, which compare never needs.
        emit(json.dumps(compare_json(result), indent=2) + "\n", options)
        return
    console = make_console(options)
    if not options.quiet:
        console.print(header(result))
        console.print()
    console.print(rows_table(result))
    console.print()
    _verdict(console, result)
