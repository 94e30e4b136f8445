"""Whether a run's arrays fit: host memory, and the memory JAX gives a device."""

from __future__ import annotations

import os
from typing import Any

from shardcli.errors import ShardcliError
from shardcli.runtime.devices import RuntimeInfo
from shardcli.specs.values import format_bytes


def available_host_memory() -> int | None:
    """Bytes of memory the host can still give (MemAvailable), or None when unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def device_memory_limit(device: Any) -> int | None:
    """Bytes one accelerator can hold, when its backend reports it."""
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - backends differ; no stats is a normal answer
        return None
    if not stats:
        return None
    return stats.get("bytes_limit")


def check_fits_in_memory(info: RuntimeInfo, devices: list, *, per_device: int, total: int, what: str) -> None:
    """Refuse before allocating when the bytes would not fit.

    On CPU every faked device lives in host memory, so this process's share of the total counts;
    on an accelerator the bytes one device holds count against that device's limit. With several
    processes every one refuses if any does, so none is left waiting for the others.

    Raises:
        ShardcliError: when the estimate exceeds what is available (here or in another process).
    """
    refusal = _memory_refusal(info, devices, per_device=per_device, total=total, what=what)
    if info.process_count > 1:
        import numpy as np

        from shardcli.runtime.processes import gather_from_processes

        refused = gather_from_processes(np.array([refusal is not None], dtype=np.int32))[:, 0]
        if refusal is None and refused.any():
            where = ", ".join(str(k) for k in np.flatnonzero(refused))
            refusal = (
                f"{what} does not fit in the memory of process(es) {where} (see their output); "
                f"use a smaller size"
            )
    if refusal is not None:
        raise ShardcliError(refusal)


def _memory_refusal(
    info: RuntimeInfo, devices: list, *, per_device: int, total: int, what: str
) -> str | None:
    import jax

    here = [d for d in devices if d.process_index == jax.process_index()] or devices
    if info.platform == "cpu":
        available = available_host_memory()
        mine = total * len(here) // max(len(devices), 1)
        # Leave headroom for XLA's temporaries and the host copy the inputs are built from.
        if available is not None and mine > 0.8 * available:
            return (
                f"{what} needs about {format_bytes(mine)} across {len(here)} CPU devices but "
                f"this machine has {format_bytes(available)} available; use a smaller size"
            )
        return None
    limit = device_memory_limit(here[0])
    if limit is not None and per_device > 0.9 * limit:
        return (
            f"{what} needs about {format_bytes(per_device)} per device but one {info.device_kind} "
            f"holds {format_bytes(limit)}; use a smaller size"
        )
    return None
