"""What `shardcli collective` is asked: the request, its input shapes and how each lies on the mesh,
and every check on it that needs no devices.

`collective.placement` runs one size in one placement, `collective.size` one size in every
placement asked, `collective` every size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from shardcli.errors import ShardcliError
from shardcli.playground.collective.cases import (
    PARAM_FLAGS,
    busbw_factor,
    get_collective,
    group_size,
    in_place_refusal,
)
from shardcli.playground.collective.entries import Collective, CollectiveParams, Entries
from shardcli.playground.roofline import MinBytes, min_bytes
from shardcli.specs.meshes import MeshSpec, ShardingSpec, check_sharding_fits
from shardcli.specs.runs import OutBuffer, Placement, RunOptions, check_timing
from shardcli.specs.values import ArraySpec, DType, format_bytes

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


@dataclass(frozen=True)
class SizeLayout:
    """One input size on the mesh: its shapes and shardings, and the bytes each device moves."""

    n: int  # devices in each group
    in_entries: Entries
    out_entries: Entries
    local: tuple[int, ...]
    out_local: tuple[int, ...]
    out_global: tuple[int, ...]
    bytes_per_device: int
    factor: float | None  # busbw / algbw
    algbw_bytes: int | None  # S in nccl-tests' algbw = S / t
    sent: int | None  # bytes each device sends in the ring algorithm
    min_bytes: MinBytes | None  # read + written at least, all devices of this process


def size_layout(
    request: CollectiveRequest, collective: Collective, shape: tuple[int, ...], itemsize: int
) -> SizeLayout:
    """How `shape` lies on the mesh; `itemsize` is the host input's bytes per element."""
    mesh = request.mesh
    params = request.params
    n = group_size(params.axes, mesh.axis_sizes)
    in_entries = input_entries(request)
    out_entries = collective.out_entries(in_entries, params, len(shape))
    local = local_shape_of(shape, in_entries, mesh)
    out_local = collective.out_local_shape(local, params, n)
    # every out_entries rule gives one entry per output dim
    out_global = tuple(d * p for d, p in zip(out_local, split_factor(out_entries, mesh), strict=True))
    bytes_per_device = math.prod(local) * itemsize
    factor = busbw_factor(collective, n)
    algbw_bytes = collective.algbw_bytes(bytes_per_device, n) if collective.algbw_bytes else None
    sent = int(round(factor * algbw_bytes)) if factor is not None and algbw_bytes is not None else None
    return SizeLayout(
        n=n,
        in_entries=tuple(in_entries),
        out_entries=out_entries,
        local=local,
        out_local=out_local,
        out_global=out_global,
        bytes_per_device=bytes_per_device,
        factor=factor,
        algbw_bytes=algbw_bytes,
        sent=sent,
        min_bytes=min_bytes(
            collective,
            bytes_per_device,
            n,
            groups=mesh.size // n,
            senders=collective.senders(params, n) if collective.senders is not None else None,
        ),
    )


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
    from shardcli.playground.collective.cases import COLLECTIVES

    owners = [c.name for c in COLLECTIVES.values() if name in c.options]
    return f"it is for {', '.join(owners)}"
