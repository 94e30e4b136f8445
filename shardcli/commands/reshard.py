"""`shardcli reshard`."""

from __future__ import annotations

from typing import Annotated

import typer

from shardcli import options as opt
from shardcli.commands.matmul import Iters, Warmup
from shardcli.errors import ExitCode
from shardcli.specs import RunOptions

Source = Annotated[
    str | None,
    typer.Option(
        "--from",
        help="The PartitionSpec the array starts in, as shard --spec takes it. \\[default: replicated]",
    ),
]
Target = Annotated[
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


@opt.with_run_options(formats=("table", "json", "csv"), mode=False)
def reshard(
    shape: Annotated[str, typer.Option("--shape", "-s", help="Global array shape: 8x1024.")] = "8x1024",
    source: Source = None,
    target: Target = None,
    impl: Impl = "all",
    dtype: Dtype = "float32",
    init: opt.Init = "arange",
    warmup: Warmup = 5,
    iters: Iters = 20,
    mesh: opt.Mesh = "2x4",
    axes: opt.Axes = None,
    *,
    options: RunOptions,
) -> None:
    """Move an array from one sharding to another: both pictures, the collectives the compiler
    used (with their mesh axes), the bytes each device must receive, memory, timing with an algbw,
    and every device's new block checked bit for bit against NumPy.

    Example: shardcli reshard --shape 8x1024 --from data,model --to model,data --mesh 2x4 --axes data,model
    """
    from shardcli.requests import build_reshard_request_from_flags

    request = build_reshard_request_from_flags(
        shape=shape,
        source=source,
        target=target,
        impl=impl,
        dtype=dtype,
        init=init,
        warmup=warmup,
        iters=iters,
        mesh=mesh,
        axes=axes,
        options=options,
    )
    from shardcli.core.reshard import run_reshard
    from shardcli.render.progress import progress_bar
    from shardcli.render.reshard import render_reshard

    with progress_bar(options.shows_progress, lambda d, t, label: label) as update:
        result = run_reshard(request, progress=update)
    render_reshard(result, options)
    raise typer.Exit(ExitCode.WRONG_RESULT if result.wrong else ExitCode.OK)
