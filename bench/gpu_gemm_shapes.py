"""The GEMMs of examples/llama.py's train step (Llama 3.2 1B shapes, batch 16 x 2048), each timed alone
on this host's GPU beside the square GEMM of the same FLOPs: how far a GEMM's rate follows its FLOPs.

    python bench/gpu_gemm_shapes.py            # needs a GPU; prints TFLOP/s per shape
    python bench/gpu_gemm_shapes.py --quick    # each dimension / 64 on the CPU (CI: the script runs)

Each product is jitted alone (bf16 in, bf16 out, as the step's are), called twice untimed, then
timed 10 times each waiting for its result; the fastest is printed (the call's cost included).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

if "--quick" in sys.argv:  # CI's check that the script runs: on the CPU, no GPU plugin started
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

TOKENS = 16 * 2048
# (name, M, K, N): the step's projections at its model widths (dim 2048, hidden 8192, 8 kv heads
# of 64, vocab 128,256)
SHAPES = [
    ("q/o projection", TOKENS, 2048, 2048),
    ("k/v projection", TOKENS, 2048, 512),
    ("gate/up", TOKENS, 2048, 8192),
    ("down", TOKENS, 8192, 2048),
    ("lm head", TOKENS, 2048, 128_256),
    ("weight grad gate/up", 2048, TOKENS, 8192),
]


def fastest(m: int, k: int, n: int) -> float:
    key = jax.random.key(0)
    a = jax.random.normal(key, (m, k), jnp.bfloat16)
    b = jax.random.normal(key, (k, n), jnp.bfloat16)
    f = jax.jit(lambda x, y: x @ y)
    for _ in range(2):
        jax.block_until_ready(f(a, b))
    times = []
    for _ in range(10):
        start = time.perf_counter()
        jax.block_until_ready(f(a, b))
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="each dimension / 64, on the CPU")
    args = parser.parse_args()
    scale = 64 if args.quick else 1
    print(f"{'GEMM':<22} {'M x K x N':>22} {'GFLOP':>8} {'TFLOP/s':>8} {'square':>6} {'TFLOP/s':>8}")
    for name, *dims in SHAPES:
        m, k, n = (max(8, d // scale) for d in dims)
        flops = 2.0 * m * k * n
        step = 8 if args.quick else 128  # the square's side, a multiple of this
        side = max(step, round((m * k * n) ** (1 / 3) / step) * step)
        rate, square = flops / fastest(m, k, n), 2.0 * side**3 / fastest(side, side, side)
        shape = f"{m}x{k}x{n}"
        print(
            f"{name:<22} {shape:>22} {flops / 1e9:>8.0f} {rate / 1e12:>8.0f} {side:>6} {square / 1e12:>8.0f}"
        )


if __name__ == "__main__":
    main()
