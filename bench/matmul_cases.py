"""Sharded-matmul cases against one device: achieved FLOP/s relative to an unsharded `jnp.dot`.

For every case of `shardcli matmul` (all of them, each in the manual, auto and explicit forms) on 8
faked CPU devices at one size, run the sharded product through shardcli's own `run_matmul` (which
compiles, times and verifies each form against a float64 NumPy product) and, in the same process,
a plain `jax.jit(jnp.dot)` of the same I, J, K dims and dtype on one device (jax.devices()[0]) with
its inputs placed there, warmed up and timed with the same counts and the same timing loop
(`time_iterations`, out of place, each call blocked until ready).

The single-device baseline is measured before the first round and after every round, so machine
drift hits both sides; the baseline figure is the median of those p50s. Each (case, impl) figure is
the median of its per-round p50s. Achieved FLOP/s is the model FLOPs of the whole product
(2 I J K, plus I K for `mac`'s bias) over that median p50; the baseline's is 2 I J K over its median.

Usage: python bench/matmul_cases.py [--dims 1024,1024,1024] [--dtype float32] [--mesh 2x4]
                                    [--impl manual,auto,explicit] [--warmup 2] [--iters 5] [--rounds 3]

Reading the ratio: ratio = achieved FLOP/s of the sharded form / FLOP/s of the single-device dot.
1.0 means the sharded program does the whole product as fast as one device does it alone; above
1.0 is a speed-up from sharding, below 1.0 is a slow-down (communication, duplicated work, or the
devices fighting over the same cores). The 8 devices here are faked: they share this machine's
cores and memory, so sharding adds no compute, and speed-ups are not expected; ratios at or below
1.0 are not a failure. (On the 2-core machine this was written on, the single-device 1024^3
float32 dot took the same time pinned to one core as on two, 31.0 against 32.1 ms, so a sharded
form that spreads its blocks over both cores can come out somewhat above 1.0.) Cases that
all-gather a whole operand and then multiply it unsharded (allgather) repeat the full product on
every device and come out well below 1.0. Compare cases and forms with each other, not with 8.
With the default 5 timed iterations per run, per-round p50s of one (case, impl) can differ by 2x
on a busy 2-core machine: read the per-round list before trusting a difference between forms.

There is no timing pass/fail threshold: this reports figures. `illegal` is refused by JAX on
purpose in the manual and explicit forms and is printed as refused; cases the mesh cannot run (a
2-D case on `--mesh 8`) are printed as skipped. Exits 1 when any result is wrong, else 0 (2 on bad
arguments).
"""

from __future__ import annotations

import jax

jax.config.update("jax_num_cpu_devices", 8)  # before any JAX op: the 8 fake devices
jax.config.update("jax_platforms", "cpu")

import argparse  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import jax.numpy as jnp  # noqa: E402

from shardcli.errors import ShardcliError  # noqa: E402
from shardcli.playground.matmul.cases import IMPLS  # noqa: E402
from shardcli.playground.matmul.impl import ImplRun  # noqa: E402
from shardcli.playground.matmul.request import MatmulRequest  # noqa: E402
from shardcli.playground.matmul.run import CaseRun, run_matmul  # noqa: E402
from shardcli.runtime.arrays import make_host_array  # noqa: E402
from shardcli.runtime.timing import summarize, time_iterations  # noqa: E402
from shardcli.specs.meshes import parse_mesh  # noqa: E402
from shardcli.specs.runs import RunOptions  # noqa: E402
from shardcli.specs.values import ArraySpec, DType, parse_dtype  # noqa: E402

N_DEVICES = 8


def parse_dims(text: str) -> tuple[int, int, int]:
    """`I,J,K` as three positive integers."""
    try:
        dims = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--dims {text!r}: give three integers I,J,K") from None
    if len(dims) != 3 or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"--dims {text!r}: give three positive integers I,J,K")
    return dims  # type: ignore[return-value]


def parse_impls(text: str) -> tuple[str, ...]:
    """A comma-separated subset of manual, auto, explicit."""
    impls = tuple(p.strip() for p in text.split(",") if p.strip())
    bad = [i for i in impls if i not in IMPLS]
    if bad or not impls:
        raise argparse.ArgumentTypeError(f"--impl {text!r}: choose from {','.join(IMPLS)}")
    return impls


def baseline_p50(dims: tuple[int, int, int], dtype: DType, warmup: int, iters: int) -> float:
    """p50 seconds of `jax.jit(jnp.dot)` of A[I,J] . B[J,K] on one device, inputs placed there.

    The operands are the same random arrays `run_matmul` builds (same init and seeds).
    """
    i, j, k = dims
    device = jax.devices()[0]
    a = jax.device_put(make_host_array(ArraySpec(shape=(i, j), dtype=dtype, init="random"), seed=0), device)
    b = jax.device_put(make_host_array(ArraySpec(shape=(j, k), dtype=dtype, init="random"), seed=1), device)
    compiled = jax.jit(jnp.dot).lower(a, b).compile()
    samples, y = time_iterations(lambda xs: compiled(*xs), (a, b), warmup=warmup, iters=iters, chain=False)
    del y, a, b
    return summarize(samples).p50


def hlo_text(run: ImplRun) -> str:
    """The collectives XLA compiled into the program, e.g. `all-reduce x1`."""
    return ", ".join(f"{h.op} x{h.count}" for h in run.hlo) or "none"


def machine_facts() -> str:
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    return (
        f"nproc {os.cpu_count()}  affinity {affinity}"
        f"  python {platform.python_version()}  jax {jax.__version__}  "
        f"devices {len(jax.devices())} x {jax.devices()[0].platform}  {platform.machine()}"
    )


def collect(rounds: list[tuple[CaseRun, ...]]) -> list[dict]:
    """One row per (case, impl) over all rounds: status, HLO, per-round p50s, wrong summed."""
    rows = []
    for per_case in zip(*rounds, strict=True):
        first = per_case[0]
        if first.skipped:
            rows.append({"case": first.case.name, "impl": "-", "status": "skipped", "why": first.skipped})
            continue
        for n, impl_run in enumerate(first.impls):
            runs = [c.impls[n] for c in per_case]
            statuses = {r.status for r in runs}
            status = runs[0].status if len(statuses) == 1 else "mixed"
            p50s = [r.timing.stats.p50 for r in runs if r.timing is not None]
            rows.append(
                {
                    "case": first.case.name,
                    "impl": impl_run.impl,
                    "status": status,
                    "why": next((r.message for r in runs if r.message), None),
                    "expected": impl_run.expected_refusal,
                    "hlo": hlo_text(impl_run),
                    "p50s": p50s,
                    "model_flops": first.model_flops,
                    "wrong": sum(r.wrong for r in runs),
                }
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dims", type=parse_dims, default=(1024, 1024, 1024), help="I,J,K")
    parser.add_argument("--dtype", default="float32", help="float32, bfloat16, float16 or float64")
    parser.add_argument("--mesh", default="2x4", help="mesh of the 8 faked devices: 2x4 (default) or 8")
    parser.add_argument("--impl", type=parse_impls, default=IMPLS, help="comma-separated, default all three")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations per run")
    parser.add_argument("--iters", type=int, default=5, help="timed iterations per run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each reports the median p50 over them")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a seconds-long run for CI (figures mean nothing)",
    )
    args = parser.parse_args()
    if args.quick:
        args.dims, args.warmup, args.iters, args.rounds = (64, 64, 64), 0, 1, 1
    if args.rounds < 1 or args.iters < 1 or args.warmup < 0:
        parser.error("--rounds and --iters must be at least 1, --warmup at least 0")
    try:
        dtype = parse_dtype(args.dtype)
        mesh = parse_mesh(args.mesh, None)
    except ShardcliError as e:
        parser.error(str(e))
    if mesh.size > N_DEVICES:
        parser.error(f"--mesh {args.mesh} needs {mesh.size} devices; this benchmark fakes {N_DEVICES}")
    if dtype.needs_x64:
        jax.config.update("jax_enable_x64", True)
    request = MatmulRequest(
        cases=("all",),
        mesh=mesh,
        dtype=dtype,
        impls=args.impl,
        dims=args.dims,
        warmup=args.warmup,
        iters=args.iters,
        options=RunOptions(platform="cpu"),
    )
    i, j, k = args.dims
    dims_text = ",".join(map(str, args.dims))

    print(machine_facts())
    print(
        f"dims I,J,K {dims_text}  dtype {dtype.name}  mesh {args.mesh}  impls {','.join(args.impl)}  "
        f"rounds/warmup/iters {args.rounds}/{args.warmup}/{args.iters}"
    )
    t0 = time.perf_counter()
    base: list[float] = []
    rounds: list[tuple[CaseRun, ...]] = []
    hardware = None
    try:
        base.append(baseline_p50(args.dims, dtype, args.warmup, args.iters))
        for _ in range(args.rounds):
            result = run_matmul(request)
            rounds.append(result.runs)
            hardware = result.hardware
            base.append(baseline_p50(args.dims, dtype, args.warmup, args.iters))
    except ShardcliError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - t0

    base_p50 = statistics.median(base)
    base_flops = 2 * i * j * k / base_p50
    print(
        f"single-device jnp.dot on {jax.devices()[0]}: p50 {base_p50 * 1e3:.3f} ms "
        f"(median of {len(base)}), {base_flops / 1e9:.2f} GFLOP/s"
    )
    if hardware is not None and hardware.peak_flops is not None:
        print(f"shardcli per-device peak {hardware.peak_flops / 1e9:.2f} GFLOP/s ({hardware.peak_source})")
    print()

    rows = collect(rounds)
    w = max([len("HLO collectives"), *(len(r["hlo"]) for r in rows if r["status"] == "ok")])
    header = (
        f"{'case':<14} {'impl':<9} {'status':<8} {'HLO collectives':<{w}} {'p50 ms':>9} "
        f"{'GFLOP/s':>8} {'ratio':>6} {'wrong':>5}"
    )
    print(header)
    print("-" * len(header))
    wrong = 0
    notes = []
    for r in rows:
        if r["status"] == "skipped":
            print(f"{r['case']:<14} {r['impl']:<9} skipped")
            notes.append(f"{r['case']}: skipped: {r['why']}")
            continue
        wrong += r["wrong"]
        if r["status"] != "ok":
            label = "refused" if r["status"] == "refused" else r["status"]
            print(f"{r['case']:<14} {r['impl']:<9} {label:<8} {'-':<{w}} {'-':>9} {'-':>8} {'-':>6} {'-':>5}")
            expected = "expected" if r["expected"] else "UNEXPECTED"
            notes.append(f"{r['case']} {r['impl']}: {r['status']} ({expected}): {r['why']}")
            continue
        p50 = statistics.median(r["p50s"])
        flops = r["model_flops"] / p50
        print(
            f"{r['case']:<14} {r['impl']:<9} {'ok':<8} {r['hlo']:<{w}} {p50 * 1e3:>9.3f} "
            f"{flops / 1e9:>8.2f} {flops / base_flops:>6.3f} {r['wrong']:>5}"
        )
    print()
    print("ratio = achieved FLOP/s / single-device jnp.dot FLOP/s (medians of per-round p50s)")
    for note in notes:
        print(f"  {note}")
    print()
    print("per-round p50s (ms):")
    print(f"  single-device: [{', '.join(f'{s * 1e3:.3f}' for s in base)}]")
    for r in rows:
        if r["status"] == "ok":
            print(f"  {r['case']} {r['impl']}: [{', '.join(f'{s * 1e3:.3f}' for s in r['p50s'])}]")
    print(f"wrong {wrong}  total {elapsed:.1f} s")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
