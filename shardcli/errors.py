"""The project's one exception type and the exit codes, named in one place."""

from __future__ import annotations

import enum

# Set (to anything) to see the Python traceback behind an internal error, and what JAX logged,
# with its traceback, while its backends started (otherwise kept as one line in the note).
TRACEBACK_ENV = "SHARDCLI_TRACEBACK"


class ExitCode(enum.IntEnum):
    """Process exit codes shared by every command."""

    OK = 0
    WRONG_RESULT = 1  # a numeric result disagreed with NumPy, or a health check failed
    BAD_INPUT = 2  # flags or files the user gave cannot be used
    INTERNAL = 3  # a bug in shardcli or an unexpected failure inside JAX
    TIMEOUT = 124
    INTERRUPTED = 130  # Ctrl-C (SIGINT)
    TERMINATED = 143  # SIGTERM (128 + 15), as a shell reports a process it ended


class ShardcliError(Exception):
    """Bad input: printed as one line on stderr, exit code 2.

    The message names the value, says what is valid and, where it helps, how to fix it.
    """

    exit_code = ExitCode.BAD_INPUT


class WrongResultError(ShardcliError):
    """Data that is wrong rather than input that is bad (a damaged checkpoint): one line, exit 1."""

    exit_code = ExitCode.WRONG_RESULT


class Terminated(BaseException):  # noqa: N818 - named for the signal, as KeyboardInterrupt is
    """SIGTERM or SIGHUP arrived while shardcli had something to clean up (a checkpoint half
    written): raised in the main thread so the cleanup runs, then exit 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def refusal_text(error: BaseException) -> str:
    """JAX's reason for refusing a program, as one line: `TypeError: <its first line>`."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".strip()
