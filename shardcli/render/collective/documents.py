"""The JSON document and CSV rows of `shardcli collective`, for scripts (`results/bodies.py` names
the keys)."""

from __future__ import annotations

import csv
import io
from typing import Any

from shardcli.playground.collective.placement import PlacementRun, Roofline
from shardcli.playground.collective.run import CollectiveResult
from shardcli.playground.collective.size import SizeRun
from shardcli.playground.fit import LatencyBandwidthFit
from shardcli.render import jsonout
from shardcli.results import bodies, documents


def _placement_json(run: PlacementRun) -> dict[str, Any]:
    return bodies.COLLECTIVE_PLACEMENT(
        placement=run.placement,
        not_run=run.not_run,
        timing=jsonout.timing_json(run.timing),
        algbw_gbps=run.algbw,
        busbw_gbps=run.busbw,
        wrong=run.wrong,
        wrong_devices=list(run.wrong_devices),
        max_abs_err=run.max_abs_err,
        out_buffer=run.out_buffer,
        aliased=run.aliased,
        hlo_collectives=jsonout.hlo_json(run.hlo),
        roofline_fraction=run.roofline_fraction,
    )


def roofline_json(roofline: Roofline | None) -> dict[str, Any] | None:
    """The bandwidth a run is held against: host memory (CPU), link (device table) or none."""
    if roofline is None:
        return None
    return bodies.ROOFLINE(
        basis=roofline.basis,
        bandwidth_gbps=None
        if roofline.bandwidth_bytes_per_s is None
        else roofline.bandwidth_bytes_per_s / 1e9,
        source=roofline.source,
        min_bytes_rule=roofline.rule,
        measured_at=roofline.measured_at,
        cached=roofline.cached,
    )


def _size_json(run: SizeRun, result: CollectiveResult) -> dict[str, Any]:
    axes = result.session.layout.axes
    return bodies.COLLECTIVE_SIZE(
        bytes_per_device=run.bytes_per_device,
        count=run.count,
        global_shape=list(run.global_shape),
        local_shape=list(run.local_shape),
        out_global_shape=list(run.out_global_shape),
        out_local_shape=list(run.out_local_shape),
        in_spec=jsonout.spec_json(run.in_entries),
        out_spec=jsonout.spec_json(run.out_entries),
        algbw_bytes=run.algbw_bytes,
        sent_bytes_per_device=run.sent_bytes,
        tolerance=run.tolerance,
        wrong=run.wrong,
        missing_hlo_op=run.missing_op,
        min_bytes=None
        if run.min_bytes is None
        else bodies.MIN_BYTES(read=run.min_bytes.read, written=run.min_bytes.written),
        roofline_time_s=run.roofline_s,
        placements=[_placement_json(p) for p in run.placements],
        values=None
        if run.global_input is None
        else bodies.COLLECTIVE_VALUES(
            global_input=jsonout.values_json(run.global_input),
            global_output=jsonout.values_json(run.global_output),
            devices=[
                bodies.COLLECTIVE_DEVICE_VALUES(
                    device_id=d.device_id,
                    coords=dict(zip(axes, d.coords, strict=True)),
                    group=d.group,
                    position=d.position,
                    input=jsonout.values_json(d.input),
                    output=jsonout.values_json(d.output),
                )
                for d in run.devices
            ],
        ),
    )


def collective_json(result: CollectiveResult) -> dict[str, Any]:
    req = result.request
    return jsonout.document(
        "collective",
        result.session,
        {
            "config": bodies.COLLECTIVE_CONFIG(
                collective=result.collective.name,
                params=req.params.describe(result.collective, result.group_size),
                dtype=req.dtype.name,
                init=req.init if req.values is None else "values",
                placement=req.placement,
                out_buffer=None if req.placement == "in" else req.out_buffer,
                warmup=req.warmup,
                iters=req.iters,
                group_size=result.group_size,
                groups=result.n_groups,
                busbw_factor=result.collective.bus_factor(result.group_size)
                if result.collective.bus_factor
                else None,
                expected_hlo_op=result.collective.hlo_op,
                roofline=roofline_json(result.roofline),
                allocator=_allocator_json(result),
            ),
            "sizes": [_size_json(r, result) for r in result.runs],
            "summary": bodies.COLLECTIVE_SUMMARY(
                avg_busbw_gbps=result.avg_busbw,
                avg_over=result.avg_over,
                min_busbw_gbps=req.min_busbw,
                below_min_busbw=result.below_min_busbw,
                wrong=result.wrong,
                fit={placement: fit_json(fit) for placement, fit in result.fits.items()},
            ),
        },
    )


def _allocator_json(result: CollectiveResult) -> dict[str, Any] | None:
    state = result.session.runtime.allocator
    if state is None:
        return None
    return bodies.ALLOCATOR(mode=state.mode, applied=state.applied, note=state.note)


def fit_json(fit: LatencyBandwidthFit | None) -> dict[str, Any] | None:
    """t(S) = alpha + S / beta, in microseconds and GB/s (1e9 B/s)."""
    if fit is None:
        return None
    return bodies.FIT(
        model="t(S) = alpha + S / beta, least squares on relative error",
        alpha_us=fit.alpha_s * 1e6,
        beta_gbps=fit.beta_bytes_per_s / 1e9 if fit.beta_bytes_per_s is not None else None,
        r2=fit.r2,
        max_rel_residual=fit.max_rel_residual,
        points=fit.points,
    )


def collectives_json(results: list[CollectiveResult]) -> dict[str, Any]:
    """One collective: its document. Several: the envelope with each one's document in order."""
    if len(results) == 1:
        return collective_json(results[0])
    docs = [collective_json(r) for r in results]
    return documents.document(
        "collective",
        runtime=docs[0]["runtime"],
        mesh=docs[0]["mesh"],
        collectives=docs,
        summary=bodies.COLLECTIVES_SUMMARY(wrong=sum(r.wrong for r in results)),
    )


# --- CSV ------------------------------------------------------------------------------------------

CSV_COLUMNS = (
    "collective",
    "size_bytes",
    "count",
    "dtype",
    "placement",
    "time_p50_us",
    "algbw_gbps",
    "busbw_gbps",
    "wrong",
    "roofline_fraction",
    "out_buffer",  # out of place: preallocated or fresh; empty in place
)


def collectives_csv(results: list[CollectiveResult]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for result in results:
        _csv_rows(writer, result)
    return buffer.getvalue()


def _csv_rows(writer: Any, result: CollectiveResult) -> None:
    for run in result.runs:
        for p in run.placements:
            writer.writerow(
                [
                    result.collective.name,
                    run.bytes_per_device,
                    run.count,
                    result.request.dtype.name,
                    p.placement,
                    "" if p.timing is None else f"{_us(p.timing.stats.p50):.3f}",
                    "" if p.algbw is None else f"{p.algbw:.4f}",
                    "" if p.busbw is None else f"{p.busbw:.4f}",
                    p.wrong,
                    "" if p.roofline_fraction is None else f"{p.roofline_fraction:.4f}",
                    p.out_buffer or "",
                ]
            )


def _us(seconds: float) -> float:
    return seconds * 1e6
