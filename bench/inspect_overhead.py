"""`shardcli inspect` of the examples' transformer block against a hand-written AOT script.

Both sides lower and compile the same block from jax.ShapeDtypeStructs on 8 faked CPU devices
(mesh 2x4, axes data and model, Megatron's layout from examples/transformer.py) and read the
compiled program's memory analysis; neither allocates the arguments:
- shardcli: `shardcli inspect examples/transformer.py:block --inputs <this size's inputs>
  --format json --no-compile-cache` (its whole report: collectives, pictures' tile math, findings);
- the hand script (this file's `--hand-run`): `jax.jit(block).lower(*inputs(mesh)).compile()` and
  `memory_analysis()`.
Each runs as a fresh process, interleaved round by round; the ratio compares the medians of the
rounds' wall times (target <= 1.3), and each side's peak RSS is read from the kernel (wait4) for
every round (target for shardcli: under 1 GB).

Sizes: `--size small` (the example's defaults) or `--size huge` (d_model 2^18, d_ff 2^20, 256 heads,
bf16: 384 GiB of weights per device, 3 TiB in all).

With `--target tpu-v5p:8x8x16 --mesh 64x16 --size pod` both sides compile through the real TPU
compiler for 1024 chips (the hand script describes the topology and builds the mesh itself); the
target there is a whole run under 10 s on a 2-core machine.

Usage: python bench/inspect_overhead.py [--rounds 5] [--size huge|small|pod] [--target T --mesh DxM]
Run it with the interpreter of the environment shardcli is installed in; it always exits 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = {
    "small": "",
    "huge": "batch=8, seq=512, d_model=1 << 18, heads=256, d_ff=1 << 20",
    # a real layer of a large model: for a pod (--target tpu-v5p:8x8x16 --mesh 64x16)
    "pod": "batch=256, seq=2048, d_model=8192, heads=64, d_ff=32768",
}
WRAPPER = """
import sys
sys.path.insert(0, {examples!r})
import transformer


def inputs(mesh):
    return transformer.inputs(mesh, {size})
"""


def hand_run(wrapper: str, target: str | None, mesh_shape: tuple[int, ...]) -> None:
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    import importlib.util

    import jax
    from jax.sharding import AxisType

    spec = importlib.util.spec_from_file_location("sizes", wrapper)
    assert spec is not None and spec.loader is not None
    sizes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sizes)
    import transformer

    if target is None:
        mesh = jax.make_mesh(mesh_shape, ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    else:  # the AOT recipe: describe the topology, build the mesh over its chips
        from jax.experimental import topologies

        generation, _, shape = target.partition(":")
        topology = topologies.get_topology_desc(topology_name=f"{generation[4:]}:{shape}", platform="tpu")
        mesh = topologies.make_mesh(topology, mesh_shape, ("data", "model"))
    compiled = jax.jit(transformer.block).lower(*sizes.inputs(mesh)).compile()
    print(compiled.memory_analysis().argument_size_in_bytes)


def run_measured(cmd: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS bytes (wait4's ru_maxrss), stdout."""
    with tempfile.TemporaryFile(mode="w+") as out, tempfile.TemporaryFile(mode="w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode not in (0, 1):  # 1: a target's "does not fit" verdict
            raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{err.read()}")
        return seconds, usage.ru_maxrss * 1024, out.read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", choices=tuple(SIZES), default="huge")
    parser.add_argument("--target", help="a TPU target, e.g. tpu-v5p:8x8x16 (needs the tpu extra)")
    parser.add_argument("--mesh", default="2x4", help="data x model, e.g. 64x16 for tpu-v5p:8x8x16")
    parser.add_argument("--hand-run", help=argparse.SUPPRESS)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a seconds-long run for CI (figures mean nothing)",
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.size = 1, "small"
    mesh_shape = tuple(int(d) for d in args.mesh.split("x"))
    if args.hand_run:
        sys.path.insert(0, os.path.join(ROOT, "examples"))
        hand_run(args.hand_run, args.target, mesh_shape)
        return
    with tempfile.TemporaryDirectory() as folder:
        wrapper = os.path.join(folder, "sizes.py")
        with open(wrapper, "w") as f:
            f.write(WRAPPER.format(examples=os.path.join(ROOT, "examples"), size=SIZES[args.size]))
        ours_cmd = [sys.executable, "-m", "shardcli", "inspect", f"{ROOT}/examples/transformer.py:block"]
        ours_cmd += ["--inputs", f"{wrapper}:inputs", "--mesh", args.mesh, "--axes", "data,model"]
        ours_cmd += ["--format", "json"]
        ours_cmd += ["--target", args.target] if args.target else []
        hand_cmd = [sys.executable, os.path.abspath(__file__), "--hand-run", wrapper, "--mesh", args.mesh]
        hand_cmd += ["--target", args.target] if args.target else []
        ours, theirs = [], []
        for _ in range(args.rounds):
            ours.append(run_measured(ours_cmd))
            theirs.append(run_measured(hand_cmd))
    import json

    doc = json.loads(ours[-1][2])
    per_device = doc["program"]["memory"]["argument_bytes"]
    a = statistics.median(t for t, _, _ in ours)
    b = statistics.median(t for t, _, _ in theirs)
    rss = max(r for _, r, _ in ours)
    where = f"{args.target} as {args.mesh}" if args.target else f"8 faked CPU devices as {args.mesh}"
    fit = doc["fit"]["text"] if doc.get("fit") else "fit not judged (no target)"
    print(
        f"transformer block ({args.size}) on {where}: {per_device / 2**30:.2f} GiB of arguments per "
        f"device, {args.rounds} rounds; {fit}"
    )
    print(
        f"  shardcli inspect: {a:.2f} s median (rounds {', '.join(f'{t:.2f}' for t, _, _ in ours)}), "
        f"peak RSS {rss / 2**20:.0f} MiB"
    )
    print(
        f"  hand-written AOT: {b:.2f} s median (rounds {', '.join(f'{t:.2f}' for t, _, _ in theirs)}), "
        f"peak RSS {max(r for _, r, _ in theirs) / 2**20:.0f} MiB"
    )
    print(
        f"  ratio {a / b:.2f} (target <= 1.3): {'PASS' if a / b <= 1.3 else 'FAIL'}; "
        f"RSS under 1 GB: {'PASS' if rss < 1e9 else 'FAIL'}"
        + (f"; whole run under 10 s: {'PASS' if a <= 10 else 'FAIL'}" if args.target else "")
    )


if __name__ == "__main__":
    main()
