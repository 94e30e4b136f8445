"""Compiling a candidate layout for the target: an `inspect` of the decoder's train step, cached on disk.

A candidate is compiled by the same path `shardcli inspect --target` takes (`program.inspect.inspect_program`
on a target session: the real compiler, abstract shapes, `program_analysis` reading the result).
What the plan needs from it is kept as plain figures (`CompiledFigures`): memory per chip and the
fit verdict, FLOPs and bytes accessed per step, and the bytes each mesh axis carries with the
collective that carries most. Per-layer costs come from one of two readings:

- `scan`: the program as it trains (layers under `lax.scan`), its loop bodies counted per trip;
- `layers`: 1- and 2-layer copies with no loop, extrapolated per layer (cost = c1 + (L - 1)(c2 - c1));
  memory and the fit verdict still come from the full program.

Figures are cached as JSON under the user's cache directory (`plan/` beside JAX's compile cache),
keyed by everything that changes the program (the environment the compilers read included:
`compile_environment`), so a second plan compiles only what changed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shardcli.hardware.targets import TargetSpec
from shardcli.plan.candidates import Candidate, MeshChoice
from shardcli.specs.decoder import DecoderConfig
from shardcli.specs.runs import RunOptions

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
METHODS = ("scan", "layers")
# The compiler's own collective-matmul loops (windowed einsums) are turned off for cost compiles: a
# gather split into a loop of permutes hides which weights move (JAX_NOTES: real programs).
COST_FLAGS = (
    "--xla_tpu_enable_windowed_einsum_for_all_gather=false",
    "--xla_tpu_enable_windowed_einsum_for_reduce_scatter=false",
)


@dataclass(frozen=True)
class AxisTraffic:
    """What one mesh axis (or group of axes) carries in one step, per chip."""

    axes: str  # "fsdp", "tensor", "fsdp+tensor", "?"
    sent_bytes: float
    collectives: int  # ops run per step
    top_kind: str  # the collective that sends most over it
    top_op: str  # and the JAX operation it comes from
    # of `sent_bytes`, what the compiled schedule leaves exposed on the target (`analysis.exposed`):
    # the rest moves while the ops between its collectives' starts and dones run
    exposed_bytes: float = 0.0


@dataclass(frozen=True)
class KernelCost:
    """Library kernel calls of one kind and cost per step (cuBLAS GEMMs, cuDNN attention on a GPU):
    what the GPU's per-op roofline (`analysis.op_roofline.op_roofline`) reads of them."""

    kind: str  # "gemm", "attention", "convolution"
    flops: float  # one call
    bytes_accessed: float  # one call
    dtype: str | None
    runs: int  # calls per step
    narrowest: int | None = None  # its matmuls' narrowest dimension (splash: the head dim)


@dataclass(frozen=True)
class CompiledFigures:
    """A candidate's figures from the compiler, per chip and per step."""

    fits: bool
    needed_bytes: int | None
    capacity_bytes: int
    argument_bytes: int | None
    temp_bytes: int | None
    flops: float | None
    bytes_accessed: float | None
    traffic: tuple[AxisTraffic, ...]
    method: str
    compile_s: float
    fit_text: str
    refused: str | None = None  # the compiler refused it for another reason than memory
    notes: tuple[str, ...] = field(default_factory=tuple)
    kernels: tuple[KernelCost, ...] = ()  # a GPU's library kernels (in flops and bytes_accessed)
    launches: tuple[int, int, int] | None = None  # on a GPU: kernels launched, loop trips, buffers
    host_bytes: int = 0  # kept in the host's memory (remat's offloaded activations)
    host_transfer_bytes: float = 0.0  # moved between the chip and the host per step

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> CompiledFigures:
        data = dict(data)
        data["traffic"] = tuple(AxisTraffic(**t) for t in data["traffic"])
        data["notes"] = tuple(data.get("notes", ()))
        data["kernels"] = tuple(KernelCost(**k) for k in data.get("kernels", ()))
        if data.get("launches") is not None:
            data["launches"] = tuple(data["launches"])
        return CompiledFigures(**data)


# --- the cache ------------------------------------------------------------------------------------


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


# --- compiling ------------------------------------------------------------------------------------


def set_cost_flags() -> None:
    """The compiler's collective-matmul loops off for cost compiles, before libtpu starts."""
    import sys

    if "jax" in sys.modules and "jax._src.xla_bridge" in sys.modules:
        from jax._src import xla_bridge

        if getattr(xla_bridge, "_backends", None):
            return  # libtpu read its flags already
    have = os.environ.get("LIBTPU_INIT_ARGS", "")
    from shardcli.analysis.target import note_users_libtpu_args

    note_users_libtpu_args(" ".join(w for w in have.split() if w not in COST_FLAGS))
    extra = [f for f in COST_FLAGS if f.split("=")[0] not in have]
    if extra:
        os.environ["LIBTPU_INIT_ARGS"] = " ".join([have, *extra]).strip()


def target_session(
    sessions: dict[tuple[Any, ...], Any], target: TargetSpec, mesh: MeshChoice, options: RunOptions
) -> Any:
    """A target session with a layout's mesh, one per target and mesh (kept in `sessions`); the
    cost compiles' flags set before the first starts libtpu. Over several slices the mesh's axes
    span them as the layout says (`MeshChoice.dcn`)."""
    key = (target.name, target.slices, mesh.shape, mesh.axes, mesh.dcn)
    if key not in sessions:
        from shardcli.analysis.target import open_target_session

        set_cost_flags()
        shape = "x".join(map(str, mesh.shape))
        dcn = mesh.dcn_shape if target.slices > 1 else None
        sessions[key] = open_target_session(target, shape, ",".join(mesh.axes), options, dcn=dcn)
    return sessions[key]


_ABANDONED: list[Any] = []  # for each compile a Ctrl-C or SIGTERM left running, the event it sets when done


def abandoned_compiles() -> bool:
    """Whether a compile that Ctrl-C (or SIGTERM) left is still running in its thread.

    Asked of the compile's own "finished" event, never of `Thread.is_alive()`: on Python 3.11 a
    `join` that Ctrl-C interrupts marks the thread stopped while it still runs (CPython's bpo-45274
    handling releases the lock the running thread holds), and Python's exit then tore the compile's
    C++ frames down under it (a SIGSEGV report after the output, about one run in three)."""
    return any(not finished.is_set() for finished in _ABANDONED)


def interruptible(work: Callable[[], Any]) -> Any:
    """Run `work` in a thread the main thread waits on, so that Ctrl-C ends the wait at once (a
    compile inside libtpu would hold the signal until it returned); the abandoned compile ends with
    the process (`shardcli.cli` leaves without waiting for it).

    The compile changes the process's streams while it runs (descriptor 2 to a file for libtpu's
    noise, `sys.stdout` to stderr while the user's code is traced); an interrupted wait puts them
    back, so that what finished is printed where it belongs.
    """
    import sys
    import threading

    box: dict[str, Any] = {}
    finished = threading.Event()

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread as it is
            box["error"] = error
        finally:
            finished.set()

    streams = (sys.stdout, sys.stderr)
    sys.stderr.flush()
    fd2 = os.dup(2)
    try:
        thread = threading.Thread(target=run, name="shardcli-plan-compile", daemon=True)
        try:
            thread.start()  # waits for the thread to start: Ctrl-C there leaves it running too
            # An event's wait, not the thread's join: Ctrl-C may end either, and only the join's
            # leaves the thread marked stopped (see `abandoned_compiles`).
            while not finished.wait(0.2):
                pass
        except BaseException:
            _ABANDONED.append(finished)
            sys.stdout, sys.stderr = streams
            os.dup2(fd2, 2)
            raise
    finally:
        os.close(fd2)
    if "error" in box:
        raise box["error"]
    return box["value"]


def figures_for(
    key: str,
    use_cache: bool,
    label: str,
    compile_figures: Callable[[], CompiledFigures],
    sources: Callable[[], dict[str, str]] | None = None,
) -> tuple[CompiledFigures, bool]:
    """A layout's figures from the cache, or compiled (Ctrl-C ends the wait at once) and cached.

    Args:
        sources: the user's files the program was built from (path -> `file_digest`), asked after
            the compile and kept in the entry; a cached entry is used only while they are unchanged.

    Returns:
        (figures, whether they came from the cache).

    Raises:
        KeyboardInterrupt: Ctrl-C during the compile; nothing is cached for it.
    """
    figures = read_cached(key) if use_cache else None
    if figures is not None:
        return figures, True
    figures = interruptible(compile_figures)
    write_cached(key, figures, label, sources() if sources is not None else None)
    return figures, False


def _traffic(analysis: Any, step: Any = None) -> tuple[AxisTraffic, ...]:
    """Bytes sent per step over each mesh axis (group), with the collective that sends most, and what
    of them the schedule leaves exposed (`step`'s share of each axis's seconds; all without a step)."""
    exposed = _exposed_shares(step)
    groups: dict[str, list[Any]] = {}
    for c in analysis.collectives:
        # by the mesh axes themselves (a strided part of an axis moves over that axis's links)
        axes = "+".join(c.mesh_axes) if c.mesh_axes is not None else "?"
        groups.setdefault(axes, []).append(c)
    out = []
    for axes, ops in groups.items():
        top = max(ops, key=lambda c: c.sent_bytes * c.runs)
        sent = float(sum(c.sent_bytes * c.runs for c in ops))
        out.append(
            AxisTraffic(
                axes=axes,
                sent_bytes=sent,
                collectives=sum(c.runs for c in ops),
                top_kind=top.kind,
                top_op=top.op or "the partitioner",
                exposed_bytes=sent * exposed.get(axes, 1.0),
            )
        )
    return tuple(sorted(out, key=lambda t: -t.sent_bytes))


def _exposed_shares(step: Any) -> dict[str, float]:
    """Per set of mesh axes, the share of its collectives' seconds the schedule leaves exposed."""
    seconds: dict[str, list[float]] = {}
    for e in step.exposure if step is not None else ():
        if e.seconds is None or e.exposed_s is None:
            continue
        axes = "+".join(e.collective.mesh_axes) if e.collective.mesh_axes is not None else "?"
        total = seconds.setdefault(axes, [0.0, 0.0])
        total[0] += e.exposed_s
        total[1] += e.seconds
    return {axes: exposed / whole for axes, (exposed, whole) in seconds.items() if whole > 0}


def _kernels(analysis: Any) -> tuple[KernelCost, ...]:
    """The program's library kernels, calls of one kind, cost and dtype added together."""
    runs: dict[tuple[str, float, float, str | None, int | None], int] = {}
    for call in analysis.kernels.calls:
        key = (call.kind, call.flops, call.bytes_accessed, call.dtype, call.narrowest)
        runs[key] = runs.get(key, 0) + call.runs
    return tuple(KernelCost(k, f, b, d, n, w) for (k, f, b, d, w), n in runs.items())


def _inspect(session: Any, cfg: DecoderConfig, c: Candidate, target: TargetSpec, unrolled: int | None) -> Any:
    """inspect of the decoder's train step (or an unrolled copy) on the candidate's mesh."""
    from shardcli.plan.decoder import build_train_step
    from shardcli.program.inspect import inspect_program

    program = build_train_step(
        cfg, c.rules, session.mesh, remat=c.remat, global_batch=c.global_batch, unrolled=unrolled
    )
    return inspect_program(session, f"{cfg.name} train step", program.fn, program.args, target=target)


def figures_of(result: Any, target: TargetSpec, method: str, seconds: float) -> CompiledFigures:
    """The figures of one `inspect` of a program on the target (the program as it trains)."""
    fit = result.fit
    analysis = result.analysis
    memory = analysis.memory if analysis is not None else None
    return CompiledFigures(
        fits=bool(fit is not None and fit.fits),
        needed_bytes=fit.needed_bytes if fit is not None else None,
        capacity_bytes=fit.capacity_bytes if fit is not None else target.generation.hbm_bytes,
        argument_bytes=memory.argument_bytes if memory is not None else None,
        temp_bytes=memory.temp_bytes if memory is not None else None,
        flops=analysis.flops if analysis is not None else None,
        bytes_accessed=analysis.bytes_accessed if analysis is not None else None,
        traffic=_traffic(analysis, result.step) if analysis is not None else (),
        method=method,
        compile_s=seconds,
        fit_text=fit.text if fit is not None else "no memory analysis",
        notes=tuple(analysis.missing) if analysis is not None else (),
        kernels=_kernels(analysis) if analysis is not None else (),
        launches=_launches(analysis),
        host_bytes=memory.host_bytes if memory is not None else 0,
        host_transfer_bytes=analysis.host_transfer_bytes if analysis is not None else 0.0,
    )


def _launches(analysis: Any) -> tuple[int, int, int] | None:
    found = getattr(analysis, "launches", None)
    return (found.kernels, found.loop_trips, found.buffers) if found is not None else None


def compile_candidate(
    session: Any, cfg: DecoderConfig, c: Candidate, target: TargetSpec, method: str
) -> CompiledFigures:
    """The candidate's figures from the compiler (see the module's docstring for `method`)."""
    from dataclasses import replace

    start = time.perf_counter()
    full = _inspect(session, cfg, c, target, None)
    figures = figures_of(full, target, method, 0.0)
    if method == "layers" and full.analysis is not None:
        one = _inspect(session, cfg, c, target, 1).analysis
        two = _inspect(session, cfg, c, target, 2).analysis
        flops, bytes_accessed, traffic = _extrapolate(one, two, cfg.layers)
        # each axis's exposed share as the whole program's schedule leaves it
        share = {t.axes: t.exposed_bytes / t.sent_bytes for t in figures.traffic if t.sent_bytes}
        figures = replace(
            figures,
            flops=flops,
            bytes_accessed=bytes_accessed,
            traffic=tuple(replace(t, exposed_bytes=t.sent_bytes * share.get(t.axes, 1.0)) for t in traffic),
            kernels=_extrapolate_kernels(_kernels(one), _kernels(two), cfg.layers),
            launches=_extrapolate_launches(_launches(one), _launches(two), cfg.layers),
            notes=("costs from 1- and 2-layer copies, extrapolated per layer",),
        )
    return replace(figures, compile_s=time.perf_counter() - start)


def _extrapolate(
    one: Any, two: Any, layers: int
) -> tuple[float | None, float | None, tuple[AxisTraffic, ...]]:
    """c(L) = c1 + (L - 1)(c2 - c1) for FLOPs, bytes accessed and each axis's traffic."""

    def line(a: float | None, b: float | None) -> float | None:
        if a is None or b is None:
            return None
        return a + (layers - 1) * (b - a)

    t1 = {t.axes: t for t in _traffic(one)}
    t2 = {t.axes: t for t in _traffic(two)}
    traffic = []
    for axes in dict.fromkeys([*t2, *t1]):
        a, b = t1.get(axes), t2.get(axes)
        sent = line(a.sent_bytes if a else 0.0, b.sent_bytes if b else 0.0) or 0.0
        count = line(float(a.collectives if a else 0), float(b.collectives if b else 0)) or 0.0
        top = b or a
        assert top is not None
        traffic.append(AxisTraffic(axes, max(sent, 0.0), max(int(round(count)), 0), top.top_kind, top.top_op))
    traffic.sort(key=lambda t: -t.sent_bytes)
    return line(one.flops, two.flops), line(one.bytes_accessed, two.bytes_accessed), tuple(traffic)


def _extrapolate_launches(
    one: tuple[int, int, int] | None, two: tuple[int, int, int] | None, layers: int
) -> tuple[int, int, int] | None:
    """Kernels and loop trips per step, c(L) = c1 + (L - 1)(c2 - c1); the buffers of the whole
    program (the layers' weights: as many more per layer)."""
    if one is None or two is None:
        return None
    k, t, b = (a + (layers - 1) * (c - a) for a, c in zip(one, two, strict=True))
    return (max(k, 0), max(t, 0), max(b, 0))


def _extrapolate_kernels(
    one: tuple[KernelCost, ...], two: tuple[KernelCost, ...], layers: int
) -> tuple[KernelCost, ...]:
    """Each kernel's calls per step, c(L) = c1 + (L - 1)(c2 - c1)."""
    runs1 = {(k.kind, k.flops, k.bytes_accessed, k.dtype, k.narrowest): k.runs for k in one}
    runs2 = {(k.kind, k.flops, k.bytes_accessed, k.dtype, k.narrowest): k.runs for k in two}
    out = []
    for key in dict.fromkeys([*runs2, *runs1]):
        a, b = runs1.get(key, 0), runs2.get(key, 0)
        runs = a + (layers - 1) * (b - a)
        if runs > 0:
            kind, flops, accessed, dtype, narrowest = key
            out.append(KernelCost(kind, flops, accessed, dtype, runs, narrowest))
    return tuple(out)
