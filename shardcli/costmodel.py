"""The roofline cost model for a sharded matmul: T_math = FLOPs / peak, T_comm = bytes / link bandwidth.

Pure arithmetic and a table of nominal device figures; no JAX. The measured calibration for CPU
devices lives in `shardcli.core.calibrate`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DevicePeak:
    """Nominal per-device figures for one accelerator kind (dense, no sparsity)."""

    label: str
    match: tuple[str, ...]  # lower-case substrings of jax's device_kind
    bf16_tflops: float
    f32_tflops: float  # at JAX's default float32 dot precision
    f32_note: str
    link_gbps: float  # one direction, what one device can send to its ring neighbours
    link_note: str
    f64_tflops: float | None = None
    f64_note: str = ""  # what f64_tflops is; unused without it
    unlike: tuple[str, ...] = ()  # lower-case substrings of a device_kind this entry does not describe


# Sources: NVIDIA H100/H200 datasheets (SXM, dense); How To Scale Your Model, "How to think about
# TPUs" (bf16 FLOP/s and ICI bandwidth per link, one way). Overridable with --peak-tflops/--link-gbps.
# float32 is what a dot at JAX's default precision runs on: TF32 tensor cores on Hopper (an 8192^3
# float32 matmul measured 373 TFLOP/s on an H100, above the 67 of its CUDA cores), one bf16 pass
# on a TPU.
DEVICE_PEAKS: tuple[DevicePeak, ...] = (
    DevicePeak(
        "H200 SXM",
        ("h200",),
        989.0,
        495.0,
        "TF32 tensor cores, XLA's default float32 dot precision; 67 on CUDA cores at HIGHEST",
        450.0,
        "NVLink 4, per direction",
        67.0,
        "FP64 tensor cores",
        ("pcie", "nvl"),  # other clocks, power and links: unknown here rather than wrong
    ),
    DevicePeak(
        "H100 SXM",
        ("h100",),
        989.0,
        495.0,
        "TF32 tensor cores, XLA's default float32 dot precision; 67 on CUDA cores at HIGHEST",
        450.0,
        "NVLink 4, per direction",
        67.0,
        "FP64 tensor cores",
        ("pcie", "nvl"),  # other clocks, power and links: unknown here rather than wrong
    ),
    DevicePeak(
        "TPU v6e",
        ("v6 lite", "v6e"),
        918.0,
        918.0,
        "DEFAULT precision: one bf16 pass",
        90.0,
        "ICI per link, one way",
    ),
    DevicePeak(
        "TPU v5e",
        ("v5 lite", "v5e"),
        197.0,
        197.0,
        "DEFAULT precision: one bf16 pass",
        45.0,
        "ICI per link, one way",
    ),
    DevicePeak(
        "TPU v5p",
        ("v5p", "tpu v5"),
        459.0,
        459.0,
        "DEFAULT precision: one bf16 pass",
        90.0,
        "ICI per link, one way",
    ),
    DevicePeak(
        "TPU v4", ("tpu v4",), 275.0, 275.0, "DEFAULT precision: one bf16 pass", 45.0, "ICI per link, one way"
    ),
)


@dataclass(frozen=True)
class Hardware:
    """What the cost model divides by: per-device FLOP/s and link bytes/s, and where each came from."""

    peak_flops: float | None
    link_bytes_per_s: float | None
    peak_source: str
    link_source: str


def lookup_peak(device_kind: str) -> DevicePeak | None:
    """The table entry whose pattern occurs in `device_kind` (case-insensitive), if any."""
    kind = device_kind.lower()
    for entry in DEVICE_PEAKS:
        if any(m in kind for m in entry.match) and not any(u in kind for u in entry.unlike):
            return entry
    return None


def table_hardware(device_kind: str, dtype_name: str) -> Hardware | None:
    """Nominal figures for a known accelerator, or None."""
    entry = lookup_peak(device_kind)
    if entry is None:
        return None
    tflops: float | None
    note: str | None
    if dtype_name in ("bfloat16", "float16"):
        tflops, note = entry.bf16_tflops, "dense bf16/fp16"
    elif dtype_name == "float32":
        tflops, note = entry.f32_tflops, entry.f32_note
    elif dtype_name == "float64":
        tflops, note = entry.f64_tflops, entry.f64_note if entry.f64_tflops is not None else None
    else:
        tflops, note = None, None
    return Hardware(
        peak_flops=tflops * 1e12 if tflops is not None else None,
        link_bytes_per_s=entry.link_gbps * 1e9,
        peak_source=f"table: {entry.label}, {note}"
        if note
        else f"table: {entry.label} has no {dtype_name} figure; give --peak-tflops",
        link_source=f"table: {entry.label}, {entry.link_note}",
    )


@dataclass(frozen=True)
class CommCost:
    """One modelled collective: its HLO op, the mesh axis it runs over, and bytes each device sends."""

    op: str
    axis: str
    group_size: int
    bytes_per_device: int


@dataclass(frozen=True)
class CostEstimate:
    """The roofline for one case at one size, per device."""

    flops_per_device: int
    comm: tuple[CommCost, ...]
    t_math_s: float | None
    t_comm_s: float | None

    @property
    def comm_bytes_per_device(self) -> int:
        return sum(c.bytes_per_device for c in self.comm)

    @property
    def t_bound_s(self) -> float | None:
        """The lower bound max(T_math, T_comm): perfect overlap."""
        if self.t_math_s is None or self.t_comm_s is None:
            return None
        return max(self.t_math_s, self.t_comm_s)

    @property
    def t_sum_s(self) -> float | None:
        """The upper bound T_math + T_comm: no overlap."""
        if self.t_math_s is None or self.t_comm_s is None:
            return None
        return self.t_math_s + self.t_comm_s

    @property
    def dominant(self) -> str | None:
        if self.t_math_s is None or self.t_comm_s is None:
            return None
        return "compute" if self.t_math_s >= self.t_comm_s else "communication"


def estimate(flops_per_device: int, comm: tuple[CommCost, ...], hardware: Hardware) -> CostEstimate:
    """T_math = FLOPs / peak and T_comm = bytes / link bandwidth, per device."""
    t_math = flops_per_device / hardware.peak_flops if hardware.peak_flops else None
    comm_bytes = sum(c.bytes_per_device for c in comm)
    if not comm:
        t_comm: float | None = 0.0
    else:
        t_comm = comm_bytes / hardware.link_bytes_per_s if hardware.link_bytes_per_s else None
    return CostEstimate(flops_per_device=flops_per_device, comm=comm, t_math_s=t_math, t_comm_s=t_comm)
