"""Consoles for the two streams: results on stdout, logs and progress on stderr."""

from __future__ import annotations

from rich.console import Console

from shardcli.specs import RunOptions


def make_console(options: RunOptions, *, stderr: bool = False) -> Console:
    """A console honouring --no-color (rich itself honours NO_COLOR)."""
    return Console(
        stderr=stderr,
        no_color=not options.color,
        color_system="auto" if options.color else None,
        highlight=False,
    )
