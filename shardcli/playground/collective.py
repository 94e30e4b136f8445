"""`shardcli collective`: run one collective through shard_map, verify it, time it.

One run per size: build the input from NumPy, compile the shard_map program, time it out of place
and/or in place (input donated, each output fed back as the next input), then compare every
device's block with a NumPy reference computed from the same host data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardcli.analysis.program import HloCollective, find_collectives
from shardcli.errors import ShardcliError
from shardcli.playground.collective_cases import (
    PARAM_FLAGS,
    Collective,
    CollectiveParams,
    Entries,
    busbw_factor,
    get_collective,
    group_size,
    in_place_refusal,
)
from shardcli.playground.fit import LatencyBandwidthFit, fit_latency_bandwidth
from shardcli.playground.roofline import MinBytes, min_bytes, min_bytes_rule
from shardcli.runtime.arrays import make_host_array, place_array
from shardcli.runtime.memory import check_fits_in_memory
from shardcli.runtime.mesh import partition_spec
from shardcli.runtime.processes import combine_check, combine_timing
from shardcli.runtime.session import Session, open_session
from shardcli.runtime.timing import Timing, compile_timed, summarize, time_iterations
from shardcli.runtime.verify import compare_exact, compare_within, sum_error_bound
from shardcli.specs.meshes import MeshSpec, ShardingSpec, check_sharding_fits
from shardcli.specs.runs import OutBuffer, Placement, RunOptions, check_timing
from shardcli.specs.values import ArraySpec, DType, format_bytes
from shardcli.tile_math import block_index

# Sizes at or above this are bandwidth-bound; the sweep's average busbw uses them.
AVERAGE_FROM_BYTES = 1024 * 1024
DEFAULT_LOCAL_ELEMENTS = 4


@dataclass(frozen=True)
class CollectiveRequest:
    """Everything `shardcli collective` needs, validated before JAX starts."""

    collective: str
    mesh: MeshSpec
    params: CollectiveParams
    dtype: DType
    init: str = "arange"
    shape: tuple[int, ...] | None = None  # global input shape
    sizes: tuple[int, ...] | None = None  # bytes per device, one run each
    values: tuple[float, ...] | None = None
    sharding: ShardingSpec | None = None  # default: the collective's axes on dim 0
    placement: Placement = Placement.OUT
    # Out of place, where each call's result goes: one preallocated buffer donated to every call and
    # reused (nccl-tests' recvbuff), or a fresh allocation per call (what a plain jit loop times).
    out_buffer: OutBuffer = OutBuffer.PREALLOCATED
    warmup: int = 5
    iters: int = 20
    show_values: bool | None = None
    min_busbw: float | None = None
    set_params: frozenset[str] = field(default_factory=frozenset)  # params the user gave
    sweep: bool = False  # --sizes (a table of sizes) rather than one run
    options: RunOptions = field(default_factory=RunOptions)

    def __post_init__(self) -> None:
        # The closed choices become their enums however the request was built; a word outside
        # them is refused as its flag.
        for name, flag, choices in (
            ("placement", "--placement", Placement),
            ("out_buffer", "--out-buffer", OutBuffer),
        ):
            value = getattr(self, name)
            if value not in tuple(choices):
                raise ShardcliError(f"{flag} {value!r} is not valid; choose one of {', '.join(choices)}")
            object.__setattr__(self, name, choices(value))


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
class Roofline:
    """What a run's speed is held against.

    On CPU with one process: the host's copy bandwidth, against the bytes the collective must at
    least read and write (`shardcli.playground.roofline`). On GPU/TPU: the device table's link bandwidth,
    against busbw (nccl-tests' busbw is comparable to one link's bandwidth). Otherwise none.
    """

    basis: str | None  # "host memory", "link" or None (not available)
    bandwidth_bytes_per_s: float | None
    source: str  # how the bandwidth was found, or why there is none
    rule: str | None = None  # host memory: the minimum-bytes rule in words
    measured_at: str | None = None  # host memory: when the copy bandwidth was measured (UTC)
    cached: bool | None = None  # host memory: read from the cache directory, not measured now
    warning: str | None = None  # host memory: for stderr, the figure could not be cached


@dataclass(frozen=True)
class PlacementRun:
    """One placement (out of place or in place) of one size."""

    placement: Placement  # out or in
    timing: Timing | None
    algbw: float | None  # GB/s, 1e9, from the p50 time
    busbw: float | None
    wrong: int
    wrong_devices: tuple[int, ...]
    max_abs_err: float
    # Did XLA write the result into the donated buffer: the input (in place) or the preallocated
    # output (out of place); None for fresh outputs.
    aliased: bool | None
    hlo: tuple[HloCollective, ...]
    not_run: str | None = None  # why this placement does not apply
    out_buffer: OutBuffer | None = None  # out of place: preallocated or fresh; in place: None
    roofline_fraction: float | None = None  # of the run's Roofline; None where it has none


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


# --- validation (no devices) ----------------------------------------------------------------------


def default_local_elements(collective: Collective, n: int) -> int:
    if collective.splits_block:
        return n * math.ceil(DEFAULT_LOCAL_ELEMENTS / n)
    return DEFAULT_LOCAL_ELEMENTS


def input_entries(request: CollectiveRequest) -> Entries:
    if request.sharding is not None:
        return request.sharding.entries
    return (request.params.axes,)


def split_factor(entries: Entries, mesh: MeshSpec) -> list[int]:
    sizes = mesh.axis_sizes
    return [math.prod(sizes[a] for a in e) for e in entries]


def global_shapes(request: CollectiveRequest, collective: Collective) -> list[tuple[int, ...]]:
    """The global input shape of every run."""
    mesh = request.mesh
    entries = input_entries(request)
    n = group_size(request.params.axes, mesh.axis_sizes)
    parts0 = split_factor(entries, mesh)[0] if entries else 1
    if request.shape is not None:
        return [request.shape]
    if request.values is not None:
        return [(len(request.values),)]
    if request.sizes is not None:
        shapes: list[tuple[int, ...]] = []
        itemsize = request.dtype.itemsize
        for size in request.sizes:
            if size % itemsize:
                raise ShardcliError(
                    f"size {format_bytes(size, short=True)} is not a whole number of {request.dtype.name} "
                    f"elements ({itemsize} bytes each); use a multiple of {itemsize} bytes"
                )
            shapes.append((size // itemsize * parts0,))
        return shapes
    return [(default_local_elements(collective, n) * parts0,)]


def local_shape_of(shape: tuple[int, ...], entries: Entries, mesh: MeshSpec) -> tuple[int, ...]:
    out = list(shape)
    for dim, parts in enumerate(split_factor(entries, mesh)):
        out[dim] //= parts
    return tuple(out)


def validate_request(request: CollectiveRequest) -> tuple[Collective, list[tuple[int, ...]]]:
    """Every check that needs no devices. Returns the collective and the global input shapes.

    Raises:
        ShardcliError: anything the run cannot do as asked.
    """
    collective = get_collective(request.collective)
    for name in sorted(request.set_params - collective.options):
        raise ShardcliError(
            f"{PARAM_FLAGS[name]} does not apply to {collective.name}; {_param_owner_hint(name)}"
        )
    if collective.numeric_only and request.dtype.kind == "bool":
        raise ShardcliError(f"{collective.name} needs a numeric --dtype, not bool")
    check_timing(request.iters, request.warmup)
    mesh = request.mesh
    n = group_size(request.params.axes, mesh.axis_sizes)
    entries = input_entries(request)
    shapes = global_shapes(request, collective)
    if request.values is not None:  # as many numbers as the shape holds, each one the dtype holds
        ArraySpec(shape=shapes[0], dtype=request.dtype, values=request.values)
    for shape in shapes:
        try:
            check_sharding_fits(ShardingSpec(entries), mesh, shape)
        except ShardcliError as e:
            if request.sharding is None and request.shape is None:
                raise ShardcliError(
                    f"{len(request.values or ())} --values cannot be split evenly over the "
                    f"{split_factor(entries, mesh)[0]} devices of axis {'+'.join(entries[0])}; "
                    f"give a multiple of {split_factor(entries, mesh)[0]} values"
                ) from e
            raise
        local = local_shape_of(shape, entries, mesh)
        if collective.validate is not None:
            collective.validate(local, request.params, n)
    if request.placement == Placement.IN:
        local = local_shape_of(shapes[0], entries, mesh)
        why = in_place_refusal(collective, local, request.params, n, request.dtype)
        if why is not None:
            out = collective.out_local_shape(local, request.params, n)
            if out != local:
                why = f"each device's result has shape {out} and its input {local}"
            raise ShardcliError(
                f"--placement in needs {collective.name}'s result to fit its input buffer, but {why}; "
                "use --placement out"
            )
    if request.show_values and request.sweep:
        raise ShardcliError("--show-values is for a single run; --sizes runs several sizes")
    if request.min_busbw is not None and not (math.isfinite(request.min_busbw) and request.min_busbw >= 0):
        raise ShardcliError(
            f"--min-busbw {request.min_busbw:g} is not a bandwidth; give a finite number of GB/s, 0 or more"
        )
    if request.min_busbw is not None and collective.bus_factor is None:
        raise ShardcliError(f"--min-busbw needs a collective that moves data; {collective.name} does not")
    return collective, shapes


def _param_owner_hint(name: str) -> str:
    from shardcli.playground.collective_cases import COLLECTIVES

    owners = [c.name for c in COLLECTIVES.values() if name in c.options]
    return f"it is for {', '.join(owners)}"


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
) -> dict[int, tuple[np.ndarray, np.ndarray | None, np.ndarray]]:
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


def _shard_map_program(
    collective: Collective,
    session: Session,
    request: CollectiveRequest,
    in_entries: Entries,
    out_entries: Entries,
    n: int,
    donate: str | None,
) -> Any:
    """jit(shard_map(collective)).

    Args:
        donate: "input": the input is donated (in place). "output": the program also takes an
            output buffer of the result's shape and sharding, unused but donated, so XLA writes
            the result into it. None: nothing donated; every call allocates its output.
    """
    import jax

    params = request.params

    def body(x: Any) -> Any:
        return collective.body(x, params, n)

    mapped = jax.shard_map(
        body, mesh=session.mesh, in_specs=partition_spec(in_entries), out_specs=partition_spec(out_entries)
    )
    if donate == "output":
        # keep_unused: jit would otherwise drop the unused buffer, and with it the donation.
        return jax.jit(lambda x, out: mapped(x), donate_argnums=(1,), keep_unused=True)
    return jax.jit(mapped, donate_argnums=(0,) if donate == "input" else ())


def _poison_filler(out_type: Any) -> Callable[[], Any]:
    """A function that makes an output buffer of `out_type` (shape, dtype, sharding) filled with
    a value a result rarely holds: NaN, ints their largest value, bools True.

    An element the program did not write keeps it, and the check against NumPy then counts it
    wrong (unless the expected value happens to be that very value).
    """
    import jax
    import jax.numpy as jnp

    dtype = out_type.dtype
    if jnp.issubdtype(dtype, jnp.inexact):  # NumPy's own check misses bfloat16
        fill: Any = np.nan
    elif dtype == np.bool_:
        fill = True
    else:
        fill = np.iinfo(dtype).max
    return jax.jit(lambda: jnp.full(out_type.shape, fill, dtype), out_shardings=out_type.sharding)


def _check_outputs(
    y: Any, expected: dict, collective: Collective
) -> tuple[int, tuple[int, ...], float, dict[int, np.ndarray]]:
    wrong_total, wrong_devices, max_err = 0, [], 0.0
    outputs = {}
    for shard in y.addressable_shards:
        dev = shard.device.id
        local = np.asarray(shard.data)
        outputs[dev] = local
        want, bound, _ = expected[dev]
        cmp = compare_exact(local, want) if bound is None else compare_within(local, want, bound)
        wrong_total += cmp.wrong
        max_err = max(max_err, cmp.max_abs_err)
        if cmp.wrong:
            wrong_devices.append(dev)
    return wrong_total, tuple(sorted(wrong_devices)), max_err, outputs


def _buffer_pointer(array: Any) -> int | None:
    try:
        return int(array.addressable_shards[0].data.unsafe_buffer_pointer())
    except Exception:  # noqa: BLE001 - not every backend exposes it
        return None


def run_size(
    session: Session,
    request: CollectiveRequest,
    collective: Collective,
    shape: tuple[int, ...],
    show_values: bool,
    roofline: Roofline | None = None,
) -> SizeRun:
    """Run one input size in the requested placements."""
    import jax
    from jax.sharding import NamedSharding

    mesh = request.mesh
    params = request.params
    n = group_size(params.axes, mesh.axis_sizes)
    in_entries = input_entries(request)
    rank = len(shape)
    out_entries = collective.out_entries(in_entries, params, rank)
    local = local_shape_of(shape, in_entries, mesh)
    out_local = collective.out_local_shape(local, params, n)
    # every out_entries rule gives one entry per output dim
    out_global = tuple(d * p for d, p in zip(out_local, split_factor(out_entries, mesh), strict=True))
    host = _host_input(request, shape)
    coords_of = {c.device_id: dict(zip(mesh.axes, c.coords, strict=True)) for c in session.layout.cells}
    device_ids = [c.device_id for c in session.layout.cells]
    expected = _expected_outputs(collective, request, host, in_entries, n, coords_of)
    in_sharding = NamedSharding(session.mesh, partition_spec(in_entries))
    itemsize = host.dtype.itemsize
    bytes_per_device = math.prod(local) * itemsize
    factor = busbw_factor(collective, n)
    algbw_bytes = collective.algbw_bytes(bytes_per_device, n) if collective.algbw_bytes else None
    sent = int(round(factor * algbw_bytes)) if factor is not None and algbw_bytes is not None else None
    need = min_bytes(
        collective,
        bytes_per_device,
        n,
        groups=mesh.size // n,
        senders=collective.senders(params, n) if collective.senders is not None else None,
    )
    roofline_s = None
    if roofline is not None and roofline.basis == "host memory" and need is not None:
        assert roofline.bandwidth_bytes_per_s is not None
        roofline_s = need.total / roofline.bandwidth_bytes_per_s

    both = (Placement.OUT, Placement.IN)
    placements = both if request.placement == Placement.BOTH else (request.placement,)
    runs: list[PlacementRun] = []
    first_outputs: dict[int, np.ndarray] | None = None
    hlo: tuple[HloCollective, ...] = ()
    global_output = None
    for placement in placements:
        donate = placement == Placement.IN
        not_run = in_place_refusal(collective, local, params, n, request.dtype) if donate else None
        if not_run is not None:
            runs.append(
                PlacementRun(
                    placement,
                    None,
                    None,
                    None,
                    0,
                    (),
                    0.0,
                    None,
                    (),
                    not_run=not_run,
                )
            )
            continue
        preallocated = not donate and request.out_buffer == OutBuffer.PREALLOCATED
        program = _shard_map_program(
            collective,
            session,
            request,
            in_entries,
            in_entries if donate else out_entries,
            n,
            "input" if donate else "output" if preallocated else None,
        )
        x = place_array(host, in_sharding)
        if donate:
            # On CPU the placed blocks may borrow NumPy's memory, which XLA cannot write into;
            # donate a buffer the runtime owns, as an in-place user would.
            x = jax.device_put(x, in_sharding, may_alias=False)
        if preallocated:
            out_sharding = NamedSharding(session.mesh, partition_spec(out_entries))
            # The result's dtype is not always the input's (axis_index gives int32). The program
            # never reads its out argument, so x stands in for it here.
            out_type = jax.ShapeDtypeStruct(
                out_global, jax.eval_shape(program, x, x).dtype, sharding=out_sharding
            )
            poisoned = _poison_filler(out_type)
            compiled, compile_s, cached = compile_timed(program, x, out_type)
        else:
            compiled, compile_s, cached = compile_timed(program, x)
        hlo = find_collectives(compiled.as_text())  # the kinds and counts: no memory or cost analysis
        if donate:
            # Verify the first in-place result, then keep feeding outputs back in.
            before = _buffer_pointer(x)
            y = compiled(x)
            after = _buffer_pointer(y)
            aliased = before is not None and before == after
            wrong, wrong_devices, max_err, outputs = _check_outputs(y, expected, collective)
            samples, _ = time_iterations(compiled, y, warmup=request.warmup, iters=request.iters, chain=True)
        elif preallocated:
            samples, y = time_iterations(
                compiled, x, warmup=request.warmup, iters=request.iters, out=poisoned()
            )
            # The timed calls all wrote into one buffer, so it would hold the first call's result
            # even if later calls wrote nothing. Verify one more call of the same executable into
            # a freshly poisoned buffer (NaN, or the dtype's largest value).
            y = None  # free the timed result before making that buffer
            out = poisoned()
            before = _buffer_pointer(out)
            y = compiled(x, out)
            aliased = before is not None and before == _buffer_pointer(y)
        else:
            aliased = None
            samples, y = time_iterations(compiled, x, warmup=request.warmup, iters=request.iters)
        if not donate:
            # Verify what the program returned: the last timed call's result, or with the
            # preallocated buffer the extra call's.
            wrong, wrong_devices, max_err, outputs = _check_outputs(y, expected, collective)
            if show_values and y.is_fully_addressable:
                global_output = np.asarray(jax.device_get(y))
        # Several processes: every one must see the same verdict and the whole run's timing.
        wrong, wrong_devices, max_err = combine_check(wrong, wrong_devices, max_err, device_ids)
        timing = combine_timing(
            Timing(
                compile_s=compile_s,
                warmup=request.warmup,
                samples=samples,
                stats=summarize(samples),
                compile_cached=cached,
            ),
            request.options.process_timing,
        )
        stats = timing.stats
        algbw = algbw_bytes / stats.p50 / 1e9 if algbw_bytes is not None else None
        busbw = algbw * factor if algbw is not None and factor is not None else None
        runs.append(
            PlacementRun(
                placement=placement,
                timing=timing,
                algbw=algbw,
                busbw=busbw,
                wrong=wrong,
                wrong_devices=wrong_devices,
                max_abs_err=max_err,
                aliased=aliased,
                hlo=hlo,
                out_buffer=None if donate else request.out_buffer,
                roofline_fraction=_roofline_fraction(roofline, roofline_s, stats.p50, busbw),
            )
        )
        if first_outputs is None:
            first_outputs = outputs

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
                group=_group_key(params.axes, mesh, coords),
                position=_position(params.axes, mesh, coords),
                input=expected[cell.device_id][2] if show_values else None,
                output=first_outputs.get(cell.device_id) if show_values and first_outputs else None,
                wrong=wrong_here,
            )
        )
    missing = None
    if collective.hlo_op is not None and n > 1 and collective.hlo_op not in {h.op for h in hlo}:
        missing = collective.hlo_op
    return SizeRun(
        global_shape=shape,
        local_shape=local,
        out_global_shape=out_global,
        out_local_shape=out_local,
        in_entries=tuple(in_entries),
        out_entries=out_entries,
        bytes_per_device=bytes_per_device,
        count=math.prod(local),
        algbw_bytes=algbw_bytes,
        sent_bytes=sent,
        placements=tuple(runs),
        devices=tuple(devices),
        global_input=host if show_values else None,
        global_output=global_output,
        tolerance=_tolerance_text(collective, host.dtype),
        missing_op=missing,
        min_bytes=need,
        roofline_s=roofline_s,
    )


def _roofline_fraction(
    roofline: Roofline | None, roofline_s: float | None, p50: float, busbw: float | None
) -> float | None:
    if roofline is None or roofline.basis is None:
        return None
    if roofline.basis == "host memory":
        return roofline_s / p50 if roofline_s is not None and p50 > 0 else None
    assert roofline.bandwidth_bytes_per_s is not None
    return busbw * 1e9 / roofline.bandwidth_bytes_per_s if busbw is not None else None


def resolve_roofline(session: Session, collective: Collective) -> Roofline:
    """The bandwidth this run is held against (see `Roofline`); measured once per process on CPU."""
    rt = session.runtime
    if rt.platform == "cpu":
        if rt.process_count > 1:
            return Roofline(
                None,
                None,
                "not available: with several processes the data crosses gloo sockets, not one "
                "process's memory",
            )
        from shardcli.playground.roofline import host_copy_bandwidth
        from shardcli.runtime.cache import cache_state

        copy = host_copy_bandwidth(cache_state().directory)
        return Roofline(
            "host memory",
            copy.bytes_per_s,
            copy.describe(),
            min_bytes_rule(collective),
            measured_at=copy.measured_at,
            cached=copy.cached,
            warning=copy.warning,
        )
    from shardcli.hardware.costmodel import lookup_peak

    entry = lookup_peak(rt.device_kind)
    if entry is None:
        return Roofline(
            None, None, f"not available: no link bandwidth in the device table for {rt.device_kind!r}"
        )
    link = entry.link_bytes_per_s
    return Roofline(
        "link",
        link.value,
        f"{link.value / 1e9:g} GB/s link bandwidth (table: {entry.label}, {link.source})",
    )


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


def run_collective(
    request: CollectiveRequest,
    progress: Callable[[int, int, int], None] | None = None,
    session: Session | None = None,
) -> CollectiveResult:
    """Run the request: one SizeRun per size.

    The request is checked once, where it is built:
    `shardcli.commands.collective_requests.build_collective_requests` validates every request before
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
    biggest = max(shapes, key=math.prod)
    per_device, total = _memory_estimate(request, collective, biggest)
    per_device_input = (
        math.prod(local_shape_of(biggest, input_entries(request), request.mesh)) * request.dtype.itemsize
    )
    if session is None:
        session = open_session(request.mesh, request.options, x64=request.dtype.needs_x64)
    check_fits_in_memory(
        session.runtime,
        list(session.devices),
        per_device=per_device,
        total=total,
        what=f"{collective.name} with {format_bytes(per_device_input)} per device",
    )
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
    return CollectiveResult(
        session=session,
        request=request,
        collective=collective,
        group_size=n,
        n_groups=request.mesh.size // n,
        runs=tuple(runs),
        avg_busbw=averages,
        avg_over=avg_over,
        # A fit of time against bytes moved: only for collectives that move data, and only for
        # placements that ran.
        fits={
            placement: fit_sizes(tuple(runs), placement)
            for placement in averages
            if collective.algbw_bytes is not None
            and any(p.placement == placement and p.timing is not None for r in runs for p in r.placements)
        },
        roofline=roofline,
    )
