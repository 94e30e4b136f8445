"""Layouts over several TPU slices (`plan --slices N`), as MaxText lays them. Pure Python.

MaxText's mesh is its ICI mesh within one slice times its DCN mesh across slices
(`ici_*_parallelism` x `dcn_*_parallelism`, joined by `create_hybrid_device_mesh`); by default the
slices are data parallel (`dcn_data_parallelism: -1`), and FSDP across slices is the other choice
its configs make. Here every layout of one slice (`candidates.mesh_choices`) is joined with every
split of the slices between data (first) and fsdp (second); the tensor and sequence axes, which
move activations every layer, never cross the data-center network.
"""

from __future__ import annotations

import math

from shardcli.errors import ShardcliError
from shardcli.plan.candidates import MESH_AXES, MeshChoice, mesh_choices

DCN_AXES = ("data", "fsdp")  # the axes that may span slices, in the order MaxText fills them


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def dcn_splits(slices: int) -> list[tuple[tuple[str, int], ...]]:
    """Each way of spreading `slices` over data and fsdp, data's share largest first:
    ((data, 2),) then ((fsdp, 2),) for two slices."""
    out = []
    for data in sorted(_divisors(slices), reverse=True):
        fsdp = slices // data
        out.append(tuple((a, n) for a, n in (("data", data), ("fsdp", fsdp)) if n > 1))
    return out


def joined(ici: MeshChoice, dcn: tuple[tuple[str, int], ...], sequence: bool) -> MeshChoice:
    """One slice's mesh `ici` times the slices each axis spans: the whole mesh's sizes, outermost first."""
    spans = dict(dcn)
    names = MESH_AXES if sequence else tuple(a for a in MESH_AXES if a != "sequence")
    sizes = tuple((a, ici.size(a) * spans.get(a, 1)) for a in names if ici.size(a) * spans.get(a, 1) > 1)
    return MeshChoice(sizes, ici.aligned, dcn)


def multislice_mesh_choices(
    torus: tuple[int, ...], slices: int, *, sequence: bool = False, aligned_only: bool = True
) -> list[MeshChoice]:
    """Every layout over `slices` copies of a slice of `torus`: each of one slice's meshes joined
    with each split of the slices over data and fsdp (`dcn_splits`)."""
    out: list[MeshChoice] = []
    for ici in mesh_choices(torus, sequence=sequence, aligned_only=aligned_only):
        for dcn in dcn_splits(slices):
            mesh = joined(ici, dcn, sequence)
            if mesh not in out:
                out.append(mesh)
    return out


def named_multislice_mesh(
    torus: tuple[int, ...], slices: int, sizes: tuple[tuple[str, int], ...]
) -> list[MeshChoice]:
    """The one mesh `--mesh` names over `slices` slices: data takes the slices first, then fsdp
    (MaxText's dcn_data_parallelism, then dcn_fsdp_parallelism), and what is left of each axis lies
    within a slice.

    Raises:
        ShardcliError: data and fsdp cannot take the slices, or what is left is no mesh of one slice.
    """
    named = dict(sizes)
    left, dcn = slices, []
    for axis in DCN_AXES:
        take = math.gcd(named.get(axis, 1), left)
        if take > 1:
            dcn.append((axis, take))
        left //= take
    text = ",".join(f"{a}={n}" for a, n in sizes)
    if left != 1:
        raise ShardcliError(
            f"--mesh {text} cannot span {slices} slices: only data and fsdp cross the data-center network "
            f"(data first), and their sizes leave {left} over; make data x fsdp a multiple of {slices}"
        )
    for mesh in mesh_choices(torus, sequence="sequence" in named, aligned_only=False):
        found = joined(mesh, tuple(dcn), "sequence" in named)
        if found.sizes == sizes:
            return [found]
    raise ShardcliError(f"--mesh {text} over {slices} slices leaves no mesh of one slice")  # pragma: no cover


def slice_meshes(
    torus: tuple[int, ...], slices: int, sequence: bool, named: tuple[tuple[str, int], ...] | None
) -> list[MeshChoice] | None:
    """plan's meshes over `slices` slices of `torus` (the one --mesh names, or every one); None for
    one slice (`candidates.enumerate_candidates` lays those out)."""
    if slices <= 1:
        return None
    if named is not None:
        return named_multislice_mesh(torus, slices, named)
    return multislice_mesh_choices(torus, slices, sequence=sequence)
