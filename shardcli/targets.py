"""Compile-only targets: hardware you don't own, named `tpu-v5e:16x16` or `gpu-h100:2x8`. Pure Python.

A target names an accelerator generation and a topology. The real compiler for it runs on a machine
without one and nothing executes: the TPU compiler from the `libtpu` package (the `tpu` extra), or
XLA's GPU compiler from JAX's CUDA plugin (the `gpu` extra) with a description of the GPU
(shardcli/gpu_specs). Each generation carries the memory per chip a program is judged against, with
its source. Adding a generation is adding an entry to GENERATIONS.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from shardcli.errors import ShardcliError

GIB = 1 << 30
INSTALL_HINTS = {
    "tpu": "pip install 'shardcli[tpu]' (libtpu, the TPU compiler: about 0.5 GB)",
    "cuda": "pip install 'shardcli[gpu]' (JAX's CUDA plugin, its GPU compiler: about 0.5 GB; no GPU needed)",
}
# The module each compiler comes in, found without importing it.
COMPILER_MODULES = {"tpu": "libtpu", "cuda": "jax_cuda12_plugin"}


@dataclass(frozen=True)
class Generation:
    """One accelerator generation: its name here, the compiler's, and the memory each chip has."""

    name: str  # "tpu-v5e", "gpu-h100"
    platform: str  # "tpu" or "cuda": the compiler that builds for it
    compiler_name: str  # libtpu's topology prefix ("v5e"), or the GPU description file ("h100.txtpb")
    hbm_bytes: int
    hbm_source: str
    example: str  # a topology the compiler knows for it

    @property
    def chip(self) -> str:
        return "GPU" if self.platform == "cuda" else "chip"


# Sources: Google Cloud's TPU system-architecture pages (per-chip HBM capacity); NVIDIA's H100 and
# H200 SXM datasheets (80 GB and 141 GB of HBM).
GENERATIONS: dict[str, Generation] = {
    g.name: g
    for g in (
        Generation("tpu-v4", "tpu", "v4", 32 * GIB, "Cloud TPU v4: 32 GiB HBM2 per chip", "2x2x2"),
        Generation("tpu-v5e", "tpu", "v5e", 16 * GIB, "Cloud TPU v5e: 16 GiB HBM2 per chip", "4x4"),
        Generation("tpu-v5p", "tpu", "v5p", 95 * GIB, "Cloud TPU v5p: 95 GiB HBM2e per chip", "4x4x4"),
        Generation("tpu-v6e", "tpu", "v6e", 32 * GIB, "Cloud TPU v6e (Trillium): 32 GiB HBM per chip", "8x8"),
        Generation("gpu-h100", "cuda", "h100.txtpb", 80 * 10**9, "NVIDIA H100 SXM: 80 GB HBM3 per GPU", "8"),
        Generation(
            "gpu-h200", "cuda", "h200.txtpb", 141 * 10**9, "NVIDIA H200 SXM: 141 GB HBM3e per GPU", "8"
        ),
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
        raise ShardcliError(
            f"{flag} {text!r} needs a topology after the ':', {shape}, such as "
            f"{generation.name}:{generation.example}; known: {known_targets()}"
        )
    return TargetSpec(generation=generation, topology=tuple(int(d) for d in topology.split("x")))
