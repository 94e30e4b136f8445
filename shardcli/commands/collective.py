"""`shardcli collective`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from shardcli.commands import options as opt
from shardcli.errors import ExitCode
from shardcli.playground.collective.cases import COLLECTIVES

if TYPE_CHECKING:
    from shardcli.playground.collective.request import CollectiveRequest
    from shardcli.playground.collective.run import CollectiveResult
    from shardcli.specs.runs import RunOptions

Name = Annotated[
    str,
    typer.Argument(
        help="The collective, or several joined by commas (psum,all_gather): " + ", ".join(COLLECTIVES) + "."
    ),
]
Axis = Annotated[
    str | None,
    typer.Option("--axis", help="Mesh axis (or axes, data,model) the collective runs over. \\[default: all]"),
]
Shape = Annotated[str | None, typer.Option("--shape", "-s", help="Global input shape, e.g. 32 or 16x8.")]
Size = Annotated[str | None, typer.Option("--size", help="Bytes per device for a 1-D input: 4096, 64K, 16M.")]
Sizes = Annotated[
    str | None,
    typer.Option("--sizes", help="Sweep bytes per device: 1K:64M (x2 steps), 1K:64M:x4, or 4K,1M,16M."),
]
Spec = Annotated[
    str | None,
    typer.Option("--spec", "-p", help="Input PartitionSpec. \\[default: the collective's axes on dim 0]"),
]
Tiled = Annotated[
    bool | None,
    typer.Option("--tiled/--no-tiled", help="all_gather: concatenate (tiled) or stack. \\[default: tiled]"),
]
GatherDim = Annotated[
    int | None, typer.Option("--gather-dim", help="all_gather: the dim to gather along. \\[default: 0]")
]
ScatterDim = Annotated[
    int | None, typer.Option("--scatter-dim", help="psum_scatter: the dim to scatter. \\[default: 0]")
]
Shift = Annotated[int | None, typer.Option("--shift", help="ppermute: ring shift. \\[default: 1]")]
Perm = Annotated[str | None, typer.Option("--perm", help="ppermute: explicit SRC:DST pairs, 0:1,1:2,2:0.")]
SplitDim = Annotated[int | None, typer.Option("--split-dim", help="all_to_all: dim to split. \\[default: 0]")]
ConcatDim = Annotated[
    int | None, typer.Option("--concat-dim", help="all_to_all: dim to concatenate. \\[default: 0]")
]
Root = Annotated[
    int | None, typer.Option("--root", help="broadcast: position of the source device. \\[default: 0]")
]
Placement = Annotated[
    str,
    typer.Option(
        "--placement",
        help="out (result in a buffer of its own), in (input donated, result written in place) or both.",
    ),
]
OutBuffer = Annotated[
    str | None,
    typer.Option(
        "--out-buffer",
        help="Out of place, where each call's result goes: preallocated (one output buffer, "
        "donated to every call and reused, like nccl-tests' recvbuff) or fresh (a new output "
        "every call, as a plain jit loop; its allocation is timed). \\[default: preallocated]",
    ),
]
Warmup = Annotated[int, typer.Option("--warmup", help="Untimed iterations before timing.")]
Iters = Annotated[int, typer.Option("--iters", help="Timed iterations.")]
Malloc = Annotated[
    str | None,
    typer.Option(
        "--malloc",
        help="CPU host memory: reuse (glibc malloc keeps freed buffers, so temporaries and "
        "outputs do not fault in fresh pages every call) or system (malloc left as it is). "
        "\\[default: reuse; system with --out-buffer fresh or --platform gpu/tpu]",
        envvar="SHARDCLI_MALLOC",
    ),
]
ShowValues = Annotated[
    bool | None,
    typer.Option(
        "--show-values/--no-show-values",
        help="Per-device BEFORE/AFTER values. \\[default: on for up to 256 elements]",
    ),
]
PlotFile = Annotated[
    str | None,
    typer.Option(
        "--plot-file",
        help="With --sizes: also draw busbw and time against size to FILE.png or FILE.svg "
        "(needs the plot extra: pip install 'shardcli\\[plot]').",
    ),
]
MinBusbw = Annotated[
    float | None,
    typer.Option("--min-busbw", help="Exit 1 if the average busbw (GB/s, sizes >= 1M) is below this."),
]


def _doc() -> str:
    lines = "\n\n".join(f"[bold]{c.name}[/bold]: {c.summary}" for c in COLLECTIVES.values())
    return (
        "Run one collective through shard_map, verify every device against NumPy, and time it.\n\n"
        f"{lines}\n\n"
        "Example: shardcli collective all_gather --mesh 2x4 --axes data,model --axis model"
    )


@opt.with_run_options(formats=("table", "json", "csv"))
def collective(
    name: Name,
    axis: Axis = None,
    shape: Shape = None,
    size: Size = None,
    sizes: Sizes = None,
    values: opt.Values = None,
    values_file: opt.ValuesFile = None,
    spec: Spec = None,
    dtype: opt.Dtype = "float32",
    init: opt.Init = None,
    tiled: Tiled = None,
    gather_dim: GatherDim = None,
    scatter_dim: ScatterDim = None,
    shift: Shift = None,
    perm: Perm = None,
    split_dim: SplitDim = None,
    concat_dim: ConcatDim = None,
    root: Root = None,
    placement: Placement = "out",
    out_buffer: OutBuffer = None,
    warmup: Warmup = 5,
    iters: Iters = 20,
    malloc: Malloc = None,
    show_values: ShowValues = None,
    plot_file: PlotFile = None,
    min_busbw: MinBusbw = None,
    hardware: opt.Hardware = None,
    mesh: opt.Mesh = "8",
    axes: opt.Axes = None,
    *,
    options: RunOptions,
) -> None:
    from shardcli.commands.requests.collective import (  # not at import: --help is light
        InputFlags,
        build_collective_requests,
    )

    array = InputFlags(
        shape=shape,
        size=size,
        sizes=sizes,
        values=values,
        spec=spec,
        dtype=dtype,
        init=init,
        values_file=values_file,
    )
    requests = build_collective_requests(
        name,
        array,
        mesh=mesh,
        axes=axes,
        axis=axis,
        tiled=tiled,
        gather_dim=gather_dim,
        scatter_dim=scatter_dim,
        shift=shift,
        perm=perm,
        split_dim=split_dim,
        concat_dim=concat_dim,
        root=root,
        placement=placement,
        out_buffer=out_buffer,
        warmup=warmup,
        iters=iters,
        malloc=malloc,
        show_values=show_values,
        min_busbw=min_busbw,
        plot_file=plot_file,
        options=options,
    )
    with opt.using_hardware(hardware):
        results = _run_each(requests)
    _render(results, plot_file)
    raise typer.Exit(ExitCode.WRONG_RESULT if any(r.failed for r in results) else ExitCode.OK)


def _describe_size(done: int, total: int, size: int) -> str:
    from shardcli.specs.values import format_bytes

    return f"{format_bytes(size, short=True)} per device" if done < total else "done"


def _run_each(requests: list[CollectiveRequest]) -> list[CollectiveResult]:
    """Run the validated requests in order on one session, under one progress bar."""
    from shardcli.playground.collective.run import run_collective
    from shardcli.render.progress import progress_bar

    results = []
    session = None
    with progress_bar(requests[0].options.shows_progress, _describe_size) as update:
        for request in requests:
            result = run_collective(request, progress=update, session=session)
            session = result.session
            results.append(result)
    return results


def _render(results: list[CollectiveResult], plot_file: str | None) -> None:
    from shardcli.render.collective.screen import render_collectives

    # the options the requests carry: the shared ones, with the host allocator chosen
    render_collectives(results, results[0].request.options, plot_file)


collective.__doc__ = _doc()
