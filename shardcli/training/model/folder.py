"""The files of a checkpoint folder: one writer at a time, and every file read back through its digest.

`model train --checkpoint DIR` claims DIR before it trains (a lock file made with O_EXCL, so two
runs cannot both hold it), writes the orbax state, records the size and SHA-256 of every file of
the state in `shardcli-model.json`, and only then lets the lock go. `model restore` checks each
recorded file before orbax opens any (missing, a directory, a FIFO, a link, truncated, changed):
a damaged checkpoint is one line naming the array whose file is damaged, exit 1.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from shardcli.errors import ShardcliError, Terminated, WrongResultError
from shardcli.specs.model import LOCK_FILE, incomplete_text

# orbax's own files of a state folder, not one array's
_STATE_FILES = ("_CHECKPOINT_METADATA", "_METADATA", "_sharding", "commit_success.txt", "array_metadatas")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class FileRecord:
    """One file of the saved state: its size and SHA-256."""

    size: int
    sha256: str


def _sha256(fd: int) -> str:
    digest = hashlib.sha256()
    while chunk := os.read(fd, _CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def record_files(state_dir: str) -> dict[str, FileRecord]:
    """Every file under `state_dir` (paths relative to it, with '/'), with its size and digest."""
    records = {}
    for root, _dirs, files in os.walk(state_dir):
        for name in files:
            path = os.path.join(root, name)
            fd = os.open(path, os.O_RDONLY)
            try:
                records[os.path.relpath(path, state_dir).replace(os.sep, "/")] = FileRecord(
                    os.fstat(fd).st_size, _sha256(fd)
                )
            finally:
                os.close(fd)
    return dict(sorted(records.items()))


def array_of(relpath: str) -> str | None:
    """The array a state file holds (its folder: `0.dot1.kernel/0.0`), None for orbax's own files."""
    first, sep, _ = relpath.partition("/")
    if not sep or first in _STATE_FILES or first.startswith("ocdbt.") or first == "d":
        return None
    return first.removesuffix(".value")  # nnx's Variable layer, left out of the arrays' names


def _damage(path: str, state_dir: str, record: FileRecord) -> str | None:
    """What is wrong with one recorded file, or None when it is as saved."""
    real, home = os.path.realpath(path), os.path.realpath(state_dir)
    if os.path.lexists(path) and os.path.commonpath([real, home]) != home:
        return f"leads out of the folder (to {real})"
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return "is missing"
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    if stat.S_ISLNK(info.st_mode):
        return "is a link, not the file that was saved"
    if stat.S_ISDIR(info.st_mode):
        return "is a directory"
    if stat.S_ISFIFO(info.st_mode):
        return "is a FIFO (named pipe)"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_size != record.size:
        how = "truncated" if info.st_size < record.size else "longer than saved"
        return f"is {how} ({info.st_size} of {record.size} bytes)"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    try:
        if _sha256(fd) != record.sha256:
            return "holds other bytes than were saved (its SHA-256 differs)"
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    finally:
        os.close(fd)
    return None


def verify_files(folder: str, state_dir: str, records: dict[str, FileRecord]) -> None:
    """Check every recorded file of the state before any is read as an array.

    Raises:
        WrongResultError: the first damaged file, naming the array it holds (exit 1).
    """
    if os.path.lexists(os.path.join(folder, LOCK_FILE)):
        raise WrongResultError(incomplete_text(folder))
    if os.path.islink(state_dir):
        raise WrongResultError(f"{folder}: the saved state is damaged: its folder is a link")
    for relpath, record in records.items():
        damage = _damage(os.path.join(state_dir, *relpath.split("/")), state_dir, record)
        if damage is None:
            continue
        array = array_of(relpath)
        what = f"array {array} is damaged: its file" if array else "the saved state is damaged: its file"
        raise WrongResultError(f"{folder}: {what} {relpath} {damage}; the checkpoint cannot be restored")


@contextlib.contextmanager
def claimed_folder(folder: str, flag: str) -> Iterator[None]:
    """Hold `folder` for one writer from before training until the checkpoint is complete.

    The folder (new or empty, as `check_checkpoint_target` required) gets the lock file with
    O_EXCL: a second run that checked the folder at the same moment fails to make it and is
    refused. When the body fails, what this run wrote is removed and the lock with it.

    Ctrl-C, SIGTERM and SIGHUP wait for the save (`_signals_deferred`): the checkpoint is then
    complete, and the signal ends the run after (exit 130, 143, 129). A second one, or SIGKILL,
    ends it at once and leaves the lock: the folder reads as incomplete, never as a checkpoint.

    Raises:
        ShardcliError: another run holds or has filled the folder since it was checked.
        Terminated, KeyboardInterrupt: a signal came while the folder was held.
    """
    with _signals_deferred():  # before the lock is made: its appearance says they are deferred
        created = not os.path.lexists(folder)
        _make_lock(folder, flag, created)
        done = False
        try:
            yield
            done = True
        finally:
            if done:
                os.unlink(os.path.join(folder, LOCK_FILE))
            else:
                _remove_written(folder, created)


def _make_lock(folder: str, flag: str, created: bool) -> None:
    try:
        os.makedirs(folder, exist_ok=True)
        fd = os.open(os.path.join(folder, LOCK_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise ShardcliError(
            f"{flag}: another run is writing a checkpoint into this folder; give another folder"
        ) from None
    except OSError as error:
        raise ShardcliError(f"{flag}: cannot write the folder ({error.strerror or error})") from None
    try:
        with os.fdopen(fd, "w") as lock:
            lock.write(f"{os.getpid()}\n")
    except OSError as error:  # a disk already full: nothing of this run's is left there
        os.unlink(os.path.join(folder, LOCK_FILE))
        if created:
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise ShardcliError(f"{flag}: cannot write the folder ({error.strerror or error})") from None
    if set(os.listdir(folder)) != {LOCK_FILE}:  # filled by a run that finished since the check
        os.unlink(os.path.join(folder, LOCK_FILE))
        raise ShardcliError(
            f"{flag}: the folder is not empty and nothing is overwritten; give a new or empty folder"
        )


def _remove_written(folder: str, created: bool) -> None:
    """Remove what a failed or interrupted save wrote, the lock last: whatever cannot be removed
    leaves the lock there, so the folder reads as incomplete, never as a checkpoint."""
    for name in os.listdir(folder):
        if name == LOCK_FILE:
            continue
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)
    with contextlib.suppress(OSError):
        if os.listdir(folder) == [LOCK_FILE]:
            os.unlink(os.path.join(folder, LOCK_FILE))
            if created:
                os.rmdir(folder)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP are held until the block ends, then raised (KeyboardInterrupt,
    `Terminated`); a second one ends the process at once, by the signal's default action.

    Raising from the handler at once is not safe here: Python runs a handler between any two
    bytecodes, also inside a garbage-collection callback or a finalizer, where the exception is
    printed and dropped while orbax goes on writing (measured: a traceback, then exit 0).
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def hold(signum: int, _frame: object) -> None:
        if received:  # the second: now, as if shardcli had no handler (the lock stays)
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        received.append(signum)

    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, hold) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        if received[0] == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(received[0])
