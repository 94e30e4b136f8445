"""Standard output for a reader that may stop reading early (`shardcli ... | head -1`), a disk that
is full (`>/dev/full`), and a user's program that writes to descriptor 1 while a document owns it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, TextIO


def _box_to_ascii() -> dict[int, str]:
    """Box-drawing characters (U+2500-257F) as ASCII: lines as - = |, corners and joints as +;
    block elements (U+2580-259F, the bars of a chart) as #."""
    table = {c: "+" for c in range(0x2500, 0x2580)}
    table.update({ord(c): "-" for c in "─━┄┅┈┉╌╍╴╶╸╺"})
    table.update({ord(c): "=" for c in "═"})
    table.update({ord(c): "|" for c in "│┃┆┇┊┋╎╏║╵╷╹╻"})
    table.update({c: "#" for c in range(0x2580, 0x25A0)})
    return table


_BOX_TO_ASCII = _box_to_ascii()


def ascii_fallback(text: str, encoding: str) -> str:
    """`text` as `encoding` can write it: boxes in ASCII, anything else it cannot hold as `?`."""
    return text.translate(_BOX_TO_ASCII).encode(encoding, errors="replace").decode(encoding)


class ReaderMayLeave:
    """stdout that goes quiet once its reader closes the pipe (`shardcli ... | head -1`).

    A reader that stops reading is not a failure of the run: what is left to print goes nowhere,
    the run goes on to its own verdict, and its exit code stands (0, or 1 for a wrong result), as
    `launch` does for its children's output. (click would exit 1, the wrong-result code, silently.)

    A write that fails otherwise (`>/dev/full`: no space left; an I/O error) is remembered in
    `failed` and the rest goes nowhere too: the CLI then says so in one line, exit 2 (see
    `write_failure`), rather than a traceback from deep inside rich.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.reader_left = False
        self.failed: str | None = None  # why a write failed (not a reader that left)

    def write(self, text: str) -> int:
        if not self.reader_left:
            try:
                try:
                    return self._stream.write(text)
                except UnicodeEncodeError:  # LC_ALL=C, PYTHONIOENCODING=ascii: ASCII boxes
                    self._stream.write(ascii_fallback(text, self._stream.encoding or "ascii"))
            except BrokenPipeError:
                self._reader_left()
            except OSError as error:
                self._write_failed(error)
        return len(text)

    def flush(self) -> None:
        if not self.reader_left:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._reader_left()
            except OSError as error:
                self._write_failed(error)

    def _write_failed(self, error: OSError) -> None:
        self.failed = self.failed or (error.strerror or str(error))
        self._reader_left()

    def _reader_left(self) -> None:
        self.reader_left = True
        # What is still buffered, and the interpreter's last flush, go to /dev/null rather than
        # raising again at exit ("Exception ignored ... BrokenPipeError", exit 120).
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()  # what was buffered now goes to /dev/null, not to a second error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def quiet_when_reader_leaves(stream: TextIO) -> TextIO:
    """STREAM wrapped in a ReaderMayLeave (once: an already wrapped stream is returned as is)."""
    if isinstance(stream, ReaderMayLeave):
        return stream
    return ReaderMayLeave(stream)  # type: ignore[return-value]


def reopen_closed_streams() -> None:
    """Give a closed stdout or stderr (`shardcli ... >&-`, `2>&-`) to /dev/null.

    A closed stream is not an error: what would go there goes nowhere, and the run's exit code
    stands. Python leaves sys.stdout None then; worse, the next file opened would take descriptor 1
    or 2 and receive the output. So the descriptors are taken first, by /dev/null.
    """
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            devnull = os.open(os.devnull, os.O_RDWR)
            if devnull != fd:
                os.dup2(devnull, fd)
                os.close(devnull)
            if getattr(sys, name) is None:
                stream = open(fd, "r" if fd == 0 else "w", encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's
                setattr(sys, name, stream)


def write_failure() -> str | None:
    """Why writing stdout failed during this run (`>/dev/full`), or None; asking clears it."""
    stream = sys.stdout
    if not isinstance(stream, ReaderMayLeave):
        return None
    with contextlib.suppress(OSError, ValueError):
        stream.flush()
    failed, stream.failed = stream.failed, None
    return failed


# Set by `shardcli.cli.main`: this process's descriptors 1 and 2 are shardcli's own (not those of
# a test runner or a notebook that called the app in-process), so they may be rearranged.
_owned = {"process": False, "routed": False, "document": False}


def own_process_streams() -> None:
    """Mark descriptors 1 and 2 as this process's own (called once by the console script)."""
    _owned["process"] = True


def owns_process_streams() -> bool:
    """Whether this process's descriptors are shardcli's own (the console script's process)."""
    return bool(_owned["process"])


def route_native_stdout_to_stderr(*, force: bool = False, document: bool = False) -> None:
    """From here on descriptor 1 goes to stderr, while `sys.stdout` keeps the real stdout.

    Whatever writes to descriptor 1 without shardcli (the user's `os.write(1, ...)`, a subprocess
    it starts, `jax.debug.print`, native libraries such as gloo, an `atexit` print after the run)
    then cannot break the JSON or CSV document on stdout. Only in a process whose descriptors are
    shardcli's own (`own_process_streams`), or with `force`; once. `document`: a JSON or CSV document
    owns stdout, so what is printed after the run goes to stderr too (`hand_back_stdout`).
    """
    if document:
        _owned["document"] = True
    if _owned["routed"] or not (force or _owned["process"]):
        return
    try:
        if sys.stdout.fileno() != 1:
            return
    except (OSError, ValueError, AttributeError):
        return
    sys.stdout.flush()
    real_stdout = os.dup(1)
    os.dup2(2, 1)
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    stream = os.fdopen(real_stdout, "w", buffering=1, encoding=encoding)
    sys.stdout = quiet_when_reader_leaves(stream)
    _owned["routed"] = True


def hand_back_stdout() -> None:
    """At the end of a run whose stdout a document owned: what is printed after it (an `atexit`
    handler of the user's) goes to descriptor 1, which `route_native_stdout_to_stderr` pointed at
    stderr. Where no document owns stdout (a table; descriptor 1 routed only for a multi-process
    run's native libraries), it still reaches stdout."""
    if not (_owned["routed"] and _owned["document"]):
        return
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's own


# gloo's connection messages (`[Gloo] Rank 3 is connected to 7 peer ranks. Expected number of
# connected peer ranks is : 7`), printed by its C++ runtime in every process of a CPU run.
NATIVE_CHATTER = b"[Gloo] Rank "

# The filter process: copies its stdin to its stdout as it comes, less the lines that start with
# the marker; a partial line is held only while it could still be one of those.
_FILTER = r"""
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
mark = sys.argv[1].encode()
pending, passing = b"", False

def put(data):
    while data:
        try:
            data = data[os.write(1, data):]
        except OSError:
            return

while True:
    try:
        chunk = os.read(0, 65536)
    except InterruptedError:
        continue
    if not chunk:
        break
    data, pending, out = pending + chunk, b"", []
    while data:
        end = data.find(b"\n")
        if passing or end < 0:
            if not passing and mark.startswith(data[: len(mark)]):
                pending, data = data, b""
                break
            part = data if end < 0 else data[: end + 1]
            out.append(part)
            data = data[len(part):]
            passing = end < 0
            continue
        line, data = data[: end + 1], data[end + 1 :]
        if not line.startswith(mark):
            out.append(line)
    put(b"".join(out))
put(pending)
"""


def filter_native_chatter() -> bool:
    """From here on descriptors 2 (and 1, where `route_native_stdout_to_stderr` pointed it at
    stderr) go through a small filter process that drops gloo's connection messages and passes
    everything else to stderr as it comes.

    A process of its own, not a thread: what this process writes last before it dies (an abort's
    message, Python's last traceback) still reaches stderr, since the filter reads on until every
    copy of the pipe is closed. It ignores SIGINT and SIGTERM (sent to the whole process group by
    Ctrl-C or `launch`) for that reason. Only in a process whose descriptors are shardcli's own.

    Returns:
        Whether the filter is in place.
    """
    if not _owned["process"] or _owned.get("filtered"):
        return False
    try:
        read_end, write_end = os.pipe()
        real_stderr = os.dup(2)
    except OSError:
        return False
    try:
        os.posix_spawn(
            sys.executable,
            [sys.executable, "-I", "-S", "-c", _FILTER, NATIVE_CHATTER.decode()],
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, read_end, 0),
                (os.POSIX_SPAWN_DUP2, real_stderr, 1),
                (os.POSIX_SPAWN_DUP2, real_stderr, 2),
            ],
        )
    except OSError:
        for fd in (read_end, write_end, real_stderr):
            os.close(fd)
        return False
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    os.dup2(write_end, 2)
    if _owned["routed"]:
        os.dup2(write_end, 1)
    for fd in (read_end, write_end, real_stderr):
        os.close(fd)
    _owned["filtered"] = True
    return True
