"""`shardcli matmul`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from shardcli.commands import options as opt
from shardcli.errors import ExitCode, ShardcliError
from shardcli.playground.matmul.cases import MATMUL_CASES

if TYPE_CHECKING:
    from shardcli.playground.matmul.run import MatmulResult
    from shardcli.specs.runs import RunOptions


Case = Annotated[
    str,
    typer.Option("--case", "-c", help="A case, a comma-separated list, or all (one comparison table)."),
]
Impl = Annotated[
    str | None,
    typer.Option(
        "--impl",
        help="manual, auto, explicit, a comma-separated list, or all. "
        "\\[default: manual; explicit for the illegal case]",
    ),
]
Dims = Annotated[str, typer.Option("--dims", "-d", help="I,J,K: A is IxJ, B is JxK.")]
Dtype = Annotated[str, typer.Option("--dtype", help="float32, bfloat16, float16 or float64.")]
PlotFile = Annotated[
    str | None,
    typer.Option(
        "--plot-file",
        help="With --sizes: also draw TFLOP/s and time against the product's FLOPs to FILE.png or "
        "FILE.svg (needs the plot extra: pip install 'shardcli\\[plot]').",
    ),
]
Sizes = Annotated[
    str | None,
    typer.Option("--sizes", help="Sweep a scale factor over the dims: 1:8 (x2 steps), 1:16:x4, or 0.5,1,2."),
]
Warmup = Annotated[int, typer.Option("--warmup", help="Untimed iterations before timing.")]
Iters = Annotated[int, typer.Option("--iters", help="Timed iterations.")]
PeakTflops = Annotated[
    float | None,
    typer.Option(
        "--peak-tflops",
        help="Peak TFLOP/s per device for the cost model. \\[default: the device table; measured on CPU]",
    ),
]
Target = Annotated[
    str | None,
    typer.Option(
        "--target",
        help="Compile every case for a TPU or GPU topology you don't own (tpu-v5e:16x16, gpu-h100:8; the "
        "tpu or gpu extra): nothing runs or is verified; each impl's fit against the chip's memory "
        "(exit 1 if one does not fit).",
    ),
]
Mesh = Annotated[
    str | None,
    typer.Option(
        "--mesh", "-m", help="Mesh shape: 8, 2x4 or 2x2x2. \\[default: 2x4, or the --target topology's]"
    ),
]
LinkGbps = Annotated[
    float | None,
    typer.Option(
        "--link-gbps",
        help="Link bandwidth per device, GB/s, one direction. \\[default: the device table; measured on CPU]",
    ),
]


def _describe(done: int, total: int, label: str) -> str:
    return f"{label} ({done + 1}/{total})" if done < total else "done"


def _doc() -> str:
    lines = "\n\n".join(f"[bold]{c.name}[/bold]: {c.notation()}. {c.summary}" for c in MATMUL_CASES.values())
    return (
        "Run sharded-matmul cases three ways (shard_map with explicit collectives, jit with in/out "
        "shardings, explicit-axes out_sharding), verify every device's block against NumPy, time "
        "them, and compare with a roofline cost model. X is the first mesh axis, Y the second.\n\n"
        f"{lines}\n\n"
        "Example: shardcli matmul --case allreduce --mesh 2x4 --axes data,model --impl all"
    )


@opt.with_run_options(formats=("table", "json", "csv"), mode=False)
def matmul(
    case: Case = "all",
    impl: Impl = None,
    dims: Dims = "256,512,256",
    dtype: Dtype = "float32",
    init: opt.OperandInit = "random",
    show_values: opt.ShowValues = None,
    plot_file: PlotFile = None,
    sizes: Sizes = None,
    warmup: Warmup = 5,
    iters: Iters = 20,
    peak_tflops: PeakTflops = None,
    link_gbps: LinkGbps = None,
    hardware: opt.Hardware = None,
    compile_target: Target = None,
    mesh: Mesh = None,
    axes: opt.Axes = None,
    *,
    options: RunOptions,
) -> None:
    from shardcli.commands.requests.playground import build_matmul_request  # not at import: --help is light

    request = build_matmul_request(
        case=case,
        impl=impl,
        dims=dims,
        dtype=dtype,
        init=init,
        show_values=show_values,
        sizes=sizes,
        warmup=warmup,
        iters=iters,
        peak_tflops=peak_tflops,
        link_gbps=link_gbps,
        mesh=mesh,
        axes=axes,
        plot_file=plot_file,
        options=options,
        compile_target=compile_target,
    )
    from shardcli.playground.matmul.run import run_matmul
    from shardcli.render.matmul import render_matmul
    from shardcli.render.progress import progress_bar

    with (
        opt.using_hardware(hardware, compile_target),
        progress_bar(options.shows_progress, _describe) as update,
    ):
        result = run_matmul(request, progress=update)
    render_matmul(result, options)
    from shardcli.render.console import prints_here  # not at import: --help loads no renderer

    if plot_file is not None and prints_here(options, result.session.runtime):
        _write_plot(plot_file, result)
    raise typer.Exit(ExitCode.WRONG_RESULT if result.wrong or result.does_not_fit else ExitCode.OK)


def _write_plot(plot_file: str, result: MatmulResult) -> None:
    from shardcli.render.plotfile import write_matmul_plot_file

    try:
        write_matmul_plot_file(plot_file, result)
    except OSError as error:
        raise ShardcliError(f"could not write --plot-file {plot_file}: {error.strerror or error}") from error


matmul.__doc__ = _doc()
