"""The memory roofline of a collective whose devices share one process (faked CPU devices).

When n faked devices live in one process, a collective is memory traffic: whatever algorithm XLA
picks, every input byte the result depends on must be read at least once and every output byte
written at least once. `min_bytes` counts those bytes per collective; divided by the host's copy
bandwidth (read + written bytes per second, all cores) they give the shortest time the collective
can take, and the fraction of it a run reaches.

Pure arithmetic plus a NumPy copy measurement, kept per machine in a small JSON file beside the
compile cache; NumPy is imported inside the function and JAX not at all, so `bench/roofline.py`
and the CLI share these formulas.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import json
import math
import os
import platform
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardcli.errors import ShardcliError
from shardcli.playground.collective.cases import get_collective
from shardcli.playground.collective.entries import Collective
from shardcli.specs.files import own_folder, read_json

# Bytes each thread copies at once: far beyond the caches, like the 64 MiB device buffers the
# roofline bounds, and past glibc's non-temporal threshold (x86: 3/4 of a thread's share of the
# L3, 41 MiB on the development machine), above which memcpy streams its stores past the cache and
# saves reading every destination line first. XLA copies device buffers with memcpy, so a copy
# below that threshold is not the machine's limit: splitting 64 MiB over 2 threads measured 17-18
# GB/s where 64 MiB per thread measured 25-27 GB/s, and a 64 MiB ppermute then read 140% of it.
COPY_BYTES = 64 * 1024 * 1024
COPY_TOTAL_MAX = 512 * 1024 * 1024  # all threads' sources together; many cores copy less each
COPY_REPEATS = 10
# With many cores each thread copies less (16 x 32 MiB), below that threshold again: a 16-core host
# measured 86 GB/s with cached stores and 129 GB/s with streaming ones, the same copies. So the
# measurement is also run in a child process whose glibc streams every copy of 1 MiB or more, and
# the better of the two is the roofline (glibc on x86 only; elsewhere the one in-process figure).
STREAMING_TUNABLE = "glibc.cpu.x86_non_temporal_threshold=0x100000"
STREAMING_TIMEOUT_S = 120


@dataclass(frozen=True)
class MinBytes:
    """Bytes a collective must at least read and write, over all the devices of the process."""

    read: int
    written: int

    @property
    def total(self) -> int:
        return self.read + self.written


def _entry(collective: str | Collective) -> Collective:
    return get_collective(collective) if isinstance(collective, str) else collective


def min_bytes(
    collective: str | Collective,
    bytes_per_device: int,
    n: int,
    *,
    groups: int = 1,
    senders: int | None = None,
) -> MinBytes | None:
    """The fewest bytes `collective` must read and write with all its devices in one process.

    The formula is the registry entry's `min_bytes` rule (`shardcli.playground.collective.cases`).

    Args:
        collective: a registry entry, or its name (psum, all_gather, ...).
        bytes_per_device: each device's input block, in bytes.
        n: devices in one group (the size of the axes the collective runs over).
        groups: independent groups running at once (the other mesh axes).
        senders: how many devices of a group send, for a collective where not all do (ppermute;
            default: all n).

    Returns:
        Read and written bytes summed over every device, or None for a collective that moves no
        data (axis_index).

    Raises:
        ShardcliError: an unknown collective name.
    """
    rule = _entry(collective).min_bytes
    if rule is None:
        return None
    read, written = rule.count(bytes_per_device, n, n if senders is None else senders)
    return MinBytes(read=groups * read, written=groups * written)


def min_bytes_rule(collective: str | Collective) -> str | None:
    """The formula in words, for headers and the benchmark's table."""
    rule = _entry(collective).min_bytes
    return None if rule is None else rule.words


@dataclass(frozen=True)
class CopyBandwidth:
    """The host's copy bandwidth: (read + written) bytes per second with every core copying."""

    bytes_per_s: float
    threads: int
    nbytes: int  # bytes each thread copies (read) at once
    repeats: int
    measured_at: str | None = None  # UTC, ISO 8601, to the second
    cached: bool = False  # read from the shardcli cache instead of measured by this process
    streaming: bool = False  # measured with glibc's memcpy streaming its stores (STREAMING_TUNABLE)
    note: str | None = None  # why there is no streaming figure, where its measurement failed
    warning: str | None = None  # for stderr: the figure could not be stored in the cache directory

    @property
    def gbps(self) -> float:
        return self.bytes_per_s / 1e9

    def describe(self) -> str:
        how = (
            f"{self.gbps:.1f} GB/s copy bandwidth (NumPy, {self.threads} thread{'s' * (self.threads != 1)}, "
            f"{self.nbytes >> 20} MiB each, read + written bytes, best of {self.repeats}"
            + (", streaming stores)" if self.streaming else ")")
            + (f"; {self.note}" if self.note else "")
        )
        if self.cached:
            how += f", measured {self.measured_at} and read from the cache"
        return how


def usable_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def measure_copy_bandwidth(
    nbytes: int = COPY_BYTES, threads: int | None = None, repeats: int = COPY_REPEATS
) -> CopyBandwidth:
    """Each of `threads` threads copies its own `nbytes`; keep the best of `repeats`.

    NumPy's copy (glibc memcpy underneath) releases the GIL, so the threads copy in parallel. With
    many threads each copies less, so that all sources together stay within COPY_TOTAL_MAX. The
    destinations are written once before timing, so no copy pays for first-touch page faults.
    The best run, not the median, is the roofline: a busy machine only ever makes a copy slower.
    """
    import numpy as np

    threads = threads or usable_cores()
    count = min(nbytes, COPY_TOTAL_MAX // threads) // 4
    pairs = []
    for _ in range(threads):
        src = np.ones(count, dtype=np.float32)
        dst = np.zeros_like(src)
        np.copyto(dst, src)
        pairs.append((dst, src))
    best = float("inf")
    for _ in range(repeats):
        workers = [threading.Thread(target=np.copyto, args=pair) for pair in pairs]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = min(best, time.perf_counter() - start)
    return CopyBandwidth(
        bytes_per_s=2 * threads * count * 4 / best, threads=threads, nbytes=count * 4, repeats=repeats
    )


def streams_with_tunable() -> bool:
    """Whether glibc's memcpy can be told to stream its stores (GLIBC_TUNABLES; Linux on x86)."""
    return (
        sys.platform.startswith("linux")
        and platform.machine().lower() in ("x86_64", "amd64")
        and platform.libc_ver()[0] == "glibc"
    )


class StreamingMeasureError(RuntimeError):
    """The child process that measures with streaming stores failed; the message says how."""


def measure_streaming_copy_bandwidth(
    nbytes: int = COPY_BYTES, threads: int | None = None, repeats: int = COPY_REPEATS
) -> CopyBandwidth | None:
    """`measure_copy_bandwidth` in a child process whose memcpy streams every copy of 1 MiB or more.

    glibc reads GLIBC_TUNABLES once, at process start, so it takes a process of its own. The child
    imports this very module (its folder first on PYTHONPATH, `-P` so the working directory cannot
    shadow it). None where the tunable does not apply.

    Raises:
        StreamingMeasureError: the child failed, timed out or printed no figure.
    """
    if not streams_with_tunable():
        return None
    tunables = os.environ.get("GLIBC_TUNABLES")
    tunables = f"{tunables}:{STREAMING_TUNABLE}" if tunables else STREAMING_TUNABLE
    here = os.path.dirname(own_folder())  # the folder holding the package
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, GLIBC_TUNABLES=tunables, PYTHONPATH=f"{here}{os.pathsep}{path}" if path else here)
    code = (
        "import dataclasses, json; from shardcli.playground.roofline import measure_copy_bandwidth as m; "
        f"print(json.dumps(dataclasses.asdict(m({int(nbytes)}, {threads!r}, {int(repeats)}))))"
    )
    if not sys.executable:
        raise StreamingMeasureError("no Python interpreter to start (sys.executable is empty)")
    try:
        proc = subprocess.run(
            [sys.executable, "-P", "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=STREAMING_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise StreamingMeasureError(f"the child took over {STREAMING_TIMEOUT_S} s") from None
    except OSError as error:
        raise StreamingMeasureError(f"could not start {sys.executable}: {error.strerror or error}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [""])[-1][:200]
        raise StreamingMeasureError(f"the child exited {proc.returncode}" + (f": {last}" if last else ""))
    try:
        copy = CopyBandwidth(**json.loads(proc.stdout))
    except (ValueError, TypeError) as error:
        raise StreamingMeasureError(f"the child printed no figure ({error})") from None
    if not (math.isfinite(copy.bytes_per_s) and copy.bytes_per_s > 0):
        raise StreamingMeasureError(f"the child measured {copy.bytes_per_s} B/s")
    return dataclasses.replace(copy, streaming=True)


def measure_best_copy_bandwidth(threads: int | None = None, repeats: int = COPY_REPEATS) -> CopyBandwidth:
    """The better of the in-process copy bandwidth and the streaming one: the host's roofline.

    Where the streaming measurement failed the in-process figure stands, and its `note` says why.
    """
    here = measure_copy_bandwidth(threads=threads, repeats=repeats)
    try:
        streaming = measure_streaming_copy_bandwidth(threads=threads, repeats=repeats)
    except StreamingMeasureError as error:
        return dataclasses.replace(here, note=f"no streaming-store figure: {error}")
    return streaming if streaming is not None and streaming.bytes_per_s > here.bytes_per_s else here


# The measurement is a property of the machine, so repeat runs (CI calls shardcli many times) read it
# from the cache directory the compiled programs live in instead of spending 0.2-0.3 s on it again.
COPY_CACHE_FILE = "shardcli-copy-bandwidth.json"
COPY_CACHE_VERSION = 1


def host_fingerprint(threads: int) -> str:
    """What a cached copy bandwidth must have been measured on: this host, CPU, cores and memory.

    A cache directory can travel (a shared home, a CI cache restored on another runner), so a
    figure from any other machine, or from a different measurement, is never used.
    """
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 0
    return (
        f"{platform.node()}|{cpu}|{threads} threads|{memory} bytes|"
        f"{COPY_BYTES} bytes x {COPY_REPEATS} repeats, at most {COPY_TOTAL_MAX} bytes in all, "
        f"the better of cached and streaming stores"
    )


COPY_CACHE_HOSTS = 16  # entries kept in the file, newest first: CI runners get new host names


def _load_entries(path: Path) -> dict[str, Any] | None:
    """The file's host entries, or None when it is missing, unreadable or not this version's."""
    try:  # a damaged cache is measured again, not an error
        doc = read_json(str(path))
    except ShardcliError:
        return None
    if not isinstance(doc, dict) or doc.get("version") != COPY_CACHE_VERSION:
        return None
    hosts = doc.get("hosts")
    if not isinstance(hosts, dict):
        return None
    return {key: entry for key, entry in hosts.items() if isinstance(entry, dict)}  # drop odd ones


def _from_entry(entry: Any) -> CopyBandwidth | None:
    """A cached figure, or None for an entry that is not one (measure again)."""
    try:
        copy = CopyBandwidth(
            bytes_per_s=float(entry["bytes_per_s"]),
            threads=int(entry["threads"]),
            nbytes=int(entry["nbytes"]),
            repeats=int(entry["repeats"]),
            measured_at=entry["measured_at"],
            cached=True,
            streaming=entry.get("streaming") is True,
            note=entry.get("note") if isinstance(entry.get("note"), str) else None,
        )
    except (ValueError, KeyError, TypeError, OverflowError):
        return None
    usable = math.isfinite(copy.bytes_per_s) and copy.bytes_per_s > 0 and isinstance(copy.measured_at, str)
    return copy if usable else None


def _write_entries(path: Path, hosts: dict[str, Any]) -> str | None:
    """Write the file whole, then rename it into place; None, or why it could not be written."""
    keep = sorted(hosts.items(), key=lambda kv: str(kv[1].get("measured_at", "")), reverse=True)
    doc = {"version": COPY_CACHE_VERSION, "hosts": dict(keep[:COPY_CACHE_HOSTS])}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:  # a reader never sees half a file; 0o666 less the umask, like any file the user makes
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(doc, out, indent=1)
        os.replace(tmp, path)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return error.strerror or type(error).__name__
    return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on a hidden `.NAME.lock` beside `path` where the platform has one.

    Runs started together on an empty cache would otherwise all measure at once, each seeing a
    share of the memory bandwidth, and store that share as the machine's figure.
    """
    try:
        import fcntl
    except ImportError:  # Windows: runs may measure at once
        yield
        return
    try:
        fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield  # an unwritable directory: the write below says so
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def host_copy_bandwidth(cache_dir: str | None = None) -> CopyBandwidth:
    """This host's copy bandwidth: once per process, and once per machine with a cache directory.

    With `cache_dir` (the compile cache's directory) a figure measured earlier on this machine is
    read from it, and a new measurement is stored there; without one it is measured once per
    process. A cache file that cannot be written never fails a run: the figure's `warning` says
    so, for the render layer to show on stderr.
    """
    return _host_copy_bandwidth(cache_dir)


@functools.lru_cache(maxsize=4)
def _host_copy_bandwidth(cache_dir: str | None) -> CopyBandwidth:
    if cache_dir is None:
        return _measured_now()
    path = Path(cache_dir) / COPY_CACHE_FILE
    key = host_fingerprint(usable_cores())
    cached = _from_entry((_load_entries(path) or {}).get(key))
    if cached is not None:
        return cached
    with _locked(path):
        hosts = _load_entries(path) or {}
        cached = _from_entry(hosts.get(key))  # another run may have measured while we waited
        if cached is not None:
            return cached
        copy = _measured_now()
        hosts[key] = {k: v for k, v in dataclasses.asdict(copy).items() if k not in ("cached", "warning")}
        problem = _write_entries(path, hosts)
    if problem is not None:
        warning = (
            f"shardcli: warning: could not store the copy bandwidth in {path} ({problem}); "
            f"the next run measures it again"
        )
        return dataclasses.replace(copy, warning=warning)
    return copy


def _measured_now() -> CopyBandwidth:
    copy = measure_best_copy_bandwidth()
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return dataclasses.replace(copy, measured_at=when)


def roofline_time(need: MinBytes, bandwidth_bytes_per_s: float) -> float:
    """Seconds the collective takes at best: its bytes at the copy bandwidth."""
    return need.total / bandwidth_bytes_per_s
