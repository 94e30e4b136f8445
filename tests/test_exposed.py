"""Exposed communication from the compiled schedule (`shardcli.analysis.exposed`).

Unit rows read hand-written scheduled HLO (what lies between each async collective's start and its
done, in the computation's order); compiled rows read the schedules XLA's GPU and TPU compilers make
for two tiny programs: a chain of tensor-parallel layers whose all-reduces each feed the next matmul
(nothing can hide: the estimate is about compute + communication), and an all-reduce with
independent matmuls beside it (hidden: the estimate stays at the larger of the two).
"""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from shardcli.analysis.collectives import parse_collectives
from shardcli.analysis.exposed import Overlap, exposures, read_overlaps
from shardcli.analysis.hlo.module import parse_module
from shardcli.analysis.kernels import kernel_calls
from shardcli.analysis.loops import runs_per_computation


def _read(text: str):
    module = parse_module(text)
    calls = kernel_calls(module, runs_per_computation(module)).calls
    return read_overlaps(module, parse_collectives(text, (4,), ("x",), module=module), calls)


HEAD = "HloModule m, is_scheduled=true\n\n%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n"
HEAD += "  %b = f32[] parameter(1)\n  ROOT %s = f32[] add(%a, %b)\n}\n\n"
GROUPS = "channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%add"
DOT = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"


def _entry(*lines: str) -> str:
    body = "\n".join(f"  {line}" for line in lines)
    return (
        HEAD
        + "ENTRY %main (p: f32[64,64], q: f32[64,64]) -> f32[64,64] {\n"
        + ("  %p = f32[64,64] parameter(0)\n  %q = f32[64,64] parameter(1)\n" + body + "\n}\n")
    )


START = f"%ar-start = f32[64,64] all-reduce-start(%p), {GROUPS}"
DONE = "%ar-done = f32[64,64] all-reduce-done(%ar-start)"
MATMUL = 2 * 64 * 64 * 64  # FLOPs of one [64,64] x [64,64] dot
F32 = 64 * 64 * 4  # bytes of one [64,64] f32 array

# (the entry's instructions after its parameters, per collective: (FLOPs, bytes, share) of each op
# between its start and done, or None for a synchronous one)
ROWS = [
    pytest.param(
        [START, f"%d = f32[64,64] dot(%q, %q), {DOT}", DONE, "ROOT %r = f32[64,64] add(%ar-done, %d)"],
        [[(MATMUL, 3 * F32, 1.0)]],
        id="a-dot-beside-it",
    ),
    pytest.param(
        [START, DONE, f"ROOT %d = f32[64,64] dot(%ar-done, %q), {DOT}"],
        [[]],
        id="dependent-start-and-done-adjacent",
    ),
    pytest.param(
        [f"%ar = f32[64,64] all-reduce(%p), {GROUPS}", f"ROOT %d = f32[64,64] dot(%ar, %q), {DOT}"],
        [None],
        id="synchronous",
    ),
    pytest.param(
        [
            START,
            f"%ag-start = f32[64,64] all-gather-start(%q), {GROUPS.split(', to_apply')[0]}, dimensions={{0}}",
            f"%d = f32[64,64] dot(%q, %q), {DOT}",
            "%ag-done = f32[64,64] all-gather-done(%ag-start)",
            "%e = f32[64,64] exponential(%d)",
            DONE,
            "ROOT %r = f32[64,64] add(%ar-done, %ag-done)",
        ],
        [[(MATMUL, 3 * F32, 0.5), (0, 2 * F32, 1.0)], [(MATMUL, 3 * F32, 0.5)]],
        id="two-in-flight-share-an-op",
    ),
    pytest.param(
        [
            START,
            "%s = f32[8,64] slice(%q), slice={[0:8], [0:64]}",
            "%b = f32[64,64] bitcast(%q)",
            DONE,
            "ROOT %r = f32[64,64] add(%ar-done, %b)",
        ],
        [[(0, 64 * 4 * 72, 1.0)]],
        id="values-passed-along-cost-nothing",
    ),
]


@pytest.mark.parametrize(("lines", "expected"), ROWS)
def test_what_lies_between_a_start_and_its_done(lines, expected):
    found = _read(_entry(*lines))
    got = [
        None if c.overlap is None else [(op.flops, op.bytes_accessed, op.share) for op in c.overlap.ops]
        for c in found
    ]
    assert got == expected


LOOPED = (
    HEAD
    + """%body (t: (s32[], f32[64,64])) -> (s32[], f32[64,64]) {
  %t = (s32[], f32[64,64]) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = f32[64,64] get-tuple-element(%t), index=1
  %d = f32[64,64] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %o = (s32[], f32[64,64]) tuple(%i, %d)
}

%cond (c: (s32[], f32[64,64])) -> pred[] {
  %c = (s32[], f32[64,64]) parameter(0)
  ROOT %k = pred[] constant(true)
}

ENTRY %main (p: f32[64,64], q: f32[64,64]) -> f32[64,64] {
  %p = f32[64,64] parameter(0)
  %q = f32[64,64] parameter(1)
  %ar-start = f32[64,64] all-reduce-start(%p), GROUPS
  %z = s32[] constant(0)
  %init = (s32[], f32[64,64]) tuple(%z, %q)
  %w = (s32[], f32[64,64]) while(%init), condition=%cond, body=%body, TRIPS
  %ar-done = f32[64,64] all-reduce-done(%ar-start)
  ROOT %r = f32[64,64] get-tuple-element(%w), index=1
}
""".replace("GROUPS", GROUPS).replace("TRIPS", 'backend_config={"known_trip_count":{"n":"5"}}')
)


def test_a_loop_between_a_start_and_its_done_runs_every_trip():
    (c,) = _read(LOOPED)
    assert c.overlap is not None
    assert [(op.name, op.flops, op.share) for op in c.overlap.ops] == [("d", MATMUL, 5.0)]


# A TPU's async collective: its start fusion (root AsyncCollectiveStart), a fusion that carries it
# on beside a convolution, and its done fusion (root AsyncCollectiveDone), all three holding a copy
# of the all-gather (one channel); the all-reduce fusion beside it is another, synchronous collective.
TPU = (
    HEAD
    + """%start_comp (a0: f32[16,64]) -> (f32[16,64], f32[64,64], u32[]) {
  %a0 = f32[16,64] parameter(0)
  %ag.1 = f32[64,64] all-gather(%a0), channel_id=8, replica_groups={{0,1,2,3}}, dimensions={0}
  ROOT %cs = (f32[16,64], f32[64,64], u32[]) custom-call(%ag.1), custom_call_target="AsyncCollectiveStart"
}

%carry_comp (c0: f32[16,64], c1: f32[64,64], c2: f32[64,64]) -> (f32[64,64], f32[16,64], f32[64,64]) {
  %c0 = f32[16,64] parameter(0)
  %c1 = f32[64,64] parameter(1)
  %c2 = f32[64,64] parameter(2)
  %ag.2 = f32[64,64] all-gather(%c0), channel_id=8, replica_groups={{0,1,2,3}}, dimensions={0}
  %conv = f32[64,64] convolution(%c2, %c2), dim_labels=bf_io->bf
  ROOT %ct = (f32[64,64], f32[16,64], f32[64,64]) tuple(%conv, %c0, %ag.2)
}

%done_comp (d0: f32[16,64], d1: f32[64,64]) -> f32[64,64] {
  %d0 = f32[16,64] parameter(0)
  %d1 = f32[64,64] parameter(1)
  %ag.3 = f32[64,64] all-gather(%d0), channel_id=8, replica_groups={{0,1,2,3}}, dimensions={0}
  ROOT %cd = f32[64,64] custom-call(%d0, %d1, %ag.3), custom_call_target="AsyncCollectiveDone"
}

%ars_comp (r0: f32[64,64]) -> f32[64,64] {
  %r0 = f32[64,64] parameter(0)
  ROOT %ar.4 = f32[64,64] all-reduce(%r0), channel_id=6, replica_groups={{0,1,2,3}}, to_apply=%add
}

ENTRY %main (p: f32[16,64], q: f32[64,64]) -> f32[64,64] {
  %p = f32[16,64] parameter(0)
  %q = f32[64,64] parameter(1)
  %start = (f32[16,64], f32[64,64], u32[]) fusion(%p), kind=kCustom, calls=%start_comp
  %s0 = f32[16,64] get-tuple-element(%start), index=0
  %s1 = f32[64,64] get-tuple-element(%start), index=1
  %carry = (f32[64,64], f32[16,64], f32[64,64]) fusion(%s0, %s1, %q), kind=kOutput, calls=%carry_comp
  %y = f32[64,64] get-tuple-element(%carry), index=0
  %ars = f32[64,64] fusion(%y), kind=kCustom, calls=%ars_comp
  %k0 = f32[16,64] get-tuple-element(%carry), index=1
  %k1 = f32[64,64] get-tuple-element(%carry), index=2
  %done = f32[64,64] fusion(%k0, %k1), kind=kCustom, calls=%done_comp
  ROOT %r = f32[64,64] add(%done, %ars)
}
"""
)


def test_a_tpu_async_collective_is_one_transfer_hidden_by_the_fusions_that_carry_it():
    found = _read(TPU)
    assert [(c.kind, c.name, c.overlap is not None) for c in found] == [
        ("all-gather", "ag.1", True),
        ("all-reduce", "ar.4", False),
    ]
    ops = found[0].overlap.ops
    # the carrying fusion's convolution; the synchronous all-reduce fusion is no op that hides it
    assert [(op.name, op.flops) for op in ops] == [("carry", MATMUL)]


def test_exposed_is_what_the_ops_between_do_not_cover_per_run():
    (c,) = _read(
        _entry(START, f"%d = f32[64,64] dot(%q, %q), {DOT}", DONE, "ROOT %r = f32[64,64] copy(%ar-done)")
    )
    c = dataclasses.replace(c, runs=3)
    sync, told = dataclasses.replace(c, overlap=None), dataclasses.replace(c, overlap=Overlap(ops_s=0.25))
    # each run moves for 1 s; the dot beside it takes 0.4 s
    found = exposures([c, sync, told], lambda _: 1.0, lambda op: 0.4 if op.flops else 0.0)
    assert [(e.seconds, e.exposed_s, e.hidden_s) for e in found] == [
        (3.0, pytest.approx(1.8), pytest.approx(1.2)),
        (3.0, 3.0, 0.0),
        (3.0, 2.25, 0.75),
    ]
    assert exposures([c], lambda _: None, lambda op: 0.0)[0].exposed_s is None


# --- the schedules the compilers make -------------------------------------------------------------

D = 4096


def _chain(mesh):
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    def body(x, w1, w2):
        for i in range(w1.shape[0]):  # each layer's all-reduce feeds the next layer's matmul
            x = jax.lax.psum(jnp.tanh(x @ w1[i]) @ w2[i], "x")
        return x

    specs = (P(), P(None, None, "x"), P(None, "x", None))
    shapes = ((D, D), (4, D, D), (4, D, D))
    return jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=P(), check_vma=False), specs, shapes


def _beside(mesh):
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    def body(y, w, g, u):
        part = jax.lax.psum(g @ u, "x")  # needed by nothing the loop computes
        for _ in range(4):
            y = jnp.tanh(y @ w)
        return y, part

    specs = (P(), P(), P(None, "x"), P("x", None))
    shapes = ((D, D),) * 4
    fn = jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=(P(), P()), check_vma=False)
    return fn, specs, shapes


def _estimate(target_name: str, program):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding

    from shardcli.analysis.program import analyze_compiled
    from shardcli.analysis.step_time import step_time_of
    from shardcli.analysis.target import compiler_options, open_target_session
    from shardcli.hardware.targets import parse_target
    from shardcli.specs.runs import RunOptions

    target = parse_target(target_name)
    session = open_target_session(target, "8", "x", RunOptions())
    fn, specs, shapes = program(session.mesh)
    args = [
        jax.ShapeDtypeStruct(s, jnp.bfloat16, sharding=NamedSharding(session.mesh, p))
        for s, p in zip(shapes, specs, strict=True)
    ]
    compiled = jax.jit(fn).lower(*args).compile(compiler_options(target))
    analysis = analyze_compiled(compiled, session.mesh)
    kind = next(iter(session.mesh.devices.flat)).device_kind
    step = step_time_of(analysis, session.mesh, kind, "bfloat16")
    assert step is not None and step.estimate_s is not None and step.t_comm_s
    assert step.math.seconds is not None
    # the ops' part: a GPU's per-op roofline, a TPU's max(T_math, T_hbm)
    compute = step.ops.seconds if step.ops is not None else max(step.math.seconds, step.hbm.seconds or 0.0)
    return analysis, step, compute


GPU = pytest.mark.skipif(
    importlib.util.find_spec("jax_cuda12_plugin") is None, reason="the gpu extra: jax_cuda12_plugin"
)
TPU_EXTRA = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="the tpu extra: libtpu")


@pytest.mark.slow  # compiles whole programs
@pytest.mark.parametrize(
    ("target", "asynchronous"),
    [
        pytest.param("gpu-h100:8", True, marks=GPU, id="gpu"),
        pytest.param("tpu-v5e:2x4", None, marks=TPU_EXTRA, id="tpu"),
    ],
)
def test_a_dependent_chain_hides_nothing(target, asynchronous):
    analysis, step, compute = _estimate(target, _chain)
    if asynchronous:  # XLA's GPU scheduler (jax 0.10): each start right before its done, a slice
        # between; jax 0.12's CUDA plugin leaves some synchronous. Each async one's overlap is read.
        assert all(c.overlap is not None for c in analysis.collectives if c.is_async)
    sum_s = compute + step.t_comm_s
    assert step.t_exposed_s >= 0.9 * step.t_comm_s
    assert step.estimate_s * step.efficiency >= 0.85 * sum_s


@GPU
def test_an_all_reduce_beside_independent_matmuls_is_hidden():
    analysis, step, compute = _estimate("gpu-h100:8", _beside)
    (c,) = analysis.collectives
    assert c.overlap is not None and any(op.kernel for op in c.overlap.ops)  # a cuBLAS GEMM beside it
    assert step.t_exposed_s == 0.0
    assert step.estimate_s == pytest.approx(max(compute, step.t_comm_s))
    assert compute + step.t_comm_s > 1.08 * step.estimate_s  # so the sum would have been wrong


def test_a_cpu_compile_has_synchronous_collectives_exposed_whole():
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from shardcli.analysis.program import analyze_compiled

    mesh = Mesh(jax.devices()[:4], ("x",))
    fn = jax.shard_map(
        lambda a, b: jax.lax.psum(a @ b, "x"), mesh=mesh, in_specs=(P(None, "x"), P("x")), out_specs=P()
    )
    args = [
        jax.ShapeDtypeStruct((16, 16), jnp.float32, sharding=NamedSharding(mesh, p))
        for p in (P(None, "x"), P("x"))
    ]
    analysis = analyze_compiled(jax.jit(fn).lower(*args).compile(), mesh)
    assert [(c.kind, c.overlap) for c in analysis.collectives] == [("all-reduce", None)]


def test_plans_cached_figures_keep_what_the_schedule_exposed():
    """`plan` keeps per mesh axis the bytes its compiled schedule left exposed; the estimate made from
    the cached figures counts those after the ops and hides the rest, as the compile's own did."""
    from shardcli.analysis.step_time import AxisLink, estimate_step
    from shardcli.hardware.chips import CHIPS
    from shardcli.plan.compiled_figures import AxisTraffic, CompiledFigures
    from shardcli.plan.estimate import analysis_of

    links = {"model": AxisLink("model", 4, 45e9, "ICI", "table")}
    # 450 MB over 45 GB/s: 10 ms, of which 90 MB (2 ms) exposed; 20 ms of maths at v5e's 197 TFLOP/s
    traffic = (AxisTraffic("model", 450e6, 10, "all-reduce", "psum", exposed_bytes=90e6),)
    figures = CompiledFigures(True, 1, 2, None, None, 3.94e12, 8.19e9, traffic, "scan", 0.0, "")
    step = estimate_step(analysis_of(figures), CHIPS["tpu-v5e"], links, "bfloat16")
    assert (step.t_comm_s, step.t_exposed_s) == (pytest.approx(0.010), pytest.approx(0.002))
    assert step.bound_s == pytest.approx(0.022)
