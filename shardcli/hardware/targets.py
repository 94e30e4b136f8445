"""Compile-only targets: hardware you don't own, named `tpu-v5e:16x16` or `gpu-h100:2x8`. Pure Python.

A target names an accelerator generation and a topology. The real compiler for it runs on a machine
without one and nothing executes: the TPU compiler from the `libtpu` package (the `tpu` extra), or
XLA's GPU compiler from JAX's CUDA plugin (the `gpu` extra, or `gpu-cuda13`) with a description of the GPU
(shardcli/hardware/gpu_specs). Each generation's figures (the memory per chip a program is judged against,
its peak, bandwidths and torus) come from the one hardware table, `shardcli.hardware.chips`, with their
sources; a topology the generation does not offer (a 3-D v5e, a 2-D v4, a slice beyond the
largest) is refused here, before any compiler starts. A GPU target names its host type too
(`gpu-h100-a3mega:32x8`; a plain `gpu-h100` is a DGX H100, `shardcli.hardware.hosts`), whose NICs
carry the traffic between hosts, or `--network GBPS` gives each GPU's share of them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from shardcli.errors import ShardcliError
from shardcli.hardware.chips import CHIPS, Chip, Figure, network_figure
from shardcli.hardware.chips import GIB as GIB  # where the targets' users have always found it
from shardcli.hardware.hosts import HOSTS, HostType, hosts_of
from shardcli.hardware.slices import DCN, dcn_figure, parse_slices

INSTALL_HINTS = {
    "tpu": "pip install 'shardcli[tpu]' (libtpu, the TPU compiler: about 0.5 GB)",
    "cuda": "pip install 'shardcli[gpu]' (JAX's CUDA 12 plugin, its GPU compiler: about 0.5 GB; no GPU "
    "needed), or 'shardcli[gpu-cuda13]' where this host's GPUs run CUDA 13",
}
# The modules each compiler comes in, found without importing them: JAX's CUDA plugin is built for
# CUDA 12 or 13 (the gpu and gpu-cuda13 extras); either compiles for a GPU target.
COMPILER_MODULES = {"tpu": ("libtpu",), "cuda": ("jax_cuda12_plugin", "jax_cuda13_plugin")}


@dataclass(frozen=True)
class Generation:
    """One accelerator generation as a target: its name here, the compiler's, and its chip's figures
    (from the one hardware table, `shardcli.hardware.chips`)."""

    hardware: Chip
    compiler_name: str  # libtpu's topology prefix ("v5e"), or the GPU description file ("h100.txtpb")

    @property
    def name(self) -> str:
        return self.hardware.name

    @property
    def platform(self) -> str:
        return self.hardware.platform

    @property
    def hbm_bytes(self) -> int:
        return int(self.hardware.hbm_bytes.value)

    @property
    def hbm_source(self) -> str:
        return self.hardware.hbm_bytes.source

    @property
    def example(self) -> str:
        return self.hardware.example

    @property
    def chip(self) -> str:
        return self.hardware.chip


GENERATIONS: dict[str, Generation] = {
    name: Generation(CHIPS[name], compiler)
    for name, compiler in (
        ("tpu-v4", "v4"),
        ("tpu-v5e", "v5e"),
        ("tpu-v5p", "v5p"),
        ("tpu-v6e", "v6e"),
        ("gpu-h100", "h100.txtpb"),
        ("gpu-h200", "h200.txtpb"),
    )
}
_TOPOLOGY_RE = {
    "tpu": re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*){1,2}$"),  # chips along each torus axis
    "cuda": re.compile(r"^([1-9][0-9]*x)?[1-9][0-9]*$"),  # GPUS, or HOSTSxGPUS
}


@dataclass(frozen=True)
class TargetSpec:
    """`--target tpu-v5e:16x16`: a generation and a topology of chips; on GPUs the host type
    (`gpu-h100-a3mega:32x8`) and --network, each GPU's share of the network in Gb/s, if given."""

    generation: Generation
    topology: tuple[int, ...]
    host: HostType | None = None  # GPUs: the host type (None: the generation's default, a DGX)
    network_gbps: float | None = None  # --network: one GPU's share of the network, Gb/s one way
    slices: int = 1  # --slices: TPU slices of `topology`, joined over the data-center network

    @property
    def name(self) -> str:
        prefix = self.host.target if self.host is not None else self.generation.name
        return f"{prefix}:{'x'.join(map(str, self.topology))}"

    @property
    def host_type(self) -> HostType | None:
        """The GPU host type (named, or the generation's default); None on a TPU."""
        return self.host or HOSTS.get(self.generation.name)

    @property
    def network(self) -> Figure | None:
        """One GPU's share of the network between hosts, one way: --network, else the host type's
        NICs over its GPUs; None on a TPU (ICI throughout)."""
        if self.network_gbps is not None:
            gbps = self.network_gbps
            return Figure(
                gbps / 8 * 1e9, "B/s", f"--network {gbps:g} Gb/s per GPU ({gbps / 8:g} GB/s one way)"
            )
        host = self.host_type
        return network_figure(host) if host is not None else None

    def network_words(self) -> str | None:
        """`NVIDIA DGX H100: 8 x 400 Gb/s ... NICs for 8 GPUs, 50 GB/s per GPU` (or --network's)."""
        host = self.host_type
        if host is None:
            return None
        if self.network_gbps is not None:
            return (
                f"{host.label}, --network {self.network_gbps:g} Gb/s per GPU ({self.network_gbps / 8:g} GB/s)"
            )
        return host.words

    @property
    def libtpu_name(self) -> str:
        """The topology as the compiler names it: `v5e:16x16`, or `1x2x8` (slices x hosts x GPUs)."""
        if self.generation.platform == "cuda":
            hosts, gpus = self.topology if len(self.topology) == 2 else (1, self.topology[0])
            return f"1x{hosts}x{gpus}"
        return f"{self.generation.compiler_name}:{'x'.join(map(str, self.topology))}"

    @property
    def install_hint(self) -> str:
        return INSTALL_HINTS[self.generation.platform]

    @property
    def chips(self) -> int:
        """Every chip of the target: the topology's, times its slices."""
        return math.prod(self.topology) * self.slices

    @property
    def slice_chips(self) -> int:
        return math.prod(self.topology)

    @property
    def dcn(self) -> Figure | None:
        """One chip's share of the data-center network between slices; None for one slice."""
        return dcn_figure(self.generation.name) if self.slices > 1 else None

    def slices_words(self) -> str:
        """`2 slices of 256 chips, joined over the data-center network (<host NICs>, 3.125 GB/s a chip)`."""
        host = DCN[self.generation.name]
        share = host.per_chip_bytes_per_s / 1e9
        return (
            f"{self.slices} slices of {self.slice_chips} chips, joined over the data-center network "
            f"({host.words}, {share:g} GB/s a chip)"
        )


def known_targets() -> str:
    return ", ".join(f"{g.name}:{g.example}" for g in GENERATIONS.values())


def known_hosts(chip: str | None = None) -> str:
    """`gpu-h100 (NVIDIA DGX H100), gpu-h100-a3 (GCP A3 High (a3-highgpu-8g)), ...`."""
    hosts = hosts_of(chip) if chip is not None else list(HOSTS.values())
    return ", ".join(f"{h.target} ({h.label})" for h in hosts)


def parse_target(
    text: str, flag: str = "--target", network: str | None = None, slices: str | None = None
) -> TargetSpec:
    """Parse `tpu-v5e:16x16`, `gpu-h100:2x8` or `gpu-h100-a3mega:32x8`, with --network GBPS and
    --slices N (TPU slices joined over the data-center network, `shardcli.hardware.slices`).

    Raises:
        ShardcliError: an unknown generation or host type, a malformed topology, a --network that is
            no bandwidth or given for a TPU, a --slices that is no count or given for a GPU (one line
            listing the known ones).
    """
    name, sep, topology = text.strip().partition(":")
    host = HOSTS.get(name.lower())
    generation = GENERATIONS.get(host.chip if host is not None else name.lower())
    if generation is None:
        raise ShardcliError(_unknown(text, name.lower(), flag))
    if not sep or not _TOPOLOGY_RE[generation.platform].match(topology):
        shape = "GPUS or HOSTSxGPUS" if generation.platform == "cuda" else "two or three sizes"
        what = (
            f"has topology {topology!r}, which is not {shape} (whole numbers from 1)"
            if topology
            else f"needs a topology after the ':', {shape}"
        )
        raise ShardcliError(
            f"{flag} {text!r} {what}, such as {generation.name}:{generation.example}; "
            f"known: {known_targets()}"
        )
    sizes = tuple(int(d) for d in topology.split("x"))
    problem = generation.hardware.topology_problem(sizes)
    if problem is not None:
        raise ShardcliError(f"{flag} {text!r}: {problem}; valid: {_valid(generation)}")
    gbps = parse_network(network, text, generation.platform) if network is not None else None
    count = parse_slices(slices, text, generation.platform, generation.name) if slices is not None else 1
    return TargetSpec(generation=generation, topology=sizes, host=host, network_gbps=gbps, slices=count)


def parse_network(text: str, target: str | None, platform: str = "cuda") -> float:
    """--network GBPS: one GPU's share of the network between hosts, Gb/s, a number above 0.

    Raises:
        ShardcliError: no number, not above 0, or no GPU target to give it to (one line).
    """
    if target is None or platform != "cuda":
        what = f"--target {target} has ICI throughout" if target is not None else "no --target is given"
        raise ShardcliError(
            f"--network {text} is the network between GPU hosts, but {what}; give a GPU target such as "
            f"gpu-h100:2x8 (host types: {known_hosts()})"
        )
    try:
        gbps = float(text)
    except ValueError:
        gbps = math.nan
    if not (math.isfinite(gbps) and gbps > 0):
        raise ShardcliError(
            f"--network {text!r} is no bandwidth; give one GPU's share of the network in Gb/s, a number "
            "above 0 (400: a ConnectX-7 port per GPU, as on a DGX H100)"
        )
    return gbps


def _unknown(text: str, name: str, flag: str) -> str:
    """Why `name` is no target: a GPU generation with a host type not in the table, or no generation."""
    for g in GENERATIONS.values():
        if g.platform == "cuda" and name.startswith(f"{g.name}-"):
            return (
                f"{flag} {text!r} names host type {name[len(g.name) + 1 :]!r}, which is not in the table "
                f"for the {g.hardware.label}; known: {known_hosts(g.name)} (or --network GBPS per GPU)"
            )
    return (
        f"{flag} {text!r} is not a known target; choose a generation and its topology: {known_targets()}; "
        f"GPU host types: {known_hosts()}"
    )


def _valid(generation: Generation) -> str:
    """What topologies a generation offers, in one clause."""
    chip = generation.hardware
    largest = "x".join(map(str, chip.max_topology))
    if chip.platform == "cuda":
        gpus = chip.max_topology[1]
        return f"GPUS (1-{gpus}) or HOSTSxGPUS, such as {chip.name}:{chip.example} or {chip.name}:2x{gpus}"
    sizes = "x".join(["N"] * (chip.torus_rank or 2))
    return f"{sizes} up to {largest} ({chip.max_chips} chips), such as {chip.name}:{chip.example}"
