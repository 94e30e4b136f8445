"""Consoles for the two streams: results on stdout, logs and progress on stderr."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

from rich.console import Console

from shardcli.runtime import RuntimeInfo
from shardcli.specs import RunOptions


def make_console(options: RunOptions, *, stderr: bool = False) -> Console:
    """A console honouring --no-color (rich itself honours NO_COLOR)."""
    # Piped output (logs, CI) gets a readable width rather than rich's 80-column fallback.
    stream_is_tty = (sys.stderr if stderr else sys.stdout).isatty()
    width = None if stream_is_tty or "COLUMNS" in os.environ else 120
    record = options.save is not None and not stderr
    console = Console(
        stderr=stderr,
        width=width,
        # None lets rich honour NO_COLOR; --no-color turns colour (and every escape code) off.
        no_color=True if not options.color else None,
        color_system="auto" if options.color else None,
        highlight=False,
        record=record,
    )
    if record:
        _recording.update(console=console, path=options.save)
    return console


# What this run printed, for --save: written by the CLI once the command has finished.
_recording: dict[str, Console | str | None] = {"console": None, "path": None}


def emit(text: str, options: RunOptions) -> None:
    """Output for scripts (JSON, CSV): to stdout as is, and to --save when asked."""
    sys.stdout.write(text)
    if options.save is not None:
        console = Console(file=io.StringIO(), record=True, color_system=None, highlight=False, width=200)
        console.out(text, end="")
        _recording.update(console=console, path=options.save)


def save_recording() -> str | None:
    """Write what the run printed to the --save file (SVG, HTML or text by its suffix), if asked.

    Returns:
        The file written, or None.

    Raises:
        OSError: the file cannot be written.
    """
    console, path = _recording["console"], _recording["path"]
    if not isinstance(console, Console) or not isinstance(path, str):
        return None
    _recording.update(console=None, path=None)
    suffix = Path(path).suffix.lower()
    if suffix == ".svg":
        console.save_svg(path, title="shardcli")
    elif suffix == ".html":
        console.save_html(path)
    else:
        console.save_text(path)
    return path


def prints_here(options: RunOptions, runtime: RuntimeInfo) -> bool:
    """Only process 0 prints a multi-process run's report, unless --all-processes."""
    return options.all_processes or runtime.process_index == 0
