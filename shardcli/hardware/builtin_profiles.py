"""The built-in GPU figures: the profile `shardcli calibrate` measured on one H200 SXM, kept in the
package (`profiles/nvidia-h200.json`; how it was run: bench/h200_calibrate.sh), as shares of the
datasheet's figures, so that an H100 (the same processor: no measurement of its own) reads the same
shares of its own datasheet.

- `GPU_OPS`: a GEMM's efficiency read from the measured curve at its FLOPs (bf16 and f32 GEMMs of
  256^3 to 8192^3 on standard normal numbers, each over its dtype's dense datasheet peak); every
  streaming op at the measured stream over the datasheet's HBM bandwidth.
- `GPU_LAUNCH`: the measured cost of a call, of a kernel launch and of a loop trip; a buffer taken or
  returned from bench/gpu_launch.py on the same kind of GPU (calibrate does not measure it).

`--hardware FILE` replaces both with a profile of the user's own (`analysis.step_time`).
"""

from __future__ import annotations

import json
from pathlib import Path

from shardcli.hardware.calibration import LaunchCosts, OpEfficiency
from shardcli.hardware.chips import CHIPS, Chip
from shardcli.hardware.profile import HardwareProfile, profile_from_json

H200_PROFILE = Path(__file__).resolve().parent / "profiles" / "nvidia-h200.json"
# bench/gpu_launch.py on one H200 (jax 0.11.2, CUDA 13 plugin, 2026-11-27): K f32[16] arguments
# each plus one, 1.48 us per buffer beyond its kernel
BUFFER_S = 1.48e-6


def read_builtin(path: Path) -> HardwareProfile:
    """A profile kept in the package."""
    return profile_from_json(json.loads(path.read_text(encoding="utf-8")), str(path))


def datasheet_shares(profile: HardwareProfile, chip: Chip) -> OpEfficiency:
    """The profile's GEMM curve and stream as shares of `chip`'s datasheet peak (per dtype) and HBM
    bandwidth; `dot` the share of its largest bf16 GEMM (or largest of any dtype)."""
    curve = []
    for point in profile.matmul:
        peak = chip.peak_flops(point.dtype)
        if peak is not None:
            curve.append((point.dtype, point.flops, point.flops_per_s / peak.value))
    largest = max(curve, key=lambda c: (c[0] == "bfloat16", c[1]))
    hbm = profile.stream.value / chip.hbm_bytes_per_s.value
    sizes = ", ".join(
        f"{p.dtype} {p.size}^3" for p in sorted(profile.matmul, key=lambda p: (p.dtype, p.size))
    )
    return OpEfficiency(
        dot=largest[2],
        hbm=hbm,
        dot_source=(
            f"{profile.label}, measured by shardcli calibrate: the GEMM curve at each GEMM's FLOPs over "
            f"the datasheet peak ({sizes}; the largest bf16 {largest[2]:.3f})"
        ),
        hbm_source=f"{profile.label}: {profile.stream.how}, {hbm:.3f} of the datasheet's HBM bandwidth",
        curve=tuple(curve),
    )


def measured_launch(profile: HardwareProfile) -> LaunchCosts:
    """The profile's call, kernel and loop-trip costs, a buffer's from bench/gpu_launch.py."""
    measured = profile.launch_costs()
    return LaunchCosts(
        call_s=measured.call_s,
        kernel_s=measured.kernel_s,
        trip_s=measured.trip_s,
        buffer_s=BUFFER_S,
        source=f"{measured.source}; {BUFFER_S * 1e6:.3g} us a buffer (bench/gpu_launch.py)",
    )


H200 = read_builtin(H200_PROFILE)
GPU_OPS = datasheet_shares(H200, CHIPS["gpu-h200"])
GPU_LAUNCH = measured_launch(H200)
