"""Repeat runs: the wall time of a second identical shardcli run against the first, empty-cache one.

CI scripts call shardcli many times with the same shapes; JAX's persistent compile cache (on by
default) should make every run after the first cheaper. Each pair runs a workload twice in fresh
processes with `SHARDCLI_CACHE_DIR` set to a new empty folder: the first run compiles and fills the
cache, the second reads it. The figure is the median over pairs of second / first wall time.
Target: <= 0.75 for the issue's workload, `shardcli collective psum --mesh 8 --size 1M`. A second
workload, every matmul case in every implementation (33 programs), shows a compile-heavy run. The
last column runs the same command with --no-compile-cache, for scale.

Usage: python bench/repeat_runs.py [--pairs 7] [--workload psum|matmul-all|both] [--platform cpu]
                                  [--strict]

--platform is passed on to every run (on a machine with a GPU, `auto` starts the GPU backend first
and then fakes the CPU devices; `cpu` measures what a CPU-only machine does).

Run it with the interpreter of the environment shardcli is installed in. It exits 0 and prints PASS
or FAIL; with --strict it exits 1 on FAIL or when a run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

WORKLOADS = {
    "psum": ["collective", "psum", "--mesh", "8", "--size", "1M", "--format", "json"],
    "matmul-all": ["matmul", "--case", "all", "--impl", "all", "--mesh", "2x4", "--format", "json"],
}
TARGET = 0.75


def _cached(doc: dict) -> bool | None:
    """Whether the run's first program came from the cache."""
    if doc["command"] == "collective":
        return doc["sizes"][0]["placements"][0]["timing"]["compile_cached"]
    return doc["runs"][0]["impls"][0]["timing"]["compile_cached"]


def timed_run(command: list[str], cache_dir: str, *extra: str) -> tuple[float, bool | None]:
    """Wall seconds of one run, and whether it read its program from the cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env["SHARDCLI_CACHE_DIR"] = cache_dir
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "shardcli", *command, *extra],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"shardcli exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return wall, _cached(json.loads(proc.stdout))


def run_pairs(name: str, pairs: int, platform: str | None = None) -> tuple[float, bool]:
    """Median second/first ratio of one workload, and whether the cache was used as expected."""
    command = WORKLOADS[name] + (["--platform", platform] if platform else [])
    print(f"\n{name}: shardcli {' '.join(command)}")
    print(f"{'pair':>4} {'first (s)':>10} {'second (s)':>11} {'ratio':>7} {'no cache (s)':>13}  cache read")
    ratios, firsts, seconds, uncached, as_expected = [], [], [], [], True
    for k in range(pairs):
        with tempfile.TemporaryDirectory(prefix="shardcli-bench-cache-") as cache:
            first, first_hit = timed_run(command, cache)
            second, second_hit = timed_run(command, cache)
            plain, _ = timed_run(command, cache, "--no-compile-cache")
        as_expected &= first_hit is False and second_hit is True
        ratios.append(second / first)
        firsts.append(first)
        seconds.append(second)
        uncached.append(plain)
        row = f"{k + 1:>4} {first:>10.2f} {second:>11.2f} {second / first:>7.2f} {plain:>13.2f}"
        print(f"{row}  {second_hit}", flush=True)
    ratio = statistics.median(ratios)
    print(
        f"median first {statistics.median(firsts):.2f} s, second {statistics.median(seconds):.2f} s, "
        f"no cache {statistics.median(uncached):.2f} s; median ratio second/first {ratio:.2f}"
    )
    return ratio, as_expected


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--workload", choices=(*WORKLOADS, "both"), default="both")
    parser.add_argument("--platform", choices=("auto", "cpu"), help="passed on to shardcli")
    parser.add_argument("--strict", action="store_true")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a seconds-long run for CI (figures mean nothing)",
    )
    args = parser.parse_args()
    if args.quick:
        args.pairs, args.workload = 1, "psum"
    print(f"{args.pairs} pairs per workload; {os.cpu_count()} cores")
    names = list(WORKLOADS) if args.workload == "both" else [args.workload]
    verdicts = []
    for name in names:
        ratio, as_expected = run_pairs(name, args.pairs, args.platform)
        verdict = "PASS" if ratio <= TARGET and as_expected else "FAIL"
        verdicts.append(verdict)
        print(f"{name}: ratio {ratio:.2f} (target <= {TARGET}): {verdict}")
    return 1 if args.strict and "FAIL" in verdicts else 0


if __name__ == "__main__":
    sys.exit(main())
