"""SIGTERM handled as Ctrl-C is, for commands that keep what finished when they are stopped.

`plan` stops between (or in the middle of) its compiles on Ctrl-C and prints the rows that finished.
`kill` (SIGTERM) asks the same, and gets the same: under `terminate_as_interrupt` it raises
KeyboardInterrupt in the main thread, which the core's own handling turns into a result that says
it was interrupted; `Stop.finished` then raises `Terminated` (one line, exit 143, not 130), as does
a KeyboardInterrupt of SIGTERM's that leaves the block.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType

from shardcli.errors import Terminated


@dataclass
class Stop:
    """Which signal stopped the block (None: none did; Ctrl-C is SIGINT)."""

    signum: int | None = None

    def finished(self) -> None:
        """Raises: Terminated when SIGTERM stopped the block (the CLI prints one line, exit 143)."""
        if self.signum is not None and self.signum != signal.SIGINT:
            raise Terminated(self.signum)


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[Stop]:
    """While the block runs, SIGTERM raises KeyboardInterrupt in the main thread (and is noted in
    the yielded `Stop`); outside the main thread (a notebook's worker) nothing changes.

    Raises:
        Terminated: SIGTERM arrived and its KeyboardInterrupt left the block.
    """
    stop = Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        stop.signum = signum
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield stop
    except KeyboardInterrupt:
        if stop.signum is None:
            raise
        raise Terminated(stop.signum) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
