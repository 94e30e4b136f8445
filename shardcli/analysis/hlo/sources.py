"""The source lines of a compiled module: its stack frames (FileNames, FileLocations, StackFrames)
read into call chains, and of each chain the user's lines, not a library's or shardcli's own."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence

from shardcli.specs.files import is_own_file

_ID_RE = re.compile(r"[0-9]{1,18}")  # a table's id: ASCII digits, an int64


def source_table(hlo_text: str, user_files: tuple[str, ...] = ()) -> dict[int, str]:
    """stack_frame_id -> "file:line", from the module's FileNames/FileLocations/StackFrames: of
    each frame's call chain, the line `pick_source` picks (the user's, not a library's)."""
    return {k: stack[0] for k, stack in stack_table(hlo_text, user_files).items()}


def stack_table(hlo_text: str, user_files: tuple[str, ...] = ()) -> dict[int, tuple[str, ...]]:
    """stack_frame_id -> the user's frames of its call chain ("file:line", innermost first; see
    `user_stack`), read from the module's FileNames/FileLocations/StackFrames."""
    sections: dict[str, dict[int, str]] = {}
    current = None
    for line in hlo_text.splitlines():
        stripped = line.strip()
        if stripped in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            current = stripped
            sections[current] = {}
            continue
        if current is None:
            continue
        head, _, rest = stripped.partition(" ")
        if not _ID_RE.fullmatch(head):  # "²" is a digit to str.isdigit(), not to int()
            current = None
            continue
        sections[current][int(head)] = rest
    files = {k: v.strip('"') for k, v in sections.get("FileNames", {}).items()}
    locations = {}
    for k, v in sections.get("FileLocations", {}).items():
        file_id = re.search(r"file_name_id=(\d{1,18})(?!\d)", v)
        line_no = re.search(r"\bline=(\d{1,18})(?!\d)", v)
        if file_id and line_no:
            locations[k] = f"{files.get(int(file_id.group(1)), '?')}:{line_no.group(1)}"
    frames: dict[int, tuple[int | None, int]] = {}  # id -> (location, parent id; 0: none)
    for k, v in sections.get("StackFrames", {}).items():
        place = re.search(r"file_location_id=(\d{1,18})(?!\d)", v)
        up = re.search(r"parent_frame_id=(\d{1,18})(?!\d)", v)
        frames[k] = (int(place.group(1)) if place else None, int(up.group(1)) if up else 0)
    # XLA prints a parent as its id + 1 (the outermost frame, 1, names "parent 1"); a printer that
    # writes the id itself gives the outermost frame parent 0.
    shift = 1 if frames.get(1, (None, 0))[1] == 1 else 0
    picked = {}
    kinds = FileKinds(user_files)
    for k in frames:
        chain: list[str] = []
        at, seen = k, set[int]()
        while at in frames and at not in seen:
            seen.add(at)
            location_id, parent_id = frames[at]
            if location_id in locations:
                chain.append(locations[location_id])
            at = parent_id - shift
        stack = user_stack(chain, files=kinds)
        if stack:
            picked[k] = stack
    return picked


def pick_source(chain: Sequence[str], user_files: tuple[str, ...] = ()) -> str | None:
    """The line a collective is blamed on: the innermost of `user_stack`, or None."""
    stack = user_stack(chain, user_files)
    return stack[0] if stack else None


def user_stack(
    chain: Sequence[str], user_files: tuple[str, ...] = (), files: FileKinds | None = None
) -> tuple[str, ...]:
    """Of a call chain ("file:line", innermost first): the user's frames, innermost first, each
    once (a transformation re-enters the same lines), else the innermost frame alone. The user's
    files are `user_files` (files, or package folders, wherever they are) and every file outside
    installed packages (site-packages, the standard library): a thin script that calls a model in
    the user's other files is blamed for no collective its model makes.
    Only the frames inside shardcli's own count (a playground program is shardcli's, not the user's;
    what calls shardcli is the command line), and never a frame of no file (`<string>`).
    `files`: a `FileKinds` that has read files before, in place of `user_files` (a module's chains
    share their files; each is looked at once)."""
    kinds = files if files is not None else FileKinds(user_files)
    # The frames inside the first of shardcli's own: those outside it are shardcli and the command
    # line's machinery (typer, runpy); "<string>" and "<frozen ...>" have no file to point at.
    inner = []
    for source in chain:
        kind = kinds.of(source.rpartition(":")[0])
        if kind == "own":
            break
        if not source.startswith("<"):
            inner.append((source, kind))
    if not inner:  # only shardcli's own frames (the playground's programs): no line of the user's
        return ()
    users = [source for source, kind in inner if kind == "user"]
    return tuple(dict.fromkeys(users or [inner[0][0]]))


@functools.lru_cache(maxsize=1)
def _stdlib() -> str:
    import sysconfig

    return os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep


class FileKinds:
    """Whose a frame's file is: "own" (shardcli's, of this or another copy), "user" (one of
    `user_files`, or outside installed packages and the standard library) or "library"; each file
    looked at once."""

    def __init__(self, user_files: tuple[str, ...] = ()) -> None:
        self.roots = tuple(os.path.abspath(r) for r in user_files)
        self.kinds: dict[str, str] = {}

    def of(self, file: str) -> str:
        kind = self.kinds.get(file)
        if kind is None:
            kind = self.kinds[file] = self._kind(file)
        return kind

    def _kind(self, file: str) -> str:
        if is_own_file(file, other_copies=True):
            return "own"
        path = os.path.abspath(file)
        if any(path == r or path.startswith(r + os.sep) for r in self.roots):
            return "user"
        parts = path.split(os.sep)
        library = "site-packages" in parts or "dist-packages" in parts or path.startswith(_stdlib())
        return "library" if library else "user"
