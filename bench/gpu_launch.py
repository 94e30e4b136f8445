"""What a GPU step of many small kernels costs beyond its roofline: kernel launch latency, a loop
trip's, and a call's per argument. Needs a GPU (CI has none). Its figures measured on one H200 are
in docs/development.md; the built-in launch costs are calibrate's (builtin_profiles.GPU_LAUNCH), but
for a buffer's (BUFFER_S), which is this script's.

    python bench/gpu_launch.py [--iters 30]

Three families of programs, each at several sizes, timed side by side in one process:
- chain N: `x = tanh(x @ w)` N times unrolled on f32[16,16] (each dot its own kernel);
- loop N: the same body in a `fori_loop` of N trips;
- args K: K f32[16] arguments, each plus one (one kernel).
For each: the kernels one call launches (shardcli's count from the optimized HLO,
`hlo_kernels.kernel_launches`), the p50 of `iters` calls (each waited for), and the least-squares
slope per kernel, per trip and per argument.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

if "--quick" in sys.argv:  # CI's check that the script runs: on the CPU, no GPU plugin started
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from shardcli.analysis.hlo.module import parse_module  # noqa: E402
from shardcli.analysis.kernels import kernel_launches  # noqa: E402
from shardcli.analysis.loops import runs_per_computation  # noqa: E402


def chain(n: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    def f(x: jax.Array, w: jax.Array) -> jax.Array:
        for _ in range(n):
            x = jnp.tanh(x @ w)
        return x

    return f, (jnp.ones((16, 16)), jnp.eye(16) * 0.5)


def loop(n: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    def f(x: jax.Array, w: jax.Array) -> jax.Array:
        return jax.lax.fori_loop(0, n, lambda _, y: jnp.tanh(y @ w), x)

    return f, (jnp.ones((16, 16)), jnp.eye(16) * 0.5)


def args(k: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    def f(*xs: jax.Array) -> list[jax.Array]:
        return [x + 1 for x in xs]

    return f, tuple(jnp.full((16,), float(i)) for i in range(k))


def measure(make: Callable[[int], Any], n: int, iters: int) -> tuple[int, float]:
    fn, given = make(n)
    compiled = jax.jit(fn).lower(*given).compile()
    module = parse_module(compiled.as_text())
    launches = kernel_launches(module, runs_per_computation(module))
    jax.block_until_ready(compiled(*given))
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*given))
        samples.append(time.perf_counter() - start)
    return launches, statistics.median(samples)


def slope(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (slope, intercept)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    s = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return s, my - s * mx


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="two sizes of each, 3 calls (CI, on the CPU)")
    given = parser.parse_args()
    iters = 3 if given.quick else given.iters
    print(f"device: {jax.devices()[0].device_kind}, jax {jax.__version__}, {iters} calls each, p50")
    families = (
        ("chain", chain, (1, 16, 64, 256)),
        ("loop", loop, (16, 64, 256)),
        ("args", args, (1, 16, 64, 256)),
    )
    for name, make, sizes in families:
        rows = [(n, *measure(make, n, iters)) for n in (sizes[:2] if given.quick else sizes)]
        for n, launches, p50 in rows:
            print(f"{name:5} {n:4}: {launches:5} kernels, p50 {p50 * 1e6:9.1f} us")
        per_n, base = slope([float(r[0]) for r in rows], [r[2] for r in rows])
        per_kernel, _ = slope([float(r[1]) for r in rows], [r[2] for r in rows])
        unit = {"chain": "link", "loop": "trip", "args": "argument"}[name]
        print(
            f"{name:5} fit: {per_n * 1e6:.2f} us per {unit}, {per_kernel * 1e6:.2f} us per kernel counted, "
            f"{base * 1e6:.1f} us at 0"
        )


if __name__ == "__main__":
    main()
