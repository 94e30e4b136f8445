"""`shardcli einsum`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from shardcli.commands import options as opt
from shardcli.commands.matmul import Iters, LinkGbps, PeakTflops, Sizes, Warmup
from shardcli.errors import ExitCode

if TYPE_CHECKING:
    from shardcli.specs.runs import RunOptions

Subscripts = Annotated[
    str,
    typer.Argument(
        help="Einsum subscripts as jnp.einsum takes them: 'bsd,df->bsf', 'bqhd,bkhd->bhqk', 'ij,jk'.",
        show_default=False,
    ),
]
Shape = Annotated[
    list[str] | None,
    typer.Option("--shape", "-s", help="One per operand, in order: 8x128x512.", show_default=False),
]
InSpec = Annotated[
    list[str] | None,
    typer.Option(
        "--in",
        help="One per operand, in order: its PartitionSpec as shard --spec takes it (data,None,model; "
        "data+model,None). \\[default: replicated]",
        show_default=False,
    ),
]
OutSpec = Annotated[
    str | None,
    typer.Option(
        "--out",
        help="The result's PartitionSpec. \\[default: the compiler chooses, and the report says what]",
    ),
]
Impl = Annotated[
    str,
    typer.Option(
        "--impl",
        help="auto (jit with in/out shardings), explicit (out_sharding= on an Explicit mesh), or all.",
    ),
]
Dtype = Annotated[str, typer.Option("--dtype", help="float32, bfloat16, float16 or float64.")]
Target = Annotated[
    str | None,
    typer.Option(
        "--target",
        help="Compile for a TPU topology you don't own (tpu-v5e:16x16, tpu-v5p:8x8x16; the tpu extra): "
        "nothing runs or is verified; the report says whether each way fits the chip's HBM (exit 1 if not).",
    ),
]
Mesh = Annotated[
    str | None,
    typer.Option(
        "--mesh",
        "-m",
        help="Mesh shape: 8, 2x4 or 2x2x2. \\[default: 2x4, or the --target topology's shape]",
    ),
]


def _describe(done: int, total: int, label: str) -> str:
    return f"{label} ({done + 1}/{total})" if done < total else "done"


@opt.with_run_options(formats=("table", "json", "csv"), mode=False)
def einsum(
    subscripts: Subscripts,
    shape: Shape = None,
    in_spec: InSpec = None,
    out_spec: OutSpec = None,
    impl: Impl = "all",
    dtype: Dtype = "float32",
    init: opt.OperandInit = "random",
    show_values: opt.ShowValues = None,
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
    """Run your own einsum with your own layout: the compiler's automatic sharding and the
    explicit-axes mode side by side, every device's block of the result checked against NumPy,
    the collectives the compiler inserted (with their mesh axes), memory and FLOPs per device,
    timing and the cost model.

    Example: shardcli einsum 'bsd,df->bsf' --shape 8x128x512 --shape 512x2048 --in data,None,None
    --in None,model --out data,None,model --mesh 2x4 --axes data,model
    """
    from shardcli.commands.requests.playground import build_einsum_request_from_flags

    request = build_einsum_request_from_flags(
        subscripts=subscripts,
        shapes=shape or [],
        in_specs=in_spec or [],
        out_spec=out_spec,
        impl=impl,
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
        options=options,
        compile_target=compile_target,
    )
    from shardcli.playground.einsum import run_einsum
    from shardcli.render.einsum import render_einsum
    from shardcli.render.progress import progress_bar

    with (
        opt.using_hardware(hardware, compile_target),
        progress_bar(options.shows_progress, _describe) as update,
    ):
        result = run_einsum(request, progress=update)
    render_einsum(result, options)
    raise typer.Exit(ExitCode.WRONG_RESULT if result.wrong or result.does_not_fit else ExitCode.OK)
