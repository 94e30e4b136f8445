"""Reading a JSON file someone else may have written: every way it can be damaged is bad input. And
which files are shardcli's own (`own_folder`, `is_own_file`), for what tells them from the user's.

A truncated file, a binary one, one nested a hundred thousand levels deep, a number with ten
thousand digits, a directory where a file should be: each becomes one line naming the file and what
is wrong with it (exit 2), never a traceback or an internal error.
"""

from __future__ import annotations

import functools
import json
import os
import stat
from typing import Any

from shardcli.errors import ShardcliError

# The largest file read: far above any document shardcli writes (a sweep's JSON is kilobytes), far
# below what would hang or exhaust the machine (/dev/zero, a multi-gigabyte file by mistake).
MAX_JSON_BYTES = 64 << 20


@functools.cache
def own_folder() -> str:
    """The folder of shardcli's own modules (the package's), as an absolute path."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def is_own_file(path: str, *, other_copies: bool = False) -> bool:
    """Whether `path` is one of shardcli's own modules.

    Args:
        other_copies: also the same module of another copy of shardcli (a compile cache keeps the
            paths of the checkout that first compiled a program).
    """
    own = own_folder()
    path = os.path.abspath(path)
    if path.startswith(own + os.sep):
        return True
    if not other_copies:
        return False
    _, sep, rest = path.rpartition(os.sep + "shardcli" + os.sep)
    return bool(sep) and os.path.isfile(os.path.join(own, rest))


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in a reader's words (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_capped(path: str, limit: int = MAX_JSON_BYTES) -> bytes:
    """The bytes of the regular file `path`, refused beyond `limit` bytes.

    The file is opened without blocking (a FIFO with no writer would wait forever), and checked to
    be a regular file (a device such as /dev/zero or /dev/urandom never ends) before a byte is read.

    Raises:
        ShardcliError: no such file, not a regular file, larger than `limit`, or unreadable.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ShardcliError(f"cannot read {path}: no such file") from None
    except IsADirectoryError:
        raise ShardcliError(f"cannot read {path}: it is a directory; give a regular file") from None
    except OSError as e:
        raise ShardcliError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        kind = _kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise ShardcliError(f"cannot read {path}: it is {kind}; give a regular file")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > limit:
                raise ShardcliError(
                    f"cannot read {path}: it is larger than {limit >> 20} MiB, the most shardcli reads"
                )
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as e:
        raise ShardcliError(f"cannot read {path}: {e.strerror or e}") from None
    finally:
        os.close(fd)


def read_json(path: str) -> Any:
    """The document in `path` (UTF-8 JSON; NaN and Infinity read as Python reads them: the caller
    judges each value it takes). Only a regular file of at most MAX_JSON_BYTES is read.

    Raises:
        ShardcliError: the file cannot be read or does not hold such a document.
    """
    data = read_capped(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ShardcliError(f"{path} is not JSON: it is not UTF-8 text") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ShardcliError(f"{path} is not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise ShardcliError(f"{path} is not usable JSON: it is nested too deeply") from None
    except ValueError as e:  # an integer of more than 4300 digits
        reason = str(e).split(";")[0].split("\n")[0]
        raise ShardcliError(f"{path} is not usable JSON: {reason}") from None
