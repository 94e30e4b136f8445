"""TPU multislice: slices joined by the data-center network (DCN), and how a mesh lies over them.

Pure Python, no JAX. `--slices N` (MaxText's `num_slices`) compiles for N copies of a target's
slice: the chips of one slice talk over ICI, the slices over the DCN, through each host's NICs.
A mesh axis that crosses slices moves at one chip's share of its host's NICs (`dcn_figure`: the
host's DCN over its chips). `dcn_split` says how many slices each mesh axis spans: as MaxText's
`dcn_*_parallelism` puts them, the outermost axes first (data, then fsdp), never the model's
tensor axis.

Sources (Google Cloud's TPU system architecture pages, checked in 2026):
- v5e, cloud.google.com/tpu/docs/v5e: "Per-host NIC configuration | 2 x 100 Gbps NIC", "Chips per
  host | 8" and "Data center network bandwidth per Pod | 6.4 Tbps" (256 chips: 25 Gb/s a chip,
  the same share).
- v5p, cloud.google.com/tpu/docs/v5p: "Data center network (DCN) bandwidth per chip (Gbps) | 50";
  its VMs are of 4 chips ("Number of vCPUs (4-chip VM)"), so 200 Gb/s a host.
- v6e, cloud.google.com/tpu/docs/v6e: "Per-host NIC configuration | 4 x 200 Gbps NIC", "Chips per
  host | 8", "Data center network bandwidth per Pod | 25.6 Tbps" (100 Gb/s a chip).
- v4, cloud.google.com/tpu/docs/v4: its specification table gives no DCN or NIC figure, and no
  other Google page found does; shardcli takes none and refuses --slices on v4 rather than guess.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from shardcli.errors import ShardcliError
from shardcli.hardware.chips import Figure

MAX_SLICES = 64  # the most slices a compile-only topology is asked for (MaxText's largest runs: 32)


@dataclass(frozen=True)
class HostDcn:
    """One TPU generation's hosts on the data-center network: their NICs and their chips."""

    generation: str  # the hardware table's name: "tpu-v5e"
    host_gbps: float  # every NIC of a host together, Gb/s one way
    chips_per_host: int
    words: str  # "2 x 100 Gbps NICs for 8 chips"
    source: str

    @property
    def per_chip_bytes_per_s(self) -> float:
        """One chip's share of its host's NICs, one way, bytes/s."""
        return self.host_gbps / 8 * 1e9 / self.chips_per_host

    @property
    def figure(self) -> Figure:
        share = self.per_chip_bytes_per_s / 1e9
        return Figure(
            self.per_chip_bytes_per_s,
            "B/s",
            f"{self.source}: {self.words}, {share:g} GB/s a chip across slices",
        )


_PAGE = "Google Cloud, TPU {v} system architecture (cloud.google.com/tpu/docs/{v})"
DCN: dict[str, HostDcn] = {
    d.generation: d
    for d in (
        HostDcn(
            "tpu-v5e",
            200,
            8,
            "2 x 100 Gbps NICs for 8 chips",
            _PAGE.format(v="v5e") + ': "Per-host NIC configuration 2 x 100 Gbps NIC", "Chips per host 8"',
        ),
        HostDcn(
            "tpu-v5p",
            200,
            4,
            "50 Gbps a chip, 4 chips a host",
            _PAGE.format(v="v5p") + ': "Data center network (DCN) bandwidth per chip (Gbps) 50"',
        ),
        HostDcn(
            "tpu-v6e",
            800,
            8,
            "4 x 200 Gbps NICs for 8 chips",
            _PAGE.format(v="v6e") + ': "Per-host NIC configuration 4 x 200 Gbps NIC", "Chips per host 8"',
        ),
    )
}
NO_DCN_FIGURE = {"tpu-v4": "Google Cloud's TPU v4 page (cloud.google.com/tpu/docs/v4) states no DCN figure"}


def dcn_figure(generation: str) -> Figure | None:
    """One chip's share of the data-center network between slices; None where no source states it."""
    host = DCN.get(generation)
    return host.figure if host is not None else None


def multislice_generations() -> str:
    return ", ".join(DCN)


def parse_slices(text: str, target: str | None, platform: str | None, generation: str | None) -> int:
    """--slices N: how many slices of the --target's topology, joined over the DCN (1 to MAX_SLICES).

    Raises:
        ShardcliError: no whole number from 1, no --target, a GPU target, or a TPU generation whose
            DCN no source states (one line naming what is valid).
    """
    value = text.strip()
    if not re.fullmatch(r"[0-9]{1,4}", value) or not 1 <= int(value) <= MAX_SLICES:
        raise ShardcliError(
            f"--slices {text!r} is not a number of slices; give a whole number from 1 to {MAX_SLICES} "
            "(2: two slices of the --target's topology joined over the data-center network)"
        )
    slices = int(value)
    if slices == 1:
        return 1
    if target is None or platform is None:
        raise ShardcliError(
            f"--slices {slices} joins slices of a TPU target, but no --target is given; add one such as "
            f"--target tpu-v5e:16x16 ({multislice_generations()})"
        )
    if platform != "tpu":
        raise ShardcliError(
            f"--slices {slices} joins TPU slices over the data-center network, but --target {target} is GPU "
            f"hosts; give their hosts in the topology instead (gpu-h100:2x8), or a TPU target "
            f"({multislice_generations()})"
        )
    if generation not in DCN:
        why = NO_DCN_FIGURE.get(generation or "", f"no DCN figure for {generation}")
        raise ShardcliError(
            f"--slices {slices} needs the data-center network's bandwidth, and {why}; multislice targets: "
            f"{multislice_generations()}"
        )
    return slices


def dcn_split(
    shape: tuple[int, ...], axes: tuple[str, ...], slices: int, *, flag: str = "--mesh"
) -> tuple[int, ...]:
    """How many slices each mesh axis spans (their product is `slices`): the outermost axes first,
    each taking what of the slices divides it, as MaxText's dcn_data_parallelism then
    dcn_fsdp_parallelism do.

    Raises:
        ShardcliError: the slices do not divide into the mesh's axes that way (one line).
    """
    left = slices
    out = []
    for size in shape:
        take = math.gcd(size, left)
        out.append(take)
        left //= take
    if left != 1:
        mesh = "x".join(map(str, shape))
        raise ShardcliError(
            f"{flag} {mesh} ({','.join(axes)}) cannot be laid over {slices} slices: the outer axes take the "
            f"slices first and their sizes leave {left} over; give an outer axis a multiple of {slices}, "
            f"such as {slices}x{math.prod(shape) // slices}"
        )
    return tuple(out)


def crossing_axes(axes: tuple[str, ...], dcn: tuple[int, ...]) -> tuple[str, ...]:
    """The mesh axes whose devices lie in more than one slice."""
    return tuple(a for a, n in zip(axes, dcn, strict=True) if n > 1)
