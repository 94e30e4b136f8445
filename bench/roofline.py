"""The memory roofline of collectives on faked CPU devices, and how close `shardcli collective` gets.

1. This machine's copy bandwidth: NumPy copying 64 MiB with 1 thread and with every core (each
   thread its own slice), read + written bytes per second, best of 10, the better of glibc's
   cached and streaming stores (`shardcli.playground.roofline.measure_best_copy_bandwidth`, what the
   CLI uses).
2. For each collective, the fewest bytes that must be read and written when its n devices live in
   one process (`shardcli.playground.roofline.min_bytes`: psum reads n inputs and writes n outputs, ...), and
   the time and busbw that gives at the all-cores copy bandwidth.
3. `shardcli collective OP --mesh 8 --size SIZE --format json` for psum, all_gather, psum_scatter,
   ppermute and all_to_all at 1 MiB and 64 MiB per device, each in a fresh process, in each of
   the VARIANTS below, interleaved so that drift hits all alike:
   - plain: `--out-buffer fresh --malloc system`, what a plain jit(shard_map) loop does (the
     "before": a fresh output every call, malloc as it is);
   - reuse: `--out-buffer fresh --malloc reuse` (glibc keeps freed buffers; not run by default:
     with fresh 512 MiB outputs, all_gather 64M grew the heap to 24 GiB and was killed once);
   - prealloc: `--out-buffer preallocated --malloc system` (one output buffer donated to every call);
   - default: shardcli's defaults, `--out-buffer preallocated --malloc reuse` (the "after");
   - default+nt1M, default+nt4M: the defaults with GLIBC_TUNABLES making glibc's memcpy use
     streaming (non-temporal) stores from 1 MiB / 4 MiB up (the default threshold is about 3/4 of
     the L3 per thread; glibc reads it at process start). Not run by default.
   The table shows busbw and the roofline % = roofline time / p50 against the copy bandwidth
   measured here (one denominator for every row), next to the fraction shardcli reported against
   its own measurement.

Usage: python bench/roofline.py [--rounds 1] [--ops psum,all_gather,...] [--sizes 1M,64M]
                                [--variants plain,prealloc,default]
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

from shardcli.playground.roofline import (  # noqa: E402
    measure_best_copy_bandwidth,
    min_bytes,
    min_bytes_rule,
    usable_cores,
)

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
NT = "glibc.cpu.x86_non_temporal_threshold"
VARIANTS = {  # name: (--out-buffer, --malloc, environment)
    "plain": ("fresh", "system", {}),
    "reuse": ("fresh", "reuse", {}),
    "prealloc": ("preallocated", "system", {}),
    "default": ("preallocated", "reuse", {}),
    # glibc's memcpy streams (non-temporal stores) copies from 1 MiB / 4 MiB up; read at start-up only.
    "default+nt1M": ("preallocated", "reuse", {"GLIBC_TUNABLES": f"{NT}=0x100000"}),
    "default+nt4M": ("preallocated", "reuse", {"GLIBC_TUNABLES": f"{NT}=0x400000"}),
}
DEFAULT_VARIANTS = ("plain", "prealloc", "default")


def describe_variant(variant: str) -> str:
    out_buffer, malloc, env = VARIANTS[variant]
    return " ".join([f"--out-buffer {out_buffer} --malloc {malloc}", *(f"{k}={v}" for k, v in env.items())])


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    return int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text)


def algbw_bytes(op: str, nbytes: int, n: int) -> int:
    """nccl-tests' S: the gathered size for all_gather, else the bytes per device."""
    return nbytes * n if op == "all_gather" else nbytes


def shardcli_run(op: str, size: str, variant: str, warmup: int, iters: int) -> dict:
    out_buffer, malloc, env = VARIANTS[variant]
    cmd = [
        sys.executable, "-m", "shardcli", "collective", op, "--mesh", str(N_DEVICES), "--size", size,
        "--format", "json", "--platform", "cpu", "--warmup", str(warmup), "--iters", str(iters),
        "--malloc", malloc, "--out-buffer", out_buffer, "--no-compile-cache",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env={**os.environ, **env})
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[3:])} exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    doc = json.loads(proc.stdout)
    (placement,) = doc["sizes"][0]["placements"]
    if doc["summary"]["wrong"]:
        raise RuntimeError(f"{op} {size} --malloc {malloc}: {doc['summary']['wrong']} wrong elements")
    applied = doc["config"]["allocator"]["applied"]
    if applied != (malloc == "reuse"):
        raise RuntimeError(f"{op} {size}: --malloc {malloc} but allocator applied = {applied}")
    if out_buffer == "preallocated" and not placement["aliased"]:
        raise RuntimeError(f"{op} {size}: XLA did not write into the preallocated buffer")
    return {
        "p50_s": placement["timing"]["stats_s"]["p50"],
        "busbw_gbps": placement["busbw_gbps"],
        "reported_fraction": placement["roofline_fraction"],
        "reported_copy_gbps": doc["config"]["roofline"]["bandwidth_gbps"],
    }


def table_cells(row: dict[str, tuple[float, float, float]], variants: list[str], t_roof: float) -> str:
    """busbw and roofline % per variant, last / first speed-up, shardcli's own fraction (last)."""
    first, last = variants[0], variants[-1]
    busbw = [f"{row[v][0]:.3f}" if v in row else "-" for v in variants]
    fraction = [f"{t_roof / row[v][1]:.0%}" if v in row else "-" for v in variants]
    speedup = f"{row[first][1] / row[last][1]:.2f}x" if first in row and last in row else "-"
    reported = f"{row[last][2]:.0%}" if last in row else "-"
    return " | ".join([*busbw, *fraction, speedup, reported])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--sizes", default="1M,64M")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--large-warmup", type=int, default=3, help="--warmup for sizes >= 64M")
    parser.add_argument("--large-iters", type=int, default=5, help="--iters for sizes >= 64M")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a seconds-long run for CI (figures mean nothing)",
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.ops, args.sizes, args.warmup, args.iters = 1, OPS[0], "1M", 1, 2
    ops = args.ops.split(",")
    sizes = args.sizes.split(",")
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant {unknown[0]!r}; choose from {', '.join(VARIANTS)}")

    cores = usable_cores()
    one = measure_best_copy_bandwidth(threads=1, repeats=10)
    copy = measure_best_copy_bandwidth(threads=cores, repeats=10)
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
                order = variants if r % 2 == 0 else variants[::-1]
                for variant in order:
                    try:
                        res = shardcli_run(op, size, variant, warmup, iters)
                    except RuntimeError as error:
                        print(f"round {r + 1} {op} {size} {variant}: FAILED: {error}", flush=True)
                        failed = True
                        continue
                    results.setdefault((op, size, variant), []).append(res)
                    print(
                        f"round {r + 1} {op:12s} {size:>4s} {variant:8s} "
                        f"p50 {res['p50_s'] * 1e3:9.2f} ms  busbw {res['busbw_gbps']:.3f} GB/s  "
                        f"shardcli's roofline {res['reported_fraction']:.0%} "
                        f"of {res['reported_copy_gbps']:.1f} GB/s",
                        flush=True,
                    )

    print()
    first, last = variants[0], variants[-1]
    print(
        "| op | size per device | "
        + " | ".join(f"busbw {v} (GB/s)" for v in variants)
        + " | "
        + " | ".join(f"roofline % {v}" for v in variants)
        + f" | {last} / {first} | shardcli's roofline % ({last}) |"
    )
    print("| --- " * (4 + 2 * len(variants)) + "|")
    for op in ops:
        for size in sizes:
            nbytes = parse_size(size)
            need = min_bytes(op, nbytes, N_DEVICES)
            assert need is not None
            t_roof = need.total / copy.bytes_per_s
            row = {}
            for variant in variants:
                runs = results.get((op, size, variant))
                if runs:
                    row[variant] = (
                        statistics.median(x["busbw_gbps"] for x in runs),
                        statistics.median(x["p50_s"] for x in runs),
                        statistics.median(x["reported_fraction"] for x in runs),
                    )
            print(f"| {op} | {size} | {table_cells(row, variants, t_roof)} |")
    print(
        "\n"
        + "; ".join(f"{v} = {describe_variant(v)}" for v in variants)
        + f"\nout of place, each call blocked until ready; median over {args.rounds} round(s); "
        f"roofline % = (min bytes / {copy.gbps:.1f} GB/s) / p50; total {time.perf_counter() - t0:.0f} s"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
