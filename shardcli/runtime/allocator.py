"""The host allocator: let glibc malloc keep freed buffers instead of handing them back to the kernel.

On CPU every device buffer is host memory from malloc. glibc serves a request above its mmap
threshold (at most 32 MiB) with a fresh mmap and unmaps it on free, and a thread's own arena cannot
hold a chunk of 64 MiB at all. So each call of a 64 MiB collective got 8 fresh outputs whose pages
the kernel faulted in and zeroed one by one: measured 131,000 page faults and 0.4 s of kernel time
per psum of 64 MiB on 8 faked devices, more than the collective's own work.

`tune_for_reuse` (mallopt, before JAX's threads start) makes every thread use the main arena,
never mmap, and never trim the heap, so a freed output is reused by the next call. It changes
where memory comes from, not what the program computes. No other allocator (tcmalloc, jemalloc)
is used: none is installed on the machines this was measured on, and preloading one would need a
new process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardcli.specs.runs import Malloc

ALLOCATORS = tuple(Malloc)

# mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
_NEVER_TRIM = 2**31 - 1  # mallopt takes an int

SETTINGS = (
    (_M_ARENA_MAX, 1, "M_ARENA_MAX=1"),
    (_M_MMAP_MAX, 0, "M_MMAP_MAX=0"),
    (_M_TRIM_THRESHOLD, _NEVER_TRIM, "M_TRIM_THRESHOLD=2 GiB"),
)


@dataclass(frozen=True)
class AllocatorState:
    """What the run's host allocator is, in words for the header and JSON."""

    mode: Malloc  # reuse (tuned here) or system (left as it was)
    applied: bool
    note: str


_state: AllocatorState | None = None


def _glibc() -> Any:
    """glibc through ctypes (imported here: the --help path must not pay for it), or None."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.gnu_get_libc_version()
        libc.mallopt  # noqa: B018 - glibc has it; musl and macOS do not
    except (OSError, AttributeError):
        return None
    return libc


def tune_for_reuse(
    requested: Malloc | str, *, backend_started: bool, why: str | None = None
) -> AllocatorState:
    """Apply `--malloc reuse` once per process, or say why not.

    Args:
        requested: "reuse" or "system".
        backend_started: JAX's backend (and its threads, each with its own malloc arena) already
            runs in this process; tuning now would only half apply, so it is left alone.
        why: what chose `requested` when it was not `--malloc` itself (shown in the note).
    """
    global _state
    if _state is not None:  # tuned by an earlier run in this process; mallopt cannot be undone
        if requested == "reuse":
            return _state
        return AllocatorState(Malloc.REUSE, True, f"{_state.note}; set earlier in this process, kept")
    if requested == "system":
        return AllocatorState(Malloc.SYSTEM, False, f"system malloc ({why or '--malloc system'})")
    if backend_started:
        return AllocatorState(
            Malloc.SYSTEM,
            False,
            "system malloc: --malloc reuse not applied, JAX had already started in this process",
        )
    libc = _glibc()
    if libc is None:
        return AllocatorState(Malloc.SYSTEM, False, "system malloc: --malloc reuse needs glibc")
    if not all(libc.mallopt(key, value) == 1 for key, value, _ in SETTINGS):
        return AllocatorState(Malloc.SYSTEM, False, "system malloc: glibc refused the mallopt settings")
    names = ", ".join(name for _, _, name in SETTINGS)
    _state = AllocatorState(Malloc.REUSE, True, f"glibc malloc keeps freed buffers for reuse ({names})")
    return _state
