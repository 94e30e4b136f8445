"""The step-time estimate on faked CPU devices, from a profile `shardcli calibrate` measured here.

    python bench/calibrated_cpu.py                  # calibrate (8 devices), then every program
    python bench/calibrated_cpu.py --profile P.json # a profile measured before (same machine, devices)

Each row is `shardcli inspect PROGRAM --run --hardware PROFILE`: the estimate (the per-op
roofline with the profile's GEMM curve, memory stream, each collective's bus bandwidth and per-call
cost; on a CPU these add up) against the step measured in the same run: the fastest of --iters, as
the profile's figures are each the fastest of their runs (on a machine shared with other work the
median moves with its load). The programs are of different kinds: math-bound (the MLP's train
step, GEMMs of 256-2048), memory-bound (a tall, thin GEMM: 2 FLOPs per byte), collective-heavy (a
weight gathered whole; a reshard moving every block), scanned (an FSDP decoder under lax.scan with
remat, tests/programs). The target band is 0.8-1.25x. The calibration runs first, then the
programs, each once; run it on a quiet machine for figures to keep.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARDCLI = [sys.executable, "-m", "shardcli"]
BAND = (0.8, 1.25)
MLP = [
    "--arg",
    "f32[256,1024]@data,None",
    "--arg",
    "f32[1024,2048]@None,model",
    "--arg",
    "f32[2048,1024]@model,None",
]
FSDP = "tests/programs/fsdp_scanned.py"

# (name, kind, inspect's arguments)
ROWS = [
    ("mlp train step", "math", ["examples/mlp.py:train_step", "--mesh", "2x4", "--axes", "data,model", *MLP]),
    (
        "tall thin GEMM",
        "memory",
        ["examples/mistakes.py:matmul", "--mesh", "8", "--axes", "data"]
        + ["--arg", "f32[131072,32]@data,None", "--arg", "f32[32,32]@None,None"],
    ),
    (
        "weight gathered",
        "collective",
        ["examples/mistakes.py:matmul", "--mesh", "8", "--axes", "data"]
        + ["--arg", "f32[64,2048]@data,None", "--arg", "f32[2048,2048]@data,None"],
    ),
    (
        "layout change",
        "collective",
        [
            "examples/mistakes.py:layout_change",
            "--mesh",
            "8",
            "--axes",
            "data",
            "--arg",
            "f32[4096,4096]@data,None",
        ],
    ),
    (
        "fsdp scanned",
        "scanned",
        [f"{FSDP}:train_step", "--inputs", f"{FSDP}:inputs", "--mesh", "2x2x2", "--axes", "data,fsdp,tensor"],
    ),
]


def calibrate(path: str) -> None:
    subprocess.run(
        [*SHARDCLI, "calibrate", "--mesh", "8", "--out", path],
        check=True,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )


def measure(args: list[str], profile: str, iters: int, save: Path | None = None) -> tuple[float, float, str]:
    """(estimate, the fastest measured step, what bounds the estimate) of one inspect --run."""
    out = subprocess.run(
        [*SHARDCLI, "inspect", *args, "--run", "--iters", str(iters), "--hardware", profile, "-f", "json"],
        check=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout
    doc = json.loads(out)
    if save is not None:
        (save / f"{args[0].replace('/', '_').replace(':', '_')}-{len(list(save.iterdir()))}.json").write_text(
            out
        )
    step = doc["step_time"]
    return step["estimate_s"], doc["timing"]["stats_s"]["min"], step["dominant"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", help="a profile measured before (default: calibrate now)")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--save", help="a folder to keep the profile and each run's JSON in")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        profile = args.profile or str(Path(tmp) / "cpu.json")
        print(f"profile: {args.profile or 'calibrated now (shardcli calibrate --mesh 8)'}", flush=True)
        save = Path(args.save) if args.save else None
        if save is not None:
            save.mkdir(parents=True, exist_ok=True)
        if args.profile is None:
            calibrate(profile)
            if save is not None:
                (save / "profile.json").write_text(Path(profile).read_text())
        print(f"{'program':<16} {'kind':<10} {'estimate':>10} {'measured':>10} {'est/meas':>8}  bound")
        outside = []
        for name, kind, inspect_args in ROWS:
            estimate, measured, bound = measure(inspect_args, profile, args.iters, save)
            ratio = estimate / measured
            if not BAND[0] <= ratio <= BAND[1]:
                outside.append(name)
            print(
                f"{name:<16} {kind:<10} {estimate * 1e3:>8.2f}ms {measured * 1e3:>8.2f}ms "
                f"{ratio:>8.2f}  {bound}",
                flush=True,
            )
    print(f"outside {BAND[0]}-{BAND[1]}x: {', '.join(outside) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
