"""`shardcli plan`'s step-time estimate against MaxText's published TPU measurements.

Each row builds shardcli's decoder at a published MaxText size and layout (the Dec-2023 base.yml
scaled by global_parameter_scale; sequence 2048), compiles it for the TPU topology through the same
path `shardcli plan` and `shardcli inspect --target` take (`plan_compile.compile_candidate`: the
program as it trains, its scanned layers counted per trip; `--method layers` adds 1- and 2-layer
copies extrapolated per layer), and compares the roofline max(T_math, T_hbm, T_comm summed over the
axes + T_host) with the measured step time. The measured step time is derived from the published
TFLOP/s/chip with MaxText's own FLOP count (`calculate_tflops_training_per_device`, Dec 2023: 6 x
parameters + causal attention per token): step = FLOPs per chip / (TFLOP/s x 1e12).

Attention: Pallas splash attention (`--attention flash`, plan's default on TPUs), as the published
runs computed it: MaxText's `attention: flash` on TPUs. Its kernels' FLOPs are counted from their
shapes and block masks (`shardcli.analysis.splash`). `--attention dot` compiles the scores through
HBM instead (the calibration before 2026-11-28 was set that way: 0.7211).

Calibration, stated plainly: the ONE efficiency the estimate divides the roofline by is the median
over these rows (and only these) of roofline / measured. The script prints it; the value stored in
`shardcli/plan/estimate.py` (CALIBRATION) was set from this script's output, and every row's
estimate / measured uses that stored value. Rows not listed here were never used.

Then for each row the planner ranks every layout of the same model, batch and target and compiles
its top pick the same way: the pick should be estimated at least as fast as the published layout.

Compiles are cached (`~/.cache/shardcli/plan`), so a second run reads them. On the 2-core
development machine a 32B compile for v5p-128 takes minutes under load: run the full bench in the
background (nohup). `--quick` runs one tiny row in seconds (CI).

Usage: python bench/plan_vs_published.py [--quick] [--rows 32B,64B] [--held-out] [--no-pick]
[--attention dot]
It exits 0 (the figures are what to read).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from dataclasses import dataclass, replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from shardcli.hardware.targets import parse_target  # noqa: E402
from shardcli.plan.analytic import chip_figures  # noqa: E402
from shardcli.plan.candidates import Candidate, MeshChoice  # noqa: E402
from shardcli.plan.estimate import CALIBRATION, ROOFLINE, estimate_of  # noqa: E402
from shardcli.specs.decoder import PRESETS, flash_refusal  # noqa: E402

README = "MaxText configs/v5p/README.md and configs/v4/README.md (Dec 2023)"


@dataclass(frozen=True)
class Row:
    name: str
    preset: str
    target: str
    mesh: tuple[tuple[str, int], ...]
    per_device_batch: int
    remat: str
    tflops_per_chip: float | None  # published; None for the quick row (or where tokens/s is)
    script: str
    tokens_per_s_per_chip: float | None = None  # published instead of TFLOP/s (MaxText's tiering table)


# MaxText's `custom` remat of its Llama 3.1 8B v6e-256 run (maxtext_trillium_model_configs.py): row 8B-v6e.
LLAMA3_8B_V6E_REMAT = "custom:" + "+".join(
    f"{name}=offload" for name in ("decoder_layer_input", "query_proj", "key_proj", "value_proj", "out_proj")
)
# fmt: off
ROWS = (
    Row(
        "32B",
        "maxtext-32b",
        "tpu-v5p:4x4x4",
        (("fsdp", 16), ("tensor", 4)),
        6,
        "minimal",
        328.0,
        "v5p/32b.sh",
    ),
    Row(
        "64B",
        "maxtext-64b",
        "tpu-v5p:4x4x4",
        (("fsdp", 16), ("tensor", 4)),
        3,
        "minimal",
        323.0,
        "v5p/64b.sh",
    ),
    Row(
        "128B",
        "maxtext-128b",
        "tpu-v5p:4x4x8",
        (("fsdp", 16), ("tensor", 8)),
        1,
        "minimal",
        315.0,
        "v5p/128b.sh",
    ),
    Row("22B", "maxtext-22b", "tpu-v4:4x4x4", (("fsdp", 64),), 13, "full", 156.0, "v4/22b.sh"),
)
# Published rows held out of the calibration: MaxText's v5e table (configs/v5e/README.md, one v5e-256
# slice; 16b.sh, 32b.sh and 64b.sh: global_parameter_scale 16/32/64, remat full, every chip on fsdp).
# They were added after CALIBRATION was fixed and are never part of the median the bench prints as
# the calibration's value: they test the one efficiency on a chip generation it was not set on.
HELD_OUT = (
    Row("16B-v5e", "maxtext-16b", "tpu-v5e:16x16", (("fsdp", 256),), 6, "full", 120.0, "v5e/16b.sh"),
    Row("32B-v5e", "maxtext-32b", "tpu-v5e:16x16", (("fsdp", 256),), 4, "full", 132.0, "v5e/32b.sh"),
    Row("64B-v5e", "maxtext-64b", "tpu-v5e:16x16", (("fsdp", 256),), 2, "full", 118.0, "v5e/64b.sh"),
    # Added by issue 40, never part of the calibration. 128B: the same README, 128b.sh (fsdp16 x tensor16,
    # 1 per chip, remat minimal_offloaded: the projections offloaded to the host's memory). Llama2-70B
    # on v5p-512 (4 per chip, remat full) and Llama 3.1 8B on v6e-256 (4 per chip, sequence 8192):
    # docs/reference/models/tiering.md, 692 and 7,207 tokens/s per chip; both ran with splash attention
    # and MaxText's own remat policies (the 8B: benchmarks/maxtext_trillium_model_configs.py, `custom`
    # with the layer input and the q/k/v/out projections offloaded, splash blocks of 2048 and the fused
    # backward kernel; shardcli's splash blocks are 512).
    Row("128B-v5e", "maxtext-128b", "tpu-v5e:16x16", (("fsdp", 16), ("tensor", 16)), 1, "minimal_offloaded",
        110.0, "v5e/128b.sh"),
    Row("70B-v5p", "llama2-70b", "tpu-v5p:8x8x8", (("fsdp", 512),), 4, "full", None, "tiering.md v5p", 692.0),
    # The 8B with its own remat: the layer input and q/k/v/out offloaded (it needs 34.4 GiB of 31.2 while
    # shardcli's decoder made its logits in float32, not in bfloat16 cast to float32 as MaxText does).
    Row("8B-v6e", "llama3-8b", "tpu-v6e:16x16", (("fsdp", 256),), 4, LLAMA3_8B_V6E_REMAT, None,
        "tiering.md v6e", 7207.0),
)
# fmt: on
QUICK = Row("tiny", "tiny", "tpu-v5e:2x2", (("fsdp", 2), ("tensor", 2)), 2, "minimal", None, "-")


class Refused(Exception):
    """The compiler refused a published layout (it does not fit): the row is named and skipped."""


def target_platform(row: Row) -> str:
    return parse_target(row.target).generation.platform


@dataclass(frozen=True)
class Result:
    row: Row
    roofline_s: float
    bound: str
    measured_s: float | None
    fits: bool
    gib: float | None
    compile_s: float
    cached: bool
    pick: str = ""
    pick_roofline_s: float | None = None


def _candidate(row: Row, chips: int) -> Candidate:
    """The published layout: MaxText's logical rules, whose `activation_embed -> tensor` splits the
    residual stream over the tensor axis between layers (shardcli's fsdp-tp-sp rule set)."""
    rule_set = "fsdp-tp-sp" if dict(row.mesh).get("tensor", 1) > 1 else "fsdp-tp"
    return Candidate(MeshChoice(row.mesh, True), rule_set, row.remat, row.per_device_batch * chips, chips)


METHOD = ["scan"]  # --method
PICK_TRIES = 4  # the planner's top candidates compiled, in its order, until one fits


def _figures(cfg, candidate, target, sessions):  # type: ignore[no-untyped-def]
    """(figures, the mesh, whether they came from the cache)."""
    from shardcli.plan.compile_cache import cache_key, read_cached, write_cached
    from shardcli.plan.compiles import compile_candidate, target_session
    from shardcli.specs.runs import RunOptions

    session = target_session(sessions, target, candidate.mesh, RunOptions())
    key = cache_key(cfg, candidate, target, METHOD[0])
    figures = read_cached(key)
    if figures is not None:
        return figures, session.mesh, True
    figures = compile_candidate(session, cfg, candidate, target, METHOD[0])
    write_cached(key, figures, candidate.label)
    return figures, session.mesh, False


def run_row(row: Row, pick: bool, sessions: dict, attention: str = "flash") -> Result:  # type: ignore[type-arg]
    cfg = PRESETS[row.preset]
    # the published runs' attention, where its kernel takes the shape (the quick tiny row: dot)
    cfg = replace(cfg, attention="dot" if flash_refusal(cfg, target_platform(row), False) else attention)
    target = parse_target(row.target)
    chip = chip_figures(target.generation.name, target.topology)
    candidate = _candidate(row, target.chips)
    figures, mesh, cached = _figures(cfg, candidate, target, sessions)
    raw = estimate_of(figures, mesh, ROOFLINE)
    if raw is None or raw.bound_s is None:
        raise Refused(f"{row.name}: the published layout was refused: {figures.fit_text}")
    measured = None
    if row.tflops_per_chip is not None:
        flops = cfg.maxtext_train_flops_per_token() * row.per_device_batch * cfg.seq
        measured = flops / (row.tflops_per_chip * 1e12)
    elif row.tokens_per_s_per_chip is not None:
        measured = row.per_device_batch * cfg.seq / row.tokens_per_s_per_chip
    result = Result(
        row,
        raw.bound_s,
        raw.dominant or "-",
        measured,
        figures.fits,
        figures.needed_bytes / 2**30 if figures.needed_bytes else None,
        figures.compile_s,
        cached,
    )
    if not pick:
        return result
    from shardcli.plan.candidates import enumerate_candidates
    from shardcli.plan.search import model_candidates
    from shardcli.plan.selection import CandidateSelector

    candidates, _ = enumerate_candidates(
        target.topology, global_batch=None, per_device_batch=row.per_device_batch, seq_len=cfg.seq
    )
    selector = CandidateSelector(
        model_candidates(cfg, candidates, chip, CALIBRATION.efficiency), chip.usable_bytes, cfg.seq
    )
    # as the planner does: its choices compiled in order, each teaching it memory; the first that
    # fits is its pick
    for _ in range(PICK_TRIES):
        modelled = selector.next()
        if modelled is None:
            break
        top = modelled.candidate
        top_figures, top_mesh, _ = _figures(cfg, top, target, sessions)
        selector.learn(modelled, top_figures.fits, top_figures.needed_bytes)
        if top_figures.fits:
            break
    top_raw = estimate_of(top_figures, top_mesh, ROOFLINE)
    label = f"{top.label} {top.remat}{'' if top_figures.fits else ' (no fit)'}"
    return replace(result, pick=label, pick_roofline_s=top_raw.bound_s if top_raw else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one tiny row (seconds)")
    parser.add_argument("--rows", default=",".join(r.name for r in ROWS))
    parser.add_argument(
        "--held-out",
        action="store_true",
        help=f"also the published rows held out of the calibration ({', '.join(r.name for r in HELD_OUT)})",
    )
    parser.add_argument("--no-pick", action="store_true", help="skip the planner's top pick")
    parser.add_argument(
        "--attention",
        choices=("dot", "flash"),
        default="flash",
        help="flash: Pallas splash attention, as MaxText's runs used it (plan's default on TPUs); dot: the "
        "scores through HBM",
    )
    parser.add_argument(
        "--method",
        choices=("scan", "layers"),
        default="scan",
        help="scan: one compile, loops counted per trip; layers: 1- and 2-layer copies extrapolated",
    )
    args = parser.parse_args()
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    by_name = {r.name: r for r in ROWS + HELD_OUT}
    unknown = [n for n in args.rows.split(",") if n and n not in by_name]
    if unknown:
        parser.error(f"--rows: unknown {', '.join(unknown)}; choose from {', '.join(by_name)}")
    METHOD[0] = args.method
    rows = [by_name[n] for n in args.rows.split(",") if n]
    rows += [r for r in HELD_OUT if args.held_out and r not in rows]
    if args.quick and (args.held_out or args.rows != parser.get_default("rows")):
        parser.error("--quick runs its one tiny row: leave out --rows and --held-out")
    rows = [QUICK] if args.quick else rows
    if not rows:
        parser.error("no rows: name some with --rows, or add --held-out")
    sessions: dict = {}  # type: ignore[type-arg]
    results = []
    refused: list[Row] = []
    for row in rows:
        start = time.perf_counter()
        try:
            result = run_row(
                row, pick=not args.no_pick and not args.quick, sessions=sessions, attention=args.attention
            )
        except Refused as why:
            print(f"# {why}", flush=True)
            refused.append(row)
            continue
        results.append(result)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print(
            f"# {row.name}: {'cached' if result.cached else 'compiled'} "
            f"in {time.perf_counter() - start:.0f} s "
            f"(compile {result.compile_s:.0f} s), peak RSS {rss:.2f} GB",
            flush=True,
        )
    measured = [r for r in results if r.measured_s is not None]
    # the calibration's median: the calibration rows only, never a held-out one
    ratios = [r.roofline_s / r.measured_s for r in measured if r.measured_s and r.row in ROWS]
    fitted = statistics.median(ratios) if ratios else None
    eff = CALIBRATION.efficiency
    print(f"\nstored efficiency {eff:.3f} ({CALIBRATION.provenance})")
    if fitted is not None:
        print(f"median roofline/measured over these rows: {fitted:.4f} (the calibration's value)")
    head = f"{'row':7} {'target':14} {'layout':16} {'GiB':>5} {'fits':4} {'roofline':>9} {'bound':8}"
    print(f"\n{head} {'measured':>9} {'roof/meas':>9} {'est/meas':>8} {'top pick':24} {'pick/pub':>8}")
    for r in results:
        est = r.roofline_s / eff
        meas = f"{r.measured_s:9.3f}" if r.measured_s else f"{'-':>9}"
        ratio = f"{r.roofline_s / r.measured_s:9.3f}" if r.measured_s else f"{'-':>9}"
        er = f"{est / r.measured_s:8.3f}" if r.measured_s else f"{'-':>8}"
        pick = f"{r.pick_roofline_s / r.roofline_s:8.3f}" if r.pick_roofline_s else f"{'-':>8}"
        gib = f"{r.gib:5.1f}" if r.gib is not None else f"{'-':>5}"
        layout = " ".join(f"{a}{s}" for a, s in r.row.mesh) + f" {r.row.remat}"
        print(
            f"{r.row.name:7} {r.row.target:14} {layout:16} {gib} {'yes' if r.fits else 'NO':4} "
            f"{r.roofline_s:9.3f} {r.bound:8} {meas} {ratio} {er} {r.pick[:24]:24} {pick}"
        )
    for title, group in (("calibration rows", ROWS), ("held-out rows", HELD_OUT)):
        judged = [r for r in measured if r.row in group and r.measured_s]
        refused_here = [row.name for row in refused if row in group]
        if not judged:
            if refused_here:
                print(f"\n{title}: every row refused ({', '.join(refused_here)})")
            continue
        fit = "yes" if all(r.fits for r in judged) and not refused_here else "no"
        fit += f" (refused: {', '.join(refused_here)})" if refused_here else ""
        ratios = [(r.roofline_s / eff) / r.measured_s for r in judged]
        print(
            f"\n{title}: median |est/measured - 1| = {statistics.median(abs(x - 1) for x in ratios):.1%}; "
            f"every row within 0.8-1.25x: {'yes' if all(0.8 <= x <= 1.25 for x in ratios) else 'no'}; "
            f"published layouts fit: {fit}"
        )


if __name__ == "__main__":
    main()
