"""Consoles for the two streams: results on stdout, logs and progress on stderr."""

from __future__ import annotations

import os
import sys

from rich.console import Console

from shardcli.runtime import RuntimeInfo
from shardcli.specs import RunOptions


def make_console(options: RunOptions, *, stderr: bool = False) -> Console:
    """A console honouring --no-color (rich itself honours NO_COLOR)."""
    # Piped output (logs, CI) gets a readable width rather than rich's 80-column fallback.
    stream_is_tty = (sys.stderr if stderr else sys.stdout).isatty()
    width = None if stream_is_tty or "COLUMNS" in os.environ else 120
    return Console(
        stderr=stderr,
        width=width,
        # None lets rich honour NO_COLOR; --no-color turns colour (and every escape code) off.
        no_color=True if not options.color else None,
        color_system="auto" if options.color else None,
        highlight=False,
    )


def prints_here(options: RunOptions, runtime: RuntimeInfo) -> bool:
    """Only process 0 prints a multi-process run's report, unless --all-processes."""
    return options.all_processes or runtime.process_index == 0
