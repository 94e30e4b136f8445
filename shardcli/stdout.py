"""Standard output for a reader that may stop reading early (`shardcli ... | head -1`)."""

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
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.reader_left = False

    def write(self, text: str) -> int:
        if not self.reader_left:
            try:
                try:
                    return self._stream.write(text)
                except UnicodeEncodeError:  # LC_ALL=C, PYTHONIOENCODING=ascii: ASCII boxes
                    self._stream.write(ascii_fallback(text, self._stream.encoding or "ascii"))
            except BrokenPipeError:
                self._reader_left()
        return len(text)

    def flush(self) -> None:
        if not self.reader_left:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._reader_left()

    def _reader_left(self) -> None:
        self.reader_left = True
        # What is still buffered, and the interpreter's last flush, go to /dev/null rather than
        # raising again at exit ("Exception ignored ... BrokenPipeError", exit 120).
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

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
