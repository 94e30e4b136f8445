"""Standard output for a reader that may stop reading early (`shardcli ... | head -1`)."""

from __future__ import annotations

import contextlib
import os
from typing import Any, TextIO


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
                return self._stream.write(text)
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
