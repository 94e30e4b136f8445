"""How each mesh axis lies on the hardware: its bandwidth per device, one way round, and why.

The step-time estimate's links (`analysis.step_time`): on a TPU from where each chip sits on the
torus, on a GPU from the hosts the axis spans (NVLink within one; across hosts each GPU's share of
its host's NICs times the axis's GPUs on each host, as NCCL's channels run over that many rails at
once, `hardware.hosts`), and with a measured profile (--hardware) from its bus bandwidth over an
axis of that size. On several TPU slices (`--slices`) an axis whose devices lie in more than one
slice moves at one chip's share of its host's data-center network (`hardware.slices`). Pure Python
over plain data; `places_of_mesh` and `slices_of_mesh` read a JAX mesh's devices by their
attributes without importing JAX.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shardcli.hardware.chips import Chip, Figure
from shardcli.hardware.hosts import axis_network_bytes_per_s
from shardcli.hardware.profile import HardwareProfile
from shardcli.hardware.slices import dcn_figure


@dataclass(frozen=True)
class AxisLink:
    """How fast one mesh axis moves bytes, per device, one way round, and why."""

    axis: str
    size: int
    bytes_per_s: float | None
    how: str  # "ICI along torus dim of 16 chips, 2 ways x 45 GB/s (wraps around)"
    source: str


def axis_links(
    chip: Chip,
    mesh_shape: tuple[int, ...],
    axis_names: tuple[str, ...],
    places: Sequence[tuple[int, ...]],
    network: Figure | None = None,
    slices: Sequence[int] | None = None,
) -> dict[str, AxisLink]:
    """The bandwidth of each mesh axis, from where each device sits.

    Args:
        chip: the hardware table's entry.
        mesh_shape, axis_names: the mesh.
        places: per device in the mesh's (row-major) order, its place: on a TPU the chip's torus
            coordinates then the core on the chip, (x, y, z, core); on a GPU (host, gpu).
        network: on GPUs, one GPU's share of the network between hosts (a target's host type or
            --network); default the chip's (its generation's default host, a DGX).
        slices: on several TPU slices, each device's slice (`slices_of_mesh`), in the mesh's order.
    """
    n = math.prod(mesh_shape)
    if len(places) != n:
        raise ValueError(f"{len(places)} device places for a mesh of {n} devices")
    grid = [tuple(p) for p in places]
    links = {}
    for a, name in enumerate(axis_names):
        line = [grid[_flat(mesh_shape, a, i)] for i in range(mesh_shape[a])]
        spans = {slices[_flat(mesh_shape, a, i)] for i in range(mesh_shape[a])} if slices else set()
        if len(spans) > 1:
            links[name] = _dcn_link(chip, name, len(line), len(spans))
        elif chip.platform == "tpu":
            links[name] = _tpu_link(chip, name, line, grid)
        else:
            links[name] = _gpu_link(chip, name, line, network or chip.network_bytes_per_s)
    return links


def _flat(shape: tuple[int, ...], axis: int, i: int) -> int:
    """The flat index of the device at position i along `axis`, 0 on every other axis."""
    stride = math.prod(shape[axis + 1 :])
    return i * stride


def _tpu_link(chip: Chip, name: str, line: list[tuple[int, ...]], grid: list[tuple[int, ...]]) -> AxisLink:
    ici = chip.link_bytes_per_s
    rank = len(grid[0]) - 1
    torus = tuple(max(p[d] for p in grid) + 1 for d in range(rank))
    varying = [d for d in range(rank) if len({p[d] for p in line}) > 1]
    if len(line) == 1:
        return AxisLink(name, 1, None, "one device: sends nothing", ici.source)
    if not varying:  # the devices of one chip
        hbm = chip.hbm_bytes_per_s
        return AxisLink(name, len(line), hbm.value, "the cores of one chip share its HBM", hbm.source)
    ways = []
    for d in varying:
        whole = len({p[d] for p in line}) == torus[d]
        ways.append(2 if whole and chip.wraps(torus[d], torus) else 1)
    dims = "x".join(str(torus[d]) for d in varying)
    how = (
        f"ICI along torus dim{'s' * (len(varying) > 1)} of {dims} chips, "
        + " + ".join(f"{w} way{'s' * (w > 1)}" for w in ways)
        + f" x {ici.value / 1e9:g} GB/s"
        + (" (wraps around)" if 2 in ways else " (no wraparound)")
    )
    return AxisLink(name, len(line), sum(ways) * ici.value, how, f"{ici.source}; {chip.wrap}")


def _dcn_link(chip: Chip, name: str, size: int, spans: int) -> AxisLink:
    """An axis across TPU slices: its ring runs through the data-center network at each chip's share
    of its host's NICs (the ICI hops within a slice are faster, so the network bounds it)."""
    dcn = dcn_figure(chip.name)
    if dcn is None:
        return AxisLink(name, size, None, f"across {spans} slices: no DCN figure for {chip.name}", "")
    how = f"across {spans} slices: the data-center network, {dcn.value / 1e9:g} GB/s a chip"
    return AxisLink(name, size, dcn.value, how, dcn.source)


def _gpu_link(chip: Chip, name: str, line: list[tuple[int, ...]], net: Figure | None) -> AxisLink:
    if len(line) == 1:
        return AxisLink(name, 1, None, "one device: sends nothing", chip.link_bytes_per_s.source)
    per_host = Counter(p[0] for p in line)
    link = chip.link_bytes_per_s
    if len(per_host) == 1 or net is None:
        return AxisLink(
            name, len(line), link.value, f"NVLink within a host, {link.value / 1e9:g} GB/s", link.source
        )
    rails = min(per_host.values())  # the axis's GPUs on each host: NCCL's channels out of it at once
    rate = axis_network_bytes_per_s(net.value, rails, link.value)
    how = f"across {len(per_host)} hosts: the network, {net.value / 1e9:g} GB/s per GPU"
    if rails > 1:
        capped = " (NVLink's, less)" if rate < net.value * rails else ""
        how += f" x {rails} GPUs a host = {rate / 1e9:g} GB/s{capped}"
    return AxisLink(name, len(line), rate, how, net.source)


def places_of_mesh(mesh: Any, chip: Chip) -> list[tuple[int, ...]]:
    """Each device's place (see `axis_links`), read from the JAX devices' attributes."""
    places = []
    for device in mesh.devices.flat:
        if chip.platform == "tpu":
            coords = tuple(int(c) for c in getattr(device, "coords", (0, 0, 0)))
            places.append((*coords, int(getattr(device, "core_on_chip", 0))))
        else:
            places.append((int(getattr(device, "process_index", 0)), int(getattr(device, "id", 0))))
    return places


def slices_of_mesh(mesh: Any) -> list[int] | None:
    """Each device's TPU slice (`slice_index`), in the mesh's order; None where all are in one."""
    indices = [int(getattr(device, "slice_index", 0) or 0) for device in mesh.devices.flat]
    return indices if len(set(indices)) > 1 else None


def devices_per_chip(
    places: Sequence[tuple[int, ...]], chip: Chip, slices: Sequence[int] | None = None
) -> int:
    """How many devices share one chip (v4's two TensorCores under libtpu's topology: 2).

    A chip is its coords within its slice: every slice of a multislice topology repeats the same
    coords (`slices`: each device's slice, as `slices_of_mesh` gives them), and N slices are N times
    the chips, not N devices sharing each."""
    if chip.platform != "tpu" or not places:
        return 1
    where = slices if slices is not None and len(slices) == len(places) else [0] * len(places)
    chips = {(s, *p[:-1]) for s, p in zip(where, places, strict=True)}
    return max(1, len(places) // len(chips))


def profiled_links(
    profile: HardwareProfile, links: dict[str, AxisLink], names: tuple[str, ...], shape: tuple[int, ...]
) -> dict[str, AxisLink]:
    """Each mesh axis's bandwidth from the profile's bus bandwidth over an axis of its size; an axis
    that crosses hosts keeps the table's network figure (a profile is measured on one host)."""
    out = dict(links)
    for name, size in zip(names, shape, strict=True):
        table = links.get(name)
        bus = profile.bus(size)
        if (table is not None and table.how.startswith("across")) or bus is None:
            continue
        how = f"{bus.collective} busbw over {bus.group_size} devices, {bus.busbw / 1e9:.3g} GB/s"
        out[name] = AxisLink(name, size, bus.busbw, how, f"{profile.label}: {bus.how}")
    return out
