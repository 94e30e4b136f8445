"""The compilers JAX loads as plugins (libtpu, the CUDA plugin): whether each is installed, and the
native start-up noise they write straight to file descriptor 2, kept off the user's screen.

Below both `shardcli.runtime` (which starts JAX quietly) and `shardcli.core.target` (which compiles
for a described topology): each imports it, neither imports the other for it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
from collections.abc import Iterator

from shardcli.errors import TRACEBACK_ENV
from shardcli.targets import COMPILER_MODULES


@contextlib.contextmanager
def quiet_native_logs() -> Iterator[list[str]]:
    """Keep what libtpu or the CUDA plugin write straight to file descriptor 2 (C++ logging) off the
    user's screen.

    On a host without a TPU libtpu warns that TPU_ACCELERATOR_TYPE and TPU_WORKER_HOSTNAMES are not
    set; without a GPU the CUDA plugin says it found no driver: true, and irrelevant to compiling.
    The lines are kept for the note (and printed as they came with SHARDCLI_TRACEBACK set).
    """
    lines: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield lines
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines.extend(line for line in sink.read().decode(errors="replace").splitlines() if line.strip())
            if lines and os.environ.get(TRACEBACK_ENV):
                sys.stderr.write("\n".join(lines) + "\n")


def native_complaint(lines: list[str]) -> list[str]:
    """libtpu's or the CUDA plugin's start-up lines as at most one complaint for the note or error."""
    if not lines:
        return []
    if any("could not determine TPU" in line for line in lines):
        return ["libtpu found no TPU on this host (it could not determine the TPU accelerator type)"]
    if any("Could not find cuda drivers" in line for line in lines):
        return ["the CUDA plugin found no CUDA driver on this host"]
    return [f"at start-up: {lines[0].strip()}"]


def compiler_installed(platform: str) -> bool:
    """Whether the compiler for `platform` (tpu: libtpu, cuda: JAX's CUDA plugin) is installed."""
    return importlib.util.find_spec(COMPILER_MODULES[platform]) is not None
