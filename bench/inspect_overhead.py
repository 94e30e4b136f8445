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

Usage: python bench/inspect_overhead.py [--rounds 5] [--size huge|small]
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
}
WRAPPER = """
import sys
sys.path.insert(0, {examples!r})
import transformer


def inputs(mesh):
    return transformer.inputs(mesh, {size})
"""


def hand_run(wrapper: str) -> None:
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import importlib.util

    import jax
    from jax.sharding import AxisType

    spec = importlib.util.spec_from_file_location("sizes", wrapper)
    assert spec is not None and spec.loader is not None
    sizes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sizes)
    import transformer

    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
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
        if proc.returncode != 0:
            raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{err.read()}")
        return seconds, usage.ru_maxrss * 1024, out.read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", choices=tuple(SIZES), default="huge")
    parser.add_argument("--hand-run", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hand_run:
        sys.path.insert(0, os.path.join(ROOT, "examples"))
        hand_run(args.hand_run)
        return
    with tempfile.TemporaryDirectory() as folder:
        wrapper = os.path.join(folder, "sizes.py")
        with open(wrapper, "w") as f:
            f.write(WRAPPER.format(examples=os.path.join(ROOT, "examples"), size=SIZES[args.size]))
        ours_cmd = [sys.executable, "-m", "shardcli", "inspect", f"{ROOT}/examples/transformer.py:block"]
        ours_cmd += ["--inputs", f"{wrapper}:inputs", "--mesh", "2x4", "--axes", "data,model"]
        ours_cmd += ["--format", "json", "--no-compile-cache"]
        hand_cmd = [sys.executable, os.path.abspath(__file__), "--hand-run", wrapper]
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
    print(
        f"transformer block ({args.size}): {per_device / 2**30:.1f} GiB of arguments per device, "
        f"{args.rounds} rounds"
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
    )


if __name__ == "__main__":
    main()
