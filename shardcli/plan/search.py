"""`shardcli plan`: which layout, on a target you do not own, ranked by the step-time estimate.

1. Enumerate candidates (`plan_candidates`): meshes over the target's chips x rule sets x remat x batch.
2. Model every one (`plan_model`): memory, FLOPs and communication per chip, in well under a second.
3. Compile `compile_n` of them for the target, each an `inspect` of the train step on its mesh
   (`plan_compile`, cached on disk), chosen one at a time by `plan_selection`: the best-ranked
   layout at the largest batch expected to fit, the model's memory corrected by what the compiles
   so far said. Their step time is estimated from what the compiler says (`plan_estimate`); every
   figure of the final table comes from those compiles. The others are listed with why they were
   not compiled.

Ctrl-C during the compiles keeps what finished: the result says it was interrupted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from shardcli.analysis.step_time import StepEstimate
from shardcli.errors import ShardcliError
from shardcli.hardware.builtin_profiles import GPU_OPS
from shardcli.hardware.targets import TargetSpec
from shardcli.plan import compiles as plan_compile
from shardcli.plan.analytic import ChipFigures, Modelled, chip_figures, model_candidate
from shardcli.plan.candidates import Candidate, Pruned, enumerate_candidates
from shardcli.plan.compile_cache import cache_key
from shardcli.plan.compiled_figures import METHODS, CompiledFigures
from shardcli.plan.compiles import figures_for, target_session
from shardcli.plan.estimate import CALIBRATION, Calibration, estimate_of
from shardcli.plan.pipeline import (
    PipelineRequest,
    PipelineStep,
    model_layout,
    pipeline_candidates,
    pipeline_step,
    stage_program,
    with_in_flight,
)
from shardcli.plan.selection import CandidateSelector
from shardcli.plan.slices import slice_meshes
from shardcli.specs.decoder import DecoderConfig
from shardcli.specs.remat import SEARCHED
from shardcli.specs.runs import RunOptions


@dataclass(frozen=True)
class PlanRequest:
    """`shardcli plan`'s flags, parsed before JAX starts."""

    model: DecoderConfig
    target: TargetSpec
    global_batch: int | None = None
    per_device_batch: int | None = None
    remats: tuple[str, ...] = SEARCHED
    rule_sets: tuple[str, ...] = ("fsdp-tp", "fsdp-tp-sp")
    sequence: bool = False
    mesh: tuple[tuple[str, int], ...] | None = None  # --mesh: only this mesh (`parse_named_mesh`)
    compile_n: int = 8
    method: str = "scan"
    use_cache: bool = True
    options: RunOptions = field(default_factory=RunOptions)
    rank: str = "throughput"  # a key of RANK_ORDERS
    pipeline: PipelineRequest | None = None  # --pipeline: stage counts to try beside the unpipelined


# How the compiled layouts are ordered, in the words the table's header and --help use.
RANK_ORDERS = {
    "throughput": "estimated tokens per second per chip (the MFU column's order), highest first",
    "step": "estimated step time, shortest first",
}


@dataclass(frozen=True)
class PlanRow:
    """One candidate: what the model said, and what the compiler said where it was compiled."""

    candidate: Candidate
    modelled: Modelled
    status: str  # "compiled", "cached", "modelled", "pruned", "interrupted"
    why: str = ""  # why it was pruned, or not compiled
    compiled: CompiledFigures | None = None
    estimate: StepEstimate | None = None  # a pipelined candidate's: one stage's, one microbatch
    pipeline: PipelineStep | None = None  # a pipelined candidate's step from its stage's estimate

    @property
    def fits(self) -> bool | None:
        return self.compiled.fits if self.compiled is not None else None

    @property
    def step_s(self) -> float | None:
        """The estimated step: the pipeline's where the candidate is pipelined, else the estimate's."""
        if self.pipeline is not None:
            return self.pipeline.step_s
        return self.estimate.estimate_s if self.estimate is not None else None


@dataclass(frozen=True)
class PlanResult:
    """Every candidate, the compiled ones ranked first by their estimate."""

    request: PlanRequest
    chip: ChipFigures
    calibration: Calibration
    rows: tuple[PlanRow, ...]
    pruned: tuple[Pruned, ...]
    interrupted: bool
    compile_s: float
    cache_hits: int
    session_note: str = ""
    exhausted: bool = False  # fewer than --compile N compiled: nothing else was expected to fit

    @property
    def chips(self) -> int:
        return self.request.target.chips

    @property
    def compiled(self) -> tuple[PlanRow, ...]:
        return tuple(r for r in self.rows if r.compiled is not None)

    @property
    def winner(self) -> PlanRow | None:
        fitting = [r for r in self.compiled if r.fits and r.estimate is not None]
        return fitting[0] if fitting else None

    def tokens_per_s_per_chip(self, row: PlanRow) -> float | None:
        if not row.step_s:
            return None
        return row.candidate.global_batch * self.request.model.seq / self.chips / row.step_s

    def mfu(self, row: PlanRow) -> float | None:
        """MaxText's model FLOPs per chip (6 x parameters + causal attention per token) over
        estimated step time x peak."""
        tokens = self.tokens_per_s_per_chip(row)
        if tokens is None:
            return None
        return tokens * self.request.model.maxtext_train_flops_per_token() / self.chip.peak_flops


def model_candidates(
    cfg: DecoderConfig, candidates: list[Candidate], chip: ChipFigures, efficiency: float
) -> list[Modelled]:
    """Every candidate through the analytic model."""
    return [model_candidate(cfg, c, chip, efficiency) for c in candidates]


def run_plan(request: PlanRequest, progress: Callable[[int, int, str], None] | None = None) -> PlanResult:
    """Enumerate, model, compile the best and estimate (see the module's docstring).

    Raises:
        ShardcliError: bad input (one line).
    """
    import os
    import time

    if request.method not in METHODS:
        raise ShardcliError(f"--method {request.method!r} is not known; choose one of {', '.join(METHODS)}")
    if request.rank not in RANK_ORDERS:
        raise ShardcliError(f"--rank {request.rank!r} is not known; choose one of {', '.join(RANK_ORDERS)}")
    from shardcli.analysis.target import quiet_native_logs
    from shardcli.runtime.devices import import_jax_quietly

    import_jax_quietly()
    with quiet_native_logs():  # jax.numpy's first import loads the CUDA plugin, which complains without a GPU
        import shardcli.plan.decoder  # noqa: F401
    cfg = request.model
    target = request.target
    gpu = target.generation.platform == "cuda"
    chip = chip_figures(target.generation.name, target.topology, os.environ, target.network, target.slices)
    candidates, pruned = enumerate_candidates(
        chip.torus,
        global_batch=request.global_batch,
        per_device_batch=request.per_device_batch,
        remats=request.remats,
        rule_sets=request.rule_sets,
        sequence=request.sequence,
        seq_len=cfg.seq,
        gpu_hosts=gpu,
        only_mesh=request.mesh,
        meshes=slice_meshes(chip.torus, target.slices, request.sequence, request.mesh),
        slices=target.slices,
    )
    if request.pipeline is not None:
        staged, left = pipeline_candidates(
            request.pipeline,
            cfg,
            target,
            global_batch=request.global_batch,
            per_device_batch=request.per_device_batch,
            remats=request.remats,
            rule_sets=request.rule_sets,
            sequence=request.sequence,
        )
        candidates, pruned = candidates + staged, pruned + left
    if not candidates:
        why = pruned[0].why if pruned else "no mesh"
        raise ShardcliError(f"no layout of {cfg.name} on {target.name} can be built: {why}")
    calibration = platform_calibration(target.generation.platform)
    efficiency = GPU_OPS.dot if gpu else calibration.efficiency
    modelled = [model_layout(cfg, c, target, chip, efficiency, os.environ) for c in candidates]
    selector = CandidateSelector(modelled, chip.usable_bytes, cfg.seq)
    budget = request.compile_n
    rows: list[PlanRow] = []
    interrupted: Modelled | None = None  # the candidate Ctrl-C stopped the compile of
    hits = 0
    start = time.perf_counter()
    sessions: dict[tuple[Any, ...], Any] = {}
    note = ""
    exhausted = False  # stopped before --compile N: nothing left that is expected to fit
    while len(rows) < budget:
        m = selector.next()
        if m is None:
            exhausted = True
            break
        c = m.candidate
        if progress is not None:
            progress(len(rows), budget, c.label)
        program_cfg, program, program_target = stage_program(cfg, c, target)  # a stage's, if pipelined
        try:
            session = target_session(sessions, program_target, program.mesh, request.options)
            note = session.runtime.note
            figures, cached = figures_for(
                cache_key(program_cfg, program, program_target, request.method),
                request.use_cache,
                c.label,
                partial(
                    plan_compile.compile_candidate,
                    session,
                    program_cfg,
                    program,
                    program_target,
                    request.method,
                ),
            )
        except KeyboardInterrupt:
            interrupted = m
            break
        hits += cached
        figures = with_in_flight(figures, m)
        selector.learn(m, figures.fits, figures.needed_bytes)
        status = "cached" if cached else "compiled"
        estimate = estimate_of(figures, session.mesh, network=target.network)
        stage_s = estimate.estimate_s if estimate is not None else None
        step = pipeline_step(cfg, c, target, chip.link_bytes_per_s, stage_s)
        rows.append(PlanRow(c, m, status, compiled=figures, estimate=estimate, pipeline=step))
    if progress is not None:
        progress(len(rows), budget if not exhausted else len(rows), "")
    for m, status, why in selector.untried(request.compile_n):
        if m is interrupted:
            status, why = "interrupted", "Ctrl-C while it compiled"
        rows.append(PlanRow(m.candidate, m, status, why))
    compiled = ranked((r for r in rows if r.compiled is not None), request.rank)
    others = [r for r in rows if r.compiled is None]
    return PlanResult(
        request=request,
        chip=chip,
        calibration=calibration,
        rows=tuple(compiled + others),
        pruned=tuple(pruned),
        interrupted=interrupted is not None,
        compile_s=time.perf_counter() - start,
        cache_hits=hits,
        session_note=note,
        exhausted=exhausted,
    )


def platform_calibration(platform: str) -> Calibration:
    """What the estimate divides by, in words: a TPU's one efficiency, or on a GPU (efficiency 1.0)
    the per-op roofline's two measured efficiencies (`shardcli.hardware.calibration`); with a
    measured profile (--hardware) the per-op roofline with its figures."""
    from shardcli.hardware.profile import active_profile

    profile = active_profile()
    if profile is not None:
        return Calibration(1.0, f"per-op roofline with the figures of {profile.label}")
    if platform == "cuda":
        return Calibration(
            1.0,
            f"per-op roofline: GEMMs at a measured curve by size (up to {GPU_OPS.dot:.2f} of the peak), "
            f"other ops at {GPU_OPS.hbm:.2f} of HBM, both measured on one H200 (shardcli calibrate)",
        )
    return CALIBRATION


def _per_token(row: PlanRow) -> float:
    """Estimated seconds per token on the whole slice (the throughput order: the inverse of tokens
    per second per chip, the slice's chips being fixed)."""
    if row.step_s is None:
        return float("inf")
    return row.step_s / row.candidate.global_batch


def _step(row: PlanRow) -> float:
    """The estimated step (the step order)."""
    return row.step_s if row.step_s is not None else float("inf")


def _exposed(row: PlanRow, by: str) -> float:
    """The no-overlap step (no communication hidden behind compute), per token or per step: the tie-break."""
    if row.estimate is None or row.estimate.sum_s is None:
        return float("inf")
    # a pipelined step's transfers are its stage's: its whole step stands for them
    total = row.pipeline.step_s if row.pipeline is not None else row.estimate.sum_s
    return total / (row.candidate.global_batch if by == "throughput" else 1)


TIE = 0.005  # estimates within 0.5% of each other are a tie (the roofline cannot tell them apart)


def ranked(rows: Iterable[PlanRow], by: str = "throughput") -> list[PlanRow]:
    """Compiled rows, fitting first, by `by` (a key of RANK_ORDERS): estimated seconds per token
    (throughput) or the estimated step. Where estimates tie (within TIE, as every compute-bound
    layout of one batch does), the layout with less communication to hide goes first: the roofline
    assumes all of it hidden, a real step hides only part."""
    figure = _per_token if by == "throughput" else _step
    order = sorted(rows, key=lambda r: (not r.fits, r.estimate is None, figure(r)))
    out: list[PlanRow] = []
    while order:  # the rows tied with the first are a prefix of this order
        head = order[0]
        size = next(
            (
                i
                for i, r in enumerate(order)
                if (r.fits, r.estimate is None) != (head.fits, head.estimate is None)
                or figure(r) > figure(head) * (1 + TIE)
            ),
            len(order),
        )
        out += sorted(order[:size], key=lambda r: _exposed(r, by))
        order = order[size:]
    return out


# --- the winner as a program `shardcli inspect` reads -------------------------------------------

PROGRAM_TEMPLATE = '''"""The layout `shardcli plan` chose, as a program `shardcli inspect` compiles.

Written by `shardcli plan`; reproduce its figures with:
    {command}
"""

from shardcli.plan.decoder import build_train_step
from shardcli.specs.decoder import DecoderConfig, parse_rules

MODEL = DecoderConfig(**{model!r})
RULES = parse_rules({rules!r})
REMAT = {remat!r}
GLOBAL_BATCH = {batch!r}
_built = {{}}


def inputs(mesh):
    """The train step's abstract arguments (params, optimizer state, batch) on `mesh`."""
    program = build_train_step(MODEL, RULES, mesh, remat=REMAT, global_batch=GLOBAL_BATCH)
    _built["step"] = program.fn
    return program.args


class _TrainStep:
    """The jitted step `inputs` built for the mesh (its shardings and donation as plan compiled it)."""

    def lower(self, *args):
        return _built["step"].lower(*args)

    def __call__(self, params, opt_state, batch):
        return _built["step"](params, opt_state, batch)


train_step = _TrainStep()
'''


def inspect_command(request: PlanRequest, row: PlanRow, program_file: str) -> str:
    """The `shardcli inspect` command that compiles this candidate again, from `program_file` (a
    pipelined candidate's stage: its layers, microbatch and devices)."""
    _, program, target = stage_program(request.model, row.candidate, request.target)
    mesh = program.mesh
    slices = f" --slices {target.slices}" if target.slices > 1 else ""
    return (
        f"shardcli inspect {program_file}:train_step --inputs {program_file}:inputs "
        f"--target {target.name}{slices} --mesh {'x'.join(map(str, mesh.shape))} "
        f"--axes {','.join(mesh.axes)}"
    )


def program_text(request: PlanRequest, row: PlanRow, program_file: str) -> str:
    """The Python file `--emit` writes: the candidate's train step for `shardcli inspect` (a
    pipelined candidate's: one stage's, at one microbatch)."""
    from dataclasses import asdict

    from shardcli.specs.decoder import rules_text

    cfg, program, _ = stage_program(request.model, row.candidate, request.target)
    return PROGRAM_TEMPLATE.format(
        command=inspect_command(request, row, program_file),
        model=asdict(cfg),
        rules=rules_text(program.rules),
        remat=program.remat,
        batch=program.global_batch,
    )
