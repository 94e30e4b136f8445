"""Typer option declarations shared by every command that runs on devices."""

from __future__ import annotations

from typing import Annotated

import typer

from shardcli.specs import (
    FORMATS,
    MODES,
    PLATFORMS,
    PROCESS_TIMINGS,
    RunOptions,
    parse_choice,
    parse_distributed,
    parse_save,
)

Mesh = Annotated[str, typer.Option("--mesh", "-m", help="Mesh shape: 8, 2x4 or 2x2x2 ('x'-separated sizes).")]
Axes = Annotated[
    str | None,
    typer.Option("--axes", "-a", help="Comma-separated axis names, one per mesh dim. \\[default: x,y,z,w]"),
]
Platform = Annotated[
    str,
    typer.Option(
        "--platform",
        help="auto, cpu, gpu or tpu. cpu (or auto without enough accelerators) fakes the devices.",
    ),
]
Devices = Annotated[
    int | None,
    typer.Option(
        "--devices",
        help="Devices the process starts with (on CPU: how many to fake). \\[default: the mesh size, "
        "or its share per process]",
        envvar="SHARDCLI_DEVICES",
    ),
]
Mode = Annotated[
    str,
    typer.Option("--mode", help="Mesh axis types for automatic sharding: auto or explicit."),
]
Dtype = Annotated[str, typer.Option("--dtype", help="float32, bfloat16, int32, ...")]
Init = Annotated[str, typer.Option("--init", help="arange, ones, zeros or random.")]
Format = Annotated[str, typer.Option("--format", "-f", help="table (for people) or json (for scripts).")]
NoColor = Annotated[bool, typer.Option("--no-color", help="Plain text; NO_COLOR is honoured too.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Only the results: no header, no pictures.")]

Save = Annotated[
    str | None,
    typer.Option(
        "--save",
        help="Also write what is printed to FILE.svg, FILE.html or FILE.txt (for docs and issue reports).",
    ),
]
NoCompileCache = Annotated[
    bool,
    typer.Option(
        "--no-compile-cache",
        help="Do not use JAX's persistent compile cache (default: on, in the user cache directory "
        "or SHARDCLI_CACHE_DIR).",
    ),
]

_CLUSTER = "Multi-process (jax.distributed; see also shardcli launch)"
Coordinator = Annotated[
    str | None,
    typer.Option(
        "--coordinator",
        help="HOST:PORT of process 0, where JAX's coordination service listens.",
        envvar="SHARDCLI_COORDINATOR",
        rich_help_panel=_CLUSTER,
    ),
]
NumProcesses = Annotated[
    int | None,
    typer.Option(
        "--num-processes",
        help="How many processes take part.",
        envvar="SHARDCLI_NUM_PROCESSES",
        rich_help_panel=_CLUSTER,
    ),
]
ProcessId = Annotated[
    int | None,
    typer.Option(
        "--process-id",
        help="This process's index, 0 to N-1.",
        envvar="SHARDCLI_PROCESS_ID",
        rich_help_panel=_CLUSTER,
    ),
]
Distributed = Annotated[
    str,
    typer.Option(
        "--distributed",
        help="off, or auto: jax.distributed.initialize() with no arguments (SLURM, Open MPI, TPU pods).",
        envvar="SHARDCLI_DISTRIBUTED",
        rich_help_panel=_CLUSTER,
    ),
]
CoordinatorBind = Annotated[
    str | None,
    typer.Option(
        "--coordinator-bind",
        help="HOST:PORT where process 0's coordination service listens. \\[default: the "
        "--coordinator address when it is a loopback one, else every interface (JAX's default)]",
        envvar="SHARDCLI_COORDINATOR_BIND",
        rich_help_panel=_CLUSTER,
    ),
]
JoinTimeout = Annotated[
    int,
    typer.Option(
        "--join-timeout",
        help="Seconds to wait for the coordinator and every process to join.",
        envvar="SHARDCLI_JOIN_TIMEOUT",
        rich_help_panel=_CLUSTER,
    ),
]
AllProcesses = Annotated[
    bool,
    typer.Option(
        "--all-processes",
        help="Every process prints its own report. \\[default: only process 0 prints]",
        rich_help_panel=_CLUSTER,
    ),
]
ProcessTiming = Annotated[
    str,
    typer.Option(
        "--process-timing",
        help="Timing shown for several processes: max or avg over processes, per iteration.",
        rich_help_panel=_CLUSTER,
    ),
]


def run_options(
    platform: str,
    devices: int | None,
    mode: str,
    format: str,
    no_color: bool,
    quiet: bool,
    formats: tuple[str, ...] = FORMATS,
    *,
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    distributed: str = "off",
    join_timeout: int = 300,
    coordinator_bind: str | None = None,
    all_processes: bool = False,
    process_timing: str = "max",
    compile_cache: bool = False,
    save: str | None = None,
) -> RunOptions:
    """Validate the shared options into a RunOptions."""
    return RunOptions(
        platform=parse_choice(platform, "--platform", PLATFORMS),
        devices=devices,
        mode=parse_choice(mode, "--mode", MODES),
        format=parse_choice(format, "--format", formats),
        color=not no_color,
        quiet=quiet,
        distributed=parse_distributed(
            coordinator, num_processes, process_id, distributed, join_timeout, coordinator_bind
        ),
        all_processes=all_processes,
        process_timing=parse_choice(process_timing, "--process-timing", PROCESS_TIMINGS),
        compile_cache=compile_cache,
        save=parse_save(save),
    )
