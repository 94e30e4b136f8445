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
remat, tests/programs). The target band is 0.8-1.25x.

Each round calibrates, then runs every program once, and prints the load average at its start. On
a machine shared with other work the load moves the profile's figures and the programs' steps alike
but not at the same moments (on 2 cores at load 5-12 the same program's fastest step moved 2x
between runs minutes apart, the profile's stream 0.56-0.99 GB/s), so one round's ratios carry the
ratio of two loads; `--rounds N` (default 2) shows how far they move. Run it on a quiet machine for
figures to keep. `--quick`: a quick calibration, one program, two runs (a smoke test).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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


def calibrate(path: str, quick: bool = False) -> None:
    subprocess.run(
        [*SHARDCLI, "calibrate", "--mesh", "8", "--out", path, *(["--quick"] if quick else [])],
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


def run_round(
    number: int, profile: str, calibrated: bool, rows: list, iters: int, save: Path | None, quick: bool
) -> dict[str, float]:
    """Calibrate (unless a profile was given), then every row once: its est/meas ratio by name."""
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"round {number}: load average {load} (1, 5, 15 min) on {os.cpu_count()} cores", flush=True)
    if calibrated:
        calibrate(profile, quick)
        if save is not None:
            (save / f"profile-{number}.json").write_text(Path(profile).read_text())
    print(f"{'program':<16} {'kind':<10} {'estimate':>10} {'measured':>10} {'est/meas':>8}  bound")
    ratios = {}
    for name, kind, inspect_args in rows:
        estimate, measured, bound = measure(inspect_args, profile, iters, save)
        ratios[name] = estimate / measured
        print(
            f"{name:<16} {kind:<10} {estimate * 1e3:>8.2f}ms {measured * 1e3:>8.2f}ms "
            f"{ratios[name]:>8.2f}  {bound}",
            flush=True,
        )
    return ratios


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", help="a profile measured before (default: calibrate each round)")
    # the fastest of as many runs as calibrate takes each figure from: on a loaded machine the fastest
    # of more runs finds a quieter moment (the MLP's step: 173 ms of 5 runs, 113-147 ms of 20)
    parser.add_argument("--iters", type=int, default=30, help="runs per program (default 30, as calibrate's)")
    parser.add_argument("--rounds", type=int, default=2, help="calibrate-then-measure rounds (default 2)")
    parser.add_argument("--save", help="a folder to keep each round's profile and each run's JSON in")
    parser.add_argument("--quick", action="store_true", help="a quick calibration, one program, 2 runs")
    args = parser.parse_args()
    rows, iters, rounds = (ROWS[:1], 2, 1) if args.quick else (ROWS, args.iters, max(1, args.rounds))
    save = Path(args.save) if args.save else None
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        profile = args.profile or str(Path(tmp) / "cpu.json")
        how = "calibrated at the start of each round (shardcli calibrate --mesh 8)"
        print(f"profile: {args.profile or how}", flush=True)
        results = [
            run_round(n + 1, profile, args.profile is None, rows, iters, save, args.quick)
            for n in range(rounds)
        ]
    outside = [name for name, _, _ in rows if any(not BAND[0] <= r[name] <= BAND[1] for r in results)]
    if rounds > 1:
        print(
            "est/meas by round: "
            + "; ".join(f"{name} {' '.join(f'{r[name]:.2f}' for r in results)}" for name, _, _ in rows)
        )
    print(f"outside {BAND[0]}-{BAND[1]}x in any round: {', '.join(outside) or 'none'}")
    if rounds > 2:
        # Each round is a calibrate and a program in processes of their own, and on 2 cores a process's
        # 8 device threads land well or badly for its whole life: the median round says what a run
        # typically gives, the rounds above how far one run moves from it.
        medians = {name: statistics.median(r[name] for r in results) for name, _, _ in rows}
        print("median est/meas of the rounds: " + "; ".join(f"{n} {m:.2f}" for n, m in medians.items()))
        off = [n for n, m in medians.items() if not BAND[0] <= m <= BAND[1]]
        print(f"median outside {BAND[0]}-{BAND[1]}x: {', '.join(off) or 'none'}")
    if args.quick:
        print(
            "--quick: a smoke test; its 16-32 GEMMs give the curve nothing to read, the figures mean nothing"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
