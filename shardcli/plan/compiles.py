"""Compiling a candidate layout for the target: an `inspect` of the decoder's train step, cached on disk.

A candidate is compiled by the same path `shardcli inspect --target` takes (`program.inspect.inspect_program`
on a target session: the real compiler, abstract shapes, `program_analysis` reading the result).
What the plan needs from it is kept as plain figures (`plan.compiled_figures`): memory per chip and the
fit verdict, FLOPs and bytes accessed per step, and the bytes each mesh axis carries with the
collective that carries most. Per-layer costs come from one of two readings:

- `scan`: the program as it trains (layers under `lax.scan`), its loop bodies counted per trip;
- `layers`: 1- and 2-layer copies with no loop, extrapolated per layer (cost = c1 + (L - 1)(c2 - c1));
  memory and the fit verdict still come from the full program.

Figures are cached on disk (`plan.compile_cache`), keyed by everything that changes the program, so
a second plan compiles only what changed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from shardcli.hardware.targets import TargetSpec
from shardcli.plan.candidates import Candidate, MeshChoice
from shardcli.plan.compile_cache import (
    COST_FLAGS,
    read_cached,
    write_cached,
)
from shardcli.plan.compiled_figures import AxisTraffic, CompiledFigures, KernelCost
from shardcli.specs.decoder import DecoderConfig
from shardcli.specs.runs import RunOptions

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
