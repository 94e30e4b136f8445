"""Multi-process all-reduce: shardcli over jax.distributed against torch.distributed, side by side.

Two processes x 1 CPU device on this machine, all-reduce (sum) of float32 data, 1 MiB and 64 MiB per
process, gloo on loopback on both sides:

- shardcli: `shardcli launch -n 2 -- collective psum --mesh 2 --sizes 1M,64M --format json`; its busbw
  is the one it reports (p50 of the per-iteration max over the two processes).
- hand: the same psum as a plain jit(shard_map) loop (a fresh output every call, malloc as it is)
  in two processes joined by `jax.distributed.initialize` (this script's `--hand-run`), timed the
  same way: it tells what shardcli adds or saves apart from the speed of JAX's gloo path.
- hand-prealloc: the same loop with one output buffer donated to every call, as shardcli runs it
  (`jit(f, donate_argnums=1, keep_unused=True)`).
- torch: `bench/torch_allreduce.py` in its own environment (torch is never a shardcli dependency):
  `dist.all_reduce` with the gloo backend, per-iteration max over the two ranks, p50.

The hand-prealloc loop and torch also record the CPU time of each call (`time.process_time`, every
thread of the process; the busier process per call, p50), printed in a second table: what the
JAX path does beyond torch's work per call. (On the development machine the difference was glibc
memcpy inside XLA's gloo all-reduce, which hands gloo a separate input and output buffer; see
bench/README.md for the `perf` profile.)

busbw = S / p50 * 2(n-1)/n with n = 2, so busbw = algbw (nccl-tests' convention). The four run
interleaved round by round, so machine drift hits all alike; the table shows the median over rounds
of each side's busbw and the ratio shardcli / torch. Target: ratio >= 0.9.

Usage: python bench/multiprocess_vs_torch.py [--rounds 3] [--sizes 1M,64M] [--warmup 5] [--iters 20]
                                             [--torch-python bench/.torch-venv/bin/python] [--strict]

Make the torch environment first (see bench/torch_allreduce.py for where the wheel came from here):

    python3 -m venv bench/.torch-venv
    bench/.torch-venv/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

Run this script with the interpreter of shardcli's environment. It exits 0 and prints PASS or FAIL
per size; with --strict it exits 1 when a size misses the target or any run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = 0.9
PROCESSES = 2


def parse_size(text: str) -> int:
    units = {"K": 1024, "M": 1024**2}
    text = text.strip().upper()
    return int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text)


def run_json(argv: list[str], env: dict[str, str] | None = None, timeout: float = 900) -> dict:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"{' '.join(argv[:6])} ... exited {proc.returncode}:\n{tail}")
    return json.loads(proc.stdout)


def _label(nbytes: int) -> str:
    return (
        f"{nbytes >> 20}M" if nbytes >= 1 << 20 else f"{nbytes >> 10}K" if nbytes >= 1 << 10 else str(nbytes)
    )


def shardcli_round(sizes: str, warmup: int, iters: int) -> dict[int, tuple[float, None]]:
    """busbw per size as shardcli reports it (no CPU time: shardcli does not measure it)."""
    doc = run_json(
        [
            sys.executable, "-m", "shardcli", "launch", "-n", str(PROCESSES), "--",
            "collective", "psum", "--mesh", str(PROCESSES), "--sizes", sizes,
            "--warmup", str(warmup), "--iters", str(iters), "--format", "json",
        ]
    )  # fmt: skip
    out = {}
    for size in doc["sizes"]:
        (placement,) = size["placements"]
        if size["wrong"]:
            raise RuntimeError(f"shardcli reported {size['wrong']} wrong elements")
        out[size["bytes_per_device"]] = (placement["busbw_gbps"], None)
    return out


def torch_round(python: str, sizes: str, warmup: int, iters: int) -> dict[int, tuple[float, float]]:
    doc = run_json(
        [python, str(HERE / "torch_allreduce.py"), "--sizes", sizes, "--warmup", str(warmup),
         "--iters", str(iters), "--format", "json"]
    )  # fmt: skip
    return {run["bytes"]: (run["busbw_gbps"], run["cpu_p50_s"]) for run in doc["runs"]}


def hand_round(sizes: str, warmup: int, iters: int, out_buffer: str) -> dict[int, tuple[float, float]]:
    """Two `--hand-run` processes joined over jax.distributed; process 0 prints the figures."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, __file__, "--hand-run", str(port), "--sizes", sizes, "--warmup", str(warmup),
            "--iters", str(iters), "--hand-out-buffer", out_buffer]  # fmt: skip
    procs = [
        subprocess.Popen(
            [*argv, "--hand-process", str(k)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        for k in range(PROCESSES)
    ]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"hand loop exited {[p.returncode for p in procs]}")
    # gloo writes its own lines to stdout too; the figures are the line that is JSON
    line = next(line for line in reversed(outs[0].splitlines()) if line.startswith("{"))
    return {int(k): tuple(v) for k, v in json.loads(line).items()}


def hand_run(port: int, process_id: int, sizes: list[int], warmup: int, iters: int, out_buffer: str) -> None:
    """One process of the minimal loop: psum over a 2-device mesh, one device per process.

    out_buffer "fresh": `f(x)`, a new output every call. "preallocated": one output buffer donated
    to every call and each result fed back as the next call's buffer, as shardcli does by default.
    Besides busbw it records the process's CPU time per call (`time.process_time`, all threads).
    """
    import jax
    import numpy as np

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", 1)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=PROCESSES, process_id=process_id)
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((PROCESSES,), ("x",), devices=jax.devices())
    sharding = NamedSharding(mesh, P("x"))
    mapped = jax.shard_map(lambda a: jax.lax.psum(a, "x"), mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    prealloc = out_buffer == "preallocated"
    if prealloc:
        step = jax.jit(lambda a, out: mapped(a), donate_argnums=1, keep_unused=True)
    else:
        step = jax.jit(mapped)
    result = {}
    for nbytes in sizes:
        count = nbytes // 4
        block = np.arange(count, dtype=np.float32)
        x = jax.make_array_from_callback((PROCESSES * count,), sharding, lambda index, b=block: b)
        y = jax.make_array_from_callback(
            (PROCESSES * count,), sharding, lambda index, c=count: np.zeros(c, np.float32)
        )
        samples, cpu = [], []
        for i in range(warmup + iters):
            if not prealloc:
                y = None  # as shardcli does: do not hold the last output while timing the next
            start, start_cpu = time.perf_counter(), time.process_time()
            y = step(x, y) if prealloc else step(x)
            y.block_until_ready()
            if i >= warmup:
                samples.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
        got = np.asarray(y.addressable_shards[0].data)
        if not np.array_equal(got, PROCESSES * block):
            raise SystemExit(1)
        rows = np.asarray(multihost_utils.process_allgather(np.array([samples, cpu])))
        worst, busiest = rows[:, 0].max(axis=0), rows[:, 1].max(axis=0)
        busbw = nbytes / float(np.percentile(worst, 50)) / 1e9  # busbw = algbw for n = 2
        result[nbytes] = (busbw, float(np.percentile(busiest, 50)))
    if process_id == 0:
        sys.stdout.write(json.dumps(result) + "\n")
    jax.distributed.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="1M,64M")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--torch-python", default=str(HERE / ".torch-venv" / "bin" / "python"))
    parser.add_argument("--strict", action="store_true")
    parser.add_argument("--hand-run", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--hand-process", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--hand-out-buffer", default="fresh", help=argparse.SUPPRESS)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a seconds-long run for CI (figures mean nothing; no torch: its side left out)",
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.sizes, args.warmup, args.iters = 1, "64K", 1, 2
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    if args.hand_run is not None:
        hand_run(args.hand_run, args.hand_process, sizes, args.warmup, args.iters, args.hand_out_buffer)
        return 0
    torch_python = shutil.which(args.torch_python)  # a path, or a command on PATH such as python3
    if torch_python is None and args.quick:
        print(f"no torch interpreter at {args.torch_python}: the torch side is left out")
    elif torch_python is None:
        sys.stderr.write(
            f"multiprocess_vs_torch.py: error: no torch interpreter at {args.torch_python}; make the venv "
            f"(see this script's docstring) or give --torch-python\n"
        )
        return 2
    args.torch_python = torch_python or ""

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}")
    print(
        f"{PROCESSES} processes x 1 CPU device, float32 all-reduce, {args.warmup} warm-up, {args.iters} timed"
    )
    sides = ("shardcli", "hand", "hand-prealloc", "torch")
    rows: dict[str, dict[int, list[float]]] = {side: {} for side in sides}
    cpu: dict[str, dict[int, list[float]]] = {"hand-prealloc": {}, "torch": {}}
    failed = False
    for r in range(args.rounds):
        for side, run in (
            ("shardcli", lambda: shardcli_round(args.sizes, args.warmup, args.iters)),
            ("hand", lambda: hand_round(args.sizes, args.warmup, args.iters, "fresh")),
            ("hand-prealloc", lambda: hand_round(args.sizes, args.warmup, args.iters, "preallocated")),
            ("torch", lambda: torch_round(args.torch_python, args.sizes, args.warmup, args.iters)),
        ):
            if side == "torch" and not args.torch_python:
                continue
            try:
                figures = run()
            except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as error:
                print(f"round {r + 1} {side}: FAILED: {error}")
                failed = True
                continue
            for nbytes, figure in figures.items():
                busbw, cpu_s = figure
                rows[side].setdefault(nbytes, []).append(busbw)
                if side in cpu:
                    cpu[side].setdefault(nbytes, []).append(cpu_s)
            shown = ", ".join(f"{_label(n)} {busbw:.3f}" for n, (busbw, _) in figures.items())
            print(f"round {r + 1} {side:13s} busbw GB/s: {shown}", flush=True)

    print()
    print(f"{'size':>6} {'shardcli':>10} {'hand':>10} {'prealloc':>10} {'torch':>10} {'shardcli/torch':>15} "
          f"{'hand/torch':>11} {'shardcli/hand':>14}  target >= {TARGET}")  # fmt: skip
    missed = False
    for nbytes in sizes:
        med = {side: statistics.median(v[nbytes]) if v.get(nbytes) else None for side, v in rows.items()}
        if None in med.values():
            print(f"{nbytes:>6} (missing runs)")
            missed = True
            continue
        ratio = med["shardcli"] / med["torch"]
        verdict = "PASS" if ratio >= TARGET else "FAIL"
        missed |= verdict == "FAIL"
        print(
            f"{_label(nbytes):>6} {med['shardcli']:>10.3f} {med['hand']:>10.3f} "
            f"{med['hand-prealloc']:>10.3f} {med['torch']:>10.3f} {ratio:>15.2f} "
            f"{med['hand'] / med['torch']:>11.2f} {med['shardcli'] / med['hand']:>14.2f}  {verdict}"
        )
    print("\nbusbw in GB/s (1e9 B/s), median over rounds; per round: p50 of the per-iteration max.")
    print("hand: plain JAX loop, a fresh output every call; prealloc: the same with one donated output")
    print("buffer, as shardcli runs it.")
    print("\nCPU time per call (all threads of the busier process, p50; median over rounds):")
    print(f"{'size':>6} {'JAX prealloc':>13} {'torch':>10} {'JAX - torch':>12}")
    for nbytes in sizes:
        med_cpu = {side: statistics.median(v[nbytes]) if v.get(nbytes) else None for side, v in cpu.items()}
        if None in med_cpu.values():
            continue
        jax_ms, torch_ms = med_cpu["hand-prealloc"] * 1e3, med_cpu["torch"] * 1e3
        print(f"{_label(nbytes):>6} {jax_ms:>10.1f} ms {torch_ms:>7.1f} ms {jax_ms - torch_ms:>9.1f} ms")
    return 1 if failed or (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
