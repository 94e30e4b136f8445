"""Output off a terminal with no spaces at the ends of its lines.

rich pads a table's cells and a panel's lines to their width; on a terminal that is invisible, but a
script that diffs, greps or cuts the output (a CI log, `| grep ' $'`) trips on it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import re
import sys
from typing import Any

# One colour code (an SGR escape), as rich writes them.
_CODE_AT_END = re.compile(r"\x1b\[[0-9;]{0,32}m\Z")


def _tail(line: str) -> int:
    """Where the spaces and colour codes that end `line` begin (scanned from the end: linear)."""
    end = len(line)
    while end:
        if line[end - 1] == " ":
            end -= 1
            continue
        code = _CODE_AT_END.search(line, max(0, end - 36), end) if line[end - 1] == "m" else None
        if code is None:
            break
        end = code.start()
    return end


def _unpadded(line: str) -> str:
    """`line` with the spaces of its tail left out (its colour codes kept: they close a style)."""
    end = _tail(line)
    return line[:end] + line[end:].replace(" ", "")


def unpadded_text(text: str) -> str:
    """`text` as an unpadded stream writes it whole: no line ends in spaces."""
    return "\n".join(_unpadded(line) for line in text.split("\n"))


class UnpaddedStream:
    """sys.stdout or sys.stderr (looked up at each write, as rich does), with no spaces at line ends.

    Spaces at the end of what one write hands over are held back until the next write shows whether
    the line goes on (they are written) or ends there (they are dropped).
    """

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._held = ""

    @property
    def _stream(self) -> Any:
        return sys.stderr if self._stderr else sys.stdout

    def write(self, text: str) -> int:
        *ended, last = (self._held + text).split("\n")
        end = _tail(last)  # the last line may go on in the next write: hold its tail until then
        self._held = last[end:]
        self._stream.write("".join(_unpadded(line) + "\n" for line in ended) + last[:end])
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return int(self._stream.fileno())

    @property
    def encoding(self) -> str:
        return str(getattr(self._stream, "encoding", None) or "utf-8")


def unpad_help_screens() -> None:
    """`--help` off a terminal with no spaces at line ends either: typer draws its help with a rich
    console of its own (`typer.rich_utils._get_rich_console`), given the same stream here.

    typer imports `rich_utils` (and with it rich's markdown) only to draw a help screen; so is it
    patched here: at once where it is imported already, else as it is imported, so that a run that
    draws no help does not pay for the import (about 0.1 s of CPU a process)."""
    if "typer.rich_utils" in sys.modules:
        _patch_rich_help(sys.modules["typer.rich_utils"])
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds `typer.rich_utils` as Python would, and patches it once it has run."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "typer.rich_utils":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            _patch_rich_help(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _patch_rich_help(rich_help: Any) -> None:
    make = getattr(rich_help, "_get_rich_console", None)
    if make is None or getattr(make, "unpadded", False):  # another typer, or done already
        return

    def unpadded_console(stderr: bool = False) -> Any:
        console = make(stderr=stderr)
        if not (sys.stderr if stderr else sys.stdout).isatty():
            console.file = UnpaddedStream(stderr)
        return console

    unpadded_console.unpadded = True  # type: ignore[attr-defined]
    rich_help._get_rich_console = unpadded_console
