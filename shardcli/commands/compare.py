"""`shardcli compare`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from shardcli.commands import options as opt
from shardcli.errors import ExitCode

if TYPE_CHECKING:
    from shardcli.specs.runs import RunOptions


@opt.with_run_options(mode=False, devices=False, compile_cache=False, processes=False)
def compare(
    base: Annotated[
        str,
        typer.Argument(
            help="The baseline: JSON from shardcli collective or matmul --format json.",
            metavar="BASE.json",
            show_default=False,
        ),
    ],
    new: Annotated[
        str,
        typer.Argument(
            help="The result to judge: the same command, mesh and sizes.",
            metavar="NEW.json",
            show_default=False,
        ),
    ],
    tolerance: Annotated[
        str,
        typer.Option(
            "--tolerance",
            "-t",
            help="How much worse than base a value may be before it is a regression: 10% or 0.1.",
        ),
    ] = "10%",
    metric: Annotated[
        str | None,
        typer.Option(
            "--metric",
            help="busbw (GB/s, higher is better; collective only), time (p50, lower is better), or, "
            "for einsum, reshard and inspect, memory, sent (bytes per device of the compiled program) "
            "or collectives (how many run), lower is better. \\[default: busbw for collective, memory "
            "for inspect, time for the others]",
        ),
    ] = None,
    *,
    options: RunOptions,
) -> None:
    """Compare two JSON results of the same command row by row, and mark the regressions.

    Rows are (size, placement) for collective, (dims, case, impl) for matmul, (shapes, impl) for
    einsum, impl for reshard and the program for inspect (a CI guard for a model's sharding).

    Both files need the same command, collective, cases, einsum or move, mesh and rows.

    Exits 1 if a row regressed beyond the tolerance, 2 if the files cannot be compared.

    Example: shardcli compare base.json new.json --tolerance 5%
    """
    # Here, not at the top: `shardcli --help` loads no command's core.
    from shardcli.render.compare import render_compare
    from shardcli.results.compare.metrics import METRICS
    from shardcli.results.compare.run import CompareRequest, run_compare
    from shardcli.specs.runs import parse_choice
    from shardcli.specs.values import parse_tolerance

    request = CompareRequest(
        base=base,
        new=new,
        metric=parse_choice(metric, "--metric", tuple(METRICS)) if metric is not None else None,
        tolerance=parse_tolerance(tolerance),
    )

    result = run_compare(request)
    render_compare(result, options)
    raise typer.Exit(ExitCode.WRONG_RESULT if result.regressions else ExitCode.OK)
