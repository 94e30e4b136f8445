"""Starting JAX on the right devices: real accelerators, or N faked CPU devices.

The number of CPU devices is fixed when the JAX backend starts, so `start_runtime` decides it
from the mesh before the first JAX operation. When JAX was already started in this process (tests
that call the CLI in-process, or a library user), it uses the first N devices it finds and says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from shardcli.errors import ShardcliError
from shardcli.specs import MAX_FAKE_DEVICES, RunOptions

ACCELERATORS = ("gpu", "tpu")


@dataclass(frozen=True)
class RuntimeInfo:
    """Facts about the devices a run uses, for the header and the JSON config."""

    platform: str  # "cpu", "gpu" or "tpu"
    device_kind: str
    device_count: int  # devices the mesh uses
    devices_present: int  # devices of that platform in this process
    faked: bool  # CPU devices simulated with jax_num_cpu_devices
    note: str | None  # why these devices (fallbacks, a backend started earlier)
    process_count: int
    process_index: int
    jax_version: str

    def describe_devices(self) -> str:
        """`8 faked CPU devices` / `4 of 8 real GPU devices`."""
        what = "faked" if self.faked else "real"
        name = self.platform.upper()
        if self.device_count == self.devices_present:
            return f"{self.device_count} {what} {name} device{'s' * (self.device_count != 1)}"
        return f"{self.device_count} of {self.devices_present} {what} {name} devices"


def _backends_started() -> bool:
    from jax._src import xla_bridge  # the only way to ask without starting them

    return bool(xla_bridge.backends_are_initialized())


def _accelerator_devices(platform: str) -> list[Any]:
    import jax

    try:
        return list(jax.devices(platform))
    except RuntimeError:
        return []


def _check_fake_count(count: int) -> None:
    if count > MAX_FAKE_DEVICES:
        raise ShardcliError(
            f"faking {count} CPU devices is more than the {MAX_FAKE_DEVICES} shardcli allows in one "
            f"process; use a smaller mesh"
        )


def start_runtime(needed: int, options: RunOptions, *, x64: bool = False) -> tuple[RuntimeInfo, list]:
    """Start JAX with at least `needed` devices of the requested platform.

    Args:
        needed: devices the mesh needs.
        options: the shared run options (platform, devices).
        x64: enable 64-bit dtypes.

    Returns:
        The runtime facts and the list of devices for the mesh (exactly `needed` of them).

    Raises:
        ShardcliError: too few devices, or an accelerator that is not there.
    """
    import jax

    platform = options.platform
    requested = options.devices
    if requested is not None:
        if requested < 1:
            raise ShardcliError(f"--devices {requested} is not valid; give a positive device count")
        if requested < needed:
            raise ShardcliError(
                f"the mesh needs {needed} devices but --devices is {requested}; use --devices "
                f"{needed} or a smaller mesh"
            )
    started = _backends_started()
    fake_count = requested or needed
    if not started:
        if platform == "cpu":
            _check_fake_count(fake_count)
            jax.config.update("jax_platforms", "cpu")
            jax.config.update("jax_num_cpu_devices", fake_count)
        elif platform == "auto":
            # Harmless when an accelerator wins: it only sizes the CPU client we may fall back to.
            _check_fake_count(fake_count)
            jax.config.update("jax_num_cpu_devices", fake_count)
    if x64:
        jax.config.update("jax_enable_x64", True)

    note = None
    if platform in ACCELERATORS or platform == "auto":
        accel_platform = platform if platform != "auto" else None
        if accel_platform is None:
            default = jax.default_backend()
            accel = [] if default == "cpu" else list(jax.devices())
        else:
            accel = _accelerator_devices(accel_platform)
        if accel_platform is not None and not accel:
            raise ShardcliError(
                f"--platform {platform} was asked for but this machine has no {platform.upper()} "
                f"devices JAX can use; use --platform cpu to fake devices on the CPU"
            )
        enough = len(accel) >= (requested or needed)
        if accel_platform is not None and not enough:
            raise ShardcliError(
                f"the mesh needs {requested or needed} {platform.upper()} devices but this machine "
                f"has {len(accel)}; use a smaller mesh or --platform cpu to fake them"
            )
        if accel and enough:
            count = requested or len(accel)
            return _info(accel[0].platform, accel[:count], needed, faked=False, note=None), accel[:needed]
        if accel:
            note = (
                f"auto: this machine has {len(accel)} {accel[0].platform.upper()} device(s), fewer "
                f"than the {needed} the mesh needs, so the CPU fakes them"
            )

    cpu = list(jax.devices("cpu"))
    if len(cpu) < needed:
        raise ShardcliError(
            f"the mesh needs {needed} devices but JAX was already started in this process with "
            f"{len(cpu)} CPU devices (the count is fixed at start-up); use a mesh of at most "
            f"{len(cpu)} devices or run shardcli in a fresh process"
        )
    if started and requested is not None and len(cpu) != requested:
        note = (
            f"JAX was already started in this process with {len(cpu)} CPU devices; "
            f"--devices {requested} cannot change that, the mesh uses the first {needed}"
        )
    elif started and len(cpu) != needed and note is None:
        note = f"JAX was already started with {len(cpu)} CPU devices; the mesh uses the first {needed}"
    info = _info("cpu", cpu, needed, faked=len(cpu) > 1, note=note)
    return info, cpu[:needed]


def _info(platform: str, present: list, needed: int, *, faked: bool, note: str | None) -> RuntimeInfo:
    import jax

    return RuntimeInfo(
        platform=platform,
        device_kind=str(present[0].device_kind),
        device_count=needed,
        devices_present=len(present),
        faked=faked,
        note=note,
        process_count=jax.process_count(),
        process_index=jax.process_index(),
        jax_version=jax.__version__,
    )


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

    On CPU every faked device lives in host memory, so the total counts; on an accelerator the
    bytes one device holds count against that device's limit.

    Raises:
        ShardcliError: when the estimate exceeds what is available.
    """
    if info.platform == "cpu":
        available = available_host_memory()
        # Leave headroom for XLA's temporaries and the host copy the inputs are built from.
        if available is not None and total > 0.8 * available:
            raise ShardcliError(
                f"{what} needs about {format_bytes(total)} across {info.device_count} CPU devices but "
                f"this machine has {format_bytes(available)} available; use a smaller size"
            )
        return
    limit = device_memory_limit(devices[0])
    if limit is not None and per_device > 0.9 * limit:
        raise ShardcliError(
            f"{what} needs about {format_bytes(per_device)} per device but one {info.device_kind} "
            f"holds {format_bytes(limit)}; use a smaller size"
        )


def format_bytes(n: float) -> str:
    """Binary units, as people read memory: `64 MiB`."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" or n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
