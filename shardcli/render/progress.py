"""Progress on stderr: a bar for people at a terminal, or for long commands one line per step where
stderr is no terminal (a log, CI, `nohup`), so that a run of many minutes is not silent."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def progress_bar(enabled: bool, describe: Callable[[int, int, Any], str]) -> Iterator:
    """Yield an `update(done, total, payload)` callback, or None when stderr is not a terminal.

    Args:
        enabled: False for scripts (json/csv) and --quiet.
        describe: the label for (done, total, payload).
    """
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("", total=None)

        def update(done: int, total: int, payload: Any) -> None:
            bar.update(task, completed=done, total=total, description=describe(done, total, payload))

        yield update


@contextlib.contextmanager
def progress_bar_or_lines(
    enabled: bool, quiet: bool, describe: Callable[[int, int, Any], str], prefix: str
) -> Iterator:
    """`progress_bar` where it shows (stderr a terminal and `enabled`); otherwise, unless `quiet`,
    an update that writes `prefix: <description> (<s> s so far)` to stderr, one line per step
    (a step whose description is empty writes nothing)."""
    if enabled and sys.stderr.isatty():
        with progress_bar(True, describe) as update:
            yield update
        return
    if quiet:
        yield None
        return
    import time

    start = time.perf_counter()

    def line(done: int, total: int, payload: Any) -> None:
        text = describe(done, total, payload)
        if text:
            print(
                f"{prefix}: {text} ({time.perf_counter() - start:,.0f} s so far)", file=sys.stderr, flush=True
            )

    yield line
