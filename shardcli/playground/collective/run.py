"""`shardcli collective`: run one collective through shard_map at every size asked, verify it,
time it, and fit its times.

The request and its checks are `collective.request`, one size in every placement `collective.size`,
one placement `collective.placement`. Here: the memory check before anything is allocated, the
sizes in turn, the average busbw over the bandwidth-bound sizes, and the latency-bandwidth fit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from shardcli.playground.collective.cases import get_collective, group_size
from shardcli.playground.collective.entries import Collective
from shardcli.playground.collective.placement import Roofline, resolve_roofline
from shardcli.playground.collective.request import (
    CollectiveRequest,
    global_shapes,
    input_entries,
    local_shape_of,
)
from shardcli.playground.collective.size import SizeRun, run_size
from shardcli.playground.fit import LatencyBandwidthFit, fit_latency_bandwidth
from shardcli.runtime.memory import check_fits_in_memory
from shardcli.runtime.session import Session, open_session
from shardcli.specs.runs import Placement
from shardcli.specs.values import format_bytes

# Sizes at or above this are bandwidth-bound; the sweep's average busbw uses them.
AVERAGE_FROM_BYTES = 1024 * 1024


@dataclass(frozen=True)
class CollectiveResult:
    session: Session
    request: CollectiveRequest
    collective: Collective
    group_size: int
    n_groups: int
    runs: tuple[SizeRun, ...]
    avg_busbw: dict[str, float | None]  # per placement, over sizes >= 1 MiB (or all)
    avg_over: str
    # per placement: t(S) = alpha + S / beta over the sweep's sizes (None with fewer than two)
    fits: dict[str, LatencyBandwidthFit | None] = field(default_factory=dict)
    roofline: Roofline | None = None

    @property
    def wrong(self) -> int:
        return sum(r.wrong for r in self.runs)

    @property
    def below_min_busbw(self) -> bool:
        if self.request.min_busbw is None:
            return False
        values = [v for v in self.avg_busbw.values() if v is not None]
        return not values or min(values) < self.request.min_busbw

    @property
    def failed(self) -> bool:
        """A check failed: a wrong result, or an average busbw below --min-busbw (exit 1)."""
        return bool(self.wrong) or self.below_min_busbw


def _memory_estimate(
    request: CollectiveRequest, collective: Collective, shape: tuple[int, ...]
) -> tuple[int, int]:
    mesh = request.mesh
    n = group_size(request.params.axes, mesh.axis_sizes)
    local = local_shape_of(shape, input_entries(request), mesh)
    item = request.dtype.itemsize
    in_bytes = math.prod(local) * item
    out_bytes = math.prod(collective.out_local_shape(local, request.params, n)) * item
    per_device = in_bytes + out_bytes
    host = math.prod(shape) * item
    # device buffers, the host input, and NumPy's reference and fetched copies of every output
    total = mesh.size * per_device + host + 2 * mesh.size * out_bytes
    return per_device, total


def fit_sizes(runs: tuple[SizeRun, ...], placement: str) -> LatencyBandwidthFit | None:
    """t(S) = alpha + S / beta from the p50 of every size of one placement.

    S is nccl-tests' message size (`algbw_bytes`), or the bytes per device for a collective that
    moves no data.
    """
    sizes, times = [], []
    for run in runs:
        for p in run.placements:
            if p.placement == placement and p.timing is not None:
                sizes.append(run.algbw_bytes if run.algbw_bytes is not None else run.bytes_per_device)
                times.append(p.timing.stats.p50)
    return fit_latency_bandwidth(sizes, times)


def _fits(
    collective: Collective, runs: tuple[SizeRun, ...], placements: tuple[str, ...]
) -> dict[str, LatencyBandwidthFit | None]:
    """A fit of time against bytes moved per placement: only for collectives that move data, and
    only for placements that ran."""
    return {
        placement: fit_sizes(runs, placement)
        for placement in placements
        if collective.algbw_bytes is not None
        and any(p.placement == placement and p.timing is not None for r in runs for p in r.placements)
    }


def run_collective(
    request: CollectiveRequest,
    progress: Callable[[int, int, int], None] | None = None,
    session: Session | None = None,
) -> CollectiveResult:
    """Run the request: one SizeRun per size.

    The request is checked once, where it is built:
    `shardcli.commands.requests.collective.build_collective_requests` validates every request before
    any runs, and a request built by hand must pass `validate_request` first; it is not checked again
    here.

    Args:
        request: a request `validate_request` accepted.
        progress: called as (done, total, size_bytes) before each size.
        session: a session opened by an earlier run on the same mesh (several collectives in one
            command); default: open one.

    Raises:
        ShardcliError: the run does not fit in this machine's memory, found before allocating.
    """
    collective = get_collective(request.collective)
    shapes = global_shapes(request, collective)
    show_values = False
    if not request.sweep:
        from shardcli.playground.shard import resolve_show_values

        show_values = resolve_show_values(request.show_values, math.prod(shapes[0]))
    if session is None:
        session = open_session(request.mesh, request.options, x64=request.dtype.needs_x64)
    _check_memory(session, request, collective, max(shapes, key=math.prod))
    n = group_size(request.params.axes, request.mesh.axis_sizes)
    roofline = resolve_roofline(session, collective)
    runs = []
    for i, shape in enumerate(shapes):
        if progress is not None:
            progress(
                i,
                len(shapes),
                math.prod(local_shape_of(shape, input_entries(request), request.mesh))
                * request.dtype.itemsize,
            )
        runs.append(run_size(session, request, collective, shape, show_values, roofline))
    if progress is not None:
        progress(len(shapes), len(shapes), 0)
    averages, avg_over = average_busbw(tuple(runs))
    return CollectiveResult(
        session=session,
        request=request,
        collective=collective,
        group_size=n,
        n_groups=request.mesh.size // n,
        runs=tuple(runs),
        avg_busbw=averages,
        avg_over=avg_over,
        fits=_fits(collective, tuple(runs), tuple(averages)),
        roofline=roofline,
    )


def _check_memory(
    session: Session, request: CollectiveRequest, collective: Collective, biggest: tuple[int, ...]
) -> None:
    """Raises: ShardcliError when the largest size does not fit in this machine's memory."""
    per_device, total = _memory_estimate(request, collective, biggest)
    per_device_input = (
        math.prod(local_shape_of(biggest, input_entries(request), request.mesh)) * request.dtype.itemsize
    )
    check_fits_in_memory(
        session.runtime,
        list(session.devices),
        per_device=per_device,
        total=total,
        what=f"{collective.name} with {format_bytes(per_device_input)} per device",
    )


def average_busbw(runs: tuple[SizeRun, ...]) -> tuple[dict[str, float | None], str]:
    """Per placement that ran, the average busbw over the sizes >= 1 MiB (or all sizes, where none
    is that large), and which sizes those were, in words."""
    big = [r for r in runs if r.bytes_per_device >= AVERAGE_FROM_BYTES]
    avg_over = f"sizes >= {format_bytes(AVERAGE_FROM_BYTES, short=True)}" if big else "all sizes (none >= 1M)"
    pool = big or runs
    averages: dict[str, float | None] = {}
    for placement in (Placement.OUT, Placement.IN):
        values = [
            p.busbw for r in pool for p in r.placements if p.placement == placement and p.busbw is not None
        ]
        if any(p.placement == placement for r in runs for p in r.placements):
            averages[placement] = sum(values) / len(values) if values else None
    return averages, avg_over
