"""Compile-only targets: hardware you don't own, named `tpu-v5e:16x16`. Pure Python, no JAX.

A target names a TPU generation and a topology of chips. The real TPU compiler (the `libtpu`
package, the `tpu` extra) compiles for it on a machine without a TPU; nothing runs. Each
generation carries the HBM capacity per chip that a program's memory is judged against, with its
source. Adding a generation is adding an entry to TPU_GENERATIONS.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from shardcli.errors import ShardcliError

GIB = 1 << 30
INSTALL_HINT = "pip install 'shardcli[tpu]' (libtpu, the TPU compiler: about 0.5 GB)"


@dataclass(frozen=True)
class TpuGeneration:
    """One TPU generation: its name here and libtpu's, and the HBM each chip has."""

    name: str  # "tpu-v5e"
    libtpu: str  # "v5e", as libtpu names topologies ("v5e:4x4")
    hbm_bytes: int
    hbm_source: str
    example: str  # a topology libtpu knows for it

    def describe(self) -> str:
        return f"{self.name} ({self.hbm_bytes / GIB:g} GiB HBM per chip)"


# Sources: Google Cloud's TPU system-architecture pages (per-chip HBM capacity).
TPU_GENERATIONS: dict[str, TpuGeneration] = {
    g.name: g
    for g in (
        TpuGeneration("tpu-v4", "v4", 32 * GIB, "Cloud TPU v4: 32 GiB HBM2 per chip", "2x2x2"),
        TpuGeneration("tpu-v5e", "v5e", 16 * GIB, "Cloud TPU v5e: 16 GiB HBM2 per chip", "4x4"),
        TpuGeneration("tpu-v5p", "v5p", 95 * GIB, "Cloud TPU v5p: 95 GiB HBM2e per chip", "4x4x4"),
        TpuGeneration("tpu-v6e", "v6e", 32 * GIB, "Cloud TPU v6e (Trillium): 32 GiB HBM per chip", "8x8"),
    )
}
_TOPOLOGY_RE = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*){1,2}$")


@dataclass(frozen=True)
class TargetSpec:
    """`--target tpu-v5e:16x16`: a generation and a topology of chips."""

    generation: TpuGeneration
    topology: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"{self.generation.name}:{'x'.join(map(str, self.topology))}"

    @property
    def libtpu_name(self) -> str:
        return f"{self.generation.libtpu}:{'x'.join(map(str, self.topology))}"

    @property
    def chips(self) -> int:
        return math.prod(self.topology)


def known_targets() -> str:
    return ", ".join(f"{g.name}:{g.example}" for g in TPU_GENERATIONS.values())


def parse_target(text: str, flag: str = "--target") -> TargetSpec:
    """Parse `tpu-v5e:16x16`.

    Raises:
        ShardcliError: an unknown generation or a malformed topology (one line listing the known ones).
    """
    name, sep, topology = text.strip().partition(":")
    generation = TPU_GENERATIONS.get(name.lower())
    if generation is None:
        raise ShardcliError(
            f"{flag} {text!r} is not a known target; choose a TPU generation and its topology: "
            f"{known_targets()} (a GPU cannot be compiled for without one here; see the README)"
        )
    if not sep or not _TOPOLOGY_RE.match(topology):
        raise ShardcliError(
            f"{flag} {text!r} needs a topology of chips after the ':', two or three sizes such as "
            f"{generation.name}:{generation.example}; known: {known_targets()}"
        )
    return TargetSpec(generation=generation, topology=tuple(int(d) for d in topology.split("x")))
