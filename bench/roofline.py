"""The memory roofline of collectives on faked CPU devices, and how close `shardcli collective` gets.

1. This machine's copy bandwidth: NumPy copying 64 MiB with 1 thread and with every core (each
   thread its own slice), read + written bytes per second, best of 10 (`shardcli.roofline`).
2. For each collective, the fewest bytes that must be read and written when its n devices live in
   one process (`shardcli.roofline.min_bytes`: psum reads n inputs and writes n outputs, ...), and
   the time and busbw that gives at the all-cores copy bandwidth.
3. `shardcli collective OP --mesh 8 --size SIZE --format json` for psum, all_gather, psum_scatter,
   ppermute and all_to_all at 1 MiB and 64 MiB per device, each in a fresh process, once with
   `--malloc system` (malloc as it was: the "before") and once with the default `--malloc reuse`
   (the "after"), interleaved so that drift hits both. The table shows busbw and the roofline %
   = roofline time / p50 against the copy bandwidth measured here (one denominator for every row),
   next to the fraction shardcli reported against its own measurement.

Usage: python bench/roofline.py [--rounds 1] [--ops psum,all_gather,...] [--sizes 1M,64M]
                                [--warmup 5] [--iters 20] [--large-warmup 3] [--large-iters 5]

Run it with the interpreter of shardcli's environment. It exits 1 if a run fails or a result is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shardcli.roofline import measure_copy_bandwidth, min_bytes, min_bytes_rule, usable_cores  # noqa: E402

N_DEVICES = 8
OPS = ("psum", "all_gather", "psum_scatter", "ppermute", "all_to_all")
BUS_FACTOR = {
    "psum": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "psum_scatter": lambda n: (n - 1) / n,
    "ppermute": lambda n: 1.0,
    "all_to_all": lambda n: (n - 1) / n,
}
LARGE_BYTES = 64 << 20
MALLOCS = ("system", "reuse")


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    return int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text)


def algbw_bytes(op: str, nbytes: int, n: int) -> int:
    """nccl-tests' S: the gathered size for all_gather, else the bytes per device."""
    return nbytes * n if op == "all_gather" else nbytes


def shardcli_run(op: str, size: str, malloc: str, warmup: int, iters: int) -> dict:
    cmd = [
        sys.executable, "-m", "shardcli", "collective", op, "--mesh", str(N_DEVICES), "--size", size,
        "--format", "json", "--platform", "cpu", "--warmup", str(warmup), "--iters", str(iters),
        "--malloc", malloc, "--no-compile-cache",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[3:])} exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    doc = json.loads(proc.stdout)
    (placement,) = doc["sizes"][0]["placements"]
    if doc["summary"]["wrong"]:
        raise RuntimeError(f"{op} {size} --malloc {malloc}: {doc['summary']['wrong']} wrong elements")
    applied = doc["config"]["allocator"]["applied"]
    if applied != (malloc == "reuse"):
        raise RuntimeError(f"{op} {size}: --malloc {malloc} but allocator applied = {applied}")
    return {
        "p50_s": placement["timing"]["stats_s"]["p50"],
        "busbw_gbps": placement["busbw_gbps"],
        "reported_fraction": placement["roofline_fraction"],
        "reported_copy_gbps": doc["config"]["roofline"]["bandwidth_gbps"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--sizes", default="1M,64M")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--large-warmup", type=int, default=3, help="--warmup for sizes >= 64M")
    parser.add_argument("--large-iters", type=int, default=5, help="--iters for sizes >= 64M")
    args = parser.parse_args()
    ops = args.ops.split(",")
    sizes = args.sizes.split(",")

    cores = usable_cores()
    one = measure_copy_bandwidth(threads=1, repeats=10)
    copy = measure_copy_bandwidth(threads=cores, repeats=10)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores ({cores} usable), python "
        f"{platform.python_version()}"
    )
    print(f"copy bandwidth, 1 thread:  {one.describe()}")
    print(f"copy bandwidth, all cores: {copy.describe()}")
    print()
    print(f"minimum bytes with {N_DEVICES} devices in one process, and the roofline at {copy.gbps:.1f} GB/s:")
    print("| op | rule | size | min bytes (MiB) | roofline time (ms) | roofline busbw (GB/s) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for op in ops:
        for size in sizes:
            nbytes = parse_size(size)
            need = min_bytes(op, nbytes, N_DEVICES)
            assert need is not None
            t = need.total / copy.bytes_per_s
            busbw = algbw_bytes(op, nbytes, N_DEVICES) / t * BUS_FACTOR[op](N_DEVICES) / 1e9
            print(
                f"| {op} | {min_bytes_rule(op)} | {size} | {need.total / 2**20:,.0f} | {t * 1e3:.3f} | "
                f"{busbw:.2f} |"
            )
    print(flush=True)

    results: dict[tuple[str, str, str], list[dict]] = {}
    failed = False
    t0 = time.perf_counter()
    for r in range(args.rounds):
        for op in ops:
            for size in sizes:
                big = parse_size(size) >= LARGE_BYTES
                warmup = args.large_warmup if big else args.warmup
                iters = args.large_iters if big else args.iters
                order = MALLOCS if r % 2 == 0 else tuple(reversed(MALLOCS))
                for malloc in order:
                    try:
                        res = shardcli_run(op, size, malloc, warmup, iters)
                    except RuntimeError as error:
                        print(f"round {r + 1} {op} {size} {malloc}: FAILED: {error}", flush=True)
                        failed = True
                        continue
                    results.setdefault((op, size, malloc), []).append(res)
                    print(
                        f"round {r + 1} {op:12s} {size:>4s} --malloc {malloc:6s} "
                        f"p50 {res['p50_s'] * 1e3:9.2f} ms  busbw {res['busbw_gbps']:.3f} GB/s  "
                        f"shardcli's roofline {res['reported_fraction']:.0%} "
                        f"of {res['reported_copy_gbps']:.1f} GB/s",
                        flush=True,
                    )

    print()
    print(
        "| op | size per device | placement | busbw before (GB/s) | busbw after (GB/s) | roofline % before "
        "| roofline % after | after / before | shardcli's roofline % (after) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for op in ops:
        for size in sizes:
            nbytes = parse_size(size)
            need = min_bytes(op, nbytes, N_DEVICES)
            assert need is not None
            t_roof = need.total / copy.bytes_per_s
            row = {}
            for malloc in MALLOCS:
                runs = results.get((op, size, malloc))
                if runs:
                    row[malloc] = (
                        statistics.median(x["busbw_gbps"] for x in runs),
                        statistics.median(x["p50_s"] for x in runs),
                        statistics.median(x["reported_fraction"] for x in runs),
                    )
            if len(row) < 2:
                print(f"| {op} | {size} | out | (missing runs) |")
                continue
            (bb, pb, _), (ba, pa, fa) = row["system"], row["reuse"]
            print(
                f"| {op} | {size} | out, blocking | {bb:.3f} | {ba:.3f} | {t_roof / pb:.0%} | "
                f"{t_roof / pa:.0%} | {pb / pa:.2f}x | {fa:.0%} |"
            )
    print(
        f"\nbefore = --malloc system, after = --malloc reuse (default); median over {args.rounds} round(s); "
        f"roofline % = (min bytes / {copy.gbps:.1f} GB/s) / p50; total {time.perf_counter() - t0:.0f} s"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
