"""`shardcli shard`: place an array with a PartitionSpec and describe every device's block."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardcli.errors import ShardcliError
from shardcli.runtime.arrays import make_host_array, place_array
from shardcli.runtime.memory import check_fits_in_memory
from shardcli.runtime.mesh import partition_spec
from shardcli.runtime.processes import combine_check
from shardcli.runtime.session import Session, open_session
from shardcli.specs.meshes import MeshSpec, ShardingSpec, check_sharding_fits
from shardcli.specs.runs import ShardRequest
from shardcli.specs.values import ArraySpec
from shardcli.tile_math import Index, ShardingLayout, group_tiles, normalize_index

# Arrays up to this many elements show their values without being asked (and in JSON).
AUTO_VALUES_MAX = 256
# --show-values refuses arrays larger than this: the output would be unreadable.
SHOW_VALUES_MAX = 1024


@dataclass(frozen=True)
class DeviceShard:
    """One device's block of a global array."""

    device_id: int
    coords: tuple[int, ...]
    process_index: int
    index: Index
    local_shape: tuple[int, ...]
    nbytes: int
    values: np.ndarray | None


@dataclass(frozen=True)
class ShardResult:
    """What placing the array produced."""

    session: Session
    request: ShardRequest
    jax_sharding: Any
    jax_type: str
    layout: ShardingLayout
    shards: tuple[DeviceShard, ...]
    global_values: np.ndarray | None
    wrong_devices: tuple[int, ...]  # devices whose block differs from the NumPy array's slice

    @property
    def ok(self) -> bool:
        return not self.wrong_devices


def local_shape(array: ArraySpec, sharding: ShardingSpec, mesh: MeshSpec) -> tuple[int, ...]:
    """Each device's block shape, computed without devices."""
    sizes = mesh.axis_sizes
    shape = list(array.shape)
    for dim, entry in enumerate(sharding.entries):
        shape[dim] //= math.prod(sizes[a] for a in entry)
    return tuple(shape)


def resolve_show_values(show_values: bool | None, size: int, flag: str = "--show-values") -> bool:
    """Automatic for small arrays; refuse an explicit request for a large one."""
    if show_values is None:
        return size <= AUTO_VALUES_MAX
    if show_values and size > SHOW_VALUES_MAX:
        raise ShardcliError(
            f"{flag} prints arrays of up to {SHOW_VALUES_MAX} elements; this one has {size}; "
            f"use a smaller --shape or --format json without {flag}"
        )
    return show_values


def validate_shard_request(request: ShardRequest) -> bool:
    """All the checks that need no devices; returns whether values are shown."""
    check_sharding_fits(request.sharding, request.mesh, request.array.shape)
    if request.view_dims is not None and len(request.array.shape) < 2:
        raise ShardcliError("--view-dims needs an array of rank 2 or more")
    return resolve_show_values(request.show_values, request.array.size)


def run_shard(request: ShardRequest) -> ShardResult:
    """Place the requested array on the mesh and describe the result.

    Raises:
        ShardcliError: bad input found before allocating (spec, sizes, memory).
    """
    show_values = validate_shard_request(request)
    session = open_session(request.mesh, request.options, x64=request.array.dtype.needs_x64)
    per_device = math.prod(local_shape(request.array, request.sharding, request.mesh))
    per_device_bytes = per_device * request.array.dtype.itemsize
    check_fits_in_memory(
        session.runtime,
        list(session.devices),
        per_device=per_device_bytes,
        # the host copy plus one block per device
        total=request.array.nbytes + per_device_bytes * request.mesh.size,
        what=f"--shape {'x'.join(map(str, request.array.shape))} {request.array.dtype.name}",
    )
    import jax
    from jax.sharding import NamedSharding

    sharding = NamedSharding(session.mesh, partition_spec(request.sharding.entries))
    host = make_host_array(request.array)
    array = place_array(host, sharding)
    shape = request.array.shape

    by_device = {s.device.id: s for s in array.addressable_shards}
    shards = []
    wrong = []
    for cell in session.layout.cells:
        shard = by_device.get(cell.device_id)
        if shard is None:  # held by another process
            continue
        index = normalize_index(shard.index, shape)
        local = np.asarray(shard.data)
        expected = host[tuple(slice(a, b) for a, b in index)]
        if not np.array_equal(local, expected):
            wrong.append(cell.device_id)
        shards.append(
            DeviceShard(
                device_id=cell.device_id,
                coords=cell.coords,
                process_index=cell.process_index,
                index=index,
                local_shape=tuple(local.shape),
                nbytes=int(local.nbytes),
                values=local if show_values else None,
            )
        )
    index_map = {
        # jax annotates the keys with `Device = xc.Device`, an alias mypy cannot use as a type
        d.id: normalize_index(idx, shape)  # type: ignore[attr-defined]
        for d, idx in sharding.devices_indices_map(shape).items()
    }
    return ShardResult(
        session=session,
        request=request,
        jax_sharding=sharding,
        jax_type=str(jax.typeof(array)),
        layout=group_tiles(shape, index_map),
        shards=tuple(shards),
        global_values=host if show_values else None,
        # several processes: each checked its own devices; every one reports them all
        wrong_devices=combine_check(len(wrong), wrong, 0.0, [c.device_id for c in session.layout.cells])[1],
    )
