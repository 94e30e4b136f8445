"""The GPU step-time estimate against step times measured on an H200: estimate / measured per row.

    python bench/gpu_estimate.py            # the H200 fixtures (examples/gpu_h200), no GPU needed
    python bench/gpu_estimate.py --gpu      # also compile and time the microbenchmarks on this host's GPU

The estimate is `inspect`'s: each library kernel's roofline plus every other op's, at the
efficiencies of `shardcli.hardware.builtin_profiles.GPU_OPS` (shardcli calibrate's profile of an
H200: a GEMM's read from the measured curve at its FLOPs; the train steps were never used to set
them), plus the call. Each row reads a fixture's optimized HLO (compiled and run on one
H200 with jax 0.11.2) through `program_analysis.analyze_text`, as `shardcli inspect PATH.hlo.txt
--target gpu-h200:1` does, and prints its FLOPs against the reference count and its estimate against
the measured step. With --gpu (a real GPU present) the einsum, stream and MLP programs are compiled
and timed here too (median of 5 after 2 warm-up calls), each beside the estimate of its own compile.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "examples" / "gpu_h200"

# (fixture, reference FLOPs, measured step in seconds or None where it was not measured): README there.
ROWS = [
    ("mlp_bf16", 8.797e12, 12.7e-3),
    ("llama1b", 3.261e14, 1.203),
    ("gemma-2b_full_b2", 3.729e14, None),
    ("llama2-7b_full_b1", 2.264e14, None),
]
BAND = (0.9, 1.1)  # issue 53's band for the H200 rows


def fixture_rows(quick: bool) -> list[tuple[str, float]]:
    """Print each fixture's FLOPs and estimate; return (name, estimate / measured) of the measured."""
    from shardcli.analysis.program import analyze_text
    from shardcli.analysis.step_time import estimate_step
    from shardcli.hardware.builtin_profiles import GPU_OPS
    from shardcli.hardware.chips import CHIPS

    chip = CHIPS["gpu-h200"]
    print(f"{'fixture':<20} {'FLOPs/ref':>9} {'XLA/ref':>8} {'estimate':>10} {'measured':>9} {'est/meas':>8}")
    ratios = []
    for name, reference, measured in ROWS[:1] if quick else ROWS:
        text = gzip.decompress((FIXTURES / f"{name}.hlo.txt.gz").read_bytes()).decode()
        analysis = analyze_text(text, (1,), ("d",))
        step = estimate_step(analysis, chip, {}, analysis.dot_dtype or "bfloat16", op_efficiency=GPU_OPS)
        estimate = step.estimate_s or 0.0
        ratio = estimate / measured if measured else None
        flops, xla = (analysis.flops or 0) / reference, (analysis.xla_flops or 0) / reference
        print(
            f"{name:<20} {flops:>9.3f} {xla:>8.4f} "
            f"{estimate * 1e3:>8.2f}ms {f'{measured * 1e3:.1f}ms' if measured else '-':>9} "
            f"{f'{ratio:.3f}' if ratio else '-':>8}"
        )
        if ratio is not None:
            ratios.append((name, ratio))
    return ratios


def gpu_rows() -> list[tuple[str, float]]:
    """Compile and time the einsum, stream and MLP programs on this host's GPU, each against the
    estimate of its own compile."""
    import jax
    import jax.numpy as jnp

    from shardcli.analysis.program import analyze_compiled
    from shardcli.analysis.step_time import step_time_of

    device = jax.devices()[0]
    mesh = jax.make_mesh((1,), ("d",), devices=[device])
    key = jax.random.key(0)
    programs = {
        "einsum 8192^3 bf16": (
            lambda a, b: jnp.einsum("ij,jk->ik", a, b),
            [jax.random.normal(key, (8192, 8192), jnp.bfloat16)] * 2,
        ),
        "stream f32[2^28]": (lambda x: jnp.tanh(x) * 2.0 + 1.0, [jax.random.normal(key, (1 << 28,))]),
        "mlp bf16": (
            lambda x, w1, w2: jnp.tanh(x @ w1) @ w2,
            [
                jax.random.normal(key, (16384, 8192), jnp.bfloat16),
                jax.random.normal(key, (8192, 16384), jnp.bfloat16) * 0.02,
                jax.random.normal(key, (16384, 8192), jnp.bfloat16) * 0.02,
            ],
        ),
    }
    ratios = []
    for name, (fn, args) in programs.items():
        compiled = jax.jit(fn).lower(*args).compile()
        analysis = analyze_compiled(compiled, mesh)
        step = step_time_of(analysis, mesh, device.device_kind, analysis.dot_dtype or "float32")
        for _ in range(2):
            jax.block_until_ready(compiled(*args))
        times = []
        for _ in range(5):
            start = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            times.append(time.perf_counter() - start)
        measured = statistics.median(times)
        estimate = step.estimate_s if step is not None and step.estimate_s else float("nan")
        print(f"{name:<20} {estimate * 1e3:>8.3f}ms {measured * 1e3:>8.3f}ms {estimate / measured:>8.3f}")
        ratios.append((name, estimate / measured))
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the first fixture only (CI)")
    parser.add_argument("--gpu", action="store_true", help="also time the microbenchmarks on this GPU")
    args = parser.parse_args()
    if not args.gpu:
        from shardcli.runtime.devices import import_jax_quietly

        import_jax_quietly()  # no GPU to start: the CUDA plugin's complaints about that kept quiet
        import jax

        jax.config.update("jax_platforms", "cpu")
    ratios = fixture_rows(args.quick)
    if args.gpu:
        print()
        ratios += gpu_rows()
    outside = [(name, r) for name, r in ratios if not BAND[0] <= r <= BAND[1]]
    print(
        f"\n{len(ratios) - len(outside)} of {len(ratios)} measured rows within {BAND[0]}-{BAND[1]}x"
        + (f"; outside: {', '.join(f'{n} {r:.3f}' for n, r in outside)}" if outside else "")
    )
    sys.exit(1 if outside else 0)


if __name__ == "__main__":
    main()
