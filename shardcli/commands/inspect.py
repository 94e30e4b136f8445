"""`shardcli inspect`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from shardcli.commands import options as opt
from shardcli.commands.matmul import Iters, LinkGbps, PeakTflops, Warmup
from shardcli.errors import ExitCode

if TYPE_CHECKING:
    from shardcli.specs.runs import RunOptions

Program = Annotated[
    str,
    typer.Argument(
        help="FILE.py:FUNCTION or package.module:FUNCTION: the function to compile (jitted or not); or "
        "PATH.hlo.txt (.txt, .hlo, .gz): a module compiled elsewhere (compiled.as_text(), or XLA_FLAGS="
        "--xla_dump_to's *.after_optimizations.txt), read on its --target.",
        show_default=False,
    ),
]
Arg = Annotated[
    list[str] | None,
    typer.Option(
        "--arg",
        help="One per positional argument, in order: DTYPE[SHAPE]@SPEC, e.g. 'bf16[256,4096]@data,None' "
        "(f32, bf16, f16, i32 or a --dtype name, or a typed PRNG key: 'key<rbg>[4]@data', "
        "'key<threefry>[]'; @SPEC left out: replicated). Nothing is allocated.",
        show_default=False,
    ),
]
Inputs = Annotated[
    str | None,
    typer.Option(
        "--inputs",
        help="FILE.py:NAME: NAME(mesh) (or NAME()) returns the tuple of arguments as pytrees of "
        "jax.ShapeDtypeStruct with shardings (or arrays), for parameters and optimizer states; or "
        "(step, args), or {'fn': step, 'args': ..., 'kwargs': ...}: that step is compiled.",
    ),
]
Rules = Annotated[
    str | None,
    typer.Option(
        "--rules",
        help="With --inputs: lay the arguments out by their logical axis names (nn.with_partitioning, "
        "nnx.with_partitioning, a LOGICAL_AXES table), LOGICAL=MESH_AXIS[+MESH_AXIS],...: "
        "embed=fsdp,mlp=tensor,batch=data+fsdp (what `shardcli plan` prints for its winner).",
    ),
]
Spec = Annotated[
    list[str] | None,
    typer.Option(
        "--spec",
        help="PATH=SPEC: lay out the argument at PATH (as the report names it: "
        "'state.params.w_in', \"params['w']\") so, over the layout --inputs or --arg gave it, e.g. "
        "--spec 'state.params.w_in=None,fsdp,tensor' (an empty SPEC: replicated); what a finding's fix "
        "prints. Repeat it for several arguments.",
        show_default=False,
    ),
]
Fixes = Annotated[
    bool,
    typer.Option(
        "--fixes/--no-fixes",
        help="Compile the program again with each finding's proposed change and show the ones that "
        "help, before -> after (at most 3 more compiles); --no-fixes: the findings alone.",
    ),
]
Out = Annotated[
    list[str] | None,
    typer.Option(
        "--out",
        help="The sharding you expect for each result, in order: a result that comes out otherwise "
        "is named (not imposed: the report shows what the compiler chose).",
        show_default=False,
    ),
]
Target = Annotated[
    str | None,
    typer.Option(
        "--target",
        help="Compile for hardware you don't own: tpu-v4, tpu-v5e, tpu-v5p or tpu-v6e with a topology "
        "(tpu-v5e:16x16, tpu-v5p:8x8x16), through the real TPU compiler (the tpu extra: pip install "
        "'shardcli\\[tpu]'), or gpu-h100/gpu-h200 with GPUS or HOSTSxGPUS (gpu-h200:8, gpu-h100:2x8) "
        "through XLA's GPU compiler (the gpu extra). Nothing runs; the report says whether it fits each "
        "chip's HBM, on a GPU the pool JAX keeps there (75% of its memory unless "
        "XLA_PYTHON_CLIENT_MEM_FRACTION etc. say otherwise; at risk under 10% spare, exit 0); exit 1 if it "
        "does not fit.",
    ),
]
Mesh = Annotated[
    str | None,
    typer.Option(
        "--mesh",
        "-m",
        help="Mesh shape: 8, 2x4 or 2x2x2 ('x'-separated sizes). \\[default: 2x4, or the --target topology's "
        "shape; with a target, any reshape of its chips]",
    ),
]
Run = Annotated[
    bool,
    typer.Option(
        "--run",
        help="Also run it on generated inputs (random normal floats) and time it as a training loop runs "
        "it: donated arguments fed back from the results of the call before, or copied afresh (untimed).",
    ),
]


@opt.with_run_options(formats=("table", "json"), compile_cache=False)
def inspect(
    target: Program,
    arg: Arg = None,
    inputs: Inputs = None,
    rules: Rules = None,
    spec: Spec = None,
    fixes: Fixes = True,
    out: Out = None,
    run: Run = False,
    warmup: Warmup = 2,
    iters: Iters = 5,
    peak_tflops: PeakTflops = None,
    link_gbps: LinkGbps = None,
    hardware: opt.Hardware = None,
    compile_target: Target = None,
    network: opt.Network = None,
    slices: opt.Slices = None,
    mesh: Mesh = None,
    axes: opt.Axes = None,
    ctx: typer.Context = None,  # type: ignore[assignment]  # Typer passes it
    *,
    options: RunOptions,
) -> None:
    """Show what the compiler did with your own jitted function: each argument's and result's
    sharding, every collective it inserted (kind, mesh axes, its role: FSDP gather, gradient
    reduction, partial sum, cross-shard reduction, table lookup, reshard, ...; bytes per device, how
    often, the JAX operation and your source line), memory and FLOPs per device, the cost model, and
    the classic sharding mistakes, each with the change that mends it where one helps: the program
    compiled again with it, before -> after (--spec PATH=SPEC applies it). It is compiled from
    abstract shapes, so nothing of the arguments' size is allocated; nothing runs unless --run asks.

    inspect imports and runs the named file as `python FILE.py` would (its folder first on the
    Python path): only inspect code you trust.

    With --target the program is compiled for a TPU topology by the real TPU compiler (or for
    GPUs by XLA's GPU compiler): per-chip memory against the chip's HBM ("fits, N GiB free" or
    "does not fit by N GiB", exit 1), the target's own collectives, FLOPs and the step time with
    the chip's figures. On a GPU target the memory is held against the pool JAX's GPU client keeps
    (by default 75% of the GPU's memory; XLA_PYTHON_CLIENT_MEM_FRACTION, _PREALLOCATE and
    _ALLOCATOR are read as JAX reads them): "at risk" (exit 0) when under 10% of the pool is spare,
    with the setting that would make it fit.

    Given PATH.hlo.txt instead, the text of a module compiled elsewhere (a job on a real cluster:
    compiled.as_text(), or XLA_FLAGS=--xla_dump_to=DIR), the same report is read from it for
    --target: collectives, loops, FLOPs (a GPU's cuBLAS and cuDNN calls counted from their shapes),
    the step time; memory and the fit verdict need a compile and are said to be missing.

    Example: shardcli inspect examples/mlp.py:train_step --mesh 2x4 --axes data,model
    --arg 'f32[256,1024]@data,None' --arg 'f32[1024,4096]@None,model' --arg 'f32[4096,1024]@model,None'
    """
    from shardcli.commands.requests.program import build_inspect_request

    request = build_inspect_request(
        target=target,
        args=arg or [],
        inputs=inputs,
        rules=rules,
        outs=out or [],
        run=run,
        warmup=warmup,
        iters=iters,
        peak_tflops=peak_tflops,
        link_gbps=link_gbps,
        mesh=mesh,
        axes=axes,
        options=options,
        compile_target=compile_target,
        mode_given=ctx is not None and _typed(ctx, "mode"),
        specs=spec or [],
        fixes=fixes,
        network=network,
        slices=slices,
    )
    from shardcli.program.inspect import run_inspect
    from shardcli.program.module import inspect_module
    from shardcli.render.inspect import render_inspect
    from shardcli.runtime.interrupts import terminate_as_interrupt

    with opt.using_hardware(hardware, compile_target), terminate_as_interrupt():  # SIGTERM: exit 143
        result = inspect_module(request) if request.module_path is not None else run_inspect(request)
    render_inspect(result, options)
    raise typer.Exit(ExitCode.WRONG_RESULT if result.does_not_fit else ExitCode.OK)


def _typed(ctx: typer.Context, name: str) -> bool:
    """Whether the user gave the option (on the command line or in the environment)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")
