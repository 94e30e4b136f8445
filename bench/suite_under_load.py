"""The test suite beside busy loops: does it pass, and how much longer does it take, on a loaded machine?

CI runs right after a session, on a machine other work may keep busy. This runs pytest twice, side by
side in one run of this script: first alone, then with `--loops` CPU-bound processes (default 2, one per
core here) spinning beside it, and prints each run's wall time, its outcome, and the ratio.

    python bench/suite_under_load.py                       # the whole suite, alone and under 2 loops
    python bench/suite_under_load.py -- -m "not slow"      # the quick subset
    python bench/suite_under_load.py --only-loaded -- tests/test_plan.py

`--quick`: one small test file, alone and loaded, to check that the script works.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPIN = "while True:\n    pass\n"


def run_pytest(args: list[str], loops: int) -> tuple[float, int, str]:
    """(wall seconds, pytest's exit code, its summary line) with `loops` busy processes beside it."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(loops)]
    try:
        start = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            check=False,
        )
        wall = time.monotonic() - start
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    summary = lines[-1] if lines else proc.stderr.strip().splitlines()[-1:]
    if proc.returncode != 0:
        failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
        summary = "\n".join([*failed, str(summary)])
    return wall, proc.returncode, str(summary)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=2, help="busy processes beside the loaded run")
    parser.add_argument("--only-loaded", action="store_true", help="skip the run alone")
    parser.add_argument("--quick", action="store_true", help="one small test file")
    parser.add_argument("pytest_args", nargs="*", help="after --: what pytest runs (default: the suite)")
    args = parser.parse_args()
    pytest_args = ["tests/test_tile_math.py"] if args.quick else args.pytest_args
    print(f"pytest {' '.join(pytest_args) or '(the whole suite)'}; {os.cpu_count()} cores", flush=True)
    runs = [] if args.only_loaded else [("alone", 0)]
    runs.append((f"beside {args.loops} busy loops", args.loops))
    walls = {}
    status = 0
    for name, loops in runs:
        wall, code, summary = run_pytest(pytest_args, loops)
        walls[name] = wall
        status = status or code
        print(f"{name:>22}: {wall:7.1f} s, exit {code}: {summary}", flush=True)
    if len(walls) == 2:
        alone, loaded = walls.values()
        print(f"{'loaded / alone':>22}: {loaded / alone:.2f}x")
    return status


if __name__ == "__main__":
    sys.exit(main())
