"""Compiling a candidate layout for the target: an `inspect` of the decoder's train step, cached on disk.

A candidate is compiled by the same path `shardcli inspect --target` takes (`core.inspect.inspect_program`
on a target session: the real compiler, abstract shapes, `program_analysis` reading the result).
What the plan needs from it is kept as plain figures (`CompiledFigures`): memory per chip and the
fit verdict, FLOPs and bytes accessed per step, and the bytes each mesh axis carries with the
collective that carries most. Per-layer costs come from one of two readings:

- `scan`: the program as it trains (layers under `lax.scan`), its loop bodies counted per trip;
- `layers`: 1- and 2-layer copies with no loop, extrapolated per layer (cost = c1 + (L - 1)(c2 - c1));
  memory and the fit verdict still come from the full program.

Figures are cached as JSON under the user's cache directory (`plan/` beside JAX's compile cache),
keyed by everything that changes the program, so a second plan compiles only what changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shardcli.core.plan_candidates import Candidate, MeshChoice
from shardcli.decoder_spec import DecoderConfig
from shardcli.specs import RunOptions
from shardcli.targets import TargetSpec

CACHE_FORMAT = "shardcli-plan/1"  # raise it when what is read from a compile changes
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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> CompiledFigures:
        data = dict(data)
        data["traffic"] = tuple(AxisTraffic(**t) for t in data["traffic"])
        data["notes"] = tuple(data.get("notes", ()))
        return CompiledFigures(**data)


# --- the cache ------------------------------------------------------------------------------------


def plan_cache_dir() -> Path:
    """`plan/` beside JAX's persistent compile cache (`$SHARDCLI_CACHE_DIR/../plan`)."""
    from shardcli.core.cache import default_cache_dir

    return default_cache_dir().parent / "plan"


def cache_key(cfg: DecoderConfig, candidate: Candidate, target: TargetSpec, method: str) -> str:
    """A digest of everything that changes the compiled program or how it is read."""
    return keyed(
        {
            "model": asdict(cfg) | {"name": "", "source": ""},
            "layout": candidate.key,
            "target": target.name,
            "method": method,
            "program": _program_digest(),
        }
    )


def keyed(what: dict[str, Any]) -> str:
    """The cache key of a compile described by `what`, with what every compile shares: the cache's
    format, the compilers' versions (jax, jaxlib, libtpu, JAX's CUDA plugin) and the cost compiles' flags."""
    from shardcli.compilers import compiler_versions

    compiler = dict(compiler_versions("tpu")) | dict(compiler_versions("cuda"))
    shared = {"format": CACHE_FORMAT, "compiler": compiler, "flags": COST_FLAGS}
    return hashlib.sha256(json.dumps(what | shared, sort_keys=True).encode()).hexdigest()[:32]


def _program_digest() -> str:
    """A digest of the decoder's source: a change to the program compiles again (the parameters' shapes
    and axes are in the model's fields and the layout's rules)."""
    return hashlib.sha256((Path(__file__).parent / "decoder.py").read_bytes()).hexdigest()[:16]


def read_cached(key: str) -> CompiledFigures | None:
    path = plan_cache_dir() / f"{key}.json"
    try:
        data = json.loads(path.read_text())
        if data.get("format") != CACHE_FORMAT:
            return None
        return CompiledFigures.from_json(data["figures"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_cached(key: str, figures: CompiledFigures, label: str) -> None:
    """Keep the figures (a cache that cannot be written is skipped: the plan goes on)."""
    directory = plan_cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"format": CACHE_FORMAT, "layout": label, "figures": figures.to_json()}))
        tmp.replace(directory / f"{key}.json")
    except OSError:
        pass


# --- compiling ------------------------------------------------------------------------------------


def set_cost_flags() -> None:
    """The compiler's collective-matmul loops off for cost compiles, before libtpu starts."""
    import sys

    if "jax" in sys.modules and "jax._src.xla_bridge" in sys.modules:
        from jax._src import xla_bridge

        if getattr(xla_bridge, "_backends", None):
            return  # libtpu read its flags already
    have = os.environ.get("LIBTPU_INIT_ARGS", "")
    from shardcli.core.target import note_users_libtpu_args

    note_users_libtpu_args(" ".join(w for w in have.split() if w not in COST_FLAGS))
    extra = [f for f in COST_FLAGS if f.split("=")[0] not in have]
    if extra:
        os.environ["LIBTPU_INIT_ARGS"] = " ".join([have, *extra]).strip()


def target_session(
    sessions: dict[tuple[Any, ...], Any], target: TargetSpec, mesh: MeshChoice, options: RunOptions
) -> Any:
    """A target session with a layout's mesh, one per target and mesh (kept in `sessions`); the
    cost compiles' flags set before the first starts libtpu."""
    key = (target.name, mesh.shape, mesh.axes)
    if key not in sessions:
        from shardcli.core.target import open_target_session

        set_cost_flags()
        shape = "x".join(map(str, mesh.shape))
        sessions[key] = open_target_session(target, shape, ",".join(mesh.axes), options)
    return sessions[key]


_ABANDONED: list[Any] = []  # compile threads a Ctrl-C or SIGTERM left running


def abandoned_compiles() -> bool:
    """Whether a compile that Ctrl-C (or SIGTERM) left is still running in its thread."""
    return any(thread.is_alive() for thread in _ABANDONED)


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

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread as it is
            box["error"] = error

    streams = (sys.stdout, sys.stderr)
    sys.stderr.flush()
    fd2 = os.dup(2)
    try:
        thread = threading.Thread(target=run, name="shardcli-plan-compile", daemon=True)
        thread.start()
        try:
            while thread.is_alive():
                thread.join(0.2)
        except BaseException:
            _ABANDONED.append(thread)
            sys.stdout, sys.stderr = streams
            os.dup2(fd2, 2)
            raise
    finally:
        os.close(fd2)
    if "error" in box:
        raise box["error"]
    return box["value"]


def figures_for(
    key: str, use_cache: bool, label: str, compile_figures: Callable[[], CompiledFigures]
) -> tuple[CompiledFigures, bool]:
    """A layout's figures from the cache, or compiled (Ctrl-C ends the wait at once) and cached.

    Returns:
        (figures, whether they came from the cache).

    Raises:
        KeyboardInterrupt: Ctrl-C during the compile; nothing is cached for it.
    """
    figures = read_cached(key) if use_cache else None
    if figures is not None:
        return figures, True
    figures = interruptible(compile_figures)
    write_cached(key, figures, label)
    return figures, False


def _traffic(analysis: Any) -> tuple[AxisTraffic, ...]:
    """Bytes sent per step over each mesh axis (group), with the collective that sends most."""
    groups: dict[str, list[Any]] = {}
    for c in analysis.collectives:
        # by the mesh axes themselves (a strided part of an axis moves over that axis's links)
        axes = "+".join(c.mesh_axes) if c.mesh_axes is not None else "?"
        groups.setdefault(axes, []).append(c)
    out = []
    for axes, ops in groups.items():
        top = max(ops, key=lambda c: c.sent_bytes * c.runs)
        out.append(
            AxisTraffic(
                axes=axes,
                sent_bytes=float(sum(c.sent_bytes * c.runs for c in ops)),
                collectives=sum(c.runs for c in ops),
                top_kind=top.kind,
                top_op=top.op or "the partitioner",
            )
        )
    return tuple(sorted(out, key=lambda t: -t.sent_bytes))


def _inspect(session: Any, cfg: DecoderConfig, c: Candidate, target: TargetSpec, unrolled: int | None) -> Any:
    """inspect of the decoder's train step (or an unrolled copy) on the candidate's mesh."""
    from shardcli.core.decoder import build_train_step
    from shardcli.core.inspect import inspect_program

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
        traffic=_traffic(analysis) if analysis is not None else (),
        method=method,
        compile_s=seconds,
        fit_text=fit.text if fit is not None else "no memory analysis",
        notes=tuple(analysis.missing) if analysis is not None else (),
    )


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
        figures = replace(
            figures,
            flops=flops,
            bytes_accessed=bytes_accessed,
            traffic=traffic,
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
