"""The Typer app. Commands live in `shardcli/commands/`; nothing here imports JAX."""

from __future__ import annotations

import contextlib
import gc
import inspect
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from shardcli import __version__
from shardcli.commands import calibrate as calibrate_cmd
from shardcli.commands import collective as collective_cmd
from shardcli.commands import compare as compare_cmd
from shardcli.commands import einsum as einsum_cmd
from shardcli.commands import inspect as inspect_cmd
from shardcli.commands import launch as launch_cmd
from shardcli.commands import matmul as matmul_cmd
from shardcli.commands import mesh as mesh_cmd
from shardcli.commands import model as model_cmd
from shardcli.commands import pipeline as pipeline_cmd
from shardcli.commands import plan as plan_cmd
from shardcli.commands import recipe as recipe_cmd
from shardcli.commands import reshard as reshard_cmd
from shardcli.commands import run as run_cmd
from shardcli.commands import shard as shard_cmd
from shardcli.errors import TRACEBACK_ENV, ExitCode, ShardcliError, Terminated
from shardcli.runtime.line_ends import unpad_help_screens
from shardcli.runtime.stdout import (
    hand_back_stdout,
    own_process_streams,
    quiet_when_reader_leaves,
    reopen_closed_streams,
    write_failure,
)


def _save_output(prog: str, code: int) -> int:
    """--save: write what the command printed once it has finished (whatever its verdict)."""
    render_console = sys.modules.get("shardcli.render.console")
    if render_console is None:
        return code
    try:
        render_console.save_recording()
    except OSError as error:
        failed = _fail(
            prog, f"could not write the --save file: {error.strerror or error}", ExitCode.BAD_INPUT
        )
        return code or failed  # a wrong result stays exit 1
    return code


def _stdout_written(prog: str, code: int) -> int:
    """A stdout that could not be written (`>/dev/full`): one line, exit 2 (the place the output was
    sent cannot take it, as for --save), unless the run already failed."""
    failed = write_failure()
    if failed is None:
        return code
    failed_code = _fail(prog, f"could not write the output to stdout: {failed}", ExitCode.BAD_INPUT)
    return code or failed_code


def _joined_a_cluster() -> bool:
    """Whether this process joined a multi-process run (without importing JAX if it is not loaded)."""
    distributed = sys.modules.get("jax._src.distributed")
    return distributed is not None and distributed.global_state.client is not None


LAUNCHER_PID_ENV = "SHARDCLI_LAUNCHER_PID"


def _die_with_launcher() -> None:
    """A child of `shardcli launch` gets SIGKILL when the launcher dies, even by SIGKILL (Linux).

    The launcher stops its children itself whenever it can; this covers the case where it cannot.
    """
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    if launcher is None or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != launcher:  # the launcher died before the line above
        os._exit(ExitCode.INTERRUPTED)


def _fail(prog: str, message: str, code: int) -> int:
    first, *_ = message.strip().splitlines() or [""]
    sys.stderr.write(f"{prog}: error: {first}\n")
    return code


def _internal(prog: str, error: BaseException) -> int:
    """A surprise: one line naming it, exit 3; the traceback where SHARDCLI_TRACEBACK asks for it."""
    if os.environ.get(TRACEBACK_ENV):
        traceback.print_exception(error)
    return _fail(
        prog,
        f"internal error: {type(error).__name__}: {error} (set {TRACEBACK_ENV}=1 for the traceback)",
        ExitCode.INTERNAL,
    )


def _no_room(error: OSError) -> str | None:
    """The one line for a disk that takes no more (full, over quota, past `ulimit -f`), or None.

    Python's tempfile says it as "No usable temporary directory found" (ENOENT) when no candidate
    folder (TMPDIR, /tmp, /var/tmp, ...) takes its probe file.
    """
    import errno

    if "No usable temporary directory" in str(error):
        return (
            "no folder for temporary files can be written (TMPDIR, /tmp, /var/tmp: full or read-only); "
            "free some space, or set TMPDIR to a folder with room"
        )
    if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        where = f" {error.filename}" if error.filename else " a file"
        return f"cannot write{where} ({error.strerror}); free some space, or set TMPDIR to a folder with room"
    return None


def _leave_cluster(prog: str, code: int) -> int:
    """End a multi-process run's process; returns only when JAX's own exit may follow.

    A failing process leaves at once with its code (os._exit): JAX's exit handler would wait at
    a shutdown barrier for every process, and the launcher (or JAX's heartbeat) would never learn
    that this one failed. A process that succeeded leaves at once too when process 0 failed (JAX
    would abort it at that barrier once process 0 is gone). Ctrl-C cuts the waiting short.
    """
    from shardcli.runtime.cluster import leave_cluster

    try:
        leave_now = leave_cluster(int(code))
    except KeyboardInterrupt:
        if code == ExitCode.OK:
            code = _fail(prog, "interrupted", ExitCode.INTERRUPTED)
        leave_now = True
    if code != ExitCode.OK or leave_now:
        for stream in (sys.stdout, sys.stderr):
            # a closed pipe, or a second Ctrl-C: the code stands
            with contextlib.suppress(OSError, ValueError, KeyboardInterrupt):
                stream.flush()
        os._exit(int(code))
    return code


class ShardcliGroup(TyperGroup):
    """Runs the app and turns every failure into one line on stderr with a named exit code."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        prog = prog_name or "shardcli"
        _die_with_launcher()
        unpad_help_screens()
        try:
            rv = super().main(
                args,
                prog_name,
                complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )
            code = rv if isinstance(rv, int) else ExitCode.OK
            if code == ExitCode.INTERRUPTED:  # click turned Ctrl-C into this code without a word
                code = _fail(prog, "interrupted", ExitCode.INTERRUPTED)
        except ShardcliError as e:
            if getattr(e, "user_traceback", None):  # an error in the user's own file: their frames
                sys.stderr.write(e.user_traceback)  # type: ignore[attr-defined]
            code = _fail(prog, str(e), e.exit_code)
        except typer.TyperException as e:  # click usage errors: unknown option, bad int, ...
            if type(e).__name__ == "NoArgsIsHelpError":
                sys.stdout.write(e.format_message() + "\n")
                code = ExitCode.OK
            else:
                ctx = getattr(e, "ctx", None)
                where = ctx.command_path if ctx is not None else prog
                code = _fail(where, e.format_message(), ExitCode.BAD_INPUT)
        except (typer.Abort, KeyboardInterrupt):
            code = _fail(prog, "interrupted", ExitCode.INTERRUPTED)
        except MemoryError as e:  # past the size checks: a limit they cannot see (ulimit -v, a cgroup)
            said = f" ({e})" if str(e) else ""
            code = _fail(
                prog,
                f"this process ran out of memory{said}; use a smaller size, or run where more memory is free",
                ExitCode.BAD_INPUT,
            )
        except Terminated as e:
            import signal

            code = _fail(prog, f"terminated ({signal.Signals(e.signum).name})", e.exit_code)
        except OSError as e:
            full = _no_room(e)
            code = _fail(prog, full, ExitCode.BAD_INPUT) if full else _internal(prog, e)
        except Exception as e:  # noqa: BLE001 - the one place a surprise is reported
            code = _internal(prog, e)
        if "jax" in sys.modules:  # 64-bit dtypes a run turned on are off again for what follows
            from shardcli.runtime.devices import restore_x64

            restore_x64()
        code = _save_output(prog, code)
        code = _stdout_written(prog, code)
        if _joined_a_cluster():
            code = _leave_cluster(prog, code)
        if standalone_mode:
            sys.exit(int(code))
        return int(code)


app = typer.Typer(
    cls=ShardcliGroup,
    name="shardcli",
    help="A command-line sharding playground for JAX: meshes, shardings, collectives and sharded "
    "matmuls, verified against NumPy.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"shardcli {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """A command-line sharding playground for JAX: meshes, shardings, collectives and sharded
    matmuls, verified against NumPy."""


def _summary(command: Any) -> str:
    """The first paragraph of a command's docstring on one line, for `shardcli --help`'s list.

    typer's list keeps a docstring's line breaks (a summary wrapped at 100 columns in the source
    came out as ragged lines); the command's own --help already joins them.
    """
    return " ".join(inspect.cleandoc(command.__doc__ or "").split("\n\n")[0].split())


def _help(command: Any) -> str:
    """A command's docstring with each paragraph on one line, for its own --help.

    typer joins the lines of the first paragraph only; the others kept the docstring's line breaks
    and came out as ragged lines (a 100-column source line wrapped at 80 columns, then broken).
    """
    paragraphs = inspect.cleandoc(command.__doc__ or "").split("\n\n")
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in paragraphs)


for _name, _command, _settings in [
    ("mesh", mesh_cmd.mesh, None),
    ("shard", shard_cmd.shard, None),
    ("collective", collective_cmd.collective, None),
    ("matmul", matmul_cmd.matmul, None),
    ("einsum", einsum_cmd.einsum, None),
    ("reshard", reshard_cmd.reshard, None),
    ("inspect", inspect_cmd.inspect, None),
    ("run", run_cmd.run, None),
    ("plan", plan_cmd.plan, None),
    ("calibrate", calibrate_cmd.calibrate, None),
    ("recipe", recipe_cmd.recipe, None),
    ("pipeline", pipeline_cmd.pipeline, None),
    ("compare", compare_cmd.compare, None),
    # Everything from the command's first word on belongs to the command each process runs.
    ("launch", launch_cmd.launch, {"allow_interspersed_args": False}),
]:
    app.command(_name, help=_help(_command), short_help=_summary(_command), context_settings=_settings)(
        _command
    )
app.add_typer(model_cmd.app, name="model")


def _leave_abandoned_compiles(code: object) -> None:
    """A compile left running by Ctrl-C or SIGTERM (`plan`'s compile thread, inside libtpu): the
    process leaves at once with its code, its output flushed. Python's exit would wait on, or tear
    down the compiler's state under, a thread still compiling (a plan once hung there)."""
    plan_compile = sys.modules.get("shardcli.plan.compiles")
    if plan_compile is None or not plan_compile.abandoned_compiles():
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    from posix import _exit  # not os._exit: the user's code being traced has it stood in for (guarded)

    _exit(code if isinstance(code, int) else ExitCode.OK if code is None else ExitCode.INTERNAL)


def main() -> None:
    """Console-script entry point (and `python -m shardcli`)."""
    reopen_closed_streams()
    own_process_streams()
    sys.stdout = quiet_when_reader_leaves(sys.stdout)
    try:
        app(prog_name="shardcli")
    except SystemExit as done:
        _leave_abandoned_compiles(done.code)
        raise
    finally:
        hand_back_stdout()
        # The process ends here. Python's last garbage collection would walk every object JAX made
        # (0.25-0.3 s of a 2.4 s run on the development machine) to free memory the OS takes back
        # anyway; frozen objects are skipped. atexit handlers (JAX's distributed shutdown) still
        # run, and nothing of shardcli's is left unflushed for a collection to close.
        gc.freeze()
