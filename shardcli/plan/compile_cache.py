"""The plan's cache of compiled figures: JSON under the user's cache directory (`plan/` beside JAX's
compile cache), one entry per compile, keyed by everything that changes the program (the environment
the compilers read included: `compile_environment`), each entry checked field by field when read
(a damaged or foreign entry is a miss, never an error)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from shardcli.hardware.targets import TargetSpec
from shardcli.plan.candidates import Candidate
from shardcli.plan.compiled_figures import METHODS, CompiledFigures
from shardcli.specs.decoder import DecoderConfig

# The compiler's own collective-matmul loops (windowed einsums) are turned off for cost compiles: a
# gather split into a loop of permutes hides which weights move (JAX_NOTES: real programs).
COST_FLAGS = (
    "--xla_tpu_enable_windowed_einsum_for_all_gather=false",
    "--xla_tpu_enable_windowed_einsum_for_reduce_scatter=false",
)

# Raise it when what is read from a compile changes. 2: a GPU program's library kernels kept, and an
# async collective written ((operands), results) counted by its results (a reduce-scatter's had been
# counted with its n-times-larger operand).
# 3: a GPU program's launches (kernels, loop trips, buffers) kept.
# 4: cuDNN's fused attention counted from its scores' shape, its backward whole, a causal mask's share.
# 5: TPU splash attention's kernels counted; instructions printed on several lines read; the TPU's
# async-collective wrappers and ConcatBitcast are data movement, not calls of unknown cost.
# 6: remat policies by MaxText's names (the decoder's activations named); the bytes kept in the host's
# memory and moved to and from it. 7: each kernel's narrowest matmul dimension (a TPU's MXU padding).
# 8: each axis's bytes the compiled schedule leaves exposed (`analysis.exposed`); a TPU async
# collective's copies in the fusions that carry it on and finish it read as one transfer.
# 9: a fusion parameter taken only by slices through a bitcast or reshape is read as its slices by
# the ops beside a collective (`analysis.hlo.ops.sliced_bytes`), so its exposed bytes may change.
CACHE_FORMAT = "shardcli-plan/9"


def plan_cache_dir() -> Path:
    """`plan/` beside JAX's persistent compile cache (`$SHARDCLI_CACHE_DIR/../plan`)."""
    from shardcli.runtime.cache import default_cache_dir

    return default_cache_dir().parent / "plan"


def cache_key(cfg: DecoderConfig, candidate: Candidate, target: TargetSpec, method: str) -> str:
    """A digest of everything that changes the compiled program or how it is read (on a GPU the
    settings of JAX's memory pool too: they change the fit verdict)."""
    what: dict[str, Any] = {
        "model": asdict(cfg) | {"name": "", "source": ""},
        "layout": candidate.key,
        "target": target.name,
        "method": method,
        "program": _program_digest(),
    }
    if target.slices > 1:
        what["slices"] = target.slices
    if target.generation.platform == "cuda":
        from shardcli.analysis.target import GPU_COMPILE_OPTIONS
        from shardcli.hardware.gpu_memory import read_gpu_pool

        what["gpu_pool"] = list(read_gpu_pool(os.environ).settings)
        what["compile_options"] = GPU_COMPILE_OPTIONS
    return keyed(what)


def keyed(what: dict[str, Any]) -> str:
    """The cache key of a compile described by `what`, with what every compile shares: the cache's
    format, the compilers' versions (jax, jaxlib, libtpu, JAX's CUDA plugin) and the cost compiles' flags."""
    from shardcli.hardware.compilers import compiler_versions

    compiler = dict(compiler_versions("tpu")) | dict(compiler_versions("cuda"))
    shared = {
        "format": CACHE_FORMAT,
        "compiler": compiler,
        "flags": COST_FLAGS,
        "environment": compile_environment(os.environ),
    }
    return hashlib.sha256(json.dumps(what | shared, sort_keys=True).encode()).hexdigest()[:32]


# Variables JAX or XLA read that say where and how a process runs, not what a compile makes: they
# stay out of the cache key (a different value would only compile again). Every other XLA_*, JAX_*
# and LIBTPU_INIT_ARGS is in it: XLA_FLAGS, a matmul precision, x64 change the compiled program.
_RUN_ONLY_VARIABLES = frozenset(
    {
        "JAX_PLATFORMS",
        "JAX_PLATFORM_NAME",
        "JAX_NUM_CPU_DEVICES",
        "JAX_COMPILATION_CACHE_DIR",
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES",
        "JAX_LOGGING_LEVEL",
        "JAX_TRACEBACK_FILTERING",
        "JAX_COORDINATOR_ADDRESS",
        "JAX_COORDINATOR_BIND_ADDRESS",
        "JAX_NUM_PROCESSES",
        "JAX_PROCESS_ID",
        "JAX_LOCAL_DEVICE_IDS",
    }
)


def compile_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of `environ` that change what a compile makes (XLA_FLAGS, LIBTPU_INIT_ARGS
    less the cost compiles' own flags, JAX's configuration), as the cache key holds them."""
    held = {
        name: value
        for name, value in environ.items()
        if (name.startswith(("XLA_", "JAX_")) or name == "LIBTPU_INIT_ARGS")
        and name not in _RUN_ONLY_VARIABLES
        and value.strip()
    }
    if "LIBTPU_INIT_ARGS" in held:  # set_cost_flags adds COST_FLAGS to the user's own
        users = " ".join(word for word in held["LIBTPU_INIT_ARGS"].split() if word not in COST_FLAGS)
        if users:
            held["LIBTPU_INIT_ARGS"] = users
        else:
            del held["LIBTPU_INIT_ARGS"]
    return held


def _program_digest() -> str:
    """A digest of the decoder's source and of what each remat policy keeps and offloads: a change to
    the program compiles again (the parameters' shapes and axes are in the model's fields and the
    layout's rules)."""
    sources = (Path(__file__).parent / "decoder.py", Path(__file__).parent.parent / "specs" / "remat.py")
    return hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:16]


MAX_ENTRY_BYTES = 1 << 20  # an entry is a few KiB; anything larger is not one of ours


def read_cached(key: str) -> CompiledFigures | None:
    """The figures cached under `key`, or None when there are none or the entry cannot be trusted.

    Every entry is checked before use: a regular file (a FIFO in its place would block the read),
    JSON of this cache's format, each figure of its type (`"fits": "no"` is no verdict), and the
    user's files it was compiled from (its `sources`: path -> digest, recorded after the compile, so
    a module the program imports while it is traced counts too) unchanged. An entry that fails is
    ignored: the layout is compiled again and its entry written anew.
    """
    path = plan_cache_dir() / f"{key}.json"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        import stat

        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ENTRY_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as entry:
            data = json.loads(entry.read(MAX_ENTRY_BYTES + 1))
    except (OSError, ValueError, RecursionError):
        return None
    finally:
        os.close(fd)
    return _valid_entry(data)


def _valid_entry(data: Any) -> CompiledFigures | None:
    """The figures of a decoded entry, or None where anything in it is not what `write_cached` writes."""
    if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
        return None
    recorded = data.get("sources", {})
    if not isinstance(recorded, dict) or any(
        not isinstance(p, str) or file_digest(p) != d for p, d in recorded.items()
    ):
        return None  # a file the program imported (even while traced) changed since
    figures = data.get("figures")
    if not isinstance(figures, dict) or set(figures) != _FIELDS:
        return None
    try:
        checks = [_is(figures[name], kinds) for name, kinds in _FIELD_KINDS.items()]
        traffic = figures["traffic"]
        checks.append(isinstance(traffic, list) and all(_valid_record(t, _TRAFFIC_KINDS) for t in traffic))
        checks.append(figures["method"] in METHODS)
        checks.append(
            isinstance(figures["notes"], list) and all(isinstance(n, str) for n in figures["notes"])
        )
        kernels, launches = figures["kernels"], figures["launches"]
        checks.append(isinstance(kernels, list) and all(_valid_record(k, _KERNEL_KINDS) for k in kernels))
        checks.append(
            launches is None
            or (isinstance(launches, list) and len(launches) == 3 and all(_is(n, (int,)) for n in launches))
        )
        if not all(checks):
            return None
        return CompiledFigures.from_json(figures)
    except (TypeError, ValueError, KeyError):
        return None


_NUMBER = (int, float)


# each figure's JSON types (besides traffic, method and notes); numbers must be finite and >= 0
_FIELD_KINDS: dict[str, tuple[type, ...]] = {
    "fits": (bool,),
    "needed_bytes": (int, type(None)),
    "capacity_bytes": (int,),
    "argument_bytes": (int, type(None)),
    "temp_bytes": (int, type(None)),
    "flops": (*_NUMBER, type(None)),
    "bytes_accessed": (*_NUMBER, type(None)),
    "compile_s": _NUMBER,
    "fit_text": (str,),
    "refused": (str, type(None)),
    "host_bytes": (int,),
    "host_transfer_bytes": _NUMBER,
}


_FIELDS = {*_FIELD_KINDS, "traffic", "method", "notes", "kernels", "launches"}


def _is(value: Any, kinds: tuple[type, ...]) -> bool:
    """`value` is one of `kinds` (a bool is no number here), and a number is finite and not negative."""
    import math

    if isinstance(value, bool) and bool not in kinds:
        return False
    if not isinstance(value, kinds):
        return False
    return not isinstance(value, _NUMBER) or isinstance(value, bool) or (math.isfinite(value) and value >= 0)


# the JSON types of one traffic record and of one kernel record
_TRAFFIC_KINDS: dict[str, tuple[type, ...]] = {
    "axes": (str,),
    "sent_bytes": _NUMBER,
    "collectives": (int,),
    "top_kind": (str,),
    "top_op": (str,),
    "exposed_bytes": _NUMBER,
}


_KERNEL_KINDS: dict[str, tuple[type, ...]] = {
    "kind": (str,),
    "flops": _NUMBER,
    "bytes_accessed": _NUMBER,
    "dtype": (str, type(None)),
    "runs": (int,),
    "narrowest": (int, type(None)),
}


def _valid_record(value: Any, kinds: dict[str, tuple[type, ...]]) -> bool:
    """`value` is a dict of exactly the keys of `kinds`, each of its types (see `_is`)."""
    return (
        isinstance(value, dict)
        and set(value) == set(kinds)
        and all(_is(value[k], v) for k, v in kinds.items())
    )


def file_digest(path: str) -> str | None:
    """The SHA-256 of a regular file's bytes (first 16 hex digits), or None where it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as source:
            return hashlib.sha256(source.read()).hexdigest()[:16]
    except OSError:
        return None
    finally:
        os.close(fd)


def write_cached(
    key: str, figures: CompiledFigures, label: str, sources: dict[str, str] | None = None
) -> None:
    """Keep the figures (a cache that cannot be written is skipped: the plan goes on, and a file
    half written, on a full disk, is removed)."""
    directory = plan_cache_dir()
    tmp = directory / f".{key}.{os.getpid()}.tmp"
    entry: dict[str, Any] = {"format": CACHE_FORMAT, "layout": label, "figures": figures.to_json()}
    if sources is not None:
        entry["sources"] = sources
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(entry))
        tmp.replace(directory / f"{key}.json")
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
