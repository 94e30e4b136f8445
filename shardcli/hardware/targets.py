"""Compile-only targets: hardware you don't own, named `tpu-v5e:16x16` or `gpu-h100:2x8`. Pure Python.

A target names an accelerator generation and a topology. The real compiler for it runs on a machine
without one and nothing executes: the TPU compiler from the `libtpu` package (the `tpu` extra), or
XLA's GPU compiler from JAX's CUDA plugin (the `gpu` extra, or `gpu-cuda13`) with a description of the GPU
(shardcli/hardware/gpu_specs). Each generation's figures (the memory per chip a program is judged against,
its peak, bandwidths and torus) come from the one hardware table, `shardcli.hardware.chips`, with their
sources; a topology the generation does not offer (a 3-D v5e, a 2-D v4, a slice beyond the
largest) is refused here, before any compiler starts.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from shardcli.errors import ShardcliError
from shardcli.hardware.chips import CHIPS, Chip
from shardcli.hardware.chips import GIB as GIB  # where the targets' users have always found it

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
    """`--target tpu-v5e:16x16`: a generation and a topology of chips."""

    generation: Generation
    topology: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"{self.generation.name}:{'x'.join(map(str, self.topology))}"

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
        return math.prod(self.topology)


def known_targets() -> str:
    return ", ".join(f"{g.name}:{g.example}" for g in GENERATIONS.values())


def parse_target(text: str, flag: str = "--target") -> TargetSpec:
    """Parse `tpu-v5e:16x16` or `gpu-h100:2x8`.

    Raises:
        ShardcliError: an unknown generation or a malformed topology (one line listing the known ones).
    """
    name, sep, topology = text.strip().partition(":")
    generation = GENERATIONS.get(name.lower())
    if generation is None:
        raise ShardcliError(
            f"{flag} {text!r} is not a known target; choose a generation and its topology: {known_targets()}"
        )
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
    return TargetSpec(generation=generation, topology=sizes)


def _valid(generation: Generation) -> str:
    """What topologies a generation offers, in one clause."""
    chip = generation.hardware
    largest = "x".join(map(str, chip.max_topology))
    if chip.platform == "cuda":
        gpus = chip.max_topology[1]
        return f"GPUS (1-{gpus}) or HOSTSxGPUS, such as {chip.name}:{chip.example} or {chip.name}:2x{gpus}"
    sizes = "x".join(["N"] * (chip.torus_rank or 2))
    return f"{sizes} up to {largest} ({chip.max_chips} chips), such as {chip.name}:{chip.example}"
