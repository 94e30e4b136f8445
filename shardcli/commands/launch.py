"""`shardcli launch`."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer

from shardcli.commands.options import takes_process_options

if TYPE_CHECKING:
    from shardcli.runtime.launcher import LaunchResult


def launch(
    ctx: typer.Context,
    command: Annotated[
        list[str] | None,
        typer.Argument(help="The shardcli command every process runs, after --.", show_default=False),
    ] = None,
    processes: Annotated[int, typer.Option("--processes", "-n", help="How many processes to start.")] = 2,
    devices_per_process: Annotated[
        int | None,
        typer.Option(
            "--devices-per-process",
            help="Faked CPU devices in each process. \\[default: the mesh size / -n]",
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option("--timeout", help="Seconds the whole run may take (0: no limit); then exit 124."),
    ] = 600.0,
    tee: Annotated[
        bool,
        typer.Option("--tee", help="Stream every process's output, each line prefixed with [K]."),
    ] = False,
    log_dir: Annotated[
        str | None,
        typer.Option("--log-dir", help="Where process-K.log files go. \\[default: a new temporary folder]"),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", help="Coordinator port on 127.0.0.1. \\[default: a free one]"),
    ] = None,
) -> None:
    """Run a shardcli command as N local processes joined by jax.distributed (each with its own
    faked CPU devices): a multi-host mesh on one machine. Process 0's output is streamed; every
    process's output is in the log folder. If one process fails, the others are stopped and the run
    exits with its code.

    Example: shardcli launch -n 2 -- collective psum --mesh 2x4 --axes data,model
    """
    from shardcli.runtime.launcher import LaunchSpec, run_launch, validate_launch

    spec = validate_launch(
        LaunchSpec(
            processes=processes,
            command=tuple(command or ()),
            devices_per_process=devices_per_process,
            timeout_s=timeout or None,
            tee=tee,
            log_dir=log_dir,
            port=port,
        ),
        launchable_commands(app_commands(ctx)),
    )

    def announce(coordinator: str, logs: str, pids: tuple[int, ...]) -> None:
        kept = "" if log_dir else " (kept if a process fails)"
        # Two lines, each within 80 columns for a few processes and a temporary log folder.
        sys.stderr.write(
            f"shardcli launch: {len(pids)} process{'es' * (len(pids) != 1)} (pids "
            f"{', '.join(map(str, pids))}), coordinator {coordinator}\n  logs in {logs}{kept}\n"
        )
        sys.stderr.flush()

    result = run_launch(spec, on_start=announce)
    sys.stderr.write(launch_summary(result, timeout))
    raise typer.Exit(result.exit_code)


def app_commands(ctx: typer.Context) -> dict[str, Any]:
    """Each command of the app running `launch`, by name: its function (typer's wrapper unwrapped)."""
    group = ctx.find_root().command
    commands = getattr(group, "commands", {})
    return {name: getattr(c.callback, "__wrapped__", c.callback) for name, c in commands.items()}


def launch_summary(result: LaunchResult, timeout: float) -> str:
    """What stderr says after the run: nothing when all went well, else who failed and how."""
    if result.reason == "ok":
        return ""
    if result.reason == "timeout":
        running = [e.process_id for e in result.exits if e.stopped]
        return (
            f"shardcli launch: error: timed out after --timeout {timeout:g} s; stopped processes "
            f"{', '.join(map(str, running)) or 'none'} (logs in {result.log_dir})\n"
        )
    if result.reason == "interrupted":
        return f"shardcli launch: interrupted; stopped every process (logs in {result.log_dir})\n"
    assert result.first_failure is not None
    failed = result.exits[result.first_failure]
    codes = {e.returncode for e in result.exits}
    if len(codes) == 1 and not any(e.stopped for e in result.exits):
        # Every process reached the same verdict (a wrong result, bad input): process 0 said why.
        return ""
    lines = [
        f"shardcli launch: process {failed.process_id} {failed.how} (the first to fail); "
        f"the run exits with {result.exit_code}"
    ]
    for other in result.exits:
        if other.process_id != failed.process_id:
            lines.append(f"  process {other.process_id} {other.how}")
    lines.append(f"last lines of {failed.log}:")
    lines += [f"  | {line}" for line in failed.tail] or ["  | (no output)"]
    return "\n".join(lines) + "\n"


def launchable_commands(commands: Mapping[str, Callable[..., Any] | None]) -> tuple[str, ...]:
    """The commands launch can run, in the app's order: those given the multi-process options.

    `options.with_run_options(processes=True)` is the one place that decides. `commands` maps each
    of the app's command names to its function; the caller (`shardcli launch`, which runs inside the
    app) passes them.
    """
    return tuple(name for name, fn in commands.items() if fn is not None and takes_process_options(fn))
