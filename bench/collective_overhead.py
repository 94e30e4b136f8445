"""Collective timing overhead: `shardcli collective` against a hand-written jit(shard_map) loop.

For psum and all_gather at 1 MB and 64 MB per device on 8 faked CPU devices, compare the p50 that
`shardcli collective OP --size SIZE --format json` reports with the p50 of a minimal loop of the same
op in this process: same input (float32, 1-D, SIZE/4 elements per device, sharded P('x') over a 1-D
mesh of 8 devices), same warm-up and iteration counts, each call blocked until ready, out of place.

Both sides run in a fresh subprocess each round: shardcli through its real start-up path (it fakes
the devices itself), the hand loop through this script's `--hand-run`. When the hand loop ran in this
long-lived process (after the 64 MB runs), its 1 MB all_gather measured 10.8-13.6 ms against
7.0-12.8 ms for shardcli in fresh processes: allocator state carried over from earlier sizes is not
overhead, so both sides now start fresh. The two are interleaved round by round so that machine
drift hits both alike, and the ratio compares the medians of the per-round p50s.
Target: ratio within [0.9, 1.1].

The 1 MB rows run 21 rounds of 50 timed calls by default. On the shared 2-core development machine
a 1 MB psum measured 1.2-1.4 ms in quiet rounds and 2.5-5 ms in noisy ones, on both sides, and with
5-11 rounds the side that happened to get more noisy rounds decided the median (psum 1 MB ratios
0.87-1.24 over five such runs; 0.96-1.04 over three runs of 21 rounds).

Both sides write their results the same way (`--out-buffer`, shardcli's default preallocated:
the hand loop donates one output buffer to every call, `jit(f, donate_argnums=1,
keep_unused=True)`, and feeds each result back as the next call's buffer; fresh: `f(x)`) and use
the same host allocator (`--malloc`, default as shardcli's: reuse, or system with fresh buffers):
shardcli gets the flags, the hand loop applies `shardcli.runtime.allocator.tune_for_reuse` before JAX
starts. So the ratio compares the instrument, not two ways of running the op.

Usage: python bench/collective_overhead.py [--rounds 21] [--warmup 5] [--iters 50]
                                          [--large-rounds 5] [--large-warmup 3] [--large-iters 5]
                                          [--out-buffer preallocated|fresh]
                                          [--ops psum,all_gather] [--sizes 1M,64M]
                                          [--malloc reuse|system] [--strict]

On CPU a 64 MB-per-device call takes 0.1-4 s (with fresh outputs mostly the kernel faulting in
their pages), so the 64 MB runs use the smaller --large-warmup/--large-iters to keep the whole run
to a few minutes.

Run it with the interpreter of the environment shardcli is installed in. It always exits 0 and
prints PASS or FAIL per row; with --strict it exits 1 when any row fails (or a run errors).
"""

from __future__ import annotations

import jax

jax.config.update("jax_num_cpu_devices", 8)  # before any JAX op: the hand loop's 8 fake devices
jax.config.update("jax_platforms", "cpu")

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

N_DEVICES = 8
OPS = ("psum", "all_gather")
SIZES = {"1M": 1024 * 1024, "64M": 64 * 1024 * 1024}
LARGE_BYTES = 64 * 1024 * 1024
LOW, HIGH = 0.9, 1.1


def shardcli_p50(op: str, size: str, warmup: int, iters: int, malloc: str, out_buffer: str) -> float:
    """p50 seconds that `shardcli collective ... --format json` reports, run in a fresh process.

    Raises:
        RuntimeError: the command failed, its output is not the expected JSON, or results were wrong.
    """
    cmd = [
        sys.executable, "-m", "shardcli", "collective", op,
        "--mesh", str(N_DEVICES), "--size", size, "--format", "json", "--platform", "cpu",
        "--warmup", str(warmup), "--iters", str(iters), "--malloc", malloc, "--out-buffer", out_buffer,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[1:])} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    data = json.loads(proc.stdout)
    if data["summary"]["wrong"] != 0:
        raise RuntimeError(f"shardcli {op} {size}: {data['summary']['wrong']} wrong elements")
    placement = data["sizes"][0]["placements"][0]
    if (placement["placement"], placement["out_buffer"]) != ("out", out_buffer):
        raise RuntimeError(f"shardcli {op} {size}: expected placement out into {out_buffer} buffers")
    if out_buffer == "preallocated" and not placement["aliased"]:
        raise RuntimeError(f"shardcli {op} {size}: XLA did not write into the preallocated buffer")
    return float(placement["timing"]["stats_s"]["p50"])


def make_mesh() -> jax.sharding.Mesh:
    return jax.make_mesh((N_DEVICES,), ("x",), axis_types=(AxisType.Auto,), devices=jax.devices()[:N_DEVICES])


def hand_program(op: str, mesh: jax.sharding.Mesh, out_buffer: str):
    if op == "psum":
        body = lambda x: lax.psum(x, "x")  # noqa: E731
    elif op == "all_gather":
        body = lambda x: lax.all_gather(x, "x", axis=0, tiled=True, to="invarying")  # noqa: E731
    else:
        raise ValueError(op)
    mapped = jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P())
    if out_buffer == "fresh":
        return jax.jit(mapped)
    return jax.jit(lambda x, out: mapped(x), donate_argnums=1, keep_unused=True)


def hand_p50(
    op: str, nbytes: int, warmup: int, iters: int, mesh: jax.sharding.Mesh, out_buffer: str
) -> float:
    """p50 seconds of the minimal loop: jit(shard_map(op)), warm up, then time each call blocked.

    fresh: `f(x)`; preallocated: `out = f(x, out)`, the result written into the donated buffer.
    """
    per_device = nbytes // 4
    host = np.arange(per_device * N_DEVICES, dtype=np.float32)
    x = jax.device_put(host, NamedSharding(mesh, P("x")))
    del host
    f = hand_program(op, mesh, out_buffer)
    if out_buffer == "fresh":
        call = lambda: f(x)  # noqa: E731
    else:
        shape = jax.eval_shape(f, x, x).shape  # f never reads its out argument: x stands in
        out = jax.jit(lambda: jnp.zeros(shape, jnp.float32), out_shardings=NamedSharding(mesh, P()))()

        def call():
            nonlocal out
            out = f(x, out)
            return out

    call().block_until_ready()  # compile (untimed, like shardcli's separate compile step)
    for _ in range(warmup):
        call().block_until_ready()
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        call().block_until_ready()
        samples.append(time.perf_counter() - start)
    return float(np.percentile(samples, 50))


def hand_p50_fresh(op: str, nbytes: int, warmup: int, iters: int, malloc: str, out_buffer: str) -> float:
    """`hand_p50` in a fresh process, so both sides start from the same allocator state."""
    cmd = [
        sys.executable, __file__, "--hand-run", op, str(nbytes), str(warmup), str(iters), malloc, out_buffer
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"hand loop {op} {nbytes} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def machine_facts() -> str:
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    return (
        f"nproc {os.cpu_count()}  affinity {affinity}"
        f"  python {platform.python_version()}  jax {jax.__version__}  "
        f"devices {N_DEVICES} x {jax.devices()[0].platform}  {platform.machine()}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=21, help="interleaved rounds per (op, 1M)")
    parser.add_argument("--large-rounds", type=int, default=5, help="--rounds for the 64M runs")
    parser.add_argument("--warmup", type=int, default=5, help="untimed iterations per run")
    parser.add_argument("--iters", type=int, default=50, help="timed iterations per run")
    parser.add_argument("--large-warmup", type=int, default=3, help="--warmup for the 64M runs")
    parser.add_argument("--large-iters", type=int, default=5, help="--iters for the 64M runs")
    parser.add_argument(
        "--out-buffer", default="preallocated", choices=("preallocated", "fresh"), help="where results go"
    )
    parser.add_argument("--malloc", choices=("reuse", "system"), help="host allocator [default: shardcli's]")
    parser.add_argument("--ops", default=",".join(OPS), help=f"some of {','.join(OPS)}")
    parser.add_argument("--sizes", default=",".join(SIZES), help=f"some of {','.join(SIZES)}")
    parser.add_argument("--strict", action="store_true", help="exit 1 on any FAIL")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a seconds-long run for CI (figures mean nothing)",
    )
    parser.add_argument(
        "--hand-run",
        nargs=6,
        metavar=("OP", "BYTES", "WARMUP", "ITERS", "MALLOC", "OUT_BUFFER"),
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.warmup, args.iters, args.ops, args.sizes = 1, 1, 2, OPS[0], "1M"
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if args.hand_run:
        op, nbytes, warmup, iters, malloc, out_buffer = args.hand_run
        if malloc == "reuse":  # before the backend starts, as shardcli does
            from shardcli.runtime.allocator import tune_for_reuse

            state = tune_for_reuse("reuse", backend_started=False)
            if not state.applied:
                raise SystemExit(state.note)
        print(hand_p50(op, int(nbytes), int(warmup), int(iters), make_mesh(), out_buffer))
        return 0

    from shardcli.commands.requests.collective import default_malloc

    args.malloc, _ = default_malloc(args.malloc, args.out_buffer)
    print(machine_facts())
    print(
        f"rounds/warmup/iters {args.rounds}/{args.warmup}/{args.iters} (1M), "
        f"{args.large_rounds}/{args.large_warmup}/{args.large_iters} (64M); both sides in fresh processes, "
        f"--out-buffer {args.out_buffer}, --malloc {args.malloc}; "
        f"ratio = median(shardcli p50) / median(hand p50), target [{LOW}, {HIGH}]"
    )
    rows = []
    failed = False
    t0 = time.perf_counter()
    ops, sizes = args.ops.split(","), args.sizes.split(",")
    if not set(ops) <= set(OPS) or not set(sizes) <= set(SIZES):
        parser.error(f"--ops takes {','.join(OPS)} and --sizes {','.join(SIZES)}")
    for op in ops:
        for size in sizes:
            nbytes = SIZES[size]
            cli, hand = [], []
            big = nbytes >= LARGE_BYTES
            warmup = args.large_warmup if big else args.warmup
            iters = args.large_iters if big else args.iters
            rounds = args.large_rounds if big else args.rounds
            try:
                for r in range(rounds):
                    # Alternate which side goes first so neither always follows the other.
                    order = ("cli", "hand") if r % 2 == 0 else ("hand", "cli")
                    for side in order:
                        if side == "cli":
                            cli.append(shardcli_p50(op, size, warmup, iters, args.malloc, args.out_buffer))
                        else:
                            hand.append(
                                hand_p50_fresh(op, nbytes, warmup, iters, args.malloc, args.out_buffer)
                            )
            except Exception as e:  # noqa: BLE001 - report it as a failed row
                print(f"{op} {size}: ERROR {e}", file=sys.stderr)
                rows.append((op, size, None, None, None, "ERROR", cli, hand))
                failed = True
                continue
            c, h = statistics.median(cli), statistics.median(hand)
            ratio = c / h
            verdict = "PASS" if LOW <= ratio <= HIGH else "FAIL"
            failed |= verdict == "FAIL"
            rows.append((op, size, c, h, ratio, verdict, cli, hand))

    print()
    header = f"{'op':<11} {'size':>5} {'shardcli p50 ms':>16} {'hand p50 ms':>12} {'ratio':>6}  result"
    print(header)
    print("-" * len(header))
    for op, size, c, h, ratio, verdict, _, _ in rows:
        if c is None:
            print(f"{op:<11} {size:>5} {'-':>16} {'-':>12} {'-':>6}  {verdict}")
        else:
            print(f"{op:<11} {size:>5} {c * 1e3:>16.3f} {h * 1e3:>12.3f} {ratio:>6.3f}  {verdict}")
    print()
    print("per-round p50s (ms):")
    for op, size, _, _, _, _, cli, hand in rows:
        fmt = lambda v: ", ".join(f"{s * 1e3:.3f}" for s in v)  # noqa: E731
        print(f"  {op} {size}: shardcli [{fmt(cli)}]  hand [{fmt(hand)}]")
    print(f"total {time.perf_counter() - t0:.1f} s")
    errors = sum(1 for row in rows if row[5] == "ERROR")  # a run that failed is never a figure
    return 1 if errors or (args.strict and failed) else 0


if __name__ == "__main__":
    sys.exit(main())
