"""Torch side of the all-reduce benchmark: gloo all_reduce(SUM) between 2 CPU processes on this machine.

Two ranks are started with torch.multiprocessing.spawn and joined over TCP on 127.0.0.1 (a free port,
gloo on the loopback interface). For each size (bytes per process, float32, 1-D) the ranks check one
all_reduce first (rank r fills its tensor with r+1; every element must then be n*(n+1)/2), then do
--warmup untimed calls and --iters timed calls. Each timed call is time.perf_counter() around
dist.all_reduce(t), after an untimed dist.barrier(); an iteration's time is the max over the ranks.
Rank 0 reports p50 and min of those times, algbw = bytes / p50 / 1e9 and busbw = algbw * 2(n-1)/n
(the nccl-tests convention; with n = 2, busbw = algbw), and cpu_p50_s: the CPU time of a call
(time.process_time, every thread of the rank), the busier rank's per call, p50.

Usage: bench/.torch-venv/bin/python bench/torch_allreduce.py [--sizes 1M,64M] [--warmup 5] [--iters 20]
                                                            [--threads 1] [--format table|json]

--sizes takes a comma-separated list of byte counts, each a multiple of 4, with an optional K or M
suffix (powers of 1024). Exit 0 when every check passed, 1 when one failed or a rank errored, 2 for
bad flags (one line on stderr), 130 on Ctrl-C or SIGTERM; the ranks never outlive the script.

The torch environment is not shardcli's; it was made with:

    python3.11 -m venv bench/.torch-venv
    bench/.torch-venv/bin/python -m pip install --find-links /opt/wheels 'torch==2.13.0+cpu'
    bench/.torch-venv/bin/python -m pip install numpy   # only silences torch's "Failed to initialize NumPy"

/opt/wheels holds torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl, the CPU-only build, on this
machine's disk (download.pytorch.org cannot be reached from here). Where that wheel is absent and
download.pytorch.org is reachable, this should do the same (not tried here):

    bench/.torch-venv/bin/python -m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

(PyPI's own torch==2.13.0 linux wheel works too, but pulls in the CUDA packages, several GB.)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import socket
import statistics
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ModuleNotFoundError:  # this script runs in the torch venv; --quick elsewhere says so and stops
    torch = None  # type: ignore[assignment]

WORLD_SIZE = 2
UNITS = {"": 1, "K": 1024, "M": 1024 * 1024}


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints the whole usage)
        self.exit(2, f"torch_allreduce.py: error: {message}\n")


def parse_size(text: str) -> int:
    text = text.strip()
    suffix = text[-1:].upper() if text[-1:].upper() in ("K", "M") else ""
    digits = text[: len(text) - len(suffix)]
    if not digits.isdigit():
        raise ValueError(f"bad size {text!r} (expected e.g. 4096, 1K, 64M)")
    nbytes = int(digits) * UNITS[suffix]
    if nbytes <= 0 or nbytes % 4:
        raise ValueError(f"size {text!r} is {nbytes} bytes: must be a positive multiple of 4 (float32)")
    return nbytes


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1M,64M", help="bytes per process, comma-separated (K/M = 1024^n)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls per size")
    parser.add_argument("--iters", type=int, default=20, help="timed calls per size")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads in each rank")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument(
        "--quick", action="store_true", help="one small size, 2 calls: checks the script still runs (CI)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.warmup, args.iters = "4K", 1, 2
    try:
        args.sizes = [parse_size(s) for s in args.sizes.split(",")]
    except ValueError as exc:
        parser.error(f"--sizes: {exc}")
    for name, low in (("warmup", 0), ("iters", 1), ("threads", 1)):
        if getattr(args, name) < low:
            parser.error(f"--{name} must be >= {low}, not {getattr(args, name)}")
    return args


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_size(nbytes: int, warmup: int, iters: int) -> dict:
    """One size, run by every rank; the returned figures are the same on every rank."""
    rank, n = dist.get_rank(), dist.get_world_size()
    t = torch.empty(nbytes // 4, dtype=torch.float32)

    t.fill_(rank + 1)
    dist.all_reduce(t)
    wrong = torch.tensor([int((t != n * (n + 1) / 2).sum())], dtype=torch.int64)
    dist.all_reduce(wrong)  # every rank's elements count

    t.zero_()  # sums of zeros stay zero, however many iterations
    for _ in range(warmup):
        dist.all_reduce(t)
    times = torch.empty(iters, dtype=torch.float64)
    cpu = torch.empty(iters, dtype=torch.float64)
    for i in range(iters):
        dist.barrier()
        start, start_cpu = time.perf_counter(), time.process_time()
        dist.all_reduce(t)
        times[i] = time.perf_counter() - start
        cpu[i] = time.process_time() - start_cpu  # every thread of this rank
    dist.all_reduce(times, op=dist.ReduceOp.MAX)  # an iteration lasts as long as its slowest rank
    dist.all_reduce(cpu, op=dist.ReduceOp.MAX)

    p50 = statistics.median(times.tolist())
    algbw = nbytes / p50 / 1e9
    return {
        "bytes": nbytes,
        "p50_s": p50,
        "min_s": float(times.min()),
        "cpu_p50_s": statistics.median(cpu.tolist()),  # CPU seconds per call, the busier rank
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * 2 * (n - 1) / n,
        "wrong": int(wrong.item()),
    }


def worker(rank: int, port: int, args: argparse.Namespace, results) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # keep gloo's traffic on the loopback interface
    torch.set_num_threads(args.threads)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD_SIZE,
        timeout=datetime.timedelta(seconds=120),
    )
    try:
        runs = [bench_size(nbytes, args.warmup, args.iters) for nbytes in args.sizes]
    finally:
        dist.destroy_process_group()
    if rank == 0:
        results.put(runs)


def print_table(report: dict, args: argparse.Namespace) -> None:
    print(
        f"torch {report['torch_version']}  gloo  world_size {report['world_size']}  "
        f"threads {args.threads}  warmup {args.warmup}  iters {args.iters}"
    )
    header = ("bytes", "p50_s", "min_s", "cpu_p50_s", "algbw_GB/s", "busbw_GB/s")
    print("  ".join(f"{h:>10}" for h in header) + f"  {'wrong':>5}")
    for r in report["runs"]:
        print(
            f"{r['bytes']:>10}  {r['p50_s']:>10.6f}  {r['min_s']:>10.6f}  {r['cpu_p50_s']:>10.6f}  "
            f"{r['algbw_gbps']:>10.3f}  {r['busbw_gbps']:>10.3f}  {r['wrong']:>5}"
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if torch is None:
        if args.quick:
            print(
                "torch is not installed in this interpreter: nothing to run (see the docstring for its venv)"
            )
            return 0
        print("torch_allreduce.py: error: torch is not installed; run it with bench/.torch-venv/bin/python")
        return 2
    results = mp.get_context("spawn").SimpleQueue()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM cleans up like Ctrl-C
    ranks = mp.spawn(worker, args=(free_port(), args, results), nprocs=WORLD_SIZE, join=False)
    try:
        while not ranks.join():
            pass
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:  # join stopped the other rank
        print(f"torch_allreduce.py: a rank failed: {str(exc).strip().splitlines()[0]}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("torch_allreduce.py: interrupted", file=sys.stderr)
        return 130
    finally:  # no rank outlives this process
        for p in ranks.processes:
            if p.is_alive():
                p.terminate()
            p.join()
    report = {"torch_version": torch.__version__, "world_size": WORLD_SIZE, "runs": results.get()}
    if args.format == "json":
        print(json.dumps(report))
    else:
        print_table(report, args)
    return 1 if any(r["wrong"] for r in report["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
