"""`shardcli calibrate`'s output: progress lines on stderr, then the profile's figures (a table for
people; the profile's own JSON document for scripts)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

from rich.table import Table

from shardcli.hardware.profile import HardwareProfile, Measured, profile_json
from shardcli.render.console import emit, format_flops, format_seconds, make_console
from shardcli.specs.runs import Format, RunOptions


def progress_lines(options: RunOptions) -> Callable[[str], None]:
    """`calibrate: <step> (<s> s so far)` on stderr per step, nothing with --quiet."""
    start = time.perf_counter()

    def line(text: str) -> None:
        if not options.quiet:
            print(
                f"calibrate: {text} ({time.perf_counter() - start:,.0f} s so far)",
                file=sys.stderr,
                flush=True,
            )

    return line


def _rate(m: Measured | None) -> str:
    if m is None:
        return "not measured"
    if m.unit == "s":
        return format_seconds(m.value)
    return f"{m.value / 1e9:.3g} GB/s"


def render_calibration(profile: HardwareProfile, out: str, options: RunOptions) -> None:
    """The profile written to `out`: its figures, or with --format json its document."""
    if options.format == Format.JSON:
        emit(json.dumps(profile_json(profile), indent=1) + "\n", options)
        return
    console = make_console(options)
    if not options.quiet:
        versions = ", ".join(f"{k} {v}" for k, v in profile.versions)
        console.print(
            f"{profile.device_count} {profile.device_kind} devices ({profile.platform}), {versions}"
        )
    table = Table("figure", "value", "measured as", box=None, pad_edge=False)
    for p in profile.matmul:
        table.add_row(f"GEMM {p.dtype} {p.size}^3", format_flops(p.flops_per_s), "per device, all at once")
    table.add_row("memory stream", _rate(profile.stream), "bytes read + written per device")
    for b in profile.collectives:
        table.add_row(f"{b.collective} over {b.axis} ({b.group_size})", f"{b.busbw / 1e9:.3g} GB/s", "busbw")
    table.add_row("host to device", _rate(profile.host_to_device), "per device")
    table.add_row("device to host", _rate(profile.device_to_host), "per device")
    table.add_row("a call", _rate(profile.call), "a program doing almost nothing (fastest run)")
    table.add_row("a loop trip", _rate(profile.loop_trip), "beyond the call")
    table.add_row("a kernel launch", _rate(profile.kernel), "beyond the call")
    console.print(table)
    for line in profile.not_measured:
        console.print(f"not measured: {line}")
    console.print(f"profile written to {out}: use it with --hardware {out}")
