"""A progress bar on stderr, only for people at a terminal."""

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
