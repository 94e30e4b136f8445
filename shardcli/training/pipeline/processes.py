"""MPMD pipeline over several processes (`shardcli launch -n N -- pipeline`): each stage's sub-mesh
on the process(es) that own its devices, activations and gradients moved between processes.

JAX 0.10 cannot move an array to another process's devices outside a collective: `jax.device_put`
onto a sharding whose devices another process owns raises "does not support cross-host device
transfers" on CPU (its experimental DCN transfer flags hung or aborted here). So a transfer between
two stages on different processes is a collective over the joint mesh of the two sub-meshes (a new
leading axis `pair`: 0 the sending stage, 1 the receiving one): a `ppermute` from pair 0 to pair 1,
into which the sender puts its blocks and the receiver zeros. That is the tutorial's send/recv
(poor-man's MPMD's `mini_dime.send_or_recv`): the sender's half of the collective is the send, the
receiver's the recv into a zero buffer (its `recv_buf_factory`). Stages on the same process move
activations with `jax.device_put`, as in one process.

A collective must be entered by every process it spans, in the same order, so every process walks
one global order of the steps and transfers (a simulation of the schedule in which each step runs
as soon as its inputs arrived) and runs the ones its devices take part in: lock-step, one thread per
process. Stages that share a process therefore do not overlap in time here (one thread), which the
timeline shows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardcli.analysis.report import Check
from shardcli.errors import ShardcliError
from shardcli.runtime.processes import gather_from_processes
from shardcli.runtime.session import Session
from shardcli.runtime.timing import compile_timed
from shardcli.training.pipeline.stages import (
    Event,
    MpmdRun,
    Plan,
    StageInfo,
    close_check,
    error_of,
    forward,
    grad_check,
    layer_errors,
    loss_of,
    stage_meshes,
)

Step = tuple[str, int, int]  # (kind, stage, microbatch): F, B, send (s -> s+1), send-grad (s -> s-1)
KINDS = ("F", "B", "send", "send-grad")


def global_order(schedule: tuple[tuple[tuple[str, int], ...], ...], forward_only: bool) -> list[Step]:
    """Every step and transfer of the pipeline in one order that every process can follow.

    Each stage runs its schedule in its own order; a step runs once its input arrived (the
    activation from the stage before, the gradient from the stage after), and its transfer follows
    it at once. Walking the stages round-robin gives an order in which nothing waits on a later item.

    Raises:
        ShardcliError: the schedule cannot finish (a bug in a schedule).
    """
    stages = len(schedule)
    at = [0] * stages
    arrived: set[tuple[str, int, int]] = set()  # ("act" | "grad", stage, microbatch)
    order: list[Step] = []
    while any(at[s] < len(schedule[s]) for s in range(stages)):
        moved = False
        for s in range(stages):
            if at[s] >= len(schedule[s]):
                continue
            kind, m = schedule[s][at[s]]
            if kind == "F" and s > 0 and ("act", s, m) not in arrived:
                continue
            if kind == "B" and s < stages - 1 and ("grad", s, m) not in arrived:
                continue
            order.append((kind, s, m))
            if kind == "F" and s < stages - 1:
                order.append(("send", s, m))
                arrived.add(("act", s + 1, m))
            if kind == "B" and s > 0:
                order.append(("send-grad", s, m))
                arrived.add(("grad", s - 1, m))
            at[s] += 1
            moved = True
        if not moved:
            raise ShardcliError("the pipeline schedule cannot finish: a stage waits for an input never sent")
    del forward_only
    return order


@dataclass
class _Link:
    """Moving arrays from one stage's sub-mesh to another's: device_put within a process, else a
    ppermute over the joint mesh of the two."""

    src: int
    dst: int
    local: bool  # both sub-meshes are wholly on this process
    joint: Any  # the joint mesh, or None
    send: Any  # the jitted ppermute over the joint mesh, or None


def _addressable(mesh: Any) -> list[bool]:
    import jax

    me = jax.process_index()
    return [d.process_index == me for d in np.asarray(mesh.devices).flat]


class _Stages:
    """The stage sub-meshes, their activation shardings, and the links between neighbours."""

    def __init__(self, session: Session, plan: Plan) -> None:
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        self.axes = session.spec.axes
        self.meshes = stage_meshes(session, plan)
        self.act = [NamedSharding(m, P(self.axes[0], None)) for m in self.meshes]
        mine = [_addressable(m) for m in self.meshes]
        self.takes_part = [any(flags) for flags in mine]  # this process owns some of the stage's devices
        self.whole = [all(flags) for flags in mine]
        self.links: dict[tuple[int, int], _Link] = {}
        for s in range(plan.stages - 1):
            for src, dst in ((s, s + 1), (s + 1, s)):
                self.links[src, dst] = self._link(src, dst)

    def _link(self, src: int, dst: int) -> _Link:
        import jax
        from jax.sharding import Mesh
        from jax.sharding import PartitionSpec as P

        if self.whole[src] and self.whole[dst]:
            return _Link(src, dst, True, None, None)
        devices = np.stack([np.asarray(self.meshes[src].devices), np.asarray(self.meshes[dst].devices)])
        joint = Mesh(devices, ("pair", *self.axes))
        spec = P("pair", self.axes[0])
        send = jax.jit(
            jax.shard_map(
                lambda block: jax.lax.ppermute(block, "pair", [(0, 1)]),
                mesh=joint,
                in_specs=spec,
                out_specs=spec,
            )
        )
        return _Link(src, dst, False, joint, send)

    def move(self, src: int, dst: int, array: Any, shape: tuple[int, ...], dtype: Any) -> Any:
        """`array` (on stage src's sub-mesh; None where this process holds none of it) onto stage
        dst's; returns it where this process holds some of dst, else None."""
        import jax
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        link = self.links[src, dst]
        if link.local:
            return jax.device_put(array, self.act[dst])
        if array is not None and not array.sharding.is_equivalent_to(self.act[src], len(shape)):
            array = jax.device_put(array, self.act[src])  # a gradient as the compiler left it
        joint_sharding = NamedSharding(link.joint, P("pair", self.axes[0], None))
        by_device = {s.device.id: s.data for s in array.addressable_shards} if array is not None else {}
        index: dict[Any, Any] = dict(joint_sharding.addressable_devices_indices_map((2, *shape)))
        local = joint_sharding.shard_shape((2, *shape))
        blocks = []
        for device in index:
            if device.id in by_device:
                blocks.append(jax.numpy.expand_dims(by_device[device.id], 0))
            else:  # the receiving half: a zero buffer for the ppermute to fill
                blocks.append(jax.device_put(np.zeros(local, dtype), device))
        joint = jax.make_array_from_single_device_arrays((2, *shape), joint_sharding, blocks)
        moved = link.send(joint)
        if not self.takes_part[dst]:
            moved.block_until_ready()
            return None
        dst_ids = {d.id for d in np.asarray(self.meshes[dst].devices).flat}
        received = [s.data[0] for s in moved.addressable_shards if s.device.id in dst_ids]
        return jax.make_array_from_single_device_arrays(shape, self.act[dst], received)


@dataclass(frozen=True)
class ProcessesOutcome:
    """What each process holds after the run: None where another process holds it."""

    run: MpmdRun
    output: np.ndarray | None  # the last stage's output for the whole batch
    grads: list[tuple[np.ndarray, np.ndarray] | None]  # per layer
    loss: float | None


def run_mpmd_processes(
    session: Session,
    request: Any,
    plan: Plan,
    params: Any,
    x: np.ndarray,
    target: np.ndarray,
    check_interrupt: Callable[[], None],
) -> ProcessesOutcome:
    """Run the schedule over the processes twice (the first pass compiles the transfers); record
    the second."""
    import jax
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    stages = _Stages(session, plan)
    lps, mb, S, M = plan.layers_per_stage, plan.microbatch_size, plan.stages, request.microbatches
    rest = tuple(session.spec.axes[1:])
    w_spec, b_spec = (P(None, rest), P(rest)) if rest else (P(), P())
    part = stages.takes_part
    stage_params: list[Any] = [
        jax.device_put(
            params[s * lps : (s + 1) * lps], [(NamedSharding(m, w_spec), NamedSharding(m, b_spec))] * lps
        )
        if part[s]
        else None
        for s, m in enumerate(stages.meshes)
    ]
    act = stages.act
    inputs = [jax.device_put(x[i * mb : (i + 1) * mb], act[0]) for i in range(M)] if part[0] else []
    targets = (
        [jax.device_put(target[i * mb : (i + 1) * mb], act[S - 1]) for i in range(M)] if part[S - 1] else []
    )
    fwd = [jax.jit(forward, out_shardings=act[s]) for s in range(S)]
    bwd = [jax.jit(lambda p, h, g: jax.vjp(forward, p, h)[1](g)) for _ in range(S)]
    last_bwd = jax.jit(jax.value_and_grad(lambda p, h, t: loss_of(forward(p, h), t) / M, argnums=(0, 1)))
    add = jax.jit(lambda a, b: jax.tree.map(lambda u, v: u + v, a, b))
    shape, dtype = (mb, request.width), np.float32

    compile_s = 0.0
    for s in range(S):
        if not part[s]:
            continue
        h = jax.device_put(x[:mb], act[s])
        compile_s += compile_timed(fwd[s], stage_params[s], h)[1]
        if not request.forward_only:
            if s == S - 1:
                compile_s += compile_timed(last_bwd, stage_params[s], h, targets[0])[1]
            else:
                compile_s += compile_timed(bwd[s], stage_params[s], h, h)[1]
        check_interrupt()
    order = global_order(plan.schedule, request.forward_only)

    def one_pass() -> tuple[np.ndarray, list[Any], list[Any], list[Any]]:
        times = np.full((len(order), 2), np.nan)
        acts: dict[tuple[int, int], Any] = {}  # (stage, m): the activation that reached the stage
        grads_in: dict[tuple[int, int], Any] = {}
        out_act: dict[tuple[int, int], Any] = {}  # to send on
        out_grad: dict[tuple[int, int], Any] = {}
        saved: dict[tuple[int, int], Any] = {}
        outputs: list[Any] = [None] * M
        grads: list[Any] = [None] * S
        losses: list[Any] = [None] * M
        multihost_utils.sync_global_devices("shardcli-pipeline-pass")
        t0 = time.perf_counter()
        for k, (kind, s, m) in enumerate(order):
            start = time.perf_counter()
            if kind == "F" and part[s]:
                h = inputs[m] if s == 0 else acts.pop((s, m))
                saved[s, m] = h
                y = fwd[s](stage_params[s], h)
                y.block_until_ready()
                if s == S - 1:
                    outputs[m] = y
                else:
                    out_act[s, m] = y
            elif kind == "B" and part[s]:
                h = saved.pop((s, m))
                if s == S - 1:
                    loss, (gp, gh) = last_bwd(stage_params[s], h, targets[m])
                    losses[m] = loss
                else:
                    gp, gh = bwd[s](stage_params[s], h, grads_in.pop((s, m)))
                grads[s] = gp if grads[s] is None else add(grads[s], gp)
                jax.block_until_ready((grads[s], gh))
                if s > 0:
                    out_grad[s, m] = gh
            elif kind in ("send", "send-grad"):
                dst = s + 1 if kind == "send" else s - 1
                if not (part[s] or part[dst]):
                    continue
                held = (out_act if kind == "send" else out_grad).pop((s, m), None)
                moved = stages.move(s, dst, held, shape, dtype)
                if moved is not None:
                    moved.block_until_ready()
                    (acts if kind == "send" else grads_in)[dst, m] = moved
            else:
                continue
            times[k] = (start - t0, time.perf_counter() - t0)
            check_interrupt()
        return times, outputs, grads, losses

    one_pass()  # warm-up: the first call of every program and transfer compiles it
    times, outputs, grads, losses = one_pass()
    return _outcome(session, plan, request, stages, order, times, outputs, grads, losses, compile_s)


def _outcome(
    session: Session,
    plan: Plan,
    request: Any,
    stages: _Stages,
    order: list[Step],
    times: np.ndarray,
    outputs: list[Any],
    grads: list[Any],
    losses: list[Any],
    compile_s: float,
) -> ProcessesOutcome:
    """The timeline from every process's times (a transfer spans both of its ends), and what this
    process holds of the results."""
    import jax

    S, lps = plan.stages, plan.layers_per_stage
    every = gather_from_processes(times)  # (processes, steps, 2)
    with np.errstate(all="ignore"):
        starts = np.nanmin(every[:, :, 0], axis=0)
        ends = np.nanmax(every[:, :, 1], axis=0)
    events = sorted(
        (
            Event(s, kind, m, float(a), float(b))
            for (kind, s, m), a, b in zip(order, starts, ends, strict=True)
            if np.isfinite(a) and np.isfinite(b)
        ),
        key=lambda e: (e.start, e.stage),
    )
    makespan = max(e.end for e in events) - min(e.start for e in events)
    infos, busy = [], 0.0
    for s, mesh in enumerate(stages.meshes):
        compute = sum(e.end - e.start for e in events if e.stage == s and e.kind in ("F", "B"))
        busy += compute
        infos.append(
            StageInfo(
                stage=s,
                device_ids=tuple(int(d.id) for d in np.asarray(mesh.devices).flat),
                sub_mesh=tuple(int(n) for n in np.asarray(mesh.devices).shape),
                layers=(s * lps, (s + 1) * lps),
                compute_s=compute,
                transfer_s=sum(e.end - e.start for e in events if e.stage == s and e.kind.startswith("send")),
            )
        )
    held_loss = (
        float(sum(float(v) for v in losses)) if stages.whole[S - 1] and not request.forward_only else np.nan
    )
    losses_everywhere = gather_from_processes(np.array([held_loss], dtype=np.float32))[:, 0]
    known = losses_everywhere[np.isfinite(losses_everywhere)]
    loss = float(known[0]) if known.size and not request.forward_only else None
    compiled = float(gather_from_processes(np.array([compile_s], dtype=np.float32)).sum())
    run = MpmdRun(
        events=tuple(events),
        stages=tuple(infos),
        makespan_s=makespan,
        bubble=1.0 - busy / (S * makespan) if makespan > 0 else 0.0,
        compile_s=compiled,
        loss=loss,
    )
    output = None
    if stages.whole[S - 1]:
        output = np.concatenate([np.asarray(jax.device_get(o)) for o in outputs])
    layer_grads: list[tuple[np.ndarray, np.ndarray] | None] = []
    for s in range(S):
        for k in range(lps):
            if request.forward_only or not stages.whole[s]:
                layer_grads.append(None)
                continue
            w, b = grads[s][k]
            layer_grads.append((np.asarray(jax.device_get(w)), np.asarray(jax.device_get(b))))
    return ProcessesOutcome(run=run, output=output, grads=layer_grads, loss=loss)


def check_stages_on_processes(session: Session, request: Any, plan: Plan) -> None:
    """Over several processes: mpmd only, and each stage's sub-mesh on one process.

    Raises:
        ShardcliError: spmd asked for, or a stage whose devices several processes own.
    """
    count = session.runtime.process_count
    if count == 1:
        return
    if "spmd" in request.impls:
        raise ShardcliError(
            f"--impl spmd runs in one process; over {count} processes give --impl mpmd (each stage on "
            f"its own process)"
        )
    for s, mesh in enumerate(stage_meshes(session, plan)):
        owners = sorted({d.process_index for d in np.asarray(mesh.devices).flat})
        if len(owners) > 1:
            raise ShardcliError(
                f"stage {s}'s sub-mesh spans processes {', '.join(map(str, owners))}; over {count} "
                f"processes give at most {plan.stages} (-n) so that each stage is on one process"
            )


def mpmd_over_processes(
    session: Session,
    request: Any,
    plan: Plan,
    model: tuple[Any, np.ndarray, np.ndarray],
    reference: tuple[np.ndarray, float | None, list | None],
    check_interrupt: Callable[[], None],
) -> tuple[MpmdRun, list[Check]]:
    """MPMD with the stages on several processes; each checks what it holds, the checks combine."""
    params, x, target = model
    ref_y, ref_loss, ref_grads = reference
    done = run_mpmd_processes(session, request, plan, params, x, target, check_interrupt)
    held = np.array(error_of(done.output, ref_y) if done.output is not None else (np.nan, np.nan))
    err, bound = np.nanmax(gather_from_processes(held.astype(np.float32)), axis=0)
    ok = bool(err <= bound)
    checks = [
        Check(
            "mpmd: the output matches the unpipelined run",
            ok,
            f"max |err| {err:.2e} {'<=' if ok else '>'} {bound:.2e} (1e-4 x max|ref|)",
        )
    ]
    if ref_loss is not None and done.loss is not None:
        checks.append(close_check("mpmd: the loss matches", np.array([done.loss]), np.array([ref_loss])))
    if ref_grads is not None:
        errors = gather_from_processes(layer_errors(done.grads, ref_grads).astype(np.float32))
        with np.errstate(all="ignore"):
            checks.append(grad_check("mpmd", np.nanmax(errors, axis=0)))
    return done.run, checks
