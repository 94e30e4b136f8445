"""SIGTERM handled as Ctrl-C is, for commands that keep what finished when they are stopped.

`plan` stops between (or in the middle of) its compiles on Ctrl-C and prints the rows that finished.
`kill` (SIGTERM) asks the same, and gets the same: under `terminate_as_interrupt` it raises
KeyboardInterrupt in the main thread, which the core's own handling turns into a result that says
it was interrupted; `Stop.finished` then raises `Terminated` (one line, exit 143, not 130), as does
a KeyboardInterrupt of SIGTERM's that leaves the block.

Python runs a signal's handler only when the main thread is back in Python: a compile inside libtpu
(`inspect --target` compiles in the main thread) would hold SIGTERM, and Ctrl-C, for minutes, where
SIGTERM's default action ended the process at once. So a watchdog thread learns of either signal from
Python's wakeup descriptor, and where its handler has not run GRACE_S later it ends the process
itself with the line and code the CLI gives that signal: `terminated (SIGTERM)`, exit 143, or
`interrupted`, exit 130 (nothing was printed on stdout yet: output is rendered after the compile).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType

from shardcli.errors import Terminated

GRACE_S = 2.0  # how long the main thread has to run a signal's handler before the watchdog exits


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
    the yielded `Stop`), or ends the process (one line, exit 143) where the main thread is held in
    native code; outside the main thread (a notebook's worker) nothing changes.

    Raises:
        Terminated: SIGTERM arrived and its KeyboardInterrupt left the block.
    """
    stop = Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    handled = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        stop.signum = signum
        handled.set()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handle)
    # Ctrl-C raises KeyboardInterrupt as Python's own handler does; this one also tells the watchdog
    # that it ran. An ignored SIGINT (a background job's) stays ignored.
    previous_int = signal.getsignal(signal.SIGINT)
    if previous_int is signal.default_int_handler:
        signal.signal(signal.SIGINT, handle)
    watchdog = _watch_for_signals(handled)
    try:
        yield stop
    except KeyboardInterrupt:
        if stop.signum in (None, signal.SIGINT):
            raise
        raise Terminated(stop.signum) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        if previous_int is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous_int)
        if watchdog is not None:
            watchdog()


# What the watchdog says and exits with, per signal: what the CLI says for each when Python handles it.
_ENDINGS = {
    signal.SIGTERM: ("shardcli: error: terminated (SIGTERM)\n", 128 + signal.SIGTERM),
    signal.SIGINT: ("shardcli: error: interrupted\n", 128 + signal.SIGINT),
}


def _watch_for_signals(handled: threading.Event) -> Callable[[], None] | None:
    """Start the watchdog (see the module's docstring); returns what stops it, or None where the
    wakeup descriptor is someone else's (an asyncio loop) and no watchdog runs."""
    import os
    import sys
    from posix import _exit as posix_exit

    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        before = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except (ValueError, OSError):
        before = -2
    if before != -1:
        if before >= 0:
            signal.set_wakeup_fd(before)
        os.close(read_fd)
        os.close(write_fd)
        return None

    def watch() -> None:
        while True:
            try:
                got = os.read(read_fd, 64)
            except OSError:
                return
            if not got:
                return  # stopped
            signum = next((s for s in _ENDINGS if s in got), None)
            if signum is not None and not handled.wait(GRACE_S):
                line, code = _ENDINGS[signum]
                with contextlib.suppress(OSError, ValueError):
                    sys.stderr.write(line)
                    sys.stderr.flush()
                # posix's own: `user_code.guarded` stands in for os._exit while the user's code runs
                posix_exit(code)

    thread = threading.Thread(target=watch, name="shardcli-sigterm-watchdog", daemon=True)
    thread.start()

    def stop() -> None:
        signal.set_wakeup_fd(-1)
        os.close(write_fd)  # the watchdog reads the end of the pipe and returns
        thread.join(GRACE_S + 1)
        os.close(read_fd)

    return stop
