"""Rendering `shardcli matmul`: rich for people, JSON and CSV for scripts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from shardcli.hardware.costmodel import CostEstimate
from shardcli.playground.fit import LatencyBandwidthFit
from shardcli.playground.matmul.impl import ImplRun
from shardcli.playground.matmul.run import ArrayLayout, CaseRun, MatmulResult
from shardcli.render import human, jsonout
from shardcli.render.console import (
    csv_text,
    emit,
    format_flops,
    format_seconds,
    make_console,
    prints_here,
    show_warnings,
)
from shardcli.render.layout import Clauses, DataTable
from shardcli.render.plot import Series, text_chart
from shardcli.render.program import (
    cost_model_text,
    hardware_json,
    model_json,
    status_text,
    verdict_json,
    verdict_text,
)
from shardcli.results import bodies, records
from shardcli.specs.runs import RunOptions
from shardcli.specs.values import format_bytes

FORMATS = ("table", "json", "csv")


def hlo_text(run: ImplRun, with_bytes: bool = False) -> str:
    """`all-reduce x1`, with the bytes of the ops' results when asked (read from the HLO shapes)."""
    if run.status != "ok":
        return "-"
    return (
        ", ".join(
            f"{h.op} x{h.count}" + (f" ({format_bytes(h.result_bytes)})" if with_bytes else "")
            for h in run.hlo
        )
        or "none"
    )


def impl_status(run: ImplRun) -> Text:
    """A refusal the case expects (its lesson) is `refused*`; one it does not, `refused!`."""
    if run.expected_refusal:
        return status_text(run.status, "refused*")
    return status_text(run.status, "refused!", "bold yellow")


def ratio_text(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    return f"{ratio:,.0f}x" if ratio >= 100 else f"{ratio:.3g}x"


def _bound_ratio(run: ImplRun, model: CostEstimate | None) -> float | None:
    if run.timing is None or model is None or not model.t_bound_s:
        return None
    return run.timing.stats.p50 / model.t_bound_s


# --- JSON -----------------------------------------------------------------------------------------


def _array_json(layout: ArrayLayout) -> dict[str, Any]:
    return bodies.MATMUL_ARRAY(
        name=layout.name,
        shape=list(layout.shape),
        spec=jsonout.spec_json(layout.entries),
        local_shape=list(layout.local_shape),
    )


def _impl_json(run: ImplRun, case_run: CaseRun, devices: int) -> dict[str, Any]:
    return bodies.MATMUL_IMPL(
        impl=run.impl,
        status=run.status,
        message=run.message,
        expected_refusal=run.expected_refusal,
        out_spec=jsonout.spec_json(run.out_entries),
        hlo_collectives=jsonout.hlo_json(run.hlo),
        xla_cost=bodies.XLA_COST(flops_per_device=run.xla_flops, bytes_accessed_per_device=run.xla_bytes),
        timing=jsonout.timing_json(run.timing),
        achieved_flop_per_s=run.achieved_flops,
        achieved_flop_per_s_per_device=None if run.achieved_flops is None else run.achieved_flops / devices,
        time_over_model_bound=_bound_ratio(run, case_run.model),
        max_rel_err=run.max_rel_err,
        wrong=run.wrong,
        wrong_devices=list(run.wrong_devices),
        fit=verdict_json(run.fit),
        values=jsonout.shown_values_json(run.values),
    )


def _case_json(run: CaseRun, devices: int) -> dict[str, Any]:
    return bodies.MATMUL_RUN(
        case=run.case.name,
        notation=run.case.notation(),
        scale=run.scale,
        dims=_dims_json(run.dims),
        skipped=run.skipped,
        operands=[_array_json(o) for o in run.operands],
        result=_array_json(run.result),
        model_flops=run.model_flops,
        tolerance=run.tolerance,
        tolerance_text=run.tolerance_text,
        model=model_json(run.model),
        impls=[_impl_json(i, run, devices) for i in run.impls],
        wrong=run.wrong,
    )


def _dims_json(dims: tuple[int, int, int]) -> dict[str, int]:
    return bodies.DIMS(**dict(zip(bodies.DIMS.keys, dims, strict=True)))


def matmul_json(result: MatmulResult) -> dict[str, Any]:
    req = result.request
    hw = result.hardware
    axes = result.axes
    devices = req.mesh.size
    return jsonout.document(
        "matmul",
        result.session,
        {
            "config": bodies.MATMUL_CONFIG(
                cases=list(result.impls),
                impls={case: list(impls) for case, impls in result.impls.items()},
                dims=_dims_json(req.dims),
                scales=list(req.scales) if req.scales is not None else [1.0],
                dtype=req.dtype.name,
                init=req.init,
                warmup=req.warmup,
                iters=req.iters,
                x_axis=axes.x,
                y_axis=axes.y,
                compile_target=req.compile_target.name if req.compile_target is not None else None,
                hardware=hardware_json(hw),
            ),
            "runs": [_case_json(r, devices) for r in result.runs],
            "summary": bodies.MATMUL_SUMMARY(
                wrong=result.wrong,
                refused=[
                    bodies.REFUSED(
                        case=r.case.name, impl=i.impl, expected=i.expected_refusal, message=i.message
                    )
                    for r in result.runs
                    for i in r.impls
                    if i.status == "refused"
                ],
                skipped=[bodies.SKIPPED(case=r.case.name, why=r.skipped) for r in result.runs if r.skipped],
                fit={key: flop_fit_json(fit) for key, fit in result.fits.items()},
            ),
        },
    )


# --- CSV ------------------------------------------------------------------------------------------

CSV_COLUMNS = (
    "case",
    "impl",
    "scale",
    "I",
    "J",
    "K",
    "dtype",
    "status",
    "time_p50_us",
    "achieved_tflops",
    "model_bound_us",
    "dominant",
    "hlo_collectives",
    "max_rel_err",
    "wrong",
)


def matmul_csv(result: MatmulResult) -> str:
    return csv_text(CSV_COLUMNS, _csv_rows(result))


def _csv_rows(result: MatmulResult) -> Iterator[list[Any]]:
    for run in result.runs:
        bound = run.model.t_bound_s if run.model else None
        if run.skipped:
            yield (
                [run.case.name, "", f"{run.scale:g}", *run.dims, result.request.dtype.name, "skipped"]
                + [""] * 6
                + [0]
            )
        for i in run.impls:
            timing = i.timing
            yield [
                run.case.name,
                i.impl,
                f"{run.scale:g}",
                *run.dims,
                result.request.dtype.name,
                i.status,
                f"{timing.stats.p50 * 1e6:.3f}" if timing is not None else "",
                f"{i.achieved_flops / 1e12:.6g}" if i.achieved_flops else "",
                f"{bound * 1e6:.3f}" if bound is not None else "",
                run.model.dominant if run.model and run.model.dominant else "",
                ";".join(f"{h.op}:{h.count}" for h in i.hlo),
                f"{i.max_rel_err:.3e}" if timing is not None else "",
                i.wrong,
            ]


# --- people ---------------------------------------------------------------------------------------


def _table(
    columns: tuple[str, ...], left: tuple[str, ...], priorities: dict[str, int], title: str | None = None
) -> Table:
    """A table of `columns`; those in `priorities` are left out, highest first, where it is too wide."""
    table = DataTable(box=None, header_style="bold", padding=(0, 1), title=title)
    for name in columns:
        table.add_column(
            name,
            justify="left" if name in left else "right",
            no_wrap=not name.startswith("HLO collectives"),
            min_width=14 if name.startswith("HLO collectives") else None,
            overflow="fold",
            priority=priorities.get(name, 0),
        )
    return table


def compiled_table(run: CaseRun) -> Table:
    """What the compiler made of each implementation."""
    columns = (
        "impl",
        "status",
        "output spec",
        "HLO collectives (result bytes)",
        "XLA flops/device",
        "XLA bytes/device",
    )
    table = _table(columns, columns[:4], {"output spec": 1, "XLA flops/device": 2, "XLA bytes/device": 3})
    for i in run.impls:
        table.add_row(
            i.impl,
            impl_status(i),
            human.spec_text(i.out_entries),
            hlo_text(i, with_bytes=True),
            format_flops(i.xla_flops, "") if i.xla_flops is not None else "-",
            format_bytes(i.xla_bytes) if i.xla_bytes is not None else "-",
        )
    return table


def timing_table(run: CaseRun) -> Table:
    """Timing, achieved FLOP/s and verification of each implementation that ran."""
    columns = (
        "impl",
        "compile",
        "min",
        "p50",
        "p90",
        "achieved FLOP/s",
        "p50/bound",
        "max rel err",
        "#wrong",
    )
    priorities = {"achieved FLOP/s": 1, "max rel err": 1, "p50/bound": 2, "compile": 3, "min": 4}
    table = _table(columns, ("impl",), priorities | {"p90": 5})
    for i in run.impls:
        if i.timing is None:
            continue
        s = i.timing.stats
        ratio = _bound_ratio(i, run.model)
        table.add_row(
            i.impl,
            human.compile_text(i.timing),
            human.format_duration(s.min),
            human.format_duration(s.p50),
            human.format_duration(s.p90),
            format_flops(i.achieved_flops, ""),
            ratio_text(ratio),
            f"{i.max_rel_err:.2e}",
            Text(str(i.wrong), style="bold red" if i.wrong else "green"),
        )
    return table


def comparison_table(result: MatmulResult) -> Table:
    """`--case all` and `--sizes`: one row per (size, case, impl)."""
    sweep = result.request.sweep
    columns: tuple[str, ...] = ("dims",) if sweep else ()
    columns += ("case", "impl", "status", "HLO collectives", "p50", "FLOP/s", "bound", "by", "x bound")
    columns += ("rel err", "#wrong")
    # The compiler's collectives are the lesson of the cases: they are never left out, nor is the
    # status, which says why a refused row is `-`.
    priorities = {"x bound": 1, "FLOP/s": 2, "rel err": 3, "bound": 4, "by": 5}
    table = _table(columns, ("case", "impl", "status", "HLO collectives", "by"), priorities)
    for run in result.runs:
        lead = (",".join(map(str, run.dims)),) if sweep else ()
        if run.skipped:
            table.add_row(*lead, run.case.name, "-", Text("n/a (1-D mesh)", style="yellow"), *["-"] * 7, "-")
            continue
        model = run.model
        for i in run.impls:
            timing = i.timing
            ratio = _bound_ratio(i, model)
            table.add_row(
                *lead,
                run.case.name,
                i.impl,
                impl_status(i),
                hlo_text(i),
                format_seconds(timing.stats.p50 if timing is not None else None),
                format_flops(i.achieved_flops, ""),
                format_seconds(model.t_bound_s if model else None),
                _bound_by(model),
                ratio_text(ratio),
                f"{i.max_rel_err:.1e}" if timing is not None else "-",
                Text(str(i.wrong), style="bold red" if i.wrong else "green"),
            )
    return table


def comparison_legend() -> RenderableType:
    """What the comparison table's figures are, broken only between its clauses."""
    return Clauses(
        [
            "p50 of per-iteration times",
            "bound = max(T_math, T_comm) of the cost model, by compute or comm",
            "x bound = p50 / bound",
        ],
        style="dim",
    )


def _bound_by(model: CostEstimate | None) -> str:
    if model is None or model.dominant is None:
        return "-"
    return "comm" if model.dominant == "communication" else "compute"


def cost_text(run: CaseRun, result: MatmulResult) -> RenderableType:
    if run.model is None:
        return Text("n/a")
    return cost_model_text(run.model, result.hardware, "matmul")


def _notes(console: Console, result: MatmulResult, verbose: bool) -> None:
    for run in result.runs:
        for i in run.impls:
            if i.status == "refused":
                label = "refused* (as expected)" if i.expected_refusal else "refused! (JAX refused this form)"
                console.print(Text(f"{run.case.name}/{i.impl} {label}: {i.message}", style="yellow"))
            if i.fit is not None:
                console.print(verdict_text(i.fit, f"{run.case.name}/{i.impl}: "))
    _below_bound_note(console, result, verbose)
    for run in result.runs:
        if not run.skipped and any(
            i.xla_flops is not None and run.model and i.xla_flops < 0.9 * run.model.flops_per_device
            for i in run.impls
            if i.impl == "manual"
        ):
            console.print(
                Text(
                    f"{run.case.name}/manual: XLA's cost analysis counts a loop body once, "
                    "so its FLOPs are below the model's",
                    style="dim",
                )
            )


def _below_bound_note(console: Console, result: MatmulResult, verbose: bool) -> None:
    """Where a measured p50 beats the model's bound, one line on why that can be (the bound is a model)."""
    below = [
        f"{r.case.name}/{i.impl} {ratio_text(ratio)}"
        for r in result.runs
        for i in r.impls
        if (ratio := _bound_ratio(i, r.model)) is not None and ratio < 1
    ]
    if below:
        console.print(below_bound_note(below, result.hardware, verbose))


def below_bound_note(below: list[str], hardware: Any, verbose: bool) -> RenderableType:
    """Why p50/bound can be under 1x: one line, the model's figures under -v."""
    if not verbose:
        runs = f"{len(below)} run{'s' if len(below) > 1 else ''}"
        return Clauses(
            [f"p50/bound under 1x for {runs}:", "the bound is a model, not a floor", "(-v says why)"],
            sep=" ",
            style="dim",
        )
    return Text(below_bound_text(below, hardware), style="dim")


def below_bound_text(below: list[str], hardware: Any) -> str:
    """Why p50/bound can be under 1x: the bound comes from the model's peak and link figures."""
    return (
        f"p50/bound under 1x ({', '.join(below)}): the bound is a model, not a floor; it assumes peak "
        f"{format_flops(hardware.peak_flops)} ({hardware.peak_source}) and link "
        f"{format_flops(hardware.link_bytes_per_s, 'B/s')} ({hardware.link_source}), and this run did better "
        "than those figures (a small size in cache, fused work, or figures measured under other load)"
    )


def _verdict(console: Console, result: MatmulResult) -> None:
    target = result.request.compile_target
    if target is not None:
        console.print(Text(f"compile-only for {target.name}: nothing ran, nothing was verified", style="dim"))
        return
    ran = [i for r in result.runs for i in r.impls if i.timing is not None]
    if not ran:
        console.print(
            Text(
                "nothing ran (every implementation was refused or skipped), so nothing was verified",
                style="dim",
            )
        )
        return
    if result.wrong:
        bad = [
            f"{r.case.name}/{i.impl} ({i.wrong} on device(s) {', '.join(map(str, i.wrong_devices))})"
            for r in result.runs
            for i in r.impls
            if i.wrong
        ]
        console.print(Text(f"WRONG: elements beyond the tolerance in {'; '.join(bad)}", style="bold red"))
    else:
        console.print(
            Text(
                "verified: every device's block of every result matches NumPy"
                + human.checked_where(result.session),
                style="green",
            )
        )


def _has_explicit(result: MatmulResult) -> bool:
    return any("explicit" in impls for impls in result.impls.values())


def render_matmul(result: MatmulResult, options: RunOptions) -> None:
    show_warnings(result.session.runtime)
    if not prints_here(options, result.session.runtime):
        return
    if options.format == "json":
        jsonout.write_json(matmul_json(result), options)
        return
    if options.format == "csv":
        emit(matmul_csv(result), options)
        return
    console = make_console(options)
    single = len(result.runs) == 1 and not result.runs[0].skipped
    if not options.quiet:
        _print_header(console, result, options, single)
    if single:
        _print_one_case(console, result, options)
    else:
        _print_cases(console, result, options)
    console.print()
    _notes(console, result, options.verbose)
    _verdict(console, result)


def _print_header(console: Any, result: MatmulResult, options: RunOptions, single: bool) -> None:
    """The run's header: the mesh roles, dims and input (and, for one case, the case and its check)."""
    req = result.request
    axes = result.axes
    facts = {
        "roles": f"X = {axes.x} ({axes.nx} devices)"
        + (f", Y = {axes.y} ({axes.ny} devices)" if axes.y else "; no Y axis: dims split over Y stay whole"),
        "dims": f"I,J,K = {','.join(map(str, req.dims))}"
        + (f" x scales {', '.join(f'{s:g}' for s in req.scales)}" if req.scales else ""),
        "input": f"{req.dtype.name}, init {req.init}",
    }
    details = {
        "meshes": "manual and auto on Auto axes"
        + (", explicit on the same devices with Explicit axes" if _has_explicit(result) else ""),
        "timing": f"compile separately, then {req.warmup} warm-up + {req.iters} timed iterations, "
        "each blocked until ready" + human.timing_across(result.session),
    }
    if single:
        run = result.runs[0]
        facts = {"case": f"{run.case.name}: {run.case.notation()}", "what": run.case.summary, **facts}
        details["verify"] = run.tolerance_text
    console.print(human.header(result.session, facts, details=details, verbose=options.verbose))


def _print_one_case(console: Any, result: MatmulResult, options: RunOptions) -> None:
    """One case: its operands' and result's layouts, what the compiler did, its values and timing."""
    run = result.runs[0]
    if not options.quiet:
        for layout in (*run.operands, run.result):
            if run.case.illegal and layout is run.result:
                continue  # no device holds this layout: that is the point of the case
            human.section(
                console,
                f"{layout.name}: global {layout.shape}, spec {human.spec_text(layout.entries)}, "
                f"local {layout.local_shape}",
                human.sharding_picture(human.spec_tiles(layout.shape, layout.entries, result.session)),
            )
    human.section(console, "what the compiler did", compiled_table(run))
    shown = next((i for i in run.impls if i.values is not None), None)
    if shown is not None:
        human.show_values(console, run.result.name, shown.values, f" (from {shown.impl})")
    if any(i.timing is not None for i in run.impls):  # no empty table where nothing ran
        human.section(console, "timing and verification", timing_table(run))
        human.section(console, "cost model (roofline, per device)", cost_text(run, result))


def _print_cases(console: Any, result: MatmulResult, options: RunOptions) -> None:
    """Several cases: the comparison table, the FLOP/s chart and fit, and the model's figures."""
    human.section(console, "matmul cases", Group(comparison_legend(), comparison_table(result)))
    if result.fits:
        human.section(console, "achieved FLOP/s against the product's FLOPs", flops_chart(result))
        console.print(flop_fit_text(result))
    if not options.quiet:
        hw = result.hardware
        console.print(
            Clauses(
                [
                    f"model: peak {format_flops(hw.peak_flops)}",
                    f"({hw.peak_source});",
                    f"link {format_flops(hw.link_bytes_per_s, 'B/s')}",
                    f"({hw.link_source})",
                ],
                sep=" ",
                style="dim",
            )
        )


# --- sweeps: the chart and the fit -----------------------------------------------------------------


def flop_fit_json(fit: LatencyBandwidthFit | None) -> dict[str, Any] | None:
    """t(F) = alpha + F / rate, F the model FLOPs of the whole product; us and TFLOP/s."""
    if fit is None:
        return None
    return records.FLOP_FIT(
        model="t(F) = alpha + F / rate, F = the product's model FLOPs; least squares on relative error",
        alpha_us=fit.alpha_s * 1e6,
        rate_tflops=fit.beta_bytes_per_s / 1e12 if fit.beta_bytes_per_s is not None else None,
        r2=fit.r2,
        max_rel_residual=fit.max_rel_residual,
        points=fit.points,
    )


def flops_chart(result: MatmulResult) -> Text:
    """Achieved TFLOP/s against the product's FLOPs (log2), a series per case and impl, with the fit."""
    series = []
    for key, fit in result.fits.items():
        case, impl = key.split("/")
        pts = tuple(
            (run.model_flops, i.achieved_flops / 1e12)
            for run in result.runs
            if run.case.name == case
            for i in run.impls
            if i.impl == impl and i.achieved_flops is not None
        )
        curve = (lambda f, fit=fit: f / fit.time_at(f) / 1e12) if fit is not None else None
        series.append(Series(key, pts, curve))
    return text_chart(
        series,
        y_label="TFLOP/s",
        x_label="FLOPs of the product (log2)",
        x_format=lambda v: format_flops(v, "").strip(),
    )


def flop_fit_text(result: MatmulResult) -> RenderableType:
    """One line per case and impl (broken between clauses where narrow, never inside a figure)."""
    lines: list[RenderableType] = []
    for key, fit in result.fits.items():
        if fit is None:
            lines.append(Text(f"fit {key}: needs two sizes or more", style="dim"))
            continue
        rate = "none" if fit.beta_bytes_per_s is None else f"{fit.beta_bytes_per_s / 1e12:.3g} TFLOP/s"
        quality = Text(f"(R^2 {fit.r2:.3f}, worst residual {fit.max_rel_residual:.0%})", style="dim")
        clauses = [
            f"fit {key}: t(F) = alpha + F / rate",
            f"alpha = {human.format_duration(fit.alpha_s)}",
            f"rate = {rate}",
        ]
        lines.append(Clauses([*clauses[:-1], Text.assemble(clauses[-1], " ", quality)], sep=", "))
    return Group(*lines)
