"""The settings `shardcli matmul` and `shardcli einsum` share: a float dtype, the timing counts,
and the hardware figures their cost model uses (flags, the device table, or a CPU calibration).
"""

from __future__ import annotations

from typing import Protocol

from shardcli.errors import ShardcliError
from shardcli.hardware.costmodel import Hardware, table_hardware
from shardcli.runtime.session import Session
from shardcli.specs.runs import check_cost_figures, check_timing
from shardcli.specs.values import DType

FLOAT_DTYPES = ("float32", "bfloat16", "float16", "float64")


class HardwareFlags(Protocol):
    """What resolve_hardware reads of a request (a matmul's or an einsum's)."""

    @property
    def dtype(self) -> DType: ...
    @property
    def peak_tflops(self) -> float | None: ...
    @property
    def link_gbps(self) -> float | None: ...


class RunSettings(HardwareFlags, Protocol):
    """What check_run_settings reads: the hardware flags and the timing counts."""

    @property
    def iters(self) -> int: ...
    @property
    def warmup(self) -> int: ...


def check_run_settings(request: RunSettings, command: str) -> None:
    """The settings matmul and einsum share: a float dtype, timing counts, the cost model's figures.

    Raises:
        ShardcliError: one of them cannot be used.
    """
    if request.dtype.name not in FLOAT_DTYPES:
        raise ShardcliError(
            f"--dtype {request.dtype.name} is not supported by {command}; "
            f"choose one of {', '.join(FLOAT_DTYPES)}"
        )
    check_timing(request.iters, request.warmup)
    check_cost_figures(request.peak_tflops, request.link_gbps)


def resolve_hardware(session: Session, request: HardwareFlags) -> Hardware:
    """--peak-tflops/--link-gbps, else the device table, else (CPU) a measured calibration."""
    rt = session.runtime
    table = table_hardware(rt.device_kind, request.dtype.name)
    peak = request.peak_tflops * 1e12 if request.peak_tflops is not None else None
    link = request.link_gbps * 1e9 if request.link_gbps is not None else None
    peak_src = "--peak-tflops" if peak is not None else ""
    link_src = "--link-gbps" if link is not None else ""
    if table is not None:
        if peak is None and table.peak_flops is not None:
            peak, peak_src = table.peak_flops, table.peak_source
        if link is None:
            link, link_src = table.link_bytes_per_s, table.link_source
    if (peak is None or link is None) and rt.platform == "cpu":
        from shardcli.runtime.calibrate import calibrate

        flops, copy, flops_src, copy_src = calibrate(session.devices, request.dtype.name)
        if peak is None:
            peak, peak_src = flops, flops_src
        if link is None:
            link, link_src = copy, copy_src
    unknown = f"unknown for device kind {rt.device_kind!r}; give --peak-tflops / --link-gbps"
    if table is not None and not peak_src:  # the device is in the table, the dtype is not
        peak_src = table.peak_source
    return Hardware(
        peak_flops=peak,
        link_bytes_per_s=link,
        peak_source=peak_src or unknown,
        link_source=link_src or unknown,
        curve=table.curve if table is not None and peak == table.peak_flops else None,
        dtype=request.dtype.name,
    )
