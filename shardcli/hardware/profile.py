"""A hardware profile: the figures `shardcli calibrate` measured on one machine's devices, as data.

A profile is a versioned JSON document (`PROFILE_SCHEMA`, `PROFILE_VERSION`): the device kind and
count it was measured on, the compiler versions and the date, and every figure with how it was
measured and its samples (seconds per run):

- `matmul`: the achieved FLOP/s per device of square GEMMs over a range of sizes and dtypes (a
  curve, read at a GEMM's size by `OpEfficiency.dot_at`);
- `stream`: the bytes per second an elementwise op streams through each device's memory;
- `collectives`: the bus bandwidth (nccl-tests' busbw) of each collective over each mesh axis (an
  all-reduce's sets the axis's bandwidth; the others' say how much slower or faster their bytes move);
- `host_to_device`, `device_to_host`: copies between the host's memory and the devices;
- `call`, `loop_trip`, `kernel`: what a program costs however little it does (per call, per loop
  trip, per kernel launched); None where not measured, `not_measured` saying why.

`--hardware FILE` hands one to the step-time estimate (`analysis.step_time`), the matmul and einsum
cost model and the collective's roofline; `using_profile` makes it the run's profile for them.

Pure Python, no JAX.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from shardcli.errors import ShardcliError
from shardcli.hardware.calibration import LaunchCosts, OpEfficiency
from shardcli.hardware.chips import Chip, Figure, chip_for_kind

PROFILE_SCHEMA = "shardcli-hardware-profile"
PROFILE_VERSION = 1
# The playground's collectives calibrate measures, by the HLO op each compiles to.
HLO_COLLECTIVES = {
    "all-reduce": "psum",
    "all-gather": "all_gather",
    "reduce-scatter": "psum_scatter",
    "all-to-all": "all_to_all",
    "collective-permute": "ppermute",
}


@dataclass(frozen=True)
class Measured:
    """One measured figure: its value, unit, how it was measured and the seconds of each run."""

    value: float
    unit: str  # "B/s", "s"
    how: str
    samples: tuple[float, ...] = ()


@dataclass(frozen=True)
class MatmulPoint:
    """One point of the GEMM curve: an M = N = K `size` GEMM per device in `dtype`."""

    dtype: str
    size: int
    flops_per_s: float  # per device, all devices at once
    how: str
    samples: tuple[float, ...] = ()

    @property
    def flops(self) -> float:
        return 2.0 * self.size**3


@dataclass(frozen=True)
class BusPoint:
    """One collective's bus bandwidth over one mesh axis of `group_size` devices."""

    collective: str
    axis: str
    group_size: int
    bytes_per_device: int
    busbw: float  # B/s
    how: str
    samples: tuple[float, ...] = ()


@dataclass(frozen=True)
class HardwareProfile:
    """Everything one `shardcli calibrate` measured (see the module's docstring)."""

    device_kind: str
    platform: str
    device_count: int
    versions: tuple[tuple[str, str], ...]  # ("jax", "0.10.2"), ("jaxlib", ...), plugins
    created: str  # UTC, ISO 8601
    matmul: tuple[MatmulPoint, ...]
    stream: Measured
    collectives: tuple[BusPoint, ...] = ()
    host_to_device: Measured | None = None
    device_to_host: Measured | None = None
    call: Measured | None = None
    loop_trip: Measured | None = None
    kernel: Measured | None = None
    not_measured: tuple[str, ...] = ()
    path: str = field(default="", compare=False)  # the file it was read from ("" when measured)

    @property
    def name(self) -> str:
        """How reports name it: its file's name, or "this calibration"."""
        return os.path.basename(self.path) if self.path else "this calibration"

    @property
    def label(self) -> str:
        """ "profile cpu.json (cpu x8, 2026-11-29)": what an estimate's chip reads."""
        return f"profile {self.name} ({self.device_kind} x{self.device_count}, {self.created[:10]})"

    def dtypes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.dtype for p in self.matmul))

    def _curve(self, dtype: str | None) -> list[MatmulPoint]:
        """The points of `dtype`'s curve; float32's (or the first dtype's) where it has none."""
        for name in (dtype, "float32", *self.dtypes()):
            points = [p for p in self.matmul if p.dtype == name]
            if points:
                return sorted(points, key=lambda p: p.flops)
        return []

    def peak(self, dtype: str | None) -> float:
        """The best FLOP/s of `dtype`'s curve (the rate the curve's efficiencies are shares of)."""
        return max(p.flops_per_s for p in self._curve(dtype))

    def bus(self, group_size: int, collective: str = "psum") -> BusPoint | None:
        """The measured bus bandwidth of `collective` over an axis of `group_size` devices: that
        size's, else the nearest size's (the largest where several are as near)."""
        points = [b for b in self.collectives if b.collective == collective]
        if not points or group_size < 2:
            return None
        return min(points, key=lambda b: (abs(b.group_size - group_size), -b.group_size))

    def comm_scale(self, hlo_kind: str, group_size: int | None) -> float:
        """How many psum bytes one byte of `hlo_kind` ("all-gather") costs: the psum's busbw over
        that collective's, both over an axis of `group_size` (1.0 where either is not measured)."""
        size = group_size or self.device_count
        psum, other = self.bus(size), self.bus(size, HLO_COLLECTIVES.get(hlo_kind, ""))
        return psum.busbw / other.busbw if psum is not None and other is not None else 1.0

    def op_efficiency(self, dtype: str) -> OpEfficiency:
        """The per-op roofline's efficiencies relative to `peak(dtype)` and the stream: the GEMM curve
        as (dtype, FLOPs, rate / peak) points, the stream at 1.0."""
        peak = self.peak(dtype)
        curve = tuple((p.dtype, p.flops, p.flops_per_s / peak) for p in self.matmul)
        sizes = ", ".join(f"{p.size}" for p in self._curve(dtype))
        return OpEfficiency(
            dot=1.0,
            hbm=1.0,
            dot_source=f"{self.label}: the GEMM curve at each GEMM's FLOPs ({dtype} sizes {sizes})",
            hbm_source=f"{self.label}: {self.stream.how}",
            curve=curve,
        )

    def peak_figure(self, dtype: str) -> Figure:
        best = max(self._curve(dtype), key=lambda p: p.flops_per_s)
        return Figure(best.flops_per_s, "FLOP/s", f"{self.label}: {best.how}")

    def stream_figure(self) -> Figure:
        return Figure(self.stream.value, "B/s", f"{self.label}: {self.stream.how}")

    def host_figure(self) -> Figure | None:
        copies = [m for m in (self.host_to_device, self.device_to_host) if m is not None]
        if not copies:
            return None
        slowest = min(copies, key=lambda m: m.value)
        return Figure(slowest.value, "B/s", f"{self.label}: {slowest.how}")

    def launch_costs(self) -> LaunchCosts:
        """Per call, per kernel and per loop trip, as measured (0 where not measured)."""
        named = ((self.call, "a call"), (self.kernel, "a kernel"), (self.loop_trip, "a loop trip"))
        parts = [(m, what) for m, what in named if m is not None]
        words = ", ".join(f"{m.value * 1e6:.3g} us {what}" for m, what in parts) or "none measured"
        return LaunchCosts(
            call_s=self.call.value if self.call else 0.0,
            kernel_s=self.kernel.value if self.kernel else 0.0,
            trip_s=self.loop_trip.value if self.loop_trip else 0.0,
            buffer_s=0.0,
            source=f"{self.label}: {words}",
            overlaps=self.platform != "cpu",
        )


# --- which profile a run uses ---------------------------------------------------------------------

# The run's profile, for the whole process (plan compiles and estimates its candidates on worker
# threads, which a ContextVar would not reach): one command runs per process.
_ACTIVE: list[HardwareProfile | None] = [None]


@contextlib.contextmanager
def using_profile(profile: HardwareProfile | None) -> Iterator[None]:
    """Make `profile` (from --hardware) the one the estimates of this run read; None: the table."""
    before = _ACTIVE[0]
    _ACTIVE[0] = profile
    try:
        yield
    finally:
        _ACTIVE[0] = before


def active_profile() -> HardwareProfile | None:
    return _ACTIVE[0]


def _same_kind(a: str, b: str) -> bool:
    chip_a, chip_b = chip_for_kind(a), chip_for_kind(b)
    if chip_a is not None or chip_b is not None:
        return chip_a is not None and chip_b is not None and chip_a.name == chip_b.name
    return a.strip().lower() == b.strip().lower()


def profile_for(device_kind: str, what: str = "this run") -> HardwareProfile | None:
    """The run's profile, checked to describe `device_kind` (the run's devices or the target's).

    Raises:
        ShardcliError: the profile was measured on another kind of device.
    """
    profile = active_profile()
    if profile is None or _same_kind(profile.device_kind, device_kind):
        return profile
    raise ShardcliError(
        f"--hardware {profile.path or profile.name} was measured on {profile.device_kind!r} devices, not "
        f"{what}'s {device_kind!r}; calibrate there (shardcli calibrate) or drop --hardware"
    )


def check_target(profile: HardwareProfile, chip: Chip, target: str) -> None:
    """Refuse a profile that does not describe a --target's chips (a profile of one host describes a
    target of many hosts of its kind).

    Raises:
        ShardcliError: it was measured on another kind of device.
    """
    measured = chip_for_kind(profile.device_kind)
    if measured is None or measured.name != chip.name:
        raise ShardcliError(
            f"--hardware {profile.path or profile.name} was measured on {profile.device_kind!r} devices, "
            f"not --target {target}'s {chip.label}; calibrate on a {chip.label} or drop --hardware"
        )


# --- the JSON document ----------------------------------------------------------------------------


def _measured_json(m: Measured | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {"value": m.value, "unit": m.unit, "how": m.how, "samples_s": list(m.samples)}


def profile_json(profile: HardwareProfile) -> dict[str, Any]:
    """The profile as its versioned JSON document."""
    return {
        "schema": PROFILE_SCHEMA,
        "version": PROFILE_VERSION,
        "device": {"kind": profile.device_kind, "platform": profile.platform, "count": profile.device_count},
        "versions": dict(profile.versions),
        "created": profile.created,
        "figures": {
            "matmul": [
                {
                    "dtype": p.dtype,
                    "size": p.size,
                    "flops_per_s": p.flops_per_s,
                    "how": p.how,
                    "samples_s": list(p.samples),
                }
                for p in profile.matmul
            ],
            "stream": _measured_json(profile.stream),
            "collectives": [
                {
                    "collective": b.collective,
                    "axis": b.axis,
                    "group_size": b.group_size,
                    "bytes_per_device": b.bytes_per_device,
                    "busbw": b.busbw,
                    "how": b.how,
                    "samples_s": list(b.samples),
                }
                for b in profile.collectives
            ],
            "host_to_device": _measured_json(profile.host_to_device),
            "device_to_host": _measured_json(profile.device_to_host),
            "call": _measured_json(profile.call),
            "loop_trip": _measured_json(profile.loop_trip),
            "kernel": _measured_json(profile.kernel),
        },
        "not_measured": list(profile.not_measured),
    }


class _Reader:
    """Reads a profile document's fields, each wrong one a one-line error naming where it is."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, where: str, expected: str) -> ShardcliError:
        return ShardcliError(
            f"--hardware {self.path} is no usable hardware profile: {where} must be {expected} "
            "(write one with shardcli calibrate --out FILE)"
        )

    def get(self, obj: Any, key: str, kind: type | tuple[type, ...], where: str, expected: str) -> Any:
        if not isinstance(obj, dict) or key not in obj:
            raise self.fail(f"{where}.{key}" if where else key, expected)
        value = obj[key]
        if isinstance(value, bool) or not isinstance(value, kind):
            raise self.fail(f"{where}.{key}" if where else key, expected)
        return value

    def number(self, obj: Any, key: str, where: str, *, positive: bool = True) -> float:
        expected = "a positive number" if positive else "a number of at least 0"
        value = float(self.get(obj, key, (int, float), where, expected))
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise self.fail(f"{where}.{key}", expected)
        return value

    def samples(self, obj: Any, where: str) -> tuple[float, ...]:
        values = self.get(obj, "samples_s", list, where, "a list of seconds")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in values):
            raise self.fail(f"{where}.samples_s", "a list of seconds")
        return tuple(float(v) for v in values)

    def measured(self, obj: Any, key: str, where: str, *, optional: bool = True) -> Measured | None:
        if optional and isinstance(obj, dict) and obj.get(key) is None:
            return None
        m = self.get(obj, key, dict, where, "an object with value, unit, how and samples_s")
        at = f"{where}.{key}"
        return Measured(
            self.number(m, "value", at, positive=m.get("unit") != "s"),
            self.get(m, "unit", str, at, "a string"),
            self.get(m, "how", str, at, "a string"),
            self.samples(m, at),
        )


def profile_from_json(document: Any, path: str) -> HardwareProfile:
    """A profile from its JSON document (`profile_json`).

    Raises:
        ShardcliError: another schema or version, or a field missing or of the wrong kind (one line).
    """
    r = _Reader(path)
    if not isinstance(document, dict) or document.get("schema") != PROFILE_SCHEMA:
        raise r.fail("schema", f"{PROFILE_SCHEMA!r}")
    if document.get("version") != PROFILE_VERSION:
        raise r.fail("version", f"{PROFILE_VERSION} (this shardcli reads version {PROFILE_VERSION})")
    device = r.get(document, "device", dict, "", "an object with kind, platform and count")
    figures = r.get(document, "figures", dict, "", "an object")
    count = r.get(device, "count", int, "device", "a positive integer")
    if count < 1:
        raise r.fail("device.count", "a positive integer")
    versions = r.get(document, "versions", dict, "", "an object of names and versions")
    matmul = []
    for i, p in enumerate(r.get(figures, "matmul", list, "figures", "a list of GEMM points")):
        at = f"figures.matmul[{i}]"
        size = r.get(p, "size", int, at, "a positive integer")
        if size < 1:
            raise r.fail(f"{at}.size", "a positive integer")
        matmul.append(
            MatmulPoint(
                r.get(p, "dtype", str, at, "a string"),
                size,
                r.number(p, "flops_per_s", at),
                r.get(p, "how", str, at, "a string"),
                r.samples(p, at),
            )
        )
    if not matmul:
        raise r.fail("figures.matmul", "a list of at least one GEMM point")
    buses = []
    for i, b in enumerate(r.get(figures, "collectives", list, "figures", "a list")):
        at = f"figures.collectives[{i}]"
        buses.append(
            BusPoint(
                r.get(b, "collective", str, at, "a string"),
                r.get(b, "axis", str, at, "a string"),
                r.get(b, "group_size", int, at, "an integer"),
                r.get(b, "bytes_per_device", int, at, "an integer"),
                r.number(b, "busbw", at),
                r.get(b, "how", str, at, "a string"),
                r.samples(b, at),
            )
        )
    stream = r.measured(figures, "stream", "figures", optional=False)
    assert stream is not None
    return HardwareProfile(
        device_kind=r.get(device, "kind", str, "device", "a string"),
        platform=r.get(device, "platform", str, "device", "a string"),
        device_count=count,
        versions=tuple((str(k), str(v)) for k, v in versions.items()),
        created=r.get(document, "created", str, "", "a date (ISO 8601)"),
        matmul=tuple(matmul),
        stream=stream,
        collectives=tuple(buses),
        host_to_device=r.measured(figures, "host_to_device", "figures"),
        device_to_host=r.measured(figures, "device_to_host", "figures"),
        call=r.measured(figures, "call", "figures"),
        loop_trip=r.measured(figures, "loop_trip", "figures"),
        kernel=r.measured(figures, "kernel", "figures"),
        not_measured=tuple(str(n) for n in document.get("not_measured") or ()),
        path=path,
    )


def load_profile(path: str) -> HardwareProfile:
    """The profile in `path` (--hardware FILE).

    Raises:
        ShardcliError: the file cannot be read, is not JSON, or is no profile this shardcli reads.
    """
    from shardcli.specs.files import read_json

    try:
        document = read_json(path)
    except ShardcliError as e:
        raise ShardcliError(f"--hardware: {e}") from None
    return profile_from_json(document, path)


def check_out_path(path: str) -> None:
    """Refuse an --out that cannot be written before anything is measured: a folder, or a file in a
    folder that does not exist.

    Raises:
        ShardcliError: one line naming the path.
    """
    if os.path.isdir(path):
        raise ShardcliError(
            f"--out {path} is a folder; give the profile's file name, such as {path}/cpu.json"
        )
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise ShardcliError(f"--out {path}: the folder {folder} does not exist; create it or choose another")


def save_profile(profile: HardwareProfile, path: str) -> None:
    """Write the profile's JSON document to `path` (replacing it).

    Raises:
        ShardcliError: the file cannot be written.
    """
    import json

    try:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(profile_json(profile), f, indent=1)
            f.write("\n")
    except OSError as e:
        raise ShardcliError(f"--out {path} cannot be written: {e.strerror or e}") from None
