"""Levers for psum of 64 MiB per device on 8 faked CPU devices, measured side by side.

Every lever runs as a minimal jit(shard_map(psum)) loop in a fresh process (allocator settings are
per process and cannot be undone), the levers interleaved round by round so that machine drift hits
all alike. Each run: 5 warm-up + 10 timed calls, float32, 1-D, sharded P('x') over 8 devices; the
result of the last call is checked against NumPy after timing (for the donated, chained levers:
against NumPy's result of the whole chain, which stays exact for these small integers).

Levers:
- baseline: out of place, each call blocked until ready, malloc as the system has it
- donate: input donated and each output fed back as the next input (XLA writes in place)
- reuse: `shardcli.runtime.allocator.tune_for_reuse` (glibc keeps freed buffers; what `--malloc reuse` does)
- reuse+donate
- thp: GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (transparent huge pages for malloc's mmap chunks;
  needs the variable at process start)
- reuse+thp
- reuse+async: reuse, all calls dispatched, one block at the end (time per call = total / calls)
- reuse+1thread: reuse, XLA_FLAGS=--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1
- reuse+nogc: reuse, Python's garbage collector off while timing
- prealloc: out of place into one preallocated output buffer, donated to every call and replaced
  by its result (`shardcli collective --out-buffer preallocated`, the default)
- prealloc+reuse: shardcli's defaults
- prealloc+reuse+nt: and GLIBC_TUNABLES=glibc.cpu.x86_non_temporal_threshold=0x100000, so memcpy
  streams copies of 1 MiB and more past the cache (glibc's default threshold here is 41 MiB, and
  XLA's all-reduce copies 8 MiB chunks); needs the variable at process start
- prealloc+reuse+thp

Usage: python bench/psum_levers.py [--rounds 2] [--size 64M] [--levers baseline,reuse,...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shardcli.playground.roofline import host_copy_bandwidth, min_bytes  # noqa: E402

N = 8
LEVERS = {
    "baseline": {},
    "donate": {"donate": True},
    "reuse": {"reuse": True},
    "reuse+donate": {"reuse": True, "donate": True},
    "thp": {"env": {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}},
    "reuse+thp": {"reuse": True, "env": {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}},
    "reuse+async": {"reuse": True, "async": True},
    "reuse+1thread": {
        "reuse": True,
        "env": {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"},
    },
    "reuse+nogc": {"reuse": True, "nogc": True},
    "prealloc": {"prealloc": True},
    "prealloc+reuse": {"prealloc": True, "reuse": True},
    "prealloc+reuse+nt": {
        "prealloc": True,
        "reuse": True,
        "env": {"GLIBC_TUNABLES": "glibc.cpu.x86_non_temporal_threshold=0x100000"},
    },
    "prealloc+reuse+thp": {
        "prealloc": True,
        "reuse": True,
        "env": {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"},
    },
}


def child(lever: str, nbytes: int, warmup: int, iters: int) -> dict:
    """One lever in this (fresh) process."""
    import gc
    import resource

    cfg = LEVERS[lever]
    if cfg.get("reuse"):
        from shardcli.runtime.allocator import tune_for_reuse

        state = tune_for_reuse("reuse", backend_started=False)
        assert state.applied, state.note
    import jax

    jax.config.update("jax_num_cpu_devices", N)
    jax.config.update("jax_platforms", "cpu")
    import numpy as np
    from jax import lax
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((N,), ("x",), axis_types=(AxisType.Auto,))
    sharding = NamedSharding(mesh, P("x"))
    count = nbytes // 4
    host = (np.arange(N * count, dtype=np.int64) % 3).astype(np.float32)  # sums stay exact
    x = jax.device_put(host, sharding, may_alias=False)
    donate = cfg.get("donate", False)
    prealloc = cfg.get("prealloc", False)
    mapped = jax.shard_map(
        lambda a: lax.psum(a, "x"), mesh=mesh, in_specs=P("x"), out_specs=P("x") if donate else P()
    )
    out = None
    if prealloc:
        out = jax.jit(
            lambda: jax.numpy.full((count,), np.nan, np.float32), out_shardings=NamedSharding(mesh, P())
        )()
        compiled = (
            jax.jit(lambda a, o: mapped(a), donate_argnums=(1,), keep_unused=True).lower(x, out).compile()
        )
        call = lambda: compiled(x, out)  # noqa: E731
    else:
        compiled = jax.jit(mapped, donate_argnums=(0,) if donate else ()).lower(x).compile()
        call = lambda: compiled(x)  # noqa: E731
    y = None
    for _ in range(warmup):
        if not donate and not prealloc:
            y = None
        y = call()
        y.block_until_ready()
        if donate:
            x = y
        if prealloc:
            out = y
    if cfg.get("nogc"):
        gc.disable()
    before = resource.getrusage(resource.RUSAGE_SELF)
    samples = []
    if cfg.get("async"):
        start = time.perf_counter()
        for _ in range(iters):
            y = call()
            if prealloc:
                out = y
        y.block_until_ready()
        samples = [(time.perf_counter() - start) / iters]
    else:
        for _ in range(iters):
            if not donate and not prealloc:
                y = None
            start = time.perf_counter()
            y = call()
            y.block_until_ready()
            samples.append(time.perf_counter() - start)
            if donate:
                x = y
            if prealloc:
                out = y
    after = resource.getrusage(resource.RUSAGE_SELF)
    gc.enable()
    # Verify after timing: one block of the last result against NumPy.
    blocks = host.reshape(N, count).astype(np.float64)
    want = blocks.sum(axis=0)
    if donate:  # warmup + iters chained calls: block_k = N^(k-1) * sum
        want = want * float(N) ** (warmup + iters - 1)
    got = np.asarray(y.addressable_shards[0].data, dtype=np.float64)
    ok = bool(np.array_equal(got, want))
    calls = iters
    return {
        "p50_s": float(np.median(samples)),
        "faults_per_call": (after.ru_minflt - before.ru_minflt) / calls,
        "sys_ms_per_call": (after.ru_stime - before.ru_stime) / calls * 1e3,
        "user_ms_per_call": (after.ru_utime - before.ru_utime) / calls * 1e3,
        "verified": ok,
    }


def run_child(lever: str, nbytes: int, warmup: int, iters: int) -> dict:
    env = {**os.environ, **LEVERS[lever].get("env", {})}
    argv = [sys.executable, __file__, "--child", lever, "--bytes", str(nbytes)]
    argv += ["--warmup", str(warmup), "--iters", str(iters)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{lever}: exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--size", default="64M", help="bytes per device: 64M, 1M, ...")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--levers", default=",".join(LEVERS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--bytes", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a seconds-long run for CI (figures mean nothing)",
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.size, args.warmup, args.iters = 1, "1M", 1, 2
    if args.child:
        print(json.dumps(child(args.child, args.bytes, args.warmup, args.iters)))
        return 0
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    size = args.size.upper()
    nbytes = int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
    levers = args.levers.split(",")
    copy = host_copy_bandwidth()
    need = min_bytes("psum", nbytes, N)
    assert need is not None
    t_roof = need.total / copy.bytes_per_s
    factor = 2 * (N - 1) / N
    print(f"machine: {os.cpu_count()} cores; {copy.describe()}")
    print(
        f"psum {args.size} per device on {N} faked CPU devices: min bytes {need.total / 2**20:.0f} MiB "
        f"(read {need.read >> 20} MiB, write {need.written >> 20} MiB) -> roofline {t_roof * 1e3:.1f} ms, "
        f"busbw {nbytes / t_roof * factor / 1e9:.2f} GB/s"
    )
    results: dict[str, list[dict]] = {lever: [] for lever in levers}
    for r in range(args.rounds):
        for lever in levers if r % 2 == 0 else reversed(levers):
            res = run_child(lever, nbytes, args.warmup, args.iters)
            results[lever].append(res)
            print(
                f"round {r + 1} {lever:14s} p50 {res['p50_s'] * 1e3:8.1f} ms  faults/call "
                f"{res['faults_per_call']:9.0f}  sys {res['sys_ms_per_call']:6.1f} ms  "
                f"verified {res['verified']}",
                flush=True,
            )
    print()
    print("| lever | p50 (ms) | busbw (GB/s) | roofline % | vs baseline | page faults / call | verified |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    base = statistics.median(r["p50_s"] for r in results[levers[0]])
    failed = False
    for lever in levers:
        p50 = statistics.median(r["p50_s"] for r in results[lever])
        faults = statistics.median(r["faults_per_call"] for r in results[lever])
        ok = all(r["verified"] for r in results[lever])
        failed |= not ok
        busbw = nbytes / p50 * factor / 1e9
        print(
            f"| {lever} | {p50 * 1e3:.1f} | {busbw:.2f} | {t_roof / p50:.0%} | {base / p50:.2f}x | "
            f"{faults:,.0f} | {'yes' if ok else 'NO'} |"
        )
    print(f"\nmedian over {args.rounds} round(s); roofline % = roofline time / p50; vs baseline = speed-up")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
