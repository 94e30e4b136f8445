"""`shardcli collective`."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

import typer

from shardcli import options as opt
from shardcli.allocator import ALLOCATORS
from shardcli.collective_registry import COLLECTIVES, PARAM_FLAGS, CollectiveParams, get_collective
from shardcli.errors import ExitCode, ShardcliError
from shardcli.render.console import prints_here
from shardcli.specs import (
    MeshSpec,
    check_plot_file,
    parse_bytes,
    parse_dtype,
    parse_init,
    parse_mesh,
    parse_perm,
    parse_shape,
    parse_sharding,
    parse_sizes,
    parse_values,
)


def parse_collective_axes(text: str | None, mesh: MeshSpec) -> tuple[str, ...]:
    """`--axis model` or `--axis data,model`; default: every mesh axis."""
    if text is None:
        return mesh.axes
    names = tuple(n.strip() for n in text.split(","))
    for name in names:
        if name not in mesh.axes:
            raise ShardcliError(
                f"--axis {name!r} is not a mesh axis; the mesh axes are {', '.join(mesh.axes)}"
            )
    if len(set(names)) != len(names):
        raise ShardcliError(f"--axis {text!r} names an axis twice")
    return names


def default_malloc(malloc: str | None, out_buffer: str, platform: str = "auto") -> tuple[str, str | None]:
    """--malloc, or its default for the out buffer and platform, and what chose it when --malloc did not.

    A fresh 64 MiB output every call fragments a heap that never gives memory back (measured:
    all_gather of 64 MiB on 8 devices grew to 24 GiB and was killed), and fresh outputs are there
    to show what allocating costs; so reuse is the default only with the preallocated buffer. On a
    GPU or TPU asked for by name the collective's buffers are device memory, not malloc's, so the
    host allocator is left alone (`auto` is decided only once JAX has started, too late for it).
    """
    if malloc is not None:
        return malloc, None
    if platform in ("gpu", "tpu"):
        return "system", f"the default with --platform {platform}: device buffers do not come from malloc"
    if out_buffer == "fresh":
        return "system", "the default with --out-buffer fresh"
    return "reuse", None


def _describe_size(done: int, total: int, size: int) -> str:
    from shardcli.specs import format_size

    return f"{format_size(size)} per device" if done < total else "done"


def _doc() -> str:
    lines = "\n\n".join(f"[bold]{c.name}[/bold]: {c.summary}" for c in COLLECTIVES.values())
    return (
        "Run one collective through shard_map, verify every device against NumPy, and time it.\n\n"
        f"{lines}\n\n"
        "Example: shardcli collective all_gather --mesh 2x4 --axes data,model --axis model"
    )


def collective(
    name: Annotated[
        str,
        typer.Argument(
            help="The collective, or several joined by commas (psum,all_gather): "
            + ", ".join(COLLECTIVES)
            + "."
        ),
    ],
    axis: Annotated[
        str | None,
        typer.Option(
            "--axis", help="Mesh axis (or axes, data,model) the collective runs over. \\[default: all]"
        ),
    ] = None,
    shape: Annotated[
        str | None, typer.Option("--shape", "-s", help="Global input shape, e.g. 32 or 16x8.")
    ] = None,
    size: Annotated[
        str | None, typer.Option("--size", help="Bytes per device for a 1-D input: 4096, 64K, 16M.")
    ] = None,
    sizes: Annotated[
        str | None,
        typer.Option("--sizes", help="Sweep bytes per device: 1K:64M (x2 steps), 1K:64M:x4, or 4K,1M,16M."),
    ] = None,
    values: Annotated[
        str | None, typer.Option("--values", help="Exact global 1-D input: 3,1,4,1,5,9,2,6.")
    ] = None,
    spec: Annotated[
        str | None,
        typer.Option("--spec", "-p", help="Input PartitionSpec. \\[default: the collective's axes on dim 0]"),
    ] = None,
    dtype: opt.Dtype = "float32",
    init: opt.Init = "arange",
    tiled: Annotated[
        bool | None,
        typer.Option(
            "--tiled/--no-tiled",
            help="all_gather: concatenate (tiled) or stack. \\[default: tiled]",
        ),
    ] = None,
    gather_dim: Annotated[
        int | None, typer.Option("--gather-dim", help="all_gather: the dim to gather along. \\[default: 0]")
    ] = None,
    scatter_dim: Annotated[
        int | None, typer.Option("--scatter-dim", help="psum_scatter: the dim to scatter. \\[default: 0]")
    ] = None,
    shift: Annotated[int | None, typer.Option("--shift", help="ppermute: ring shift. \\[default: 1]")] = None,
    perm: Annotated[
        str | None, typer.Option("--perm", help="ppermute: explicit SRC:DST pairs, 0:1,1:2,2:0.")
    ] = None,
    split_dim: Annotated[
        int | None, typer.Option("--split-dim", help="all_to_all: dim to split. \\[default: 0]")
    ] = None,
    concat_dim: Annotated[
        int | None, typer.Option("--concat-dim", help="all_to_all: dim to concatenate. \\[default: 0]")
    ] = None,
    root: Annotated[
        int | None, typer.Option("--root", help="broadcast: position of the source device. \\[default: 0]")
    ] = None,
    placement: Annotated[
        str,
        typer.Option(
            "--placement",
            help="out (result in a buffer of its own), in (input donated, result written in place) or both.",
        ),
    ] = "out",
    out_buffer: Annotated[
        str | None,
        typer.Option(
            "--out-buffer",
            help="Out of place, where each call's result goes: preallocated (one output buffer, "
            "donated to every call and reused, like nccl-tests' recvbuff) or fresh (a new output "
            "every call, as a plain jit loop; its allocation is timed). \\[default: preallocated]",
        ),
    ] = None,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed iterations before timing.")] = 5,
    iters: Annotated[int, typer.Option("--iters", help="Timed iterations.")] = 20,
    malloc: Annotated[
        str,
        typer.Option(
            "--malloc",
            help="CPU host memory: reuse (glibc malloc keeps freed buffers, so temporaries and "
            "outputs do not fault in fresh pages every call) or system (malloc left as it is). "
            "\\[default: reuse; system with --out-buffer fresh or --platform gpu/tpu]",
            envvar="SHARDCLI_MALLOC",
        ),
    ] = None,
    show_values: Annotated[
        bool | None,
        typer.Option(
            "--show-values/--no-show-values",
            help="Per-device BEFORE/AFTER values. \\[default: on for up to 256 elements]",
        ),
    ] = None,
    plot_file: Annotated[
        str | None,
        typer.Option(
            "--plot-file",
            help="With --sizes: also draw busbw and time against size to FILE.png or FILE.svg "
            "(needs the plot extra: pip install 'shardcli\\[plot]').",
        ),
    ] = None,
    min_busbw: Annotated[
        float | None,
        typer.Option("--min-busbw", help="Exit 1 if the average busbw (GB/s, sizes >= 1M) is below this."),
    ] = None,
    mesh: opt.Mesh = "8",
    axes: opt.Axes = None,
    platform: opt.Platform = "auto",
    devices: opt.Devices = None,
    mode: opt.Mode = "auto",
    format: Annotated[str, typer.Option("--format", "-f", help="table, json or csv.")] = "table",
    no_color: opt.NoColor = False,
    quiet: opt.Quiet = False,
    save: opt.Save = None,
    no_compile_cache: opt.NoCompileCache = False,
    coordinator: opt.Coordinator = None,
    num_processes: opt.NumProcesses = None,
    process_id: opt.ProcessId = None,
    distributed: opt.Distributed = "off",
    join_timeout: opt.JoinTimeout = 300,
    coordinator_bind: opt.CoordinatorBind = None,
    all_processes: opt.AllProcesses = False,
    process_timing: opt.ProcessTiming = "max",
) -> None:
    from shardcli.core.collective import CollectiveRequest
    from shardcli.render.collective import FORMATS

    options = opt.run_options(
        platform,
        devices,
        mode,
        format,
        no_color,
        quiet,
        formats=FORMATS,
        coordinator=coordinator,
        num_processes=num_processes,
        process_id=process_id,
        distributed=distributed,
        join_timeout=join_timeout,
        coordinator_bind=coordinator_bind,
        all_processes=all_processes,
        save=save,
        compile_cache=not no_compile_cache,
        process_timing=process_timing,
    )
    if out_buffer is not None and placement == "in":
        raise ShardcliError(
            "--out-buffer is for out-of-place runs, and --placement in writes the result into the "
            "input; use --placement out or both"
        )
    out_buffer = out_buffer or "preallocated"
    malloc, malloc_why = default_malloc(malloc, out_buffer, options.platform)
    if malloc not in ALLOCATORS:
        raise ShardcliError(f"--malloc {malloc!r} is not valid; choose one of {', '.join(ALLOCATORS)}")
    options = replace(options, malloc=malloc, malloc_why=malloc_why)
    mesh_spec = parse_mesh(mesh, axes)
    given = {"--shape": shape, "--size": size, "--sizes": sizes, "--values": values}
    chosen = [flag for flag, value in given.items() if value is not None]
    if len(chosen) > 1:
        raise ShardcliError(f"{' and '.join(chosen)} both set the input; give only one of them")
    knobs = {
        "tiled": tiled,
        "gather_dim": gather_dim,
        "scatter_dim": scatter_dim,
        "shift": shift,
        "perm": parse_perm(perm) if perm is not None else None,
        "split_dim": split_dim,
        "concat_dim": concat_dim,
        "root": root,
    }
    set_params = frozenset(k for k, v in knobs.items() if v is not None)
    if "shift" in set_params and "perm" in set_params:
        raise ShardcliError("--shift and --perm both set ppermute's pairs; give only one")
    params = CollectiveParams(
        axes=parse_collective_axes(axis, mesh_spec), **{k: v for k, v in knobs.items() if v is not None}
    )
    dtype_spec = parse_dtype(dtype)
    names = parse_collective_names(name)
    collectives = [get_collective(n) for n in names]
    for param in sorted(set_params):
        if not any(param in c.options for c in collectives):
            raise ShardcliError(
                f"{PARAM_FLAGS[param]} does not apply to {', '.join(names)}; it is for "
                f"{', '.join(c.name for c in COLLECTIVES.values() if param in c.options)}"
            )
    if plot_file is not None:
        check_plot_file(plot_file)
        if sizes is None:
            raise ShardcliError("--plot-file draws a sweep over sizes; give --sizes (such as 1K:64M)")
    base = CollectiveRequest(
        collective=names[0],
        mesh=mesh_spec,
        params=params,
        dtype=dtype_spec,
        init=parse_init(init),
        shape=parse_shape(shape) if shape is not None else None,
        sizes=parse_sizes(sizes) if sizes is not None else (parse_bytes(size),) if size is not None else None,
        values=parse_values(values) if values is not None else None,
        sharding=parse_sharding(spec, mesh_spec) if spec is not None else None,
        placement=placement,
        out_buffer=out_buffer,
        warmup=warmup,
        iters=iters,
        show_values=show_values,
        min_busbw=min_busbw,
        set_params=set_params,
        sweep=sizes is not None,
        options=options,
    )
    # Each collective gets the knobs that are its own (the check above refused any that fit none).
    requests = [replace(base, collective=c.name, set_params=set_params & c.options) for c in collectives]
    from shardcli.core.collective import run_collective, validate_request
    from shardcli.render.collective import render_collectives
    from shardcli.render.progress import progress_bar

    for request in requests:  # every bad input is found before anything runs
        validate_request(request)
    results = []
    session = None
    with progress_bar(options.shows_progress, _describe_size) as update:
        for request in requests:
            result = run_collective(request, progress=update, session=session)
            session = result.session
            results.append(result)
    render_collectives(results, options)
    if plot_file is not None and prints_here(options, results[0].session.runtime):
        from shardcli.render.plotfile import write_plot_file

        try:
            write_plot_file(plot_file, results)
        except OSError as error:
            raise ShardcliError(
                f"could not write --plot-file {plot_file}: {error.strerror or error}"
            ) from error
    failed = any(r.wrong or r.below_min_busbw for r in results)
    raise typer.Exit(ExitCode.WRONG_RESULT if failed else ExitCode.OK)


def parse_collective_names(text: str) -> list[str]:
    """`psum` or `psum,all_gather`: each a known collective, none twice."""
    names = [n.strip() for n in text.split(",")]
    for n in names:
        get_collective(n)
    if len(set(names)) != len(names):
        raise ShardcliError(f"collective list {text!r} names one twice")
    return names


collective.__doc__ = _doc()
