"""`shardcli plan`."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from shardcli.commands import options as opt
from shardcli.errors import ExitCode, ShardcliError
from shardcli.runtime.interrupts import terminate_as_interrupt

if TYPE_CHECKING:
    from shardcli.specs.decoder import DecoderConfig
    from shardcli.specs.runs import RunOptions


def _int_option(flag: str, text: str) -> typer.models.OptionInfo:
    return typer.Option(flag, help=text, show_default=False)


Program = Annotated[
    str | None,
    typer.Argument(
        help="Your own program instead of the decoder: FILE.py:FUNCTION, whose arguments (from --inputs) "
        "carry logical axis names.",
        show_default=False,
    ),
]
Inputs = Annotated[
    str | None,
    typer.Option(
        "--inputs",
        help="With FILE.py:FUNCTION: FILE.py:NAME, NAME() (or NAME(mesh)) returns the arguments, parameters "
        "named by nnx.with_partitioning or nn.with_partitioning (or in a LOGICAL_AXES table in that file).",
    ),
]
Rules = Annotated[
    str | None,
    typer.Option("--rules", help="With FILE.py:FUNCTION: logical axes to mesh axes, embed=fsdp,mlp=tensor."),
]
Preset = Annotated[
    str | None,
    typer.Option(
        "--preset",
        "-p",
        help="A published model shape: llama2-7b, llama2-13b, llama2-70b, llama3-8b, llama3-70b, gemma-2b, "
        "gemma-7b, maxtext-16b/22b/32b/64b/128b (MaxText's TPU benchmarks), tiny. Shape flags change it.",
    ),
]
Target = Annotated[
    str,
    typer.Option(
        "--target",
        help="Where to plan for: a TPU slice, tpu-v4, tpu-v5e, tpu-v5p or tpu-v6e with its torus "
        "(tpu-v5p:4x4x4), or GPU hosts, gpu-h100 or gpu-h200 with HOSTSxGPUS (gpu-h100:4x8; gpu-h100:8 is "
        "one host). Compiled by the real compiler (the tpu or gpu extra); nothing runs.",
        show_default=False,
    ),
]
Layers = Annotated[int | None, _int_option("--layers", "Decoder layers.")]
DModel = Annotated[int | None, _int_option("--d-model", "Model width (embedding size).")]
Heads = Annotated[int | None, _int_option("--heads", "Query heads.")]
KvHeads = Annotated[
    int | None, _int_option("--kv-heads", "Key/value heads (grouped-query attention). \\[default: --heads]")
]
HeadDim = Annotated[int | None, _int_option("--head-dim", "Width of one head.")]
MlpDim = Annotated[int | None, _int_option("--mlp-dim", "MLP hidden width.")]
Vocab = Annotated[int | None, _int_option("--vocab", "Vocabulary size.")]
Seq = Annotated[int | None, _int_option("--seq", "Sequence length.")]
Activation = Annotated[
    str | None, _int_option("--activation", "swiglu, geglu (gated) or relu (MaxText's 2023 base).")
]
GlobalBatch = Annotated[int | None, _int_option("--global-batch", "Sequences per step over the whole slice.")]
Batch = Annotated[
    int | None,
    _int_option(
        "--batch", "Sequences per chip (MaxText's per_device_batch_size). \\[default: the planner tries 1-32]"
    ),
]
Remat = Annotated[
    str | None,
    typer.Option(
        "--remat",
        help="Remat policies to try, comma-separated, MaxText's names: none, minimal, full, "
        "minimal_offloaded (offloaded to the host's memory), save_dot_except_mlpwi, ... (a wrong name "
        "lists them all), or custom:NAME=device|offload|remat+... (query_proj=offload+context=device). "
        "\\[default: none,minimal,full]",
        show_default=False,
    ),
]
MeshFlag = Annotated[
    str | None,
    typer.Option(
        "--mesh",
        help="Only this mesh: AXIS=SIZE for data, fsdp, sequence, tensor (data=32,fsdp=8). With --batch "
        "and --remat one published layout is compiled and estimated. \\[default: every mesh]",
        show_default=False,
    ),
]
Attention = Annotated[
    str | None,
    typer.Option(
        "--attention",
        help="flash: fused kernels whose scores never reach HBM (cuDNN's flash attention on GPUs, Pallas "
        "splash attention on TPUs); dot: the scores through HBM, as XLA fuses the einsums and softmax. "
        "\\[default: flash; dot with --sequence or a shape the kernel does not take]",
        show_default=False,
    ),
]
Sequence = Annotated[
    bool, typer.Option("--sequence", help="Also try a sequence mesh axis (sequence parallelism).")
]
Compile = Annotated[
    int,
    typer.Option(
        "--compile",
        "-n",
        help="Compile N candidates, one at a time: the best-ranked layout not yet settled, at the largest "
        "batch expected to fit, the model's memory corrected by the compiles so far.",
    ),
]
Method = Annotated[
    str | None,
    typer.Option(
        "--method",
        help="scan: one compile of the program as it trains (loops counted per trip); layers: also 1- and "
        "2-layer copies, per-layer costs extrapolated. \\[default: scan]",
        show_default=False,
    ),
]
RankBy = Annotated[
    str,
    typer.Option(
        "--rank",
        help="How compiled layouts are ordered: throughput (estimated tokens per second per chip, highest "
        "first: a larger batch with a slower step can win) or step (estimated step time, shortest first: "
        "give --global-batch so that every layout runs the same batch).",
    ),
]
PipelineFlag = Annotated[
    str | None,
    typer.Option(
        "--pipeline",
        help="Also try pipelined layouts: stage counts, comma-separated (2,4), each dividing the layers and "
        "the GPU hosts or TPU slices (a stage is one host's GPUs or one slice's chips, or an even share of "
        "them); the stages' layouts ranked beside the others. \\[default: none]",
        show_default=False,
    ),
]
Microbatches = Annotated[
    int | None, _int_option("--microbatches", "With --pipeline: microbatches a step. \\[default: 4 x stages]")
]
ScheduleFlag = Annotated[
    str | None,
    typer.Option(
        "--schedule",
        help="With --pipeline: 1f1b, gpipe, or circular (MaxText's, one layer a stage a repeat). "
        "\\[default: 1f1b]",
        show_default=False,
    ),
]
NoCache = Annotated[
    bool, typer.Option("--no-cache", help="Compile every candidate again (the cache is still written).")
]
Emit = Annotated[
    str | None,
    typer.Option(
        "--emit",
        help="Write the winner's train step to FILE.py, for `shardcli inspect` (the command is printed).",
    ),
]


def _positive(flag: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise ShardcliError(f"{flag} {value} must be a positive whole number")


@opt.with_run_options(
    formats=("table", "json"), mode=False, devices=False, compile_cache=False, processes=False
)
def plan(
    program: Program = None,
    inputs: Inputs = None,
    rules: Rules = None,
    preset: Preset = None,
    target: Target = "tpu-v5p:4x4x4",
    layers: Layers = None,
    d_model: DModel = None,
    heads: Heads = None,
    kv_heads: KvHeads = None,
    head_dim: HeadDim = None,
    mlp_dim: MlpDim = None,
    vocab: Vocab = None,
    seq: Seq = None,
    activation: Activation = None,
    global_batch: GlobalBatch = None,
    batch: Batch = None,
    remat: Remat = None,
    mesh: MeshFlag = None,
    attention: Attention = None,
    sequence: Sequence = False,
    compile_n: Compile = 8,
    method: Method = None,
    no_cache: NoCache = False,
    emit: Emit = None,
    rank: RankBy = "throughput",
    hardware: opt.Hardware = None,
    network: opt.Network = None,
    slices: opt.Slices = None,
    pipeline: PipelineFlag = None,
    microbatches: Microbatches = None,
    schedule: ScheduleFlag = None,
    *,
    options: RunOptions,
) -> None:
    """Choose a layout for a decoder-only transformer on a TPU slice or GPU hosts you don't own:
    every way of naming the chips (data, fsdp, tensor, sequence axes along the torus; on GPUs the
    tensor axis within a host, the others over NVLink or across hosts) x logical-axis rules x remat
    x batch is ranked by an analytic model, --compile N of them are compiled by the real compiler
    (one at a time, each correcting the model's memory for the next pick), and the table orders them
    by the estimate from those compiles: by tokens per second per chip (--rank throughput, the
    default) or by step time (--rank step). Each row has its memory per chip and the share of the
    usable memory it takes (HBM; on a GPU JAX's pool; "at risk" above 90%), the estimated step, MFU
    and the bound. Exit 1 when no compiled layout fits.

    With FILE.py:FUNCTION --inputs FILE.py:NAME it lays out your own program instead: its
    arguments carry logical axis names (nnx.with_partitioning, nn.with_partitioning), each layout is
    a mesh and a rule set mapping those names to mesh axes, and the winner comes with the
    `shardcli inspect ... --rules` command that compiles it again.

    Rule sets: fsdp-tp (MaxText's default: weights' embed dim over fsdp; heads, mlp, vocab over
    tensor; batch over data and fsdp) and fsdp-tp-sp (also the activations' embed dim over tensor,
    `+sp` in a layout). The bound is the estimate's largest term: math or hbm (on a GPU also launch:
    a step of small kernels takes as long as launching them), or where the transfers
    (the collectives and the host's, one after another) take longer, the largest of them: the mesh
    axis whose collectives take longest (`fsdp`: bound by communication over fsdp), or `host`.

    Example: shardcli plan --preset llama2-7b --target tpu-v5p:4x4x4
    """
    if program is not None:
        decoder_flags = {
            "--preset": preset, "--layers": layers, "--d-model": d_model, "--heads": heads,
            "--kv-heads": kv_heads, "--head-dim": head_dim, "--mlp-dim": mlp_dim, "--vocab": vocab,
            "--seq": seq, "--activation": activation, "--global-batch": global_batch, "--batch": batch,
            "--emit": emit, "--remat": remat, "--sequence": sequence or None, "--method": method,
            "--attention": attention, "--mesh": mesh,
            "--rank": None if rank == "throughput" else rank, "--pipeline": pipeline,
            "--microbatches": microbatches, "--schedule": schedule,
        }  # fmt: skip
        _refuse_decoder_flags(program, decoder_flags)
        if slices is not None:
            raise ShardcliError(
                f"--slices {slices} lays shardcli's decoder (--preset) over TPU slices; {program} is planned "
                "on one slice or GPU hosts (leave --slices out)"
            )
        with opt.using_hardware(hardware, target):
            _plan_program(program, inputs, rules, target, compile_n, not no_cache, options, network)
        return
    if inputs is not None or rules is not None:
        flag = "--inputs" if inputs is not None else "--rules"
        raise ShardcliError(f"{flag} goes with your own program (shardcli plan FILE.py:FUNCTION {flag} ...)")
    from shardcli.hardware.targets import parse_target
    from shardcli.plan.candidates import names_sequence
    from shardcli.plan.search import PlanRequest, program_text, run_plan
    from shardcli.render.plan import render_plan
    from shardcli.specs.decoder import build_config

    _check_decoder_flags(compile_n, global_batch, batch, emit)
    shape = {
        "layers": layers, "d_model": d_model, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim,
        "mlp_dim": mlp_dim, "vocab": vocab, "seq": seq, "activation": activation,
    }  # fmt: skip
    target_spec = parse_target(target, network=network, slices=slices)
    named = _named(mesh, target_spec.chips)
    sequence = sequence or names_sequence(named)
    cfg = _with_attention(build_config(preset, **shape), attention, target_spec.generation.platform, sequence)
    _check_sizes(cfg, target_spec.chips, global_batch, batch)
    stages = _pipeline(pipeline, microbatches, schedule, cfg.layers, target_spec)
    request = PlanRequest(
        model=cfg, target=target_spec, global_batch=global_batch, mesh=named,
        per_device_batch=batch, remats=_remat_policies(remat, cfg.gated), sequence=sequence,
        compile_n=compile_n,
        method=method if method is not None else "scan", use_cache=not no_cache, options=options, rank=rank,
        pipeline=stages,
    )  # fmt: skip
    with opt.using_hardware(hardware, target), terminate_as_interrupt() as stop, _progress(options) as update:
        result = run_plan(request, progress=update)
    if emit is not None and result.winner is not None:
        try:
            with open(emit, "w", encoding="utf-8") as out:
                out.write(program_text(request, result.winner, emit))
        except OSError as error:
            raise ShardcliError(f"--emit {emit}: cannot write it ({error.strerror or error})") from None
    render_plan(result, options, emit)
    if result.interrupted:
        stop.finished()  # SIGTERM: exit 143
        raise typer.Exit(ExitCode.INTERRUPTED)
    raise typer.Exit(ExitCode.OK if result.winner is not None else ExitCode.WRONG_RESULT)


def _pipeline(
    text: str | None, microbatches: int | None, schedule: str | None, layers: int, target: Any
) -> Any:
    """--pipeline's stage counts (`plan.pipeline.parse_pipeline`), or None.

    Raises:
        ShardcliError: --microbatches or --schedule without --pipeline, or a bad count (one line).
    """
    from shardcli.plan.pipeline import parse_pipeline

    if text is None:
        given = (
            "--microbatches" if microbatches is not None else "--schedule" if schedule is not None else None
        )
        if given:
            raise ShardcliError(f"{given} goes with --pipeline S (the stage counts to try, such as 2,4)")
        return None
    _positive("--microbatches", microbatches)
    return parse_pipeline(text, microbatches, schedule or "1f1b", layers, target)


def _named(text: str | None, chips: int) -> tuple[tuple[str, int], ...] | None:
    from shardcli.plan.candidates import parse_named_mesh

    return None if text is None else parse_named_mesh(text, chips)


def _with_attention(cfg: DecoderConfig, text: str | None, platform: str, sequence: bool) -> DecoderConfig:
    """The model with --attention's implementation. Not given: flash (cuDNN's on GPUs, splash on
    TPUs, as MaxText's runs use them), or dot with a sequence axis or a shape the kernel does not take.

    Raises:
        ShardcliError: an unknown implementation; flash with --sequence (both kernels split batch and
            heads, never the queries), or for a shape its kernel does not take (one line each).
    """
    from dataclasses import replace

    from shardcli.specs.decoder import ATTENTIONS, flash_refusal

    refused = flash_refusal(cfg, platform, sequence)
    if text is None:
        return replace(cfg, attention="dot" if refused else "flash")
    if text not in ATTENTIONS:
        raise ShardcliError(f"--attention {text!r} is not known; choose one of {', '.join(ATTENTIONS)}")
    if text == "flash" and refused:
        raise ShardcliError(f"--attention flash: {refused}; give --attention dot")
    return replace(cfg, attention=text)


def _check_decoder_flags(
    compile_n: int, global_batch: int | None, batch: int | None, emit: str | None
) -> None:
    """Raises: ShardcliError for a count that is not positive, both batches, an --emit not a .py file."""
    for flag, value in (("--compile", compile_n), ("--global-batch", global_batch), ("--batch", batch)):
        _positive(flag, value)
    if global_batch is not None and batch is not None:
        raise ShardcliError("give --global-batch or --batch (per chip), not both")
    if emit is not None and not emit.endswith(".py"):
        raise ShardcliError(
            f"--emit {emit!r} must name a .py file (shardcli inspect FILE.py:train_step reads it)"
        )


def _progress(options: RunOptions) -> AbstractContextManager[Any]:
    """A bar on a terminal; elsewhere one line on stderr per compile (a plan can take many minutes)."""
    from shardcli.render.progress import progress_bar_or_lines

    def describe(done: int, total: int, label: str) -> str:
        return f"compiling {done + 1}/{total}: {label}" if label else ""

    return progress_bar_or_lines(options.format != "json", options.quiet, describe, "shardcli plan")


def _check_sizes(cfg: DecoderConfig, chips: int, global_batch: int | None, batch: int | None) -> None:
    """Raises: ShardcliError for a batch beyond JAX's integers, or a train step whose largest array,
    at the largest batch the plan may try, is beyond what a compile takes (one line each)."""
    from shardcli.plan.candidates import BATCH_CHOICES
    from shardcli.specs.decoder import check_array_sizes, check_size

    for flag, value in (("--global-batch", global_batch), ("--batch", batch)):
        if value is not None:
            check_size(flag, value)
    largest = global_batch or (batch or max(BATCH_CHOICES)) * chips
    check_array_sizes(cfg, largest)


def _refuse_decoder_flags(program: str, flags: Mapping[str, object]) -> None:
    """Raises: ShardcliError naming the decoder's flags given with the user's own program."""
    given = [flag for flag, value in flags.items() if value is not None]
    if given:
        raise ShardcliError(
            f"{', '.join(given)} describe{'s' if len(given) == 1 else ''} the decoder; "
            f"{program} is laid out as it is (leave {'it' if len(given) == 1 else 'them'} out)"
        )


def _remat_policies(text: str | None, gated: bool) -> tuple[str, ...]:
    """`--remat none,minimal_offloaded` -> ("none", "minimal_offloaded"), each once, a custom policy
    in its one spelling; not given: the policies the search tries (`specs.remat.SEARCHED`).

    Raises:
        ShardcliError: a word that names no policy, a custom one naming an activation this model does
            not make (`mlpwi` of a gated MLP, `mlpwi_0`/`mlpwi_1` of a plain one), or none at all.
    """
    from shardcli.specs.remat import SEARCHED, mlp_names, parse_policy, valid_words

    if text is None:
        return SEARCHED
    policies = [parse_policy(r) for r in text.split(",") if r.strip()]
    for policy in policies:
        absent = [n for n in (*policy.saved, *policy.offloaded) if n in mlp_names(not gated)]
        if absent:
            mlp = "gated: mlpwi_0 (gate) and mlpwi_1 (up)" if gated else "not gated: mlpwi"
            raise ShardcliError(
                f"--remat {policy.name!r}: this model makes no {absent[0]} (its MLP is {mlp})"
            )
    remats = tuple(dict.fromkeys(p.name for p in policies))
    if not remats:
        raise ShardcliError(f"--remat {text!r} names no policy; choose from {valid_words()}")
    return remats


def _plan_program(
    program: str,
    inputs: str | None,
    rules: str | None,
    target: str,
    compile_n: int,
    use_cache: bool,
    options: RunOptions,
    network: str | None = None,
) -> None:
    """`plan FILE.py:FUNCTION --inputs FILE.py:NAME`."""
    from shardcli.hardware.targets import parse_target
    from shardcli.plan.program_rows import ProgramPlanRequest
    from shardcli.plan.user_program import run_program_plan
    from shardcli.render.plan_program import render_program_plan
    from shardcli.specs.decoder import parse_rules

    _positive("--compile", compile_n)
    if inputs is None:
        raise ShardcliError(
            f"plan {program} needs --inputs FILE.py:NAME (the arguments, with logical axis names)"
        )
    request = ProgramPlanRequest(
        program=program,
        inputs=inputs,
        target=parse_target(target, network=network),
        rules=parse_rules(rules) if rules is not None else None,
        compile_n=compile_n,
        use_cache=use_cache,
        options=options,
    )
    with terminate_as_interrupt() as stop, _progress(options) as update:
        result = run_program_plan(request, progress=update)
    render_program_plan(result, options)
    if result.interrupted:
        stop.finished()  # SIGTERM: exit 143
        raise typer.Exit(ExitCode.INTERRUPTED)
    raise typer.Exit(ExitCode.OK if result.winner is not None else ExitCode.WRONG_RESULT)
