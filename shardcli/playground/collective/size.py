"""One input size of `shardcli collective`: its input built from NumPy, every device's expected
block computed from the same host data, and the size run in each placement asked.

Each placement (`collective.placement`) is compared with that reference, device by device; the
size's result keeps every placement, the blocks each device holds, and the bytes it moves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shardcli.playground.collective.entries import Collective, Entries
from shardcli.playground.collective.placement import Expected, PlacementRun, Roofline, run_placement
from shardcli.playground.collective.request import CollectiveRequest, size_layout
from shardcli.playground.roofline import MinBytes
from shardcli.runtime.arrays import make_host_array
from shardcli.runtime.session import Session
from shardcli.runtime.verify import sum_error_bound
from shardcli.specs.meshes import MeshSpec
from shardcli.specs.runs import Placement
from shardcli.specs.values import ArraySpec
from shardcli.tile_math import block_index


@dataclass(frozen=True)
class DeviceBlocks:
    """One device's input and output blocks, and how many output elements were wrong."""

    device_id: int
    coords: tuple[int, ...]
    group: int
    position: int
    input: np.ndarray | None
    output: np.ndarray | None
    wrong: int


@dataclass(frozen=True)
class SizeRun:
    """All placements of one input size."""

    global_shape: tuple[int, ...]
    local_shape: tuple[int, ...]
    out_global_shape: tuple[int, ...]
    out_local_shape: tuple[int, ...]
    in_entries: Entries
    out_entries: Entries
    bytes_per_device: int
    count: int  # elements per device
    algbw_bytes: int | None  # S in nccl-tests' algbw = S / t
    sent_bytes: int | None  # bytes each device sends in the ring algorithm
    placements: tuple[PlacementRun, ...]
    devices: tuple[DeviceBlocks, ...]  # from the first placement run
    global_input: np.ndarray | None
    global_output: np.ndarray | None
    tolerance: str
    missing_op: str | None  # the expected HLO op when the compiler left it out
    min_bytes: MinBytes | None = None  # read + written at least, all devices of this process
    roofline_s: float | None = None  # min_bytes at the host copy bandwidth (host memory basis)

    @property
    def wrong(self) -> int:
        return sum(p.wrong for p in self.placements)


# --- running --------------------------------------------------------------------------------------


def _position(axes: tuple[str, ...], mesh: MeshSpec, coords: dict[str, int]) -> int:
    sizes = mesh.axis_sizes
    pos = 0
    for a in axes:
        pos = pos * sizes[a] + coords[a]
    return pos


def _group_key(axes: tuple[str, ...], mesh: MeshSpec, coords: dict[str, int]) -> int:
    others = tuple(a for a in mesh.axes if a not in axes)
    return _position(others, mesh, coords)


def _host_input(request: CollectiveRequest, shape: tuple[int, ...]) -> np.ndarray:
    return make_host_array(
        ArraySpec(shape=shape, dtype=request.dtype, init=request.init, values=request.values)
    )


def _expected_outputs(
    collective: Collective,
    request: CollectiveRequest,
    host: np.ndarray,
    entries: Entries,
    n: int,
    coords_of: dict[int, dict[str, int]],
) -> Expected:
    """device id -> (expected output, error bound or None for exact, input block)."""
    mesh = request.mesh
    axes = request.params.axes
    groups: dict[int, dict[int, int]] = {}
    blocks: dict[int, np.ndarray] = {}
    for dev, coords in coords_of.items():
        blocks[dev] = host[block_index(entries, mesh.axis_sizes, coords, host.shape)]
        groups.setdefault(_group_key(axes, mesh, coords), {})[_position(axes, mesh, coords)] = dev
    out = {}
    for members in groups.values():
        ordered = [blocks[members[i]] for i in range(n)]
        expected = collective.reference(ordered, request.params, n)
        bounds: list[np.ndarray | None] = [None] * n
        is_float = host.dtype.kind in "fV" or collective.mean
        if not collective.exact and is_float:
            assert collective.bound_blocks is not None
            out_dtype = np.dtype(np.float32) if host.dtype.kind in "iu" else host.dtype
            scale = 1.0 / n if collective.mean else 1.0
            bound = sum_error_bound(ordered, out_dtype, n, scale)
            bounds = collective.bound_blocks(bound, request.params, n)
        for pos, dev in members.items():
            out[dev] = (expected[pos], bounds[pos], blocks[dev])
    return out


def _tolerance_text(collective: Collective, host_dtype: np.dtype) -> str:
    if collective.exact or (host_dtype.kind in "iu" and not collective.mean):
        return "exact (bit for bit)"
    name = "bfloat16" if host_dtype.name == "bfloat16" else host_dtype.name
    return f"|err| <= (n-1)*eps*sum|x_j| + eps*|sum| per element ({name}, any summation order)"


def run_size(
    session: Session,
    request: CollectiveRequest,
    collective: Collective,
    shape: tuple[int, ...],
    show_values: bool,
    roofline: Roofline | None = None,
) -> SizeRun:
    """Run one input size in the requested placements."""
    mesh = request.mesh
    host = _host_input(request, shape)
    size = size_layout(request, collective, shape, host.dtype.itemsize)
    coords_of = {c.device_id: dict(zip(mesh.axes, c.coords, strict=True)) for c in session.layout.cells}
    expected = _expected_outputs(collective, request, host, size.in_entries, size.n, coords_of)
    roofline_s = None
    if roofline is not None and roofline.basis == "host memory" and size.min_bytes is not None:
        assert roofline.bandwidth_bytes_per_s is not None
        roofline_s = size.min_bytes.total / roofline.bandwidth_bytes_per_s

    both = (Placement.OUT, Placement.IN)
    placements = both if request.placement == Placement.BOTH else (request.placement,)
    runs: list[PlacementRun] = []
    first_outputs: dict[int, np.ndarray] | None = None
    global_output = None
    for placement in placements:
        run, outputs, shown = run_placement(
            session, request, collective, size, host, expected, placement, show_values, roofline, roofline_s
        )
        runs.append(run)
        if first_outputs is None:
            first_outputs = outputs
        if shown is not None:
            global_output = shown
    # the collectives of the last placement that ran
    hlo = next((r.hlo for r in reversed(runs) if r.not_run is None), ())
    missing = None
    if collective.hlo_op is not None and size.n > 1 and collective.hlo_op not in {h.op for h in hlo}:
        missing = collective.hlo_op
    return SizeRun(
        global_shape=shape,
        local_shape=size.local,
        out_global_shape=size.out_global,
        out_local_shape=size.out_local,
        in_entries=size.in_entries,
        out_entries=size.out_entries,
        bytes_per_device=size.bytes_per_device,
        count=math.prod(size.local),
        algbw_bytes=size.algbw_bytes,
        sent_bytes=size.sent,
        placements=tuple(runs),
        devices=_device_blocks(session, request, coords_of, runs, first_outputs, expected, show_values),
        global_input=host if show_values else None,
        global_output=global_output,
        tolerance=_tolerance_text(collective, host.dtype),
        missing_op=missing,
        min_bytes=size.min_bytes,
        roofline_s=roofline_s,
    )


def _device_blocks(
    session: Session,
    request: CollectiveRequest,
    coords_of: dict[int, dict[str, int]],
    runs: list[PlacementRun],
    first_outputs: dict[int, np.ndarray] | None,
    expected: Expected,
    show_values: bool,
) -> tuple[DeviceBlocks, ...]:
    """Each of this process's devices: its place in its group, its blocks (where shown), and how
    many of the placements it got wrong."""
    axes, mesh = request.params.axes, request.mesh
    devices = []
    for cell in session.layout.cells:
        coords = coords_of[cell.device_id]
        if first_outputs is not None and cell.device_id not in first_outputs:
            continue  # another process's device
        wrong_here = sum(1 for r in runs if cell.device_id in r.wrong_devices)
        devices.append(
            DeviceBlocks(
                device_id=cell.device_id,
                coords=cell.coords,
                group=_group_key(axes, mesh, coords),
                position=_position(axes, mesh, coords),
                input=expected[cell.device_id][2] if show_values else None,
                output=first_outputs.get(cell.device_id) if show_values and first_outputs else None,
                wrong=wrong_here,
            )
        )
    return tuple(devices)
