"""How long `shardcli plan` takes, and its peak memory: the issue's speed targets, measured.

Three runs of the real command in a fresh process each, against a fresh plan cache:

1. the first plan (every compile done): target at most 10 minutes on the 2-core development machine;
2. the same plan again (every compile read from the cache): target under 1 minute;
3. one flag changed (`--batch 2`, sequences per chip): only what changed is compiled.

Each line gives the wall time, the peak RSS of the plan's process (target under 4 GB) and the
plan's own count of compiles and cache hits. Absolute times depend on the machine's load: say
what else ran beside it when you quote them.

Usage: python bench/plan_speed.py [--quick] [--preset llama2-7b] [--target tpu-v5p:4x4x4]
`--quick`: the tiny model on tpu-v5e:2x2, one sequence a chip, 1 compile a run (seconds; the figures
mean nothing). Exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from inspect_overhead import run_measured  # noqa: E402

TARGETS = {"first": 600.0, "again": 60.0}  # seconds
RSS_TARGET = 4e9  # bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="llama2-7b")
    parser.add_argument("--target", default="tpu-v5p:4x4x4")
    parser.add_argument("--quick", action="store_true", help="the tiny model on tpu-v5e:2x2 (seconds)")
    args = parser.parse_args()
    if args.quick:
        args.preset, args.target = "tiny", "tpu-v5e:2x2"
    base = [sys.executable, "-m", "shardcli", "plan", "--preset", args.preset, "--target", args.target]
    base += ["--format", "json", *(["--compile", "1"] if args.quick else [])]
    # --quick: one sequence a chip (a smaller program compiles in half the time), then the flag is 2
    first = [*base, "--batch", "1"] if args.quick else base
    runs = (("first", first), ("again", first), ("one flag", [*base, "--batch", "2"]))
    with tempfile.TemporaryDirectory() as cache:
        os.environ["SHARDCLI_CACHE_DIR"] = os.path.join(cache, "jax")
        print(f"plan --preset {args.preset} --target {args.target}, a fresh cache in {cache}")
        for name, cmd in runs:
            seconds, rss, out = run_measured(cmd)
            summary = json.loads(out)["summary"]
            target = TARGETS.get(name)
            verdict = (
                ""
                if target is None
                else f" (target {target:.0f} s: {'met' if seconds <= target else 'MISSED'})"
            )
            print(
                f"{name:9} {seconds:7.1f} s{verdict}; peak RSS {rss / 1e9:.2f} GB "
                f"(target {RSS_TARGET / 1e9:.0f} GB: {'met' if rss < RSS_TARGET else 'MISSED'}); "
                f"{summary['compiled']} layouts compiled ({summary['cached']} from the cache) "
                f"of {summary['candidates']} candidates",
                flush=True,
            )


if __name__ == "__main__":
    main()
