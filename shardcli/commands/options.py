"""Typer option declarations shared by every command that runs on devices."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from shardcli.specs.runs import RunOptions

# specs.runs.FORMATS, the --format choices most commands take, as text: `--help` does not import specs.
FORMATS: tuple[str, ...] = ("table", "json")

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
Init = Annotated[
    str | None,
    typer.Option(
        "--init", help="How the input is filled: arange, ones, zeros, random or normal. \\[default: arange]"
    ),
]
# matmul and einsum: several operands, filled by one --init (arange numbers them in one sequence)
OperandInit = Annotated[
    str,
    typer.Option(
        "--init",
        help="How the operands are filled: arange (A from 0, B after A, as the tutorials' arange(16) and "
        "arange(16, 32)), ones, zeros, random (uniform) or normal.",
    ),
]
Values = Annotated[
    str | None,
    typer.Option(
        "--values",
        help="The input's numbers, row-major: 3,1,4,1 (1-D), or with --shape 2x2 a 2x2 array. "
        "Not with --init.",
    ),
]
ValuesFile = Annotated[
    str | None,
    typer.Option(
        "--values-file", help="The input from a .npy file (numpy.save; up to 16 MiB). Not with --init."
    ),
]
ShowValues = Annotated[
    bool | None,
    typer.Option(
        "--show-values/--no-show-values",
        help="Print the global result and each device's block. \\[default: on for up to 256 elements]",
    ),
]
Hardware = Annotated[
    str | None,
    typer.Option(
        "--hardware",
        metavar="FILE",
        help="A hardware profile from shardcli calibrate: the estimate uses its measured figures (its GEMM "
        "curve at each GEMM's size, memory stream, links) instead of the built-in table.",
    ),
]
Network = Annotated[
    str | None,
    typer.Option(
        "--network",
        metavar="GBPS",
        help="With a GPU --target of several hosts: one GPU's share of the network between hosts, Gb/s "
        "one way, in place of its host type's NICs over its GPUs (400 on a DGX H100's 8 x 400 Gb/s; "
        "gpu-h100-a3mega names Google Cloud's a3-megagpu-8g).",
    ),
]
Slices = Annotated[
    str | None,
    typer.Option(
        "--slices",
        metavar="N",
        help="With a TPU --target: N slices of its topology joined over the data-center network "
        "(MaxText's num_slices), compiled as one program; the outer mesh axes (data, then fsdp) span the "
        "slices, and an axis across slices moves at each chip's share of its host's NICs. \\[default: 1]",
    ),
]
Format = Annotated[str, typer.Option("--format", "-f", help="table (for people) or json (for scripts).")]
NoColor = Annotated[bool, typer.Option("--no-color", help="Plain text; NO_COLOR is honoured too.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Only the results: no header, no pictures.")]
Verbose = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        help="The header's full provenance: allocator, how bandwidth was measured, buffer policy, "
        "tolerance (always in JSON).",
    ),
]
Wide = Annotated[
    bool,
    typer.Option(
        "--wide",
        help="Every table column at its natural width, however wide the terminal: lines may be wider "
        "than it. \\[default: the columns that fit; a line under each table names the others]",
    ),
]

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


def using_hardware(path: str | None, target: str | None = None) -> contextlib.AbstractContextManager[None]:
    """--hardware FILE loaded and made the run's profile (`hardware.profile.using_profile`); without
    it the built-in table, as before. With --target TEXT the profile must describe its chips.

    Raises:
        ShardcliError: the file is no readable profile, or one of another device kind (one line).
    """
    if path is None:
        return contextlib.nullcontext()
    from shardcli.hardware.profile import check_target, load_profile, using_profile

    profile = load_profile(path)
    if target is not None:
        from shardcli.hardware.targets import parse_target

        check_target(profile, parse_target(target).generation.hardware, target)
    return using_profile(profile)


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
    verbose: bool = False,
    wide: bool = False,
) -> RunOptions:
    """Validate the shared options into a RunOptions."""
    from shardcli.specs.runs import (
        MODES,
        PLATFORMS,
        PROCESS_TIMINGS,
        Format,
        Mode,
        Platform,
        ProcessTiming,
        RunOptions,
        parse_choice,
        parse_distributed,
        parse_save,
    )

    return RunOptions(
        platform=Platform(parse_choice(platform, "--platform", PLATFORMS)),
        devices=devices,
        mode=Mode(parse_choice(mode, "--mode", MODES)),
        format=Format(parse_choice(format, "--format", formats)),
        color=not no_color,
        quiet=quiet,
        distributed=parse_distributed(
            coordinator, num_processes, process_id, distributed, join_timeout, coordinator_bind
        ),
        all_processes=all_processes,
        process_timing=ProcessTiming(parse_choice(process_timing, "--process-timing", PROCESS_TIMINGS)),
        compile_cache=compile_cache,
        save=parse_save(save),
        verbose=verbose,
        wide=wide,
    )


# The shared parameters in the order --help lists them: (name, Typer annotation, default).
_RUNTIME = (("platform", Platform, "auto"), ("devices", Devices, None))
_OUTPUT = (
    ("format", Format, "table"),
    ("no_color", NoColor, False),
    ("quiet", Quiet, False),
    ("verbose", Verbose, False),
    ("wide", Wide, False),
    ("save", Save, None),
)
_PROCESSES = (
    ("coordinator", Coordinator, None),
    ("num_processes", NumProcesses, None),
    ("process_id", ProcessId, None),
    ("distributed", Distributed, "off"),
    ("join_timeout", JoinTimeout, 300),
    ("coordinator_bind", CoordinatorBind, None),
    ("all_processes", AllProcesses, False),
)


# The commands given the multi-process options: what `shardcli launch` may run (shardcli.runtime.launcher).
_MULTI_PROCESS_COMMANDS: set[Callable[..., Any]] = set()


def takes_process_options(command: Callable[..., Any]) -> bool:
    """Whether `with_run_options` gave `command` the multi-process options (--coordinator, ...)."""
    return command in _MULTI_PROCESS_COMMANDS


def _format_option(formats: tuple[str, ...]) -> Any:
    """--format with its choices in the help: `table, json or csv.` (the two-format help says more)."""
    if formats == FORMATS:
        return Format
    listed = f"{', '.join(formats[:-1])} or {formats[-1]}."
    return Annotated[str, typer.Option("--format", "-f", help=listed)]


def _shared_parameters(
    formats: tuple[str, ...],
    mode: bool,
    devices: bool,
    compile_cache: bool,
    processes: bool,
    process_timing: bool,
) -> list[inspect.Parameter]:
    chosen: list[tuple[str, Any, Any]] = list(_RUNTIME) if devices else []
    if mode:
        chosen.append(("mode", Mode, "auto"))
    chosen += [("format", _format_option(formats), "table"), *_OUTPUT[1:]]
    if compile_cache:
        chosen.append(("no_compile_cache", NoCompileCache, False))
    if processes:
        chosen += _PROCESSES
    if process_timing:
        chosen.append(("process_timing", ProcessTiming, "max"))
    keyword = inspect.Parameter.KEYWORD_ONLY
    return [
        inspect.Parameter(name, keyword, default=default, annotation=hint) for name, hint, default in chosen
    ]


def _own_parameters(command: Callable[..., Any]) -> list[inspect.Parameter]:
    """The command's parameters but `options`, their annotations evaluated (`from __future__ import
    annotations` leaves strings, which Typer would otherwise resolve against this module)."""
    params = [p for p in inspect.signature(command).parameters.values() if p.name != "options"]
    return [
        p.replace(annotation=eval(p.annotation, command.__globals__))  # noqa: S307 - what inspect does
        if isinstance(p.annotation, str)
        else p
        for p in params
    ]


def with_run_options(
    formats: tuple[str, ...] = FORMATS,
    *,
    mode: bool = True,
    devices: bool = True,
    compile_cache: bool = True,
    processes: bool = True,
    process_timing: bool | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the shared run options, declared once here, and call it with a `RunOptions`.

    The decorated command declares its own flags and a keyword-only `options: RunOptions`; Typer
    sees its flags followed by --platform, --devices, --mode, --format, --no-color, --quiet,
    --verbose, --wide, --save, --no-compile-cache and the multi-process panel. They are validated
    (as `run_options` does) before the command runs.

    Example:
        @with_run_options(formats=("table", "json", "csv"), mode=False)
        def einsum(subscripts: Subscripts, *, options: RunOptions) -> None: ...

    Args:
        formats: the --format choices; its help lists them.
        mode: offer --mode (else every run uses auto axes).
        devices: offer --platform and --devices (a command that starts no devices leaves them out).
        compile_cache: offer --no-compile-cache (else the persistent compile cache stays off).
        processes: offer the multi-process options (--coordinator, --num-processes, ...); these
            commands are the ones `shardcli launch` runs (`takes_process_options`).
        process_timing: offer --process-timing, for commands that time; default: with `processes`.

    Returns:
        The decorator.
    """
    shared = _shared_parameters(
        formats,
        mode,
        devices,
        compile_cache,
        processes,
        processes if process_timing is None else process_timing,
    )
    names = [p.name for p in shared]

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        parameters = [*_own_parameters(command), *shared]

        @functools.wraps(command)
        def run(**flags: Any) -> Any:
            given = {name: flags.pop(name) for name in names}
            options = run_options(
                given.get("platform", "auto"),
                given.get("devices"),
                given.get("mode", "auto"),
                given["format"],
                given["no_color"],
                given["quiet"],
                formats,
                coordinator=given.get("coordinator"),
                num_processes=given.get("num_processes"),
                process_id=given.get("process_id"),
                distributed=given.get("distributed", "off"),
                join_timeout=given.get("join_timeout", 300),
                coordinator_bind=given.get("coordinator_bind"),
                all_processes=given.get("all_processes", False),
                process_timing=given.get("process_timing", "max"),
                compile_cache=not given.get("no_compile_cache", True),
                save=given["save"],
                verbose=given["verbose"],
                wide=given["wide"],
            )
            if options.format != "table":
                from shardcli.runtime.stdout import route_native_stdout_to_stderr

                # A document owns stdout: whatever else writes to descriptor 1 goes to stderr.
                route_native_stdout_to_stderr(document=True)
            return command(**flags, options=options)

        # Typer reads the parameters from the signature and their types from __annotations__.
        run.__signature__ = inspect.Signature(parameters, return_annotation=None)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
        if processes:
            _MULTI_PROCESS_COMMANDS.add(run)
        return run

    return decorate
