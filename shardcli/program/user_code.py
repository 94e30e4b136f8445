"""Loading the user's own code (`FILE.py:NAME`, `package.module:NAME`) and reporting its errors.

`shardcli inspect` imports and runs the named file as `python FILE.py` would (its folder first on
sys.path). An error raised inside the user's file is theirs: it is reported with their own
traceback, cut to the frames in their files and the library frame it failed in, then one line,
exit 2 (`UserCodeError`).

While the user's code runs (`guarded`) it cannot take shardcli's output or exit: what it prints
goes to stderr (so `--format json` stays one JSON document), and `sys.exit` or `os._exit` in it
is reported as one line naming the file and line, exit 2.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from shardcli.errors import ShardcliError
from shardcli.specs.files import is_own_file


class UserCodeError(ShardcliError):
    """An error inside the user's own code: their traceback (their frames only), then one line."""

    def __init__(self, message: str, user_traceback: str) -> None:
        super().__init__(message)
        self.user_traceback = user_traceback


@dataclass(frozen=True)
class UserObject:
    """What `FILE.py:NAME` named: the object, and the files its traceback frames may come from."""

    target: str
    value: Any
    roots: tuple[str, ...]  # the user's file, or the package's folder


def _split(target: str, flag: str, what: str) -> tuple[str, str]:
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise ShardcliError(
            f"{flag} {target!r} is not FILE.py:{what} or package.module:{what}; "
            f"e.g. model.py:train_step or mypkg.model:train_step"
        )
    return where, name


def load(target: str, flag: str = "inspect", what: str = "FUNCTION", *, fresh: bool = False) -> UserObject:
    """Import the file or module of `target` and return the object it names.

    Args:
        fresh: import a file anew even where this process imported it before (what it builds at
            import, such as a mesh, then comes from this run's devices).

    Raises:
        ShardcliError: the file, module or name is missing (one line).
        UserCodeError: importing the user's file raised.
    """
    where, name = _split(target, flag, what)
    if where.endswith(".py") or os.sep in where or "/" in where or os.path.isfile(where):
        path = os.path.abspath(where)
        if not os.path.isfile(path):
            raise ShardcliError(f"{flag} {target!r}: no file {where}; give the path of a Python file")
        roots: tuple[str, ...] = (path,)
        module_name = f"_shardcli_user_{os.path.splitext(os.path.basename(path))[0]}"
        module = None if fresh else sys.modules.get(module_name)
        if module is None or getattr(module, "__file__", None) != path:
            folder = os.path.dirname(path)
            if folder not in sys.path:
                sys.path.insert(0, folder)
            # Python's source loader whatever the file is named (`python prog.txt` runs it too);
            # by the name alone importlib would find no loader for a file not named .py.
            loader = importlib.machinery.SourceFileLoader(module_name, path)
            spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
            if spec is None or spec.loader is None:
                raise ShardcliError(f"{flag} {target!r}: Python cannot import {where}; give a .py file")
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            try:
                with guarded(f"importing {where}"):
                    spec.loader.exec_module(module)
            except ShardcliError:
                sys.modules.pop(module_name, None)
                raise
            except Exception as error:
                sys.modules.pop(module_name, None)
                raise user_error(error, roots, f"importing {where} raised") from None
            except BaseException:
                sys.modules.pop(module_name, None)
                raise
    else:
        if importlib.util.find_spec(where.split(".")[0]) is None:
            raise ShardcliError(f"{flag} {target!r}: no module {where.split('.')[0]!r} on the Python path")
        try:
            with guarded(f"importing {where}"):
                module = importlib.import_module(where)
        except ModuleNotFoundError as error:
            raise ShardcliError(f"{flag} {target!r}: {error}") from None
        except ShardcliError:
            raise
        except Exception as error:
            raise user_error(error, (_package_root(where),), f"importing {where} raised") from None
        roots = (_package_root(where),)
    if not hasattr(module, name):
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        known = f"; it defines {', '.join(public[:12])}" if public else ""
        raise ShardcliError(f"{flag} {target!r}: {where} has no {name!r}{known}")
    return UserObject(target=target, value=getattr(module, name), roots=roots)


def _package_root(module: str) -> str:
    """The folder of the package's files; for a module built into Python (`builtins`, whose origin
    is "built-in"), a root no file is under (not the current folder, whose files are not theirs)."""
    spec = importlib.util.find_spec(module.split(".")[0])
    origin = spec.origin if spec is not None and spec.origin else None
    if origin is None or not os.path.isabs(origin):
        return f"<{module}: no files>"
    return os.path.dirname(os.path.abspath(origin))


def is_users(filename: str, roots: tuple[str, ...]) -> bool:
    path = os.path.abspath(filename)
    return any(path == root or path.startswith(root + os.sep) for root in roots)


def raised_in(error: BaseException, roots: tuple[str, ...]) -> bool:
    """Whether any frame of the error's traceback (or its causes') is in the user's files."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if any(is_users(f.filename, roots) for f in traceback.extract_tb(error.__traceback__)):
            return True
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return False


def user_error(error: BaseException, roots: tuple[str, ...], what: str) -> UserCodeError:
    """The user's traceback, cut to their frames and the library frame it failed in, and one line
    saying what raised."""
    every = traceback.extract_tb(error.__traceback__)
    frames = [f for f in every if is_users(f.filename, roots)]
    head = "Traceback (most recent call last; your frames only):\n"
    if frames and every and not is_users(every[-1].filename, roots):
        frames.append(every[-1])  # where it failed: the library call the user's line made
        head = "Traceback (most recent call last; your frames and the library frame it failed in):\n"
    lines = [head, *traceback.format_list(frames)]
    lines += traceback.format_exception_only(type(error), error)
    first = (str(error).strip().splitlines() or [""])[0]
    return UserCodeError(f"{what} {type(error).__name__}: {first}".rstrip(": "), "".join(lines))


def call_user(
    fn: Callable[..., Any], roots: tuple[str, ...], what: str, *args: Any, doing: str = "running your code"
) -> Any:
    """Call the user's function (`guarded`); an error raised in their files is a UserCodeError, and so
    is one raised in a callback of theirs while the program ran (`callbacks_watched`)."""
    with callbacks_watched(roots, what, doing) as failed:
        try:
            with guarded(doing):
                result = fn(*args)
        except ShardcliError:
            raise
        except Exception as error:
            if failed:
                raise callback_error(failed[0], roots, what, doing) from None
            if type(error).__name__ == "JaxRuntimeError" and _CALLBACK_RUNTIME_ERROR in str(error):
                # JAX's own check of a callback's result (its shape, its dtype) failed: not logged
                # with the exception, so only its text is left; its last line names what was wrong.
                _forget_failed_effects()
                lines = [line.strip() for line in str(error).splitlines() if line.strip()]
                raise ShardcliError(f"{what.removesuffix(':')} (in a callback): {lines[-1]}") from None
            if raised_in(error, roots):
                raise user_error(error, roots, what) from None
            raise
        if failed:
            raise callback_error(failed[0], roots, what, doing)
        return result


# What JAX's runtime error says of a callback that failed (its text then ends in the callback's error).
_CALLBACK_RUNTIME_ERROR = "CpuCallback error"

# The loggers JAX reports a failed callback on (`logger.exception("jax.debug.callback failed")`, with
# the exception itself), before the runtime turns it into an INTERNAL error of its own.
_CALLBACK_LOGGERS = ("jax._src.debugging", "jax._src.callback")


@dataclass(frozen=True)
class CallbackFailure:
    """A callback of the user's program (`jax.debug.callback`, `jax.debug.print`, `io_callback`,
    `pure_callback`) that raised, or called sys.exit, while the program ran."""

    kind: str  # jax.debug.callback, jax.io_callback, jax.pure_callback
    error: BaseException


# Callbacks whose result the program waits for: on a mesh of several devices, the others wait in
# their next collective for the one whose callback failed, until XLA aborts the process (40 s on CPU).
_RESULT_CALLBACKS = ("jax.io_callback", "jax.pure_callback")


class _CallbackFailures(logging.Filter):
    def __init__(self, roots: tuple[str, ...], what: str, doing: str) -> None:
        super().__init__()
        self.failures: list[CallbackFailure] = []
        self._context = roots, what, doing

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is None:
            return True
        kind = record.getMessage().removesuffix(" failed").strip() or "a callback"
        self.failures.append(CallbackFailure(kind, error))
        if kind in _RESULT_CALLBACKS:
            _end_now_if_own_process(callback_error(self.failures[0], *self._context))
        return False  # shown once, as the user's error, rather than as JAX's log of it


def _end_now_if_own_process(error: ShardcliError) -> None:
    """In the console script's own process: report the user's error and end the process at once,
    from the callback's thread (the main thread may never get it back; see `_RESULT_CALLBACKS`).
    In a process of another's (a notebook, tests) the error is left to `call_user`."""
    from shardcli.runtime.stdout import owns_process_streams

    if not owns_process_streams():
        return
    from posix import _exit  # not os._exit: `guarded` stands in for it while the user's code runs

    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.write(getattr(error, "user_traceback", "") + f"shardcli: error: {error}\n")
        sys.stderr.flush()
    _exit(error.exit_code)


@contextlib.contextmanager
def callbacks_watched(
    roots: tuple[str, ...] = (), what: str = "", doing: str = ""
) -> Iterator[list[CallbackFailure]]:
    """Note each callback of the user's that fails while the program runs (in JAX's runtime threads,
    where the exception itself never reaches shardcli: the call fails later with `INTERNAL:
    CpuCallback error`), and keep JAX's own traceback of it off stderr. ROOTS, WHAT and DOING are
    `call_user`'s, for the message of a callback whose failure ends the process at once."""
    watcher = _CallbackFailures(roots, what, doing)
    loggers = [logging.getLogger(name) for name in _CALLBACK_LOGGERS]
    for logger in loggers:
        logger.addFilter(watcher)
    try:
        yield watcher.failures
    finally:
        for logger in loggers:
            logger.removeFilter(watcher)


def callback_error(failure: CallbackFailure, roots: tuple[str, ...], what: str, doing: str) -> ShardcliError:
    """The user's error for a failed callback: their frames and one line (UserCodeError), or one line
    for a sys.exit or os._exit in it. The failed call's effects are forgotten, so JAX does not raise
    it again (twice, with tracebacks) as the process exits."""
    _forget_failed_effects()
    error = failure.error
    if isinstance(error, SystemExit | _UserExit):
        call = "sys.exit" if isinstance(error, SystemExit) else "os._exit"
        if isinstance(error, _UserExit):
            filename, lineno = error.filename, error.lineno
        else:
            filename, lineno = _exit_site(error)
        return ShardcliError(
            f"{filename}:{lineno} calls {call}({error.code!r}) in a {failure.kind} while shardcli was "
            f"{doing}: a callback cannot end the run or set its exit status; raise an exception in it instead"
        )
    return user_error(error, roots, f"{what.removesuffix(':')} (in its {failure.kind}):")


def _forget_failed_effects() -> None:
    """Drop JAX's tokens of the effects the failed call left (each holds the callback's error): JAX
    waits on them at exit, and would print the error twice more there."""
    with contextlib.suppress(Exception):
        from jax._src import dispatch

        dispatch.runtime_tokens.clear()


class _UserExit(BaseException):
    """`os._exit` called by the user's code while shardcli runs it (raised by the stand-in)."""

    def __init__(self, code: Any, filename: str, lineno: int) -> None:
        super().__init__(code)
        self.code = code
        self.filename = filename
        self.lineno = lineno


def _exit_site(error: BaseException) -> tuple[str, int]:
    """The innermost frame outside shardcli and the standard library's exit machinery."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not is_own_file(f.filename)]
    frame = frames[-1] if frames else traceback.extract_tb(error.__traceback__)[-1]
    return frame.filename, frame.lineno or 0


@contextlib.contextmanager
def guarded(what: str) -> Iterator[None]:
    """Run the user's code (importing it, calling it, tracing it) without letting it take shardcli's
    stdout or exit status: `print` goes to stderr; `sys.exit` and `os._exit` become one line.

    Args:
        what: what shardcli was doing, for the message (`importing model.py`).

    Raises:
        ShardcliError: the user's code called sys.exit or os._exit (file and line named).
    """
    real_exit = os._exit

    def stand_in(code: int) -> None:
        caller = sys._getframe(1)
        raise _UserExit(code, caller.f_code.co_filename, caller.f_lineno)

    os._exit = stand_in  # type: ignore[assignment]
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    except SystemExit as error:
        filename, lineno = _exit_site(error)
        raise ShardcliError(_exit_text(filename, lineno, f"sys.exit({error.code!r})", what)) from None
    except _UserExit as error:
        raise ShardcliError(
            _exit_text(error.filename, error.lineno, f"os._exit({error.code!r})", what)
        ) from None
    finally:
        os._exit = real_exit


def _exit_text(filename: str, lineno: int, call: str, what: str) -> str:
    return (
        f"{filename}:{lineno} calls {call} while shardcli was {what}: shardcli keeps its own exit "
        f'status and output; put the call under `if __name__ == "__main__":`'
    )
