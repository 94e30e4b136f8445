"""`shardcli matmul`."""

from __future__ import annotations

from typing import Annotated

import typer

from shardcli import options as opt
from shardcli.errors import ExitCode, ShardcliError
from shardcli.matmul_registry import IMPLS, MATMUL_CASES
from shardcli.render.console import prints_here
from shardcli.specs import check_plot_file, parse_dims, parse_dtype, parse_init, parse_mesh, parse_scales


def _parse_names(text: str, flag: str, choices: tuple[str, ...], what: str) -> tuple[str, ...]:
    """A comma-separated list of distinct names from `choices`."""
    names = tuple(n.strip() for n in text.split(","))
    for name in names:
        if name not in choices:
            raise ShardcliError(f"{flag} {name!r} is not {what}; choose one of {', '.join(choices)} or all")
    twice = [n for n in names if names.count(n) > 1]
    if twice:
        raise ShardcliError(f"{flag} {text!r} names {twice[0]!r} twice; give each once")
    return names


def parse_cases(text: str) -> tuple[str, ...]:
    """`--case allreduce`, `--case allreduce,collective` or `--case all` (kept as ("all",))."""
    if text.strip() == "all":
        return ("all",)
    return _parse_names(text, "--case", tuple(MATMUL_CASES), "a matmul case")


def parse_impls(text: str | None) -> tuple[str, ...] | None:
    """`--impl manual`, `--impl manual,auto` or `--impl all`; None keeps each case's default."""
    if text is None:
        return None
    if text.strip() == "all":
        return IMPLS
    return _parse_names(text, "--impl", IMPLS, "valid")


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


def matmul(
    case: Annotated[
        str,
        typer.Option("--case", "-c", help="A case, a comma-separated list, or all (one comparison table)."),
    ] = "all",
    impl: Annotated[
        str | None,
        typer.Option(
            "--impl",
            help="manual, auto, explicit, a comma-separated list, or all. "
            "\\[default: manual; explicit for the illegal case]",
        ),
    ] = None,
    dims: Annotated[str, typer.Option("--dims", "-d", help="I,J,K: A is IxJ, B is JxK.")] = "256,512,256",
    dtype: Annotated[str, typer.Option("--dtype", help="float32, bfloat16, float16 or float64.")] = "float32",
    init: opt.Init = "random",
    plot_file: Annotated[
        str | None,
        typer.Option(
            "--plot-file",
            help="With --sizes: also draw TFLOP/s and time against the product's FLOPs to FILE.png or "
            "FILE.svg (needs the plot extra: pip install 'shardcli\\[plot]').",
        ),
    ] = None,
    sizes: Annotated[
        str | None,
        typer.Option(
            "--sizes", help="Sweep a scale factor over the dims: 1:8 (x2 steps), 1:16:x4, or 0.5,1,2."
        ),
    ] = None,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed iterations before timing.")] = 5,
    iters: Annotated[int, typer.Option("--iters", help="Timed iterations.")] = 20,
    peak_tflops: Annotated[
        float | None,
        typer.Option(
            "--peak-tflops",
            help="Peak TFLOP/s per device for the cost model. \\[default: the device table; measured on CPU]",
        ),
    ] = None,
    link_gbps: Annotated[
        float | None,
        typer.Option(
            "--link-gbps",
            help="Link bandwidth per device, GB/s, one direction. "
            "\\[default: the device table; measured on CPU]",
        ),
    ] = None,
    mesh: opt.Mesh = "2x4",
    axes: opt.Axes = None,
    platform: opt.Platform = "auto",
    devices: opt.Devices = None,
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
    from shardcli.render.matmul import FORMATS

    options = opt.run_options(
        platform,
        devices,
        "auto",
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
    from shardcli.core.matmul import MatmulRequest

    request = MatmulRequest(
        cases=parse_cases(case),
        mesh=parse_mesh(mesh, axes),
        dtype=parse_dtype(dtype),
        impls=parse_impls(impl),
        dims=parse_dims(dims),
        init=parse_init(init),
        scales=parse_scales(sizes) if sizes is not None else None,
        warmup=warmup,
        iters=iters,
        peak_tflops=peak_tflops,
        link_gbps=link_gbps,
        options=options,
    )
    from shardcli.core.matmul import run_matmul
    from shardcli.render.matmul import render_matmul
    from shardcli.render.progress import progress_bar

    if plot_file is not None:
        check_plot_file(plot_file)
        if sizes is None:
            raise ShardcliError("--plot-file draws a sweep over sizes; give --sizes (such as 1:8)")
    with progress_bar(options.shows_progress, _describe) as update:
        result = run_matmul(request, progress=update)
    render_matmul(result, options)
    if plot_file is not None and prints_here(options, result.session.runtime):
        from shardcli.render.plotfile import write_matmul_plot_file

        try:
            write_matmul_plot_file(plot_file, result)
        except OSError as error:
            raise ShardcliError(
                f"could not write --plot-file {plot_file}: {error.strerror or error}"
            ) from error
    raise typer.Exit(ExitCode.WRONG_RESULT if result.wrong else ExitCode.OK)


matmul.__doc__ = _doc()
