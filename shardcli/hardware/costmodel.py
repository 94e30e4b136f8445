"""The roofline cost model for a sharded matmul: T_math = FLOPs / peak, T_comm = bytes / link bandwidth.

Pure arithmetic over the nominal device figures of the one hardware table (`shardcli.hardware.chips`),
or a measured profile's (--hardware: `shardcli.hardware.profile`, whose GEMM curve gives the peak at
each GEMM's size); no JAX. The measured calibration for CPU devices lives in
`shardcli.runtime.calibrate`; the step-time estimate of a whole compiled program in
`shardcli.analysis.step_time`.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardcli.hardware.calibration import OpEfficiency
from shardcli.hardware.chips import Chip, chip_for_kind
from shardcli.hardware.profile import profile_for


@dataclass(frozen=True)
class Hardware:
    """What the cost model divides by: per-device FLOP/s and link bytes/s, and where each came from."""

    peak_flops: float | None
    link_bytes_per_s: float | None
    peak_source: str
    link_source: str
    # a measured profile's GEMM curve: the peak is `peak_flops` x its efficiency at a GEMM's FLOPs
    curve: OpEfficiency | None = None
    dtype: str = ""

    def peak_at(self, flops: float) -> float | None:
        """The FLOP/s a GEMM of `flops` per device runs at: the curve's where there is one."""
        if self.peak_flops is None or self.curve is None:
            return self.peak_flops
        return self.peak_flops * self.curve.dot_at(self.dtype, flops)


def lookup_peak(device_kind: str) -> Chip | None:
    """The hardware table's entry whose pattern occurs in `device_kind` (case-insensitive), if any."""
    return chip_for_kind(device_kind)


def table_hardware(device_kind: str, dtype_name: str) -> Hardware | None:
    """Nominal figures for a known accelerator (the hardware table's), or None; the run's measured
    profile's where there is one (--hardware).

    Raises:
        ShardcliError: the run's profile was measured on another kind of device.
    """
    profile = profile_for(device_kind)
    if profile is not None:
        bus = profile.bus(profile.device_count)
        best = profile.peak_figure(dtype_name)
        return Hardware(
            peak_flops=best.value,
            link_bytes_per_s=bus.busbw if bus is not None else None,
            peak_source=f"{best.source}; read on its GEMM curve at each size",
            link_source=f"{profile.label}: {bus.how}"
            if bus is not None
            else f"{profile.label}: no collective",
            curve=profile.op_efficiency(dtype_name),
            dtype=dtype_name,
        )
    entry = chip_for_kind(device_kind)
    if entry is None:
        return None
    peak = entry.peak_flops(dtype_name)
    link = entry.link_bytes_per_s
    return Hardware(
        peak_flops=peak.value if peak is not None else None,
        link_bytes_per_s=link.value,
        peak_source=f"table: {entry.label}, {peak.source}"
        if peak is not None
        else f"table: {entry.label} has no {dtype_name} figure; give --peak-tflops",
        link_source=f"table: {entry.label}, {link.source}",
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
    peak = hardware.peak_at(flops_per_device)
    t_math = flops_per_device / peak if peak else None
    comm_bytes = sum(c.bytes_per_device for c in comm)
    if not comm:
        t_comm: float | None = 0.0
    else:
        t_comm = comm_bytes / hardware.link_bytes_per_s if hardware.link_bytes_per_s else None
    return CostEstimate(flops_per_device=flops_per_device, comm=comm, t_math_s=t_math, t_comm_s=t_comm)
