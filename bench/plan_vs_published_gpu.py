"""`shardcli plan`'s GPU step-time estimate against published MaxText GPU measurements.

Each row builds shardcli's decoder at a published model and layout, compiles it for the GPU hosts
with XLA's GPU compiler and no GPU (`plan_compile.compile_candidate`, the path `shardcli plan` and
`shardcli inspect --target gpu-...` take), and puts the estimate `plan` ranks by (`estimate_of`:
the per-op roofline of `shardcli.hardware.builtin_profiles.GPU_OPS`, or the communication over NVLink and the
network where that takes longer) beside the published step time. Nothing here was used to set any
figure of the estimate: GPU_OPS is shardcli calibrate's profile of one H200.

Rows (both Llama2-7B, sequence 4096, bf16):
- 8xH100-fsdp8: NVIDIA JAX-Toolbox, docs/frameworks/maxtext/README.md: 8 H100-80G SXM, FSDP 8,
  2 sequences per GPU, flash attention, remat `minimal_flash`: 0.721 s a step.
- 256xH100-dp32-fsdp8: AI-Hypercomputer gpu-recipes, training/a3mega/llama-2-7b/maxtext-pretraining-gke:
  256 H100 (A3 Mega, 32 hosts), dcn_data_parallelism 32 x ici_fsdp_parallelism 8, 4 per GPU: 1.500 s
  a step (503 TFLOP/s per GPU); MaxText's a3 llama2-7b config: remat `minimal`, cudnn flash attention.

Each row compiles with flash attention, as both published runs did: cuDNN's fused kernel
(`jax.nn.dot_product_attention(implementation="cudnn")`, `--attention flash`, plan's default on GPUs),
whose FLOPs shardcli counts from the `__cudnn$fmha` calls' shapes. `--attention dot` compiles the
scores through HBM instead, for the comparison. What still differs, stated plainly: shardcli's
`minimal` remat stands for MaxText's `minimal`/`minimal_flash`. The 256-GPU row is planned on the
host type it ran on, `gpu-h100-a3mega:32x8` (8 x 200 Gb/s a host: 25 GB/s per GPU, shardcli.hardware.hosts).

Usage: python bench/plan_vs_published_gpu.py [--quick] [--rows 8xH100-fsdp8,...] [--attention dot].
Compiles are cached as `plan`'s are. Exits 0: the figures are what to read.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from dataclasses import dataclass, replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from shardcli.hardware.targets import parse_target  # noqa: E402
from shardcli.plan.candidates import Candidate, MeshChoice  # noqa: E402
from shardcli.plan.estimate import estimate_of  # noqa: E402
from shardcli.specs.decoder import PRESETS  # noqa: E402


@dataclass(frozen=True)
class GpuRow:
    name: str
    preset: str
    target: str
    mesh: tuple[tuple[str, int], ...]
    per_device_batch: int
    remat: str
    measured_s: float | None  # None for the quick row
    source: str
    attention: str = "flash"  # both published runs used cuDNN's flash attention


ROWS = (
    GpuRow(
        "8xH100-fsdp8",
        "llama2-7b",
        "gpu-h100:8",
        (("fsdp", 8),),
        2,
        "minimal",
        0.721,
        "NVIDIA JAX-Toolbox docs/frameworks/maxtext/README.md",
    ),
    GpuRow(
        "256xH100-dp32-fsdp8",
        "llama2-7b",
        "gpu-h100-a3mega:32x8",
        (("data", 32), ("fsdp", 8)),
        4,
        "minimal",
        1.500,
        "AI-Hypercomputer gpu-recipes training/a3mega/llama-2-7b/maxtext-pretraining-gke",
    ),
)
QUICK = GpuRow("tiny", "tiny", "gpu-h100:2x4", (("data", 2), ("fsdp", 4)), 2, "full", None, "-")
BAND = (0.8, 1.25)


def run_row(row: GpuRow, sessions: dict, attention: str | None = None) -> None:  # type: ignore[type-arg]
    from shardcli.plan.compile_cache import cache_key, read_cached, write_cached
    from shardcli.plan.compiles import compile_candidate, target_session
    from shardcli.specs.runs import RunOptions

    cfg = replace(PRESETS[row.preset], attention=attention or row.attention)
    target = parse_target(row.target)
    candidate = Candidate(
        MeshChoice(row.mesh, True), "fsdp-tp", row.remat, row.per_device_batch * target.chips, target.chips
    )
    start = time.perf_counter()
    session = target_session(sessions, target, candidate.mesh, RunOptions())
    key = cache_key(cfg, candidate, target, "scan")
    figures = read_cached(key)
    cached = figures is not None
    if figures is None:
        figures = compile_candidate(session, cfg, candidate, target, "scan")
        write_cached(key, figures, candidate.label)
    est = estimate_of(figures, session.mesh, network=target.network)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(
        f"# {row.name}: {'cached' if cached else 'compiled'} in {time.perf_counter() - start:.0f} s "
        f"(compile {figures.compile_s:.0f} s), peak RSS {rss:.2f} GB",
        flush=True,
    )
    if est is None or est.estimate_s is None:
        print(f"{row.name}: no estimate ({figures.fit_text})")
        return
    ops = est.ops
    comm = ", ".join(f"{t.name} {t.seconds:.3f} s" for t in est.comm if t.seconds is not None) or "none"
    gib = (figures.needed_bytes or 0) / 2**30
    print(
        f"{row.name:22} {row.target:14} {' '.join(f'{a}{s}' for a, s in row.mesh)} {row.remat} "
        f"{cfg.attention} attention "
        f"batch {row.per_device_batch}/GPU: {gib:.1f} GiB, {figures.fit_text.split(':')[0]}"
    )
    if ops is not None:
        print(
            f"  per-op roofline {ops.seconds:.3f} s ({ops.kernels} library kernel calls "
            f"{ops.kernels_math_s + ops.kernels_hbm_s:.3f} s, other ops {ops.other_s:.3f} s "
            f"{ops.other_bound}); "
            f"T_comm {comm}"
        )
    if row.measured_s is None:
        print(f"  estimate {est.estimate_s:.6f} s, bound {est.dominant}")
        return
    ratio = est.estimate_s / row.measured_s
    inside = BAND[0] <= ratio <= BAND[1]
    print(
        f"  estimate {est.estimate_s:.3f} s, bound {est.dominant}; published {row.measured_s:.3f} s; "
        f"estimate / published {ratio:.3f} ({'within' if inside else 'outside'} {BAND[0]}-{BAND[1]}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=",".join(r.name for r in ROWS))
    parser.add_argument("--quick", action="store_true", help="one tiny row on 2 hosts of 4 (seconds)")
    parser.add_argument(
        "--attention",
        choices=("dot", "flash"),
        help="every row with this attention (default: each row's published one, flash)",
    )
    args = parser.parse_args()
    if args.quick:
        run_row(QUICK, {}, args.attention)
        return
    by_name = {r.name: r for r in ROWS}
    unknown = [n for n in args.rows.split(",") if n and n not in by_name]
    if unknown:
        parser.error(f"--rows: unknown {', '.join(unknown)}; choose from {', '.join(by_name)}")
    sessions: dict = {}  # type: ignore[type-arg]
    for name in args.rows.split(","):
        run_row(by_name[name], sessions, args.attention)


if __name__ == "__main__":
    main()
