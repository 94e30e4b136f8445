"""Building a JAX mesh from a MeshSpec, and describing it as plain data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shardcli.errors import ShardcliError
from shardcli.specs.meshes import MeshSpec, ShardingSpec


def partition_spec(entries: tuple[tuple[str, ...], ...]) -> Any:
    """`jax.sharding.PartitionSpec` of a spec held as plain data (mesh axes per array dim)."""
    from jax.sharding import PartitionSpec

    return PartitionSpec(*ShardingSpec(tuple(entries)).to_partition_spec_args())


def explicit_twin(mesh: Any) -> Any:
    """The same devices and axis names with Explicit axes (for the explicit-axes way of a program)."""
    import jax
    from jax.sharding import AxisType

    return jax.sharding.Mesh(
        mesh.devices, mesh.axis_names, axis_types=(AxisType.Explicit,) * len(mesh.axis_names)
    )


def entries_of(sharding: Any, rank: int) -> tuple[tuple[str, ...], ...] | None:
    """The mesh axes per dim of a JAX sharding (None where it has no PartitionSpec)."""
    spec = getattr(sharding, "spec", None)
    return None if spec is None else entries_of_spec(spec, rank)


def entries_of_spec(spec: Any, rank: int) -> tuple[tuple[str, ...], ...]:
    """A PartitionSpec (or a tuple like one) as the mesh axes of each of `rank` dims."""
    out: list[tuple[str, ...]] = []
    for i in range(rank):
        entry = spec[i] if i < len(spec) else None
        if entry is None:
            out.append(())
        elif isinstance(entry, str):
            out.append((entry,))
        else:
            out.append(tuple(entry))
    return tuple(out)


@dataclass(frozen=True)
class MeshCell:
    """One device of the mesh, at its mesh coordinates."""

    device_id: int
    coords: tuple[int, ...]
    process_index: int
    platform: str
    device_kind: str


@dataclass(frozen=True)
class MeshLayout:
    """The mesh as data: shape, axis names, axis types and every device's position."""

    shape: tuple[int, ...]
    axes: tuple[str, ...]
    axis_types: tuple[str, ...]
    cells: tuple[MeshCell, ...]  # in row-major order of the mesh coordinates

    def cell_at(self, coords: tuple[int, ...]) -> MeshCell:
        return self.cells[int(np.ravel_multi_index(coords, self.shape))]

    def coords_of(self, device_id: int) -> tuple[int, ...]:
        for cell in self.cells:
            if cell.device_id == device_id:
                return cell.coords
        raise KeyError(device_id)


def build_mesh(spec: MeshSpec, devices: list[Any] | None = None, mode: str = "auto") -> Any:
    """Build a `jax.sharding.Mesh` of the spec's shape over the given devices.

    Args:
        spec: mesh shape and axis names.
        devices: devices to use (the first `spec.size`); default `jax.devices()`.
        mode: "auto" for Auto axes (the compiler propagates shardings), "explicit" for Explicit axes
            (shardings are part of the array type).

    Raises:
        ShardcliError: too few devices.
    """
    import jax
    from jax.sharding import AxisType

    if devices is None:
        devices = jax.devices()
    if len(devices) < spec.size:
        raise ShardcliError(
            f"--mesh {'x'.join(map(str, spec.shape))} needs {spec.size} devices but only "
            f"{len(devices)} are available; use a smaller mesh"
        )
    axis_type = AxisType.Explicit if mode == "explicit" else AxisType.Auto
    devices = list(devices[: spec.size])
    if len({d.process_index for d in devices}) > 1:
        # Keep the given order (process by process) so the leading axes span processes;
        # make_mesh may reorder devices for a single host's topology.
        return jax.sharding.Mesh(
            np.asarray(devices, dtype=object).reshape(spec.shape),
            spec.axes,
            axis_types=(axis_type,) * len(spec.axes),
        )
    return jax.make_mesh(
        spec.shape,
        spec.axes,
        axis_types=(axis_type,) * len(spec.axes),
        devices=devices,
    )


def describe_mesh(mesh: Any) -> MeshLayout:
    """Plain description of a mesh: which device sits at which coordinates."""
    devices = np.asarray(mesh.devices)
    cells = []
    for coords in np.ndindex(devices.shape):
        device: Any = devices[coords]  # a jax Device: numpy types the cell of an object array as an array
        cells.append(
            MeshCell(
                device_id=int(device.id),
                coords=tuple(int(c) for c in coords),
                process_index=int(device.process_index),
                platform=str(device.platform),
                device_kind=str(device.device_kind),
            )
        )
    return MeshLayout(
        shape=tuple(int(n) for n in devices.shape),
        axes=tuple(str(a) for a in mesh.axis_names),
        axis_types=tuple(t.name for t in mesh.axis_types),
        cells=tuple(cells),
    )
