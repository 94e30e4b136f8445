"""Pipeline stages in `plan` (`--pipeline S[,S...]`): the schedule's arithmetic. Pure Python.

A pipelined layout splits the decoder's layers evenly over S stages, one stage on each GPU host
(or an even share of the hosts), each TPU slice (or share of the slices), or, where the target is
one host or one slice, an even share of its chips. The global batch runs as M microbatches (by
default 4 x S). Each stage is an ordinary layout (a mesh, a rule set, a remat policy) of its own
devices, compiled as the decoder with layers/S layers at the microbatch's batch; its estimate
(`plan.estimate`, the project's one step estimate) is one microbatch's forward and backward, t_mb.

The step of the pipeline (`pipeline_step`):

- GPipe (Huang et al. 2019, arXiv:1811.06965, section 2.2) and 1F1B (Narayanan et al. 2021,
  "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
  arXiv:2104.04473, section 2.2.1): (M + S - 1) x t_mb; the bubble is (S - 1) x t_mb, a fraction
  (S - 1)/(M + S - 1) of the step, (S - 1)/M of the ideal M x t_mb.
- MaxText's circular pipeline (`num_pipeline_repeats` R; its default one layer a stage a repeat, so
  R = layers / S): each stage runs R chunks of t_mb / R, the bubble (S - 1) x t_mb / R, a fraction
  (S - 1)/(R x M + S - 1) of the step (the interleaved schedule's (1/v) x (p - 1)/m, Megatron-LM
  section 2.2.2).
- Activations in flight on the first stage: GPipe M microbatches, 1F1B min(S, M) (it starts a
  backward as soon as the last stage can), the circular pipeline M (MaxText's loop runs every
  microbatch forward and autodiff's backward after, as GPipe).
- Stage-to-stage transfers: each microbatch's activations (batch/M x seq x d_model x 2 bytes in
  bf16, over the devices that hold distinct shards of them) cross each stage boundary forward, and
  their gradients backward, over the link between stages (`stage_link`). The schedule sends while
  the next microbatch computes, so on the step's critical path lie the fill and drain hops, 2(S - 1)
  transfers, and where one transfer outlasts the chunk it hides behind (a forward a third of a
  chunk, a backward two thirds) the difference, for each of a stage's M x R chunks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from shardcli.errors import ShardcliError
from shardcli.plan.analytic import HEADROOM, Modelled, chip_figures, model_candidate
from shardcli.plan.candidates import Candidate, Pruned, enumerate_candidates, global_batches
from shardcli.plan.schedules import SCHEDULES, PipelineChoice
from shardcli.plan.slices import slice_meshes

if TYPE_CHECKING:
    from shardcli.hardware.targets import TargetSpec
    from shardcli.plan.analytic import ChipFigures
    from shardcli.plan.compiled_figures import CompiledFigures
    from shardcli.specs.decoder import DecoderConfig

BYTES_ACTIVATION = 2  # bf16 activations between stages
MICROBATCHES_PER_STAGE = 4  # the default M = 4 x S: the bubble (S - 1)/(M + S - 1) under a fifth
NO_PUBLISHED_ROW = (
    "no published pipelined row to check this against: MaxText's pipelined configs (ici/dcn_pipeline_"
    "parallelism) and JAX-Toolbox publish no step time for one"
)


@dataclass(frozen=True)
class PipelineRequest:
    """`--pipeline 2,4 --microbatches M --schedule 1f1b`, parsed."""

    stages: tuple[int, ...]
    microbatches: int | None = None  # None: 4 x stages
    schedule: str = "1f1b"


def valid_stages(layers: int, groups: int) -> list[int]:
    """Stage counts of at least 2 that divide both the layers and `groups` (hosts, slices or chips)."""
    return [s for s in range(2, groups + 1) if groups % s == 0 and layers % s == 0]


def stage_groups(target: TargetSpec) -> tuple[int, str]:
    """What stages go over: (count, words): a GPU target's hosts, a TPU target's slices, else the chips
    of its one host or slice."""
    if target.generation.platform == "cuda":
        hosts = target.topology[0] if len(target.topology) == 2 else 1
        if hosts > 1:
            return hosts, f"{hosts} hosts"
    elif target.slices > 1:
        return target.slices, f"{target.slices} slices"
    return target.slice_chips, f"{target.slice_chips} chips"


def parse_pipeline(
    text: str, microbatches: int | None, schedule: str, layers: int, target: TargetSpec
) -> PipelineRequest:
    """--pipeline S[,S...] (with --microbatches M and --schedule NAME) for a model of `layers` layers.

    Raises:
        ShardcliError: a count that is no whole number from 2, one that does not divide the layers or
            the hosts, slices or chips stages go over, an unknown schedule, fewer microbatches than
            stages (one line naming what is valid).
    """
    groups, words = stage_groups(target)
    valid = valid_stages(layers, groups)
    hint = (
        f"stage counts that divide the {layers} layers and the {words} of {target.name}: "
        f"{', '.join(map(str, valid)) or 'none'}"
    )
    if schedule not in SCHEDULES:
        raise ShardcliError(f"--schedule {schedule!r} is not known; choose one of {', '.join(SCHEDULES)}")
    stages: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not re.fullmatch(r"[0-9]{1,6}", part) or int(part) < 2:
            raise ShardcliError(f"--pipeline {text!r}: {part!r} is not a stage count of 2 or more; {hint}")
        count = int(part)
        if layers % count:
            raise ShardcliError(f"--pipeline {count} does not divide the model's {layers} layers; {hint}")
        if count > groups or groups % count:
            raise ShardcliError(
                f"--pipeline {count} stages cannot split the {words} of {target.name}; {hint}"
            )
        if microbatches is not None and microbatches < count:
            raise ShardcliError(
                f"--microbatches {microbatches} is fewer than the {count} stages; give at least {count}"
            )
        if count not in stages:
            stages.append(count)
    return PipelineRequest(tuple(stages), microbatches, schedule)


def choice_for(request: PipelineRequest, stages: int, layers: int) -> PipelineChoice:
    """The choice for `stages` stages: M = --microbatches or 4 x S; circular: R = layers / S."""
    microbatches = request.microbatches or MICROBATCHES_PER_STAGE * stages
    repeats = layers // stages if SCHEDULES[request.schedule].circular else 1
    return PipelineChoice(stages, microbatches, request.schedule, repeats)


def stage_target(target: TargetSpec, stages: int) -> TargetSpec:
    """The devices of one stage: a GPU target's hosts / S (or its one host's GPUs / S), a TPU
    target's slices / S, or one slice's torus with its largest dimension S divides (the innermost
    of equals) cut by S.

    Raises:
        ShardcliError: no torus dimension of a one-slice TPU target splits into S stages.
    """
    if target.generation.platform == "cuda":
        hosts, gpus = target.topology if len(target.topology) == 2 else (1, target.topology[0])
        if hosts > 1:
            return replace(target, topology=(hosts // stages, gpus))
        return replace(target, topology=(1, gpus // stages))
    if target.slices > 1:
        return replace(target, slices=target.slices // stages)
    dims = list(target.topology)
    fits = [i for i, d in enumerate(dims) if d % stages == 0]
    if not fits:
        raise ShardcliError(
            f"--pipeline {stages}: no dimension of {target.name}'s torus splits into {stages} stages; give a "
            f"count that divides one of {', '.join(map(str, dims))}"
        )
    i = max(reversed(fits), key=lambda j: dims[j])  # the innermost of the largest
    dims[i] //= stages
    return replace(target, topology=tuple(dims))


def stage_program(
    cfg: DecoderConfig, c: Candidate, target: TargetSpec
) -> tuple[DecoderConfig, Candidate, TargetSpec]:
    """What is compiled for a candidate: for a pipelined one a stage (layers/S layers, the microbatch's
    batch, the stage's devices); for any other the candidate itself."""
    p = c.pipeline
    if p is None:
        return cfg, c, target
    stage = replace(
        c, global_batch=c.global_batch // p.microbatches, chips=c.chips // p.stages, pipeline=None
    )
    return replace(cfg, layers=cfg.layers // p.stages), stage, stage_target(target, p.stages)


@dataclass(frozen=True)
class StageLink:
    """What one device moves to its peer in the next stage, one way."""

    bytes_per_s: float
    words: str


def stage_link(target: TargetSpec, link_bytes_per_s: float) -> StageLink:
    """The link between stages: between GPU hosts a GPU's share of its host's NICs (rail-aligned,
    `hardware.hosts`), between TPU slices a chip's share of the data-center network
    (`hardware.slices`), within one host or slice the chip's `link` (NVLink, one ICI link)."""
    _, words = stage_groups(target)
    if target.generation.platform == "cuda" and words.endswith("hosts") and target.network is not None:
        return StageLink(
            target.network.value, f"the network between hosts ({target.network.value / 1e9:g} GB/s a GPU)"
        )
    if target.slices > 1 and target.dcn is not None:
        return StageLink(
            target.dcn.value, f"the data-center network ({target.dcn.value / 1e9:g} GB/s a chip)"
        )
    kind = "NVLink" if target.generation.platform == "cuda" else "one ICI link"
    return StageLink(link_bytes_per_s, f"{kind} ({link_bytes_per_s / 1e9:g} GB/s)")


def transfer_bytes(cfg: DecoderConfig, c: Candidate) -> float:
    """One device's share of one microbatch's activations at a stage boundary: batch/M x seq x d_model
    x 2 bytes over the devices holding distinct shards (data x fsdp x sequence, and tensor where the
    rule set splits the residual stream)."""
    p = c.pipeline
    assert p is not None
    mesh = c.mesh
    shards = mesh.size("data") * mesh.size("fsdp") * mesh.size("sequence")
    if c.rule_set == "fsdp-tp-sp":
        shards *= mesh.size("tensor")
    return c.global_batch / p.microbatches * cfg.seq * cfg.d_model * BYTES_ACTIVATION / shards


def exposed_transfer_s(p: PipelineChoice, transfer_s: float, stage_s: float) -> float:
    """The stage transfers on the critical path: the fill and drain hops, 2(S - 1) transfers, and what
    each transfer outlasts of the chunk it hides behind (forward a third of a chunk of t_mb / R,
    backward two thirds), for each of a stage's M x R chunks."""
    chunk = stage_s / p.repeats
    excess = max(0.0, transfer_s - chunk / 3) + max(0.0, transfer_s - 2 * chunk / 3)
    return 2 * (p.stages - 1) * transfer_s + p.microbatches * p.repeats * excess


@dataclass(frozen=True)
class PipelineStep:
    """A pipelined candidate's step, from one stage's estimate of one microbatch."""

    choice: PipelineChoice
    stage_s: float  # t_mb: one microbatch's forward and backward on one stage
    transfer_bytes: float  # one device, one microbatch, one boundary, one way
    transfer_s: float  # that transfer over the link between stages
    exposed_transfer_s: float
    link: str

    @property
    def ideal_s(self) -> float:
        return self.choice.microbatches * self.stage_s

    @property
    def bubble_s(self) -> float:
        """(S - 1) x t_mb / R: the step's bubble fraction of (ideal + bubble)."""
        return (self.choice.stages - 1) * self.stage_s / self.choice.repeats

    @property
    def step_s(self) -> float:
        """M x t_mb x (1 + (S - 1)/(R x M)) + the exposed stage transfers."""
        return self.ideal_s + self.bubble_s + self.exposed_transfer_s


def pipeline_step(
    cfg: DecoderConfig, c: Candidate, target: TargetSpec, link_bytes_per_s: float, stage_s: float | None
) -> PipelineStep | None:
    """The pipelined step of `c` from its stage's estimate `stage_s`; None for an unpipelined
    candidate or a stage without an estimate."""
    p = c.pipeline
    if p is None or stage_s is None:
        return None
    between = stage_link(target, link_bytes_per_s)
    moved = transfer_bytes(cfg, c)
    seconds = moved / between.bytes_per_s
    return PipelineStep(p, stage_s, moved, seconds, exposed_transfer_s(p, seconds, stage_s), between.words)


def in_flight_bytes(p: PipelineChoice, activation_bytes: float) -> float:
    """What the first stage holds beyond one microbatch's compiled program: the activations of the
    other microbatches in flight."""
    return (p.in_flight - 1) * activation_bytes


def label(p: PipelineChoice | None) -> str:
    """`pp4 ` before a pipelined layout's mesh; empty for an unpipelined one."""
    return f"pp{p.stages} " if p is not None else ""


def bubble_words(p: PipelineChoice) -> str:
    """`1F1B, 8 microbatches: bubble (S-1)/(M+S-1) = 11%`."""
    sched = SCHEDULES[p.schedule]
    r = f"{p.repeats} x " if p.repeats > 1 else ""
    return (
        f"{sched.words}, {p.microbatches} microbatches"
        + (f", {p.repeats} repeats" if p.repeats > 1 else "")
        + f": bubble ({p.stages}-1)/({r}{p.microbatches}+{p.stages}-1) = {p.bubble_fraction:.0%} of the step"
    )


# --- the layouts and what the model and the compiler say of them ---------------------------------


def pipeline_candidates(
    request: PipelineRequest,
    cfg: DecoderConfig,
    target: TargetSpec,
    *,
    global_batch: int | None,
    per_device_batch: int | None,
    remats: tuple[str, ...],
    rule_sets: tuple[str, ...],
    sequence: bool,
) -> tuple[list[Candidate], list[Pruned]]:
    """Every pipelined layout: for each stage count, each layout of one stage's devices
    (`candidates.enumerate_candidates`, on several slices `plan.slices`) at each global batch M
    microbatches divide, the batch of one microbatch split over the stage's data x fsdp."""
    chips = target.chips
    batches = global_batches(chips, global_batch, per_device_batch)
    out: list[Candidate] = []
    pruned: list[Pruned] = []
    for stages in request.stages:
        choice = choice_for(request, stages, cfg.layers)
        stage = stage_target(target, stages)
        gpu = stage.generation.platform == "cuda"
        for batch in batches:
            if batch % choice.microbatches:
                why = f"global batch {batch} does not split into {choice.microbatches} microbatches"
                pruned.append(Pruned(f"pp{stages}", why))
                continue
            found, left = enumerate_candidates(
                stage.topology,
                global_batch=batch // choice.microbatches,
                per_device_batch=None,
                remats=remats,
                rule_sets=rule_sets,
                sequence=sequence,
                seq_len=cfg.seq,
                gpu_hosts=gpu,
                meshes=None if gpu else slice_meshes(stage.topology, stage.slices, sequence, None),
                slices=stage.slices,
            )
            out += [replace(c, global_batch=batch, chips=chips, pipeline=choice) for c in found]
            pruned += [Pruned(f"pp{stages} {p.label}", f"its microbatch: {p.why}") for p in left]
    return out, pruned


def model_layout(
    cfg: DecoderConfig,
    c: Candidate,
    target: TargetSpec,
    chip: ChipFigures,
    efficiency: float,
    environ: Mapping[str, str],
) -> Modelled:
    """The analytic model of a candidate; a pipelined one's from its stage's microbatch: M x R + S - 1
    chunks of the stage's time, the exposed stage transfers a term of their own (`stage`), and the
    first stage's memory with the activations of its microbatches in flight."""
    p = c.pipeline
    if p is None:
        return model_candidate(cfg, c, chip, efficiency)
    stage_cfg, stage_c, stage = stage_program(cfg, c, target)
    stage_chip = chip_figures(stage.generation.name, stage.topology, environ, stage.network, stage.slices)
    m = model_candidate(stage_cfg, stage_c, stage_chip, efficiency)
    chunks = p.microbatches + (p.stages - 1) / p.repeats
    memory = int(m.memory_bytes + in_flight_bytes(p, m.activation_bytes))
    link = stage_link(target, chip.link_bytes_per_s)
    moved = transfer_bytes(cfg, c)
    exposed = exposed_transfer_s(p, moved / link.bytes_per_s, m.t_bound_s)
    return replace(
        m,
        candidate=c,
        memory_bytes=memory,
        activation_bytes=m.activation_bytes * p.in_flight,
        flops=m.flops * p.microbatches,
        comm_bytes=(
            *((a, b * p.microbatches) for a, b in m.comm_bytes),
            ("stage", 2 * moved * p.microbatches),
        ),
        t_math_s=m.t_math_s * chunks,
        t_comm_s=(*((a, t * chunks) for a, t in m.t_comm_s), ("stage", exposed)),
        t_host_s=m.t_host_s * chunks,
        fits=memory <= HEADROOM * chip.usable_bytes,
    )


def with_in_flight(figures: CompiledFigures, m: Modelled) -> CompiledFigures:
    """A stage's compiled figures (one microbatch) with the activations of the first stage's other
    microbatches in flight added to its memory (the model's activations, `model_layout`)."""
    p = m.candidate.pipeline
    if p is None or figures.needed_bytes is None:
        return figures
    extra = int(in_flight_bytes(p, m.activation_bytes / p.in_flight))
    needed = figures.needed_bytes + extra
    fits = figures.fits and needed <= figures.capacity_bytes
    text = (
        f"{figures.fit_text}; the first stage also holds the activations of {p.in_flight - 1} more "
        f"microbatch{'es' * (p.in_flight > 2)} ({extra / 2**30:.2f} GiB, modelled): "
        f"{'fits' if fits else 'does not fit'}"
    )
    return replace(figures, needed_bytes=needed, fits=fits, fit_text=text)
