"""JAX's persistent compilation cache, on by default so repeated runs skip compiling.

CI scripts call shardcli many times with the same shapes; with the cache a second run reads the
compiled program from disk. The cache lives in the user's cache directory (`SHARDCLI_CACHE_DIR`
overrides it; `--no-compile-cache` turns it off). A directory that cannot be used never fails a run:
the run goes on without it and carries a warning, which the render layer shows on stderr.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CACHE_ENV = "SHARDCLI_CACHE_DIR"
HIT_EVENT = "/jax/compilation_cache/cache_hits"

_hits = 0
_listening = False
_state: CacheState | None = None


@dataclass(frozen=True)
class CacheState:
    """Where compiled programs are cached, or why they are not."""

    directory: str | None  # None: off
    note: str | None  # why it is off, when it was asked for
    warning: str | None = None  # for the user, once: the cache was asked for and cannot be used


def default_cache_dir() -> Path:
    """`$SHARDCLI_CACHE_DIR`, else the platform's user cache directory + shardcli/jax."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    elif sys.platform.startswith("win"):
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "shardcli" / "jax"


def _usable(directory: Path) -> str | None:
    """None when `directory` can hold the cache, else why not."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".probe-"):
            pass
    except OSError as error:
        return error.strerror or type(error).__name__
    return None


def _count_hits(event: str, **_: object) -> None:
    global _hits
    if event == HIT_EVENT:
        _hits += 1


def enable_compile_cache(enabled: bool) -> CacheState:
    """Turn the persistent cache on unless `enabled` is False; once on, it stays on in this process.

    Small programs are cached too: shardcli's are small, and they are what repeat runs compile.
    """
    global _state, _listening
    if _state is not None and _state.directory is not None:
        return _state  # once on, it stays on for the process
    if not enabled:
        _state = CacheState(None, None)
        return _state
    import jax

    directory = default_cache_dir()
    problem = _usable(directory)
    if problem is not None:
        warning = (
            f"the compile cache at {directory} cannot be used ({problem}); "
            f"going on without it (set {CACHE_ENV} or pass --no-compile-cache)"
        )
        _state = CacheState(None, f"{directory}: {problem}", warning)
        return _state
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    if not _listening:
        jax.monitoring.register_event_listener(_count_hits)
        _listening = True
        _one_line_for_failed_writes(directory)
    _state = CacheState(str(directory), None)
    return _state


# JAX warns for each entry it cannot write (two lines each: the message and its `warnings.warn`
# source line), once per compiled function: a full disk filled the screen with them.
_WRITE_FAILED = "Error writing persistent compilation cache entry"


def _one_line_for_failed_writes(directory: Path) -> None:
    """From now on, JAX's warnings about cache entries it cannot write are one line, said once."""
    shown = warnings.showwarning
    said = False

    def show(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        nonlocal said
        text = str(message)
        if not text.startswith(_WRITE_FAILED):
            shown(message, category, *args, **kwargs)
        elif not said:
            said = True
            why = text.partition("': ")[2] or text
            sys.stderr.write(
                f"shardcli: warning: the compile cache at {directory} takes no more entries ({why}); "
                f"this run's compiles are not kept\n"
            )

    warnings.showwarning = show


def cache_hits() -> int:
    """How many compilations this process has read from the cache so far."""
    return _hits


def cache_state() -> CacheState:
    """The cache as this process set it up (off until a run turns it on)."""
    return _state or CacheState(None, None)


def cache_enabled() -> bool:
    return cache_state().directory is not None


@contextlib.contextmanager
def unreadable_entries_compiled_again() -> Iterator[None]:
    """Compile again, without JAX's warning, where a persistent cache entry cannot be loaded.

    Once a process has used the cache, JAX reads it for every compile, whatever the flags say then;
    an executable compiled for a described GPU (no CUDA client to load it into) is written but cannot
    be read back ("PjRtCompiler must be constructed with a Client"). JAX then compiles the program
    again, which is the right answer; its warning about the entry is left out.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Error reading persistent compilation cache entry")
        yield
