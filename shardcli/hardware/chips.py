"""The one hardware table: per-chip figures of each accelerator shardcli knows, each with its source.

Pure Python, no JAX. Every figure a command divides by (FLOP/s, HBM bytes and bytes/s, link
bytes/s) comes from here, as a `Figure` carrying the words of where it came from, so a renderer
can print the source next to the number. `shardcli.hardware.targets` (compile-only `--target`s),
`shardcli.hardware.costmodel` (the per-dtype peak) and `shardcli.analysis.step_time` (the step-time estimate)
read this table; adding a generation is adding a `Chip` to CHIPS.

Sources (checked in 2026):
- Google Cloud TPU documentation, "TPU v4", "TPU v5e", "TPU v5p", "TPU v6e" system-architecture
  pages: peak bf16 compute, HBM capacity and bandwidth per chip, ICI ports per chip, 2-D or 3-D
  torus, pod and largest slice sizes, and when a v4/v5p slice wraps around (dimensions that are
  multiples of 4: whole 4x4x4 cubes joined by optical switches).
- How To Scale Your Model (the "scaling book"), "How to think about TPUs": ICI bandwidth per link
  and direction (4.5e10 B/s on v4 and v5e, 9e10 on v5p and v6e), which is what a ring collective
  along one torus dimension moves per direction; v5e/v6e slices wrap around only along a full
  16-chip dimension.
- The same page, on the matrix units: "TPU v6e (Trillium) has a 256x256 MXU, while all previous
  generations use 128x128", and "weight matrices need to be padded to at least size 128 (256 on TPU
  v6) in all dimensions to fill up the MXU".
- The same page, on each chip's PCIe link to its host (what remat's offloaded activations cross):
  "typically around 1.5e10 bytes/second per chip", 16 GB/s each way on TPU v4, and "Trillium (TPU
  v6e) has 32GB/s, about 2x higher than v5".
- NVIDIA H100 and H200 SXM datasheets (dense, no sparsity): bf16 989 TFLOP/s, TF32 495, FP64 67;
  HBM 80 GB at 3.35 TB/s (H100) and 141 GB at 4.8 TB/s (H200); NVLink 4 900 GB/s per GPU both
  directions together (450 one way), 8 GPUs per HGX board; PCIe Gen5 128 GB/s both ways (64 one
  way) to the host. Between hosts a GPU's share of its host's NICs, from the host types of
  `shardcli.hardware.hosts` (a plain `gpu-h100` target is a DGX H100: 8 x 400 Gb/s ConnectX-7,
  50 GB/s per GPU one way), with their sources.
- A GPU's memory is what its driver reports (nvidia-smi, 2026-11): 81,559 MiB on an H100 SXM and
  143,771 MiB on an H200 SXM, the total JAX's GPU allocator takes its fraction of
  (`shardcli.hardware.gpu_memory`); the datasheets' 80 GB and 141 GB stay in the figures' sources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shardcli.hardware.hosts import HOSTS, HostType

GIB = 1 << 30

_CLOUD = "Cloud TPU docs, {gen}"
_BOOK = "How To Scale Your Model, 'How to think about TPUs'"
_NVIDIA = "NVIDIA {gpu} SXM datasheet"


@dataclass(frozen=True)
class Figure:
    """One number of the table, its unit, and where it came from."""

    value: float
    unit: str  # "FLOP/s", "B/s", "B"
    source: str

    def json(self) -> dict[str, object]:
        return {"value": self.value, "unit": self.unit, "source": self.source}


@dataclass(frozen=True)
class Chip:
    """One accelerator generation, per chip (TPU) or per GPU.

    `link_bytes_per_s` is what one chip sends one way over one link: an ICI link to one torus
    neighbour on a TPU, its NVLink share to the other GPUs of its host on a GPU (through NVSwitch a
    GPU reaches every GPU of its host at that rate). `network_bytes_per_s` is one GPU's share of the
    network between hosts on the generation's default host type (`shardcli.hardware.hosts`; a target
    of another host type carries its own); TPU slices have ICI throughout.
    """

    name: str  # "tpu-v5e", "gpu-h100": the --target generation
    label: str  # "TPU v5e", "H100 SXM"
    platform: str  # "tpu" or "cuda"
    match: tuple[str, ...]  # lower-case substrings of jax's device_kind
    hbm_bytes: Figure
    bf16_flops: Figure
    f32_flops: Figure  # at JAX's default float32 dot precision
    hbm_bytes_per_s: Figure
    link_bytes_per_s: Figure
    torus_rank: int | None  # 2 or 3 on a TPU; None on a GPU
    max_topology: tuple[int, ...]  # the largest slice (TPU) or (hosts, GPUs per host) one may name
    max_chips: int
    example: str  # a topology the compiler knows
    wrap: str  # when an axis of a slice wraps around, in words
    f64_flops: Figure | None = None
    network_bytes_per_s: Figure | None = None
    host_bytes_per_s: Figure | None = None  # one chip's link to its host's memory (PCIe), one way
    # a TPU's matrix unit: a systolic array this many elements wide, which pads a narrower matmul
    # dimension to its width (None on a GPU)
    mxu_width: Figure | None = None
    unlike: tuple[str, ...] = ()  # device_kind substrings this entry does not describe

    @property
    def chip(self) -> str:
        return "GPU" if self.platform == "cuda" else "chip"

    def wraps(self, size: int, topology: tuple[int, ...]) -> bool:
        """Whether a torus dimension of `size` chips, in a slice of shape `topology`, wraps around
        (a ring, not a line).

        v4/v5p: in slices of whole 4x4x4 cubes (every dimension a multiple of 4; the cubes are
        joined by optical switches that close the rings); v5e/v6e: only a full 16-chip dimension;
        a GPU host's NVSwitch is no torus (False).
        """
        if self.platform != "tpu" or size < 3:
            return False
        if self.torus_rank == 3:
            return all(d % 4 == 0 for d in topology)
        return size == 16

    def peak_flops(self, dtype_name: str) -> Figure | None:
        """The dense peak for a dot in `dtype_name`; None where the table has no figure."""
        if dtype_name in ("bfloat16", "float16"):
            return self.bf16_flops
        if dtype_name == "float32":
            return self.f32_flops
        if dtype_name == "float64":
            return self.f64_flops
        return None

    def topology_problem(self, topology: tuple[int, ...]) -> str | None:
        """Why `topology` is no slice of this generation (one clause), or None where it is one."""
        if self.platform == "cuda":
            hosts, gpus = topology if len(topology) == 2 else (1, topology[0])
            if gpus > self.max_topology[1]:
                return f"a host has at most {self.max_topology[1]} {self.label} GPUs"
            if hosts > self.max_topology[0]:
                return f"at most {self.max_topology[0]} hosts are described"
            return None
        if len(topology) != self.torus_rank:
            return f"{self.label} slices are {self.torus_rank}-D tori, not {len(topology)}-D"
        if any(d > m for d, m in zip(sorted(topology), sorted(self.max_topology), strict=True)):
            return f"beyond the largest {self.label} slice"
        if math.prod(topology) > self.max_chips:
            return f"more chips than the largest {self.label} slice"
        return None


def network_figure(host: HostType) -> Figure:
    """One GPU's share of its host's NICs, one way, with the host's figures and their source."""
    return Figure(host.per_gpu_bytes_per_s, "B/s", f"{host.words} ({host.source_words})")


def _tpu(
    name: str,
    label: str,
    match: tuple[str, ...],
    *,
    hbm_gib: int,
    bf16_tflops: float,
    hbm_gbps: float,
    hbm_note: str,
    ici_gbps: float,
    ici_note: str,
    rank: int,
    largest: tuple[int, ...],
    max_chips: int,
    example: str,
    pcie_gbps: float,
    pcie_note: str,
    mxu: int = 128,
) -> Chip:
    cloud = _CLOUD.format(gen=label)
    return Chip(
        name=name,
        label=label,
        platform="tpu",
        match=match,
        hbm_bytes=Figure(hbm_gib * GIB, "B", f"{cloud}: {hbm_gib} GiB HBM per chip"),
        bf16_flops=Figure(
            bf16_tflops * 1e12, "FLOP/s", f"{cloud}: peak bf16 {bf16_tflops:g} TFLOP/s per chip"
        ),
        f32_flops=Figure(
            bf16_tflops * 1e12,
            "FLOP/s",
            f"{cloud}: peak bf16 {bf16_tflops:g} TFLOP/s; a float32 dot at JAX's DEFAULT precision is "
            "one bf16 pass",
        ),
        hbm_bytes_per_s=Figure(hbm_gbps * 1e9, "B/s", f"{cloud}: {hbm_note}"),
        link_bytes_per_s=Figure(
            ici_gbps * 1e9, "B/s", f"{_BOOK}: ICI {ici_gbps:g} GB/s per link, one way; {ici_note}"
        ),
        host_bytes_per_s=Figure(pcie_gbps * 1e9, "B/s", f"{_BOOK}: PCIe to the host {pcie_note}"),
        mxu_width=Figure(
            mxu,
            "elements",
            f"{_BOOK}: {label} multiplies on {mxu}x{mxu} systolic arrays (MXUs); a matmul "
            f"dimension under {mxu} is padded to it",
        ),
        torus_rank=rank,
        max_topology=largest,
        max_chips=max_chips,
        example=example,
        wrap=(
            "every axis wraps around in slices of whole 4x4x4 cubes (each size a multiple of 4)"
            if rank == 3
            else "an axis wraps around only where it is the full 16 chips"
        ),
    )


def _gpu(name: str, label: str, match: str, *, hbm_gb: int, smi_mib: int, hbm_tbps: float) -> Chip:
    sheet = _NVIDIA.format(gpu=label.split()[0])
    return Chip(
        name=name,
        label=label,
        platform="cuda",
        match=(match,),
        unlike=("pcie", "nvl"),  # other clocks, power and links: unknown here rather than wrong
        hbm_bytes=Figure(
            smi_mib * 2**20,
            "B",
            f"nvidia-smi on an {label}: {smi_mib:,} MiB per GPU, what the driver reports ({sheet}: "
            f"{hbm_gb} GB HBM)",
        ),
        bf16_flops=Figure(989e12, "FLOP/s", f"{sheet}: dense bf16 989 TFLOP/s"),
        f32_flops=Figure(
            495e12,
            "FLOP/s",
            f"{sheet}: TF32 tensor cores 495 TFLOP/s dense, XLA's default float32 dot precision "
            "(67 on CUDA cores at HIGHEST)",
        ),
        f64_flops=Figure(67e12, "FLOP/s", f"{sheet}: FP64 tensor cores 67 TFLOP/s"),
        hbm_bytes_per_s=Figure(hbm_tbps * 1e12, "B/s", f"{sheet}: HBM {hbm_tbps:g} TB/s"),
        link_bytes_per_s=Figure(
            450e9, "B/s", f"{sheet}: NVLink 4 900 GB/s per GPU both ways, 450 one way, within a host"
        ),
        network_bytes_per_s=network_figure(HOSTS[name]),
        host_bytes_per_s=Figure(
            64e9, "B/s", f"{sheet}: PCIe Gen5 128 GB/s both ways, 64 one way, to the host"
        ),
        torus_rank=None,
        max_topology=(1024, 8),
        max_chips=8192,
        example="8",
        wrap="GPUs of a host meet through NVSwitch; hosts through the network",
    )


CHIPS: dict[str, Chip] = {
    c.name: c
    for c in (
        _tpu(
            "tpu-v4",
            "TPU v4",
            ("tpu v4",),
            hbm_gib=32,
            bf16_tflops=275,
            hbm_gbps=1200,
            hbm_note="HBM2 1200 GB/s per chip",
            ici_gbps=45,
            ici_note="6 links per chip (3-D torus)",
            rank=3,
            largest=(16, 16, 16),
            max_chips=4096,
            example="2x2x2",
            pcie_gbps=16,
            pcie_note="16 GB/s each way on TPU v4",
        ),
        _tpu(
            "tpu-v5e",
            "TPU v5e",
            ("v5 lite", "v5e"),
            hbm_gib=16,
            bf16_tflops=197,
            hbm_gbps=819,
            hbm_note="HBM2 819 GB/s per chip",
            ici_gbps=45,
            ici_note="4 ICI ports per chip (2-D torus), 400 GB/s both ways per chip (Cloud docs)",
            rank=2,
            largest=(16, 16),
            max_chips=256,
            example="4x4",
            pcie_gbps=15,
            pcie_note="about 1.5e10 B/s per chip",
        ),
        _tpu(
            "tpu-v5p",
            "TPU v5p",
            ("v5p", "tpu v5"),
            hbm_gib=95,
            bf16_tflops=459,
            hbm_gbps=2765,
            hbm_note="HBM 2765 GB/s (2575 GiB/s) per chip",
            ici_gbps=90,
            ici_note="6 links per chip (3-D torus), 1200 GB/s both ways per chip (Cloud docs)",
            rank=3,
            largest=(16, 16, 24),
            max_chips=6144,
            example="4x4x4",
            pcie_gbps=15,
            pcie_note="about 1.5e10 B/s per chip",
        ),
        _tpu(
            "tpu-v6e",
            "TPU v6e",
            ("v6 lite", "v6e"),
            hbm_gib=32,
            bf16_tflops=918,
            hbm_gbps=1638,
            hbm_note="HBM 1638 GB/s per chip",
            ici_gbps=90,
            ici_note="4 ICI ports per chip (2-D torus), 800 GB/s both ways per chip (Cloud docs)",
            rank=2,
            largest=(16, 16),
            max_chips=256,
            example="8x8",
            pcie_gbps=32,
            pcie_note="32 GB/s on Trillium, about 2x v5",
            mxu=256,
        ),
        _gpu("gpu-h100", "H100 SXM", "h100", hbm_gb=80, smi_mib=81_559, hbm_tbps=3.35),
        _gpu("gpu-h200", "H200 SXM", "h200", hbm_gb=141, smi_mib=143_771, hbm_tbps=4.8),
    )
}


def chip_for_kind(device_kind: str) -> Chip | None:
    """The entry whose pattern occurs in jax's `device_kind` (case-insensitive), if any.

    The H200 is tried before the H100 and v5 lite (v5e) before the plain "TPU v5" (v5p).
    """
    kind = device_kind.lower()
    for name in ("gpu-h200", "gpu-h100", "tpu-v6e", "tpu-v5e", "tpu-v5p", "tpu-v4"):
        entry = CHIPS[name]
        if any(m in kind for m in entry.match) and not any(u in kind for u in entry.unlike):
            return entry
    return None
