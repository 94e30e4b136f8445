"""`shardcli reshard`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from shardcli.commands import options as opt
from shardcli.commands.matmul import Iters, Warmup
from shardcli.errors import ExitCode

if TYPE_CHECKING:
    from shardcli.specs.runs import RunOptions

Source = Annotated[
    str | None,
    typer.Option(
        "--from",
        help="The PartitionSpec the array starts in, as shard --spec takes it. \\[default: replicated]",
    ),
]
Destination = Annotated[
    str | None,
    typer.Option("--to", help="The PartitionSpec to move it to. \\[default: replicated]"),
]
Impl = Annotated[
    str,
    typer.Option(
        "--impl",
        help="reshard (jax.sharding.reshard under jit), jit (identity with in/out shardings), "
        "device_put, a comma-separated list, or all.",
    ),
]
Dtype = Annotated[str, typer.Option("--dtype", help="float32, bfloat16, int32, ...")]
CompileTarget = Annotated[
    str | None,
    typer.Option(
        "--target",
        help="Compile the move for a TPU topology you don't own (tpu-v5e:16x16; the tpu extra): the "
        "collectives the TPU compiler uses and the memory per chip against its HBM (exit 1 if it does not "
        "fit); nothing runs, so device_put (eager) is left out.",
    ),
]
Mesh = Annotated[
    str | None,
    typer.Option(
        "--mesh", "-m", help="Mesh shape: 8, 2x4 or 2x2x2. \\[default: 2x4, or the --target topology's shape]"
    ),
]


@opt.with_run_options(formats=("table", "json", "csv"), mode=False)
def reshard(
    shape: Annotated[
        str | None,
        typer.Option(
            "--shape", "-s", help="Global array shape: 8x1024. \\[default: 8x1024, or the --values given]"
        ),
    ] = None,
    source: Source = None,
    target: Destination = None,
    impl: Impl = "all",
    dtype: Dtype = "float32",
    init: opt.Init = None,
    values: opt.Values = None,
    values_file: opt.ValuesFile = None,
    show_values: opt.ShowValues = None,
    warmup: Warmup = 5,
    iters: Iters = 20,
    compile_target: CompileTarget = None,
    mesh: Mesh = None,
    axes: opt.Axes = None,
    *,
    options: RunOptions,
) -> None:
    """Move an array from one sharding to another: both pictures, the collectives the compiler
    used (with their mesh axes), the bytes each device must receive, memory, timing with an algbw,
    and every device's new block checked bit for bit against NumPy.

    Example: shardcli reshard --shape 8x1024 --from data,model --to model,data --mesh 2x4 --axes data,model
    """
    from shardcli.commands.requests.playground import build_reshard_request_from_flags

    request = build_reshard_request_from_flags(
        shape=shape,
        source=source,
        target=target,
        impl=impl,
        dtype=dtype,
        init=init,
        values=values,
        values_file=values_file,
        show_values=show_values,
        warmup=warmup,
        iters=iters,
        mesh=mesh,
        axes=axes,
        options=options,
        compile_target=compile_target,
    )
    from shardcli.playground.reshard import run_reshard
    from shardcli.render.progress import progress_bar
    from shardcli.render.reshard import render_reshard

    with progress_bar(options.shows_progress, lambda d, t, label: label) as update:
        result = run_reshard(request, progress=update)
    render_reshard(result, options)
    raise typer.Exit(ExitCode.WRONG_RESULT if result.wrong or result.does_not_fit else ExitCode.OK)
