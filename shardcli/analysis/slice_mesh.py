"""A mesh over several TPU slices: ICI within each slice, the data-center network across them.

`multislice_mesh` lays a target's devices (libtpu's compile-only multislice topology, each device
with its `slice_index`) as JAX's `mesh_utils.create_hybrid_device_mesh` does for MaxText: each mesh
axis is its ICI part within a slice times its DCN part across slices, the DCN part outermost. How
many slices each axis spans comes from `hardware.slices.dcn_split` unless the caller (plan's
layouts) says.
"""

from __future__ import annotations

import math
from typing import Any

from shardcli.errors import ShardcliError
from shardcli.hardware.slices import dcn_split


def multislice_mesh(
    devices: list[Any],
    shape: tuple[int, ...],
    axes: tuple[str, ...],
    slices: int,
    dcn: tuple[int, ...] | None = None,
) -> tuple[Any, str]:
    """The mesh over `slices` slices, and in words how its devices were laid.

    Args:
        devices: every device of every slice (each with `slice_index`).
        shape, axes: the mesh.
        slices: how many slices.
        dcn: the slices each mesh axis spans (product `slices`); default `dcn_split`'s.

    Raises:
        ShardcliError: `dcn` that does not divide the mesh, or a mesh that cannot be laid (one line).
    """
    import jax
    from jax.experimental import mesh_utils

    if dcn is None:
        dcn = dcn_split(shape, axes, slices)
    if (
        len(dcn) != len(shape)
        or math.prod(dcn) != slices
        or any(s % d for s, d in zip(shape, dcn, strict=True))
    ):
        raise ShardcliError(
            f"the mesh {'x'.join(map(str, shape))} cannot span {slices} slices as {'x'.join(map(str, dcn))}"
        )
    ici = tuple(s // d for s, d in zip(shape, dcn, strict=True))
    try:
        grid = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices=devices)
        how = "along each slice's torus"
    except (NotImplementedError, ValueError, AssertionError):  # an ICI shape that splits a torus axis
        grid = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices=devices, allow_split_physical_axes=True)
        how = "splitting a torus axis of each slice"
    across = ", ".join(f"{a} over {n}" for a, n in zip(axes, dcn, strict=True) if n > 1)
    order = (
        f"jax.experimental.mesh_utils.create_hybrid_device_mesh: ICI {'x'.join(map(str, ici))} {how}, "
        f"the data-center network across slices for {across or 'no axis'}"
    )
    return jax.sharding.Mesh(grid, axes), order
