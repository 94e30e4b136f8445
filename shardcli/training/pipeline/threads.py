"""`shardcli pipeline`: MPMD pipeline parallelism across sub-meshes, with a recorded timeline.

The leading mesh axis is cut into one sub-mesh per stage. Each stage holds its slice of an MLP
(`tanh(h @ W + b)` layers, W sharded over the remaining mesh axes) and runs it as its own jitted
programs on its sub-mesh; activations and their gradients move between stages with
`jax.device_put` onto the next stage's sharding. Every stage runs in its own thread, following the
schedule (GPipe or 1F1B), so stages overlap as they would on separate hosts, and each step and
transfer is recorded with its start and end time.

`--impl spmd` runs the same pipeline as one SPMD program: a shard_map over the whole mesh in which
each position of the leading axis is a stage and ppermute passes activations along it.

Both are checked against the same model run unpipelined on one device.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardcli.analysis.report import Check
from shardcli.runtime.memory import check_fits_in_memory
from shardcli.runtime.session import Session, open_session
from shardcli.runtime.timing import compile_timed, summarize
from shardcli.training.pipeline.processes import check_stages_on_processes, mpmd_over_processes
from shardcli.training.pipeline.request import PipelineRequest, validate_request
from shardcli.training.pipeline.schedules import textbook_bubble
from shardcli.training.pipeline.stages import (
    Event,
    MpmdRun,
    Plan,
    StageInfo,
    close_check,
    forward,
    grad_check,
    layer_errors,
    loss_of,
    stage_meshes,
)

SPMD_ITERS = 3
QUEUE_POLL_S = 0.5


@dataclass(frozen=True)
class SpmdRun:
    step_s: float  # p50 of the whole step
    compile_s: float
    loss: float | None


@dataclass(frozen=True)
class PipelineResult:
    session: Session
    request: PipelineRequest
    plan: Plan
    mpmd: MpmdRun | None
    spmd: SpmdRun | None
    reference_loss: float | None
    checks: tuple[Check, ...]

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.ok)


# --- the model ------------------------------------------------------------------------------------


def _host_model(
    request: PipelineRequest,
) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    w = request.width
    params = [
        (
            (rng.standard_normal((w, w)) / math.sqrt(w)).astype(np.float32),
            (rng.standard_normal(w) * 0.1).astype(np.float32),
        )
        for _ in range(request.layers)
    ]
    x = rng.standard_normal((request.batch, w)).astype(np.float32)
    target = rng.standard_normal((request.batch, w)).astype(np.float32) * 0.5
    return params, x, target


# --- the reference --------------------------------------------------------------------------------


def _reference(session: Session, params: Any, x: np.ndarray, target: np.ndarray, forward_only: bool) -> Any:
    """All layers on one device, the whole batch at once: output, loss and parameter gradients."""
    import jax

    # This process's first device: with several processes each computes the same reference itself.
    device = next(d for d in session.devices if d.process_index == jax.process_index())
    p, xs, ts = jax.device_put((params, x, target), device)
    y = jax.jit(forward)(p, xs)
    if forward_only:
        return np.asarray(y), None, None
    loss, grads = jax.jit(jax.value_and_grad(lambda p: loss_of(forward(p, xs), ts)))(p)
    return np.asarray(y), float(loss), [(np.asarray(g[0]), np.asarray(g[1])) for g in grads]


# --- MPMD: one program per stage, one thread per stage --------------------------------------------


class _Abort(Exception):
    pass


class _CtrlC:
    """Ctrl-C during a run: note it, and raise KeyboardInterrupt only at points where no JAX call
    is in flight.

    Python's own handler raises inside whatever Python code runs next, which may be a callback that
    JAX's C++ invoked (compiling, monitoring): the exception then crosses C++ frames and aborts the
    process. Here the handler only sets a flag (and tells the stage threads to stop); `check()`
    raises in plain Python.
    """

    def __init__(self) -> None:
        self.hit = threading.Event()
        self.stops: list[threading.Event] = []
        self._previous: Any = None

    def __enter__(self) -> _CtrlC:
        import signal

        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.hit.set()
        for stop in self.stops:
            stop.set()

    def check(self) -> None:
        if self.hit.is_set():
            raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        import signal

        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


_ctrl_c = _CtrlC()


def _take(q: queue.Queue, stop: threading.Event) -> Any:
    while True:
        try:
            return q.get(timeout=QUEUE_POLL_S)
        except queue.Empty:
            if stop.is_set():
                raise _Abort from None


def run_mpmd(
    session: Session, request: PipelineRequest, plan: Plan, params: Any, x: np.ndarray, target: np.ndarray
) -> tuple[MpmdRun, np.ndarray, list | None]:
    """Run the schedule twice (the first pass compiles), record the second.

    Returns:
        The run, the pipeline's output for the whole batch, and the summed parameter gradients.
    """
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    axes = session.spec.axes
    lead, rest = axes[0], tuple(axes[1:])
    meshes = stage_meshes(session, plan)
    lps, mb, S, M = plan.layers_per_stage, plan.microbatch_size, plan.stages, request.microbatches
    act = [NamedSharding(m, P(lead, None)) for m in meshes]
    w_spec, b_spec = (P(None, rest), P(rest)) if rest else (P(), P())
    stage_params = [
        jax.device_put(
            params[s * lps : (s + 1) * lps], [(NamedSharding(m, w_spec), NamedSharding(m, b_spec))] * lps
        )
        for s, m in enumerate(meshes)
    ]
    inputs = [jax.device_put(x[i * mb : (i + 1) * mb], act[0]) for i in range(M)]
    targets = [jax.device_put(target[i * mb : (i + 1) * mb], act[S - 1]) for i in range(M)]

    fwd = [jax.jit(forward, out_shardings=act[s]) for s in range(S)]
    bwd = [jax.jit(lambda p, h, g: jax.vjp(forward, p, h)[1](g)) for _ in range(S)]
    last_bwd = jax.jit(jax.value_and_grad(lambda p, h, t: loss_of(forward(p, h), t) / M, argnums=(0, 1)))
    add = jax.jit(lambda a, b: jax.tree.map(lambda u, v: u + v, a, b))

    compile_s = 0.0
    for s in range(S):  # compile every program before anything is timed
        h = inputs[0] if s == 0 else jax.device_put(inputs[0], act[s])
        compile_s += compile_timed(fwd[s], stage_params[s], h)[1]
        if not request.forward_only:
            if s == S - 1:
                compile_s += compile_timed(last_bwd, stage_params[s], h, targets[0])[1]
            else:
                compile_s += compile_timed(bwd[s], stage_params[s], h, h)[1]
        _ctrl_c.check()

    def one_pass(record: bool) -> tuple[list[Event], list, list, list]:
        events: list[Event] = []
        lock = threading.Lock()
        # (microbatch, activation) forward into each stage; (microbatch, gradient) backward into it
        fq: list[queue.Queue[tuple[int, Any]]] = [queue.Queue() for _ in range(S)]
        bq: list[queue.Queue[tuple[int, Any]]] = [queue.Queue() for _ in range(S)]
        outputs: list[Any] = [None] * M
        grads: list[Any] = [None] * S
        losses: list[Any] = [None] * M
        stop = threading.Event()
        _ctrl_c.stops.append(stop)
        errors: list[BaseException] = []
        t0 = time.perf_counter()

        def note(stage: int, kind: str, m: int, start: float, end: float) -> None:
            if record:
                with lock:
                    events.append(Event(stage, kind, m, start - t0, end - t0))

        def stage_loop(s: int) -> None:
            saved: dict[int, Any] = {}
            try:
                for kind, m in plan.schedule[s]:
                    if stop.is_set():
                        return
                    if kind == "F":
                        if s == 0:
                            h = inputs[m]
                        else:
                            got_m, h = _take(fq[s], stop)
                            assert got_m == m, (s, got_m, m)
                        saved[m] = h
                        start = time.perf_counter()
                        y = fwd[s](stage_params[s], h)
                        y.block_until_ready()
                        note(s, "F", m, start, time.perf_counter())
                        if s < S - 1:
                            start = time.perf_counter()
                            y = jax.device_put(y, act[s + 1])
                            y.block_until_ready()
                            note(s, "send", m, start, time.perf_counter())
                            fq[s + 1].put((m, y))
                        else:
                            outputs[m] = y
                    else:
                        h = saved.pop(m)
                        if s == S - 1:
                            start = time.perf_counter()
                            loss, (gp, gh) = last_bwd(stage_params[s], h, targets[m])
                            losses[m] = loss
                        else:
                            got_m, g = _take(bq[s], stop)
                            assert got_m == m, (s, got_m, m)
                            start = time.perf_counter()
                            gp, gh = bwd[s](stage_params[s], h, g)
                        grads[s] = gp if grads[s] is None else add(grads[s], gp)
                        jax.block_until_ready((grads[s], gh))
                        note(s, "B", m, start, time.perf_counter())
                        if s > 0:
                            start = time.perf_counter()
                            gh = jax.device_put(gh, act[s - 1])
                            gh.block_until_ready()
                            note(s, "send-grad", m, start, time.perf_counter())
                            bq[s - 1].put((m, gh))
            except _Abort:
                pass
            except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
                errors.append(error)
                stop.set()
            finally:
                finished[s].set()

        # Each stage's own "finished" event, not Thread.join/is_alive: on Python 3.11 a join that
        # Ctrl-C interrupts marks the still-running thread stopped (CPython's bpo-45274 handling).
        finished = [threading.Event() for _ in range(S)]
        threads = [threading.Thread(target=stage_loop, args=(s,), daemon=True) for s in range(S)]
        started = 0
        try:
            for t in threads:
                started += 1  # before start: Ctrl-C inside start() leaves the stage running
                try:
                    t.start()
                except RuntimeError:
                    started -= 1  # no thread was launched
                    raise
            for event in finished:
                event.wait()
        finally:
            # Ctrl-C (or any error) in this thread: stop the stages before the interpreter goes on,
            # so no stage is still running JAX work while it shuts down.
            stop.set()
            for event in finished[:started]:
                event.wait()
        _ctrl_c.check()
        if errors:
            raise errors[0]
        return events, outputs, grads, losses

    one_pass(record=False)  # warm-up: first dispatch of every program, first transfers
    events, outputs, grads, losses = one_pass(record=True)
    events.sort(key=lambda e: (e.start, e.stage))
    makespan = max(e.end for e in events) - min(e.start for e in events)
    infos = []
    busy = 0.0
    for s, m in enumerate(meshes):
        compute = sum(e.end - e.start for e in events if e.stage == s and e.kind in ("F", "B"))
        transfer = sum(e.end - e.start for e in events if e.stage == s and e.kind.startswith("send"))
        busy += compute
        infos.append(
            StageInfo(
                stage=s,
                device_ids=tuple(int(d.id) for d in np.asarray(m.devices).flat),
                sub_mesh=tuple(int(n) for n in np.asarray(m.devices).shape),
                layers=(s * lps, (s + 1) * lps),
                compute_s=compute,
                transfer_s=transfer,
            )
        )
    out = np.concatenate([_gather(o) for o in outputs])
    flat_grads = None
    if not request.forward_only:
        flat_grads = [(_gather(w), _gather(b)) for s in range(S) for (w, b) in grads[s]]
    loss = float(sum(float(v) for v in losses)) if not request.forward_only else None
    run = MpmdRun(
        events=tuple(events),
        stages=tuple(infos),
        makespan_s=makespan,
        bubble=1.0 - busy / (S * makespan) if makespan > 0 else 0.0,
        compile_s=compile_s,
        loss=loss,
    )
    return run, out, flat_grads


def _gather(array: Any) -> np.ndarray:
    import jax

    return np.asarray(jax.device_get(array))


# --- SPMD: one shard_map over the whole mesh, ppermute between stage positions --------------------


def run_spmd(
    session: Session, request: PipelineRequest, plan: Plan, params: Any, x: np.ndarray, target: np.ndarray
) -> tuple[SpmdRun, np.ndarray, list | None]:
    """The same pipeline in one program: at step t, stage s works on microbatch t - s."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    lead = session.spec.axes[0]
    S, M, mb, lps, w = (
        plan.stages,
        request.microbatches,
        plan.microbatch_size,
        plan.layers_per_stage,
        request.width,
    )
    ws = np.stack([np.stack([params[s * lps + k][0] for k in range(lps)]) for s in range(S)])
    bs = np.stack([np.stack([params[s * lps + k][1] for k in range(lps)]) for s in range(S)])
    xs = x.reshape(M, mb, w)
    ts = target.reshape(M, mb, w)
    mesh = session.mesh
    ring = [(i, i + 1) for i in range(S - 1)]

    def body(wl: Any, bl: Any, xs: Any) -> Any:
        s = jax.lax.axis_index(lead)
        layers = [(wl[0, k], bl[0, k]) for k in range(lps)]

        def step(t: Any, carry: Any) -> Any:
            state, outs = carry
            fresh = jax.lax.dynamic_index_in_dim(xs, jnp.minimum(t, M - 1), keepdims=False)
            h = forward(layers, jnp.where(s == 0, fresh, state))
            m = jnp.maximum(t - (S - 1), 0)
            done = jnp.where(
                (s == S - 1) & (t >= S - 1), h, jax.lax.dynamic_index_in_dim(outs, m, keepdims=False)
            )
            outs = jax.lax.dynamic_update_index_in_dim(outs, done, m, 0)
            return jax.lax.ppermute(h, lead, ring), outs

        # The carry varies along the stage axis (each stage holds its own): say so up front.
        init = jax.lax.pcast(
            (jnp.zeros((mb, w), xs.dtype), jnp.zeros((M, mb, w), xs.dtype)), (lead,), to="varying"
        )
        _, outs = jax.lax.fori_loop(0, M + S - 1, step, init)
        return jax.lax.psum(jnp.where(s == S - 1, outs, jnp.zeros_like(outs)), lead)

    pipeline = jax.shard_map(body, mesh=mesh, in_specs=(P(lead), P(lead), P()), out_specs=P())
    placed = jax.device_put(
        (ws, bs, xs, ts),
        (
            NamedSharding(mesh, P(lead)),
            NamedSharding(mesh, P(lead)),
            NamedSharding(mesh, P()),
            NamedSharding(mesh, P()),
        ),
    )
    if request.forward_only:
        step = jax.jit(lambda ws, bs, xs, ts: (pipeline(ws, bs, xs), None, None))
    else:

        def loss_fn(ws: Any, bs: Any, xs: Any, ts: Any) -> Any:
            ys = pipeline(ws, bs, xs)
            return loss_of(ys, ts), ys

        def train(ws: Any, bs: Any, xs: Any, ts: Any) -> Any:
            (loss, ys), grads = jax.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)(ws, bs, xs, ts)
            return ys, loss, grads

        step = jax.jit(train)
    compiled, compile_s, _ = compile_timed(step, *placed)
    _ctrl_c.check()
    result = compiled(*placed)
    jax.block_until_ready(result)
    samples = []
    for _ in range(SPMD_ITERS):
        start = time.perf_counter()
        result = compiled(*placed)
        jax.block_until_ready(result)
        samples.append(time.perf_counter() - start)
    ys, loss, grads = result
    flat = None
    if grads is not None:
        gw, gb = _gather(grads[0]), _gather(grads[1])
        flat = [(gw[s, k], gb[s, k]) for s in range(S) for k in range(lps)]
    run = SpmdRun(
        step_s=summarize(tuple(samples)).p50, compile_s=compile_s, loss=None if loss is None else float(loss)
    )
    return run, _gather(ys).reshape(request.batch, w), flat


# --- the whole run --------------------------------------------------------------------------------


def _grad_checks(name: str, grads: list | None, reference: list | None) -> list[Check]:
    """Every layer's W and b gradients against the reference; the detail names the worst one."""
    if grads is None or reference is None:
        return []
    return [grad_check(name, layer_errors(grads, reference))]


def run_pipeline(request: PipelineRequest, progress: Callable[[str], None] | None = None) -> PipelineResult:
    """Run the requested implementations and check them against the unpipelined model.

    Raises:
        ShardcliError: bad input, before JAX starts.
    """
    plan = validate_request(request)
    with _ctrl_c:
        result = _run(request, plan, progress)
        _ctrl_c.check()
    return result


def _run(request: PipelineRequest, plan: Plan, progress: Callable[[str], None] | None) -> PipelineResult:
    w = request.width
    per_device = 4 * (
        plan.layers_per_stage * (w * w + w) * 3 + 4 * plan.microbatch_size * w * request.microbatches
    )
    session = open_session(request.mesh, request.options)
    check_stages_on_processes(session, request, plan)
    check_fits_in_memory(
        session.runtime,
        list(session.devices),
        per_device=per_device,
        total=per_device * request.mesh.size + 4 * request.layers * w * w * 4,
        what=f"a pipeline of {request.layers} layers of width {w}",
    )
    params, x, target = _host_model(request)
    ref_y, ref_loss, ref_grads = _reference(session, params, x, target, request.forward_only)
    _ctrl_c.check()
    checks: list[Check] = []
    mpmd = spmd = None
    if "mpmd" in request.impls and session.runtime.process_count > 1:
        if progress:
            progress("mpmd")
        mpmd, more = mpmd_over_processes(
            session, request, plan, (params, x, target), (ref_y, ref_loss, ref_grads), _ctrl_c.check
        )
        checks += more
    elif "mpmd" in request.impls:
        if progress:
            progress("mpmd")
        mpmd, y, grads = run_mpmd(session, request, plan, params, x, target)
        checks.append(close_check("mpmd: the output matches the unpipelined run", y, ref_y))
        if ref_loss is not None and mpmd.loss is not None:
            checks.append(close_check("mpmd: the loss matches", np.array([mpmd.loss]), np.array([ref_loss])))
        checks += _grad_checks("mpmd", grads, ref_grads)
    if "spmd" in request.impls:
        if progress:
            progress("spmd")
        spmd, y, grads = run_spmd(session, request, plan, params, x, target)
        checks.append(close_check("spmd: the output matches the unpipelined run", y, ref_y))
        if ref_loss is not None and spmd.loss is not None:
            checks.append(close_check("spmd: the loss matches", np.array([spmd.loss]), np.array([ref_loss])))
        checks += _grad_checks("spmd", grads, ref_grads)
    return PipelineResult(
        session=session,
        request=request,
        plan=plan,
        mpmd=mpmd,
        spmd=spmd,
        reference_loss=ref_loss,
        checks=tuple(checks),
    )


def bubble_text(result: PipelineResult) -> tuple[float, float]:
    """The measured bubble and the textbook (S-1)/(M+S-1)."""
    assert result.mpmd is not None
    return result.mpmd.bubble, textbook_bubble(result.plan.stages, result.request.microbatches)
