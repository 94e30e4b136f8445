"""Whole-run wall time of `shardcli einsum` against a minimal hand-written jit script of the same einsum.

Both sides run as fresh processes, interleaved round by round so that machine drift hits both alike:
- shardcli: `shardcli einsum SUBSCRIPTS --shape ... --in ... --out ... --impl auto --format json
  --no-compile-cache` (one way, as the hand script does; its peak/link calibration included, since a
  user pays for it too; run with --peak-tflops/--link-gbps given to leave it out: --no-calibration);
- the hand script (this file's `--hand-run`): fake the devices, build the Auto mesh, place the same
  random operands with the same shardings, `jax.jit(jnp.einsum, in_shardings, out_shardings)`,
  compile, the same warm-up and timed iterations each blocked until ready, and the same check of
  every device's block against a float64 NumPy einsum.
The ratio compares the medians of the rounds' wall times. Target: <= 1.2.

Usage: python bench/einsum_overhead.py [--rounds 5] [--warmup 5] [--iters 20] [--no-calibration]
       [--subscripts bsd,df->bsf --shapes 8x512x1024,1024x4096 --ins data,None,None:None,model
        --out data,None,model --mesh 2x4 --axes data,model]
Run it with the interpreter of the environment shardcli is installed in; it always exits 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def hand_run(args: argparse.Namespace) -> None:
    mesh_shape = tuple(int(d) for d in args.mesh.split("x"))
    n = 1
    for d in mesh_shape:
        n *= d
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={n}"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    def spec(text: str) -> P:
        return P(*[None if e == "None" else e for e in text.split(",")])

    mesh = jax.make_mesh(
        mesh_shape, tuple(args.axes.split(",")), axis_types=(AxisType.Auto,) * len(mesh_shape)
    )
    shapes = [tuple(int(d) for d in s.split("x")) for s in args.shapes.split(",")]
    ins = [NamedSharding(mesh, spec(s)) for s in args.ins.split(":")]
    out = NamedSharding(mesh, spec(args.out))
    rng = np.random.default_rng(0)
    hosts = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    xs = [jax.device_put(h, s) for h, s in zip(hosts, ins, strict=True)]
    f = jax.jit(lambda *ops: jnp.einsum(args.subscripts, *ops), in_shardings=ins, out_shardings=out)
    compiled = f.lower(*xs).compile()
    for _ in range(args.warmup + args.iters):
        y = compiled(*xs)
        y.block_until_ready()
    ref = np.einsum(args.subscripts, *(h.astype(np.float64) for h in hosts))
    scale = np.einsum(args.subscripts, *(np.abs(h.astype(np.float64)) for h in hosts))
    for shard in y.addressable_shards:
        err = np.abs(np.asarray(shard.data, dtype=np.float64) - ref[shard.index])
        assert np.all(err <= 1e-4 * scale[shard.index]), shard.device
    print("ok")


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--subscripts", default="bsd,df->bsf")
    parser.add_argument("--shapes", default="8x512x1024,1024x4096")
    parser.add_argument("--ins", default="data,None,None:None,model")
    parser.add_argument("--out", default="data,None,model")
    parser.add_argument("--mesh", default="2x4")
    parser.add_argument("--axes", default="data,model")
    parser.add_argument("--no-calibration", action="store_true")
    parser.add_argument("--hand-run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a seconds-long run for CI (figures mean nothing)",
    )
    args = parser.parse_args()
    if args.quick:  # the hand run gets --quick too (it is passed sys.argv) and shrinks alike
        args.rounds, args.warmup, args.iters, args.shapes = 1, 0, 1, "8x16x32,32x64"
    if args.hand_run:
        hand_run(args)
        return
    shardcli = [sys.executable, "-m", "shardcli", "einsum", args.subscripts, "--impl", "auto"]
    shardcli += [a for s in args.shapes.split(",") for a in ("--shape", s)]
    shardcli += [a for s in args.ins.split(":") for a in ("--in", s)]
    shardcli += ["--out", args.out, "--mesh", args.mesh, "--axes", args.axes, "--format", "json"]
    shardcli += ["--warmup", str(args.warmup), "--iters", str(args.iters), "--no-compile-cache"]
    if args.no_calibration:
        shardcli += ["--peak-tflops", "1", "--link-gbps", "1"]
    hand = [sys.executable, os.path.abspath(__file__), "--hand-run", *sys.argv[1:]]
    ours, theirs = [], []
    for _ in range(args.rounds):
        ours.append(timed(shardcli))
        theirs.append(timed(hand))
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"einsum {args.subscripts} {args.shapes} on {args.mesh}, {args.rounds} rounds, median wall:")
    print(f"  shardcli einsum: {a:.2f} s (rounds {', '.join(f'{t:.2f}' for t in ours)})")
    print(f"  hand-written:    {b:.2f} s (rounds {', '.join(f'{t:.2f}' for t in theirs)})")
    print(f"  ratio {a / b:.2f} (target <= 1.2): {'PASS' if a / b <= 1.2 else 'FAIL'}")


if __name__ == "__main__":
    main()
