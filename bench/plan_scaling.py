"""`shardcli plan`'s estimate across scale: one model on 1 to 32 TPU slices against MaxText's table.

Source (the only published scaling table used): MaxText's configs/v5e/README.md
(AI-Hypercomputer/maxtext@76bd53b0f44caf989c88189afadeb1062f9254f0, MaxText/configs/v5e/README.md),
"Expected performance results for 16B, 32B, 64B, and 128B parameter models running on TPU v5e": the
TFLOP/s per chip of each model on 1x, 2x, 4x, 8x, 16x and 32x v5e-256. Each model's script
(MaxText/configs/v5e/16b.sh, 32b.sh, 64b.sh, 128b.sh) is the same at every slice count ("will work
out of the box for any number of v5e-256 slices"): its per-chip batch, remat and ICI layout are the
single-slice row's of bench/plan_vs_published.py (HELD_OUT, imported from there), and the slices are
data parallel over the data-center network (base.yml's `dcn_data_parallelism: -1`).

A second, smaller table: Llama2-7B on 1 and 32 H100 hosts, bench/plan_vs_published_gpu.py's two
published rows (imported from there: NVIDIA JAX-Toolbox docs/frameworks/maxtext/README.md, 8 H100
fsdp8, 2 sequences a GPU, 0.721 s; AI-Hypercomputer gpu-recipes training/a3mega/llama-2-7b, 256 H100
dp32 x fsdp8, 4 a GPU, 1.500 s), as tokens/s per GPU, planned on `gpu-h100:8` and the host type
`gpu-h100-a3mega:32x8`. No published GPU table of one model and layout at several host counts was
found; these two rows differ in batch per GPU as well as in hosts.

Each TPU row is planned as `shardcli plan --target tpu-v5e:16x16 --slices N --mesh data=N,...` plans it:
the program compiled for N slices (`--slices`, `plan_compile.compile_candidate`, its scanned layers
counted per trip) and estimated by the one estimate (`estimate_of` with the target's network: the
TPU calibration, the exposed communication and the DCN per chip, shardcli.hardware.slices). The
estimate's TFLOP/s per chip is MaxText's FLOP count per chip (6 x parameters + causal attention per
token, `maxtext_train_flops_per_token`) over the estimated step; est/pub is that over the published
figure. Per model (one table) the spread is max - min of est/pub over its rows. Target (issue 52):
spread <= 0.15 per table, every row within 0.8-1.25x.

Compiles are cached as `plan`'s are; a model of 16B-128B on thousands of chips compiles in minutes
on a small machine: pick rows with --models and --slices, one process at a time. `--quick`: the tiny
decoder on 2 slices of tpu-v5e:2x2 (seconds, CI).

Usage: python bench/plan_scaling.py [--quick] [--models 16B,32B,llama2-7b] [--slices 1,2,4]
It exits 0 (the figures are what to read).
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
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from plan_vs_published import HELD_OUT, QUICK, Row, _candidate, _figures, target_platform  # noqa: E402

from shardcli.hardware.targets import parse_target  # noqa: E402
from shardcli.plan.candidates import MeshChoice  # noqa: E402
from shardcli.plan.estimate import estimate_of  # noqa: E402
from shardcli.specs.decoder import PRESETS, flash_refusal  # noqa: E402

SOURCE = "AI-Hypercomputer/maxtext@76bd53b0f44caf989c88189afadeb1062f9254f0 MaxText/configs/v5e/README.md"
SLICES = (1, 2, 4, 8, 16, 32)
# TFLOP/s per chip at 1, 2, 4, 8, 16 and 32 slices of v5e-256 (SOURCE's table, column by model)
PUBLISHED = {
    "16B": (120.0, 117.0, 117.0, 115.0, 111.0, 108.0),
    "32B": (132.0, 128.0, 126.0, 125.0, 123.0, 119.0),
    "64B": (118.0, 112.0, 110.0, 108.0, 105.0, 99.0),
    "128B": (110.0, 110.0, 108.0, 104.0, 100.0, 91.0),
}
GPU_SOURCE = "bench/plan_vs_published_gpu.py's rows (JAX-Toolbox 8xH100; gpu-recipes a3mega 256xH100)"
BAND = (0.8, 1.25)
SPREAD = 0.15


@dataclass(frozen=True)
class ScaleRow:
    model: str  # the table: 16B, 32B, 64B, 128B (v5e slices) or llama2-7b (H100 hosts)
    slices: int
    base: Row  # the layout on one slice (plan_vs_published's row) or on the GPU hosts
    published: float | None  # TFLOP/s per chip (TPU) or tokens/s per GPU; None for the quick row
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or f"{self.model} x{self.slices}"

    @property
    def unit(self) -> str:
        return "tokens/s" if self.base.tokens_per_s_per_chip is not None else "TFLOP/s"


def _base(model: str) -> Row:
    return next(r for r in HELD_OUT if r.name == f"{model}-v5e")


def rows_of(models: list[str], slices: list[int]) -> list[ScaleRow]:
    return [
        ScaleRow(m, n, _base(m), PUBLISHED[m][SLICES.index(n)]) for m in models for n in slices if n in SLICES
    ]


GPU_MODEL = "llama2-7b"


def gpu_rows() -> list[ScaleRow]:
    """Llama2-7B on 1 and 32 H100 hosts: plan_vs_published_gpu's two published rows (JAX-Toolbox's
    8 GPUs and gpu-recipes' 256), as tokens/s per GPU (batch x sequence over the published step)."""
    from plan_vs_published_gpu import ROWS as GPU_ROWS

    out = []
    for g in GPU_ROWS:
        seq = PRESETS[g.preset].seq
        tokens = g.per_device_batch * seq / g.measured_s
        base = Row(g.name, g.preset, g.target, g.mesh, g.per_device_batch, g.remat, None, g.source, tokens)
        hosts = parse_target(g.target).chips // 8
        out.append(ScaleRow(GPU_MODEL, 1, base, tokens, f"7B {hosts}x8"))
    return out


def run_row(row: ScaleRow, sessions: dict) -> tuple[float, str, bool, float]:  # type: ignore[type-arg]
    """(estimated step s, bound, cached, compile s) of the row's layout over its slices."""
    base = row.base
    cfg = PRESETS[base.preset]
    cfg = replace(cfg, attention="dot" if flash_refusal(cfg, target_platform(base), False) else "flash")
    target = parse_target(base.target, slices=str(row.slices) if row.slices > 1 else None)
    # the slices are data parallel (dcn_data_parallelism -1), each slice laid out as the one-slice row
    dcn = (("data", row.slices),) if row.slices > 1 else ()
    candidate = replace(
        _candidate(base, target.chips),
        mesh=MeshChoice(dcn + base.mesh, True, dcn if target.slices > 1 else ()),
    )
    figures, mesh, cached = _figures(cfg, candidate, target, sessions)
    est = estimate_of(figures, mesh, network=target.network)
    if est is None or est.estimate_s is None:
        raise RuntimeError(f"{row.name}: no estimate ({figures.fit_text})")
    return est.estimate_s, est.dominant or "-", cached, figures.compile_s


def per_chip(row: ScaleRow, step_s: float) -> float:
    """The estimate's throughput per chip, in the row's published unit."""
    cfg = PRESETS[row.base.preset]
    tokens = row.base.per_device_batch * cfg.seq / step_s
    return tokens if row.unit == "tokens/s" else cfg.maxtext_train_flops_per_token() * tokens / 1e12


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the tiny decoder on 2 slices of tpu-v5e:2x2")
    tables = (*PUBLISHED, GPU_MODEL)
    parser.add_argument("--models", default=",".join(tables), help=f"tables to run ({','.join(tables)})")
    parser.add_argument("--slices", default=",".join(map(str, SLICES)), help="slice counts to run")
    args = parser.parse_args()
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    if args.quick:
        row = ScaleRow("tiny", 2, QUICK, None)
        step, bound, _, _ = run_row(row, {})
        print(f"{row.name}: estimate {step:.6f} s ({bound}), {per_chip(row, step):.3f} TFLOP/s/chip")
        return
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in tables]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; choose from {', '.join(tables)}")
    try:
        slices = [int(n) for n in args.slices.split(",") if n]
    except ValueError:
        parser.error(f"--slices: give counts from {', '.join(map(str, SLICES))}")
    if any(n not in SLICES for n in slices):
        parser.error(f"--slices: the table has {', '.join(map(str, SLICES))}")
    sessions: dict = {}  # type: ignore[type-arg]
    done: list[tuple[ScaleRow, float, str]] = []
    rows = rows_of([m for m in models if m in PUBLISHED], slices)
    rows += gpu_rows() if GPU_MODEL in models else []
    for row in rows:
        start = time.perf_counter()
        try:
            step, bound, cached, compile_s = run_row(row, sessions)
        except RuntimeError as why:
            print(f"# {why}", flush=True)
            continue
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print(
            f"# {row.name}: {'cached' if cached else 'compiled'} in {time.perf_counter() - start:.0f} s "
            f"(compile {compile_s:.0f} s), peak RSS {rss:.2f} GB",
            flush=True,
        )
        done.append((row, step, bound))
    print(f"\nsources: {SOURCE} (TFLOP/s per chip); {GPU_SOURCE} (tokens/s per GPU)")
    print(
        f"{'row':9} {'target':26} {'layout':22} {'step s':>7} {'bound':8} {'published':>9} "
        f"{'estimate':>8} {'est/pub':>7}"
    )
    for row, step, bound in done:
        est = per_chip(row, step)
        layout = " ".join(
            f"{a}{s}" for a, s in ((("data", row.slices),) if row.slices > 1 else ()) + row.base.mesh
        )
        target = row.base.target + (f" --slices {row.slices}" if row.slices > 1 else "")
        pub = row.published or 0.0
        print(
            f"{row.name:9} {target:26} {layout:22} {step:7.3f} {bound:8} {pub:9.1f} {est:8.1f} "
            f"{est / pub:7.3f}"
        )
    for model in models:
        ratios = [per_chip(r, s) / (r.published or 1.0) for r, s, _ in done if r.model == model]
        if not ratios:
            continue
        spread = max(ratios) - min(ratios)
        inside = all(BAND[0] <= x <= BAND[1] for x in ratios)
        print(
            f"{model}: {len(ratios)} rows, est/pub {min(ratios):.3f}-{max(ratios):.3f}, spread {spread:.3f} "
            f"({'<=' if spread <= SPREAD else '>'} {SPREAD}); every row within {BAND[0]}-{BAND[1]}x: "
            f"{'yes' if inside else 'no'}"
        )


if __name__ == "__main__":
    main()
