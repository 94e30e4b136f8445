"""The one reading of compiled programs: collectives with mesh axes, runs, source; memory; FLOPs."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardcli.analysis.hlo.arrays import dot_dtype
from shardcli.analysis.hlo.module import parse_module
from shardcli.analysis.hlo.trips import find_loops
from shardcli.analysis.program import CollectiveOp, analyze_compiled, count_trips, parse_collectives

MESH_2x4 = ((2, 4), ("data", "model"))


def _one(line: str, mesh=MESH_2x4) -> CollectiveOp:
    # the reduction its to_apply names: a module that calls a computation it lacks is no module
    add = "%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n"
    add += "  ROOT %s = f32[] add(%a, %b)\n}\n\n"
    text = f"{add}ENTRY %main (p: f32[4]) -> f32[4] {{\n  {line}\n}}\n"
    (op,) = parse_collectives(text, *mesh)
    return op


@pytest.mark.parametrize(
    ("line", "kind", "axes", "size"),
    [
        pytest.param(
            "%a = f32[4,32]{1,0} all-reduce(%x), replica_groups={{0,1,2,3},{4,5,6,7}}, to_apply=%add",
            "all-reduce",
            ("model",),
            4,
            id="listed-groups-model",
        ),
        pytest.param(
            "%a = f32[4]{0} all-reduce(%x), replica_groups={{0,4},{1,5},{2,6},{3,7}}, to_apply=%add",
            "all-reduce",
            ("data",),
            2,
            id="listed-groups-data",
        ),
        pytest.param(
            "%a = f32[4]{0} all-reduce(%x), replica_groups={}, to_apply=%add",
            "all-reduce",
            ("data", "model"),
            8,
            id="empty-groups-every-device",
        ),
        pytest.param(
            "%g = f32[8]{0} all-gather(%x), replica_groups=[2,4]<=[8], dimensions={0}",
            "all-gather",
            ("model",),
            4,
            id="iota-rows",
        ),
        pytest.param(
            "%g = f32[8]{0} all-gather(%x), replica_groups=[4,2]<=[2,4]T(1,0), dimensions={0}",
            "all-gather",
            ("data",),
            2,
            id="iota-transposed",
        ),
        pytest.param(
            "%r = f32[2]{0} reduce-scatter(%x), replica_groups=mesh['axis_0'=2,'axis_1'=1,'axis_2'=4] "
            "{'axis_0'}, dimensions={0}, to_apply=%add",
            "reduce-scatter",
            ("data",),
            2,
            id="named-mesh-form",
        ),
        pytest.param(
            "%p = f32[4]{0} collective-permute(%x), source_target_pairs={{0,1},{1,2},{2,3},{3,0}}",
            "collective-permute",
            ("model",),
            4,
            id="permute-pairs",
        ),
        pytest.param(
            "%a = f32[4]{0} all-reduce(%x), replica_groups={{0,1,4},{2,3,5,6,7}}, to_apply=%add",
            "all-reduce",
            None,
            3,
            id="groups-that-follow-no-axes",
        ),
    ],
)
def test_replica_groups_name_the_mesh_axes(line, kind, axes, size):
    op = _one(line)
    assert (op.kind, op.mesh_axes, op.group_size) == (kind, axes, size)


def test_bytes_sent_follow_the_ring_conventions():
    ar = _one("%a = f32[1024]{0} all-reduce(%x), replica_groups={{0,1,2,3},{4,5,6,7}}, to_apply=%add")
    assert ar.result_bytes == 4096 and ar.sent_bytes == 2 * 3 * 4096 // 4
    rs = _one("%r = f32[256]{0} reduce-scatter(%x), replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}")
    assert rs.sent_bytes == 3 * 1024  # (n-1)/n of the 4x larger input
    ag = _one("%g = f32[1024]{0} all-gather(%x), replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}")
    assert ag.sent_bytes == 3 * 1024


def test_loop_trip_counts_multiply_runs_and_unknown_ones_are_marked():
    text = """
%add (a: f32[], b: f32[]) -> f32[] {
  ROOT %s = f32[] add(%a, %b)
}
%c (p: f32[4]) -> pred[] {
  ROOT %k = pred[] constant(true)
}
%body (p: f32[4]) -> f32[4] {
  %a = f32[4]{0} all-reduce(%p), replica_groups={{0,1}}, to_apply=%add
}
%inner (p: f32[4]) -> f32[4] {
  %g = f32[8]{0} all-gather(%p), replica_groups={{0,1}}, dimensions={0}
}
%outer (p: f32[4]) -> f32[4] {
  %w = f32[4]{0} while(%p), condition=%c, body=%inner, backend_config={"known_trip_count":{"n":"5"}}
}
%unknown (p: f32[4]) -> f32[4] {
  %q = f32[4]{0} collective-permute(%p), source_target_pairs={{0,1},{1,0}}
}
ENTRY %main (p: f32[4]) -> f32[4] {
  %w1 = f32[4]{0} while(%p), condition=%c, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  %w2 = f32[4]{0} while(%p), condition=%c, body=%outer, backend_config={"known_trip_count":{"n":"2"}}
  %w3 = f32[4]{0} while(%p), condition=%c, body=%unknown
}
"""
    ops = {op.kind: op for op in parse_collectives(text, (2,), ("x",))}
    assert (ops["all-reduce"].runs, ops["all-reduce"].runs_known) == (3, True)
    assert (ops["all-gather"].runs, ops["all-gather"].runs_known) == (10, True)
    assert (ops["collective-permute"].runs, ops["collective-permute"].runs_known) == (1, False)


def test_a_real_compile_gives_axes_runs_source_memory_and_flops():
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)

    def step(x, w):
        def body(i, c):
            return c + jnp.sum(c @ w)  # the marked line

        return jax.lax.fori_loop(0, 3, body, x)

    x = jax.ShapeDtypeStruct((8, 16), jnp.float32, sharding=NamedSharding(mesh, P("data", "model")))
    w = jax.ShapeDtypeStruct((16, 16), jnp.float32, sharding=NamedSharding(mesh, P("model", None)))
    analysis = analyze_compiled(jax.jit(step).lower(x, w).compile(), mesh)
    in_loop = [c for c in analysis.collectives if c.runs == 3]
    assert in_loop, analysis.collectives
    dot = next(c for c in in_loop if c.op_name and c.op_name.endswith("dot_general"))
    assert dot.kind == "all-reduce" and dot.mesh_axes == ("model",) and dot.group_size == 4
    assert dot.source is not None and dot.source.endswith(f"test_program_analysis.py:{_marked_line()}")
    assert analysis.memory is not None
    assert analysis.memory.argument_bytes == (8 * 16 // 8 + 16 * 16 // 4) * 4
    assert analysis.flops is not None and analysis.flops > 0


def _marked_line() -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if "# the marked line" in line and "return" in line)


# --- subgroups of an axis -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("groups", "mesh", "axes", "text", "size"),
    [
        pytest.param(
            "{{0,2},{1,3},{4,6},{5,7}}", MESH_2x4, ("model",), "model[::2]", 2, id="every-2nd-of-model"
        ),
        pytest.param(
            "{{0,1},{2,3},{4,5},{6,7}}", MESH_2x4, ("model",), "model[:2]", 2, id="blocks-of-2-of-model"
        ),
        pytest.param(
            "{{0,2,4,6},{1,3,5,7}}",
            MESH_2x4,
            ("data", "model"),
            "data+model[::2]",
            4,
            id="data-and-half-of-model",
        ),
        pytest.param("{{0,4},{1,5},{2,6},{3,7}}", ((8,), ("x",)), ("x",), "x[::4]", 2, id="1d-stride-4"),
        pytest.param(
            "{{0,2},{1,3},{4,6},{5,7}}", ((8,), ("x",)), ("x",), "x[:4:2]", 2, id="1d-stride-2-in-blocks"
        ),
        pytest.param("{{0,1,2,3},{4,5,6,7}}", MESH_2x4, ("model",), "model", 4, id="whole-axis-no-slice"),
    ],
)
def test_a_subgroup_of_an_axis_is_named_by_the_axis_and_its_slice(groups, mesh, axes, text, size):
    op = _one(f"%a = f32[4]{{0}} all-reduce(%x), replica_groups={groups}, to_apply=%add", mesh)
    assert (op.mesh_axes, op.axes_text, op.group_size) == (axes, text, size)


# --- loop trip counts from the text ---------------------------------------------------------------

LOOP = """
%body (p: (s32[], f32[4], s32[])) -> (s32[], f32[4], s32[]) {{
  %p = (s32[], f32[4]{{0}}, s32[]) parameter(0)
  %c = s32[]{{:T(128)}} constant({step})
  %i = s32[]{{:T(128)}} get-tuple-element(%p), index=0
  %ic = s32[]{{:T(128)S(6)}} copy(%i)
  %next = s32[]{{:T(128)}} {update}(%ic, %c)
  %x = f32[4]{{0}} get-tuple-element(%p), index=1
  %m = s32[] get-tuple-element(%p), index=2
  ROOT %t = (s32[], f32[4]{{0}}, s32[]) tuple(%next, %x, %m)
}}

%cond (p: (s32[], f32[4], s32[])) -> pred[] {{
  %p = (s32[], f32[4]{{0}}, s32[]) parameter(0)
  %n = s32[] constant({bound})
  %i = s32[] get-tuple-element(%p), index=0
  %m = s32[] get-tuple-element(%p), index=2
  ROOT %lt = pred[] compare(%i, {rhs}), direction={direction}
}}

ENTRY %main (x: f32[4], y: s32[]) -> f32[4] {{
  %x = f32[4]{{0}} parameter(0)
  %y = s32[] parameter(1)
  %z = s32[] constant({start})
  %zc = s32[] copy(%z)
  %limit = s32[] constant({carried})
  %t = (s32[], f32[4]{{0}}, s32[]) tuple(%zc, %x, {third})
  %w = (s32[], f32[4]{{0}}, s32[]) while(%t), condition=%cond, body=%body{config}
  ROOT %r = f32[4]{{0}} get-tuple-element(%w), index=1
}}
"""


def _loop(**changes: object) -> str:
    fields: dict[str, object] = dict(
        step=1, update="add", bound=8, rhs="%n", direction="LT", start=0, carried=0, third="%limit", config=""
    )
    fields.update(changes)
    return LOOP.format(**fields)


@pytest.mark.parametrize(
    ("text", "trips"),
    [
        pytest.param(_loop(), 8, id="tpu-pattern-0-to-8"),
        pytest.param(_loop(start=2, step=3), 2, id="from-2-by-3-below-8"),
        pytest.param(_loop(direction="LE"), 9, id="up-to-and-with-8"),
        pytest.param(_loop(start=8, bound=0, update="subtract", direction="GT"), 8, id="counting-down"),
        pytest.param(_loop(rhs="%m", carried=5, bound=99), 5, id="bound-carried-in-the-tuple"),
        pytest.param(_loop(third="%y", rhs="%m"), None, id="bound-not-a-constant"),
        pytest.param(
            _loop(config=', backend_config={"known_trip_count":{"n":"12"}}'), 12, id="known-trip-count"
        ),
    ],
)
def test_trip_counts_come_from_the_config_or_the_counted_loop_pattern(text, trips):
    (loop,) = find_loops(parse_module(text))
    assert (loop.body, loop.condition, loop.trips) == ("body", "cond", trips)


def test_a_compare_inside_a_fusion_is_read_through_its_parameters():
    text = _loop().replace(
        "  ROOT %lt = pred[] compare(%i, %n), direction=LT\n",
        "  ROOT %f = pred[] fusion(%i, %n), kind=kLoop, calls=%fused_lt\n",
    )
    text = (
        "%fused_lt (a: s32[], b: s32[]) -> pred[] {\n  %a = s32[] parameter(0)\n  %b = s32[] parameter(1)\n"
        "  ROOT %c = pred[] compare(%a, %b), direction=LT\n}\n" + text
    )
    (loop,) = find_loops(parse_module(text))
    assert loop.trips == 8


NESTED = """
%c (p: (s32[])) -> pred[] {
  ROOT %k = pred[] constant(true)
}
%inner (p: (s32[])) -> (s32[]) {
  %p = (s32[]) parameter(0)
  ROOT %t = (s32[]) tuple(%p)
}
%outer (p: (s32[])) -> (s32[]) {
  %p = (s32[]) parameter(0)
  %w = (s32[]) while(%p), condition=%c, body=%inner, backend_config={"known_trip_count":{"n":"5"}}
  ROOT %t = (s32[]) tuple(%w)
}
%other (p: (s32[])) -> (s32[]) {
  %p = (s32[]) parameter(0)
  ROOT %t = (s32[]) tuple(%p)
}
ENTRY %main (p: (s32[])) -> (s32[]) {
  %p = (s32[]) parameter(0)
  %w1 = (s32[]) while(%p), condition=%c, body=%outer, backend_config={"known_trip_count":{"n":"3"}}
  ROOT %w2 = (s32[]) while(%w1), condition=%c, body=%other
}
"""


def test_nested_loops_multiply_and_an_unknown_loop_is_counted_once_and_named():
    # Own costs: entry 1, outer 10, inner 100 FLOPs (bytes x2), other 1000: XLA counts each once.
    own = {"outer": 10.0, "inner": 100.0, "other": 1000.0}
    below = {"outer": ("inner",), "inner": (), "other": ()}

    def xla(text: str) -> tuple[float, float]:
        name = text.split("\n", 1)[0].split()[1]
        flops = own[name] + sum(own[b] for b in below[name])
        return flops, 2 * flops

    total = 1 + 10 + 100 + 1000
    counted = count_trips(parse_module(NESTED), total, 2 * total, body_cost=xla)
    assert counted.flops == 1 + 3 * 10 + 15 * 100 + 1000  # the unknown loop once
    assert counted.bytes_accessed == 2 * counted.flops
    runs = {loop.name: (loop.trips, loop.runs) for loop in counted.loops}
    assert runs == {"w": (5, 15), "w1": (3, 3), "w2": (None, 1)}


def test_a_body_xla_cannot_analyse_is_counted_once_and_said_so():
    def refuse(text: str) -> tuple[float, float]:
        raise ValueError("parse error at line 3")

    counted = count_trips(parse_module(NESTED), 1111.0, 2222.0, body_cost=refuse)
    assert (counted.flops, counted.bytes_accessed) == (1111.0, 2222.0)
    assert counted.missing == (
        "loop bodies counted once in FLOPs and bytes: XLA could not analyse 3 of them (ValueError: parse "
        "error at line 3)",
    )


# --- partial answers ------------------------------------------------------------------------------


class _Memory:
    argument_size_in_bytes = 1000
    output_size_in_bytes = 200
    temp_size_in_bytes = 30
    alias_size_in_bytes = 0
    generated_code_size_in_bytes = 4


class _Compiled:
    """A compiled program whose text XLA cannot print, as libtpu's as_text() on big programs."""

    def __init__(self, modules_text: str | None = None) -> None:
        self.modules_text = modules_text

    def as_text(self) -> str:
        raise RuntimeError("INTERNAL: RET_CHECK failure (async_update.cc:91) async-update\nmore")

    def runtime_executable(self) -> object:
        if self.modules_text is None:
            raise NotImplementedError("no executable for a compile-only target")
        text = self.modules_text

        class Module:
            def to_string(self) -> str:
                return text

        class Executable:
            def hlo_modules(self) -> list[object]:
                return [Module()]

        return Executable()

    def memory_analysis(self) -> _Memory:
        return _Memory()

    def cost_analysis(self) -> dict[str, float]:
        return {"flops": 5e9, "bytes accessed": 7e6, "optimal_seconds": -1.0}


def test_when_the_text_fails_memory_and_cost_remain_and_one_line_says_what_is_missing():
    analysis = analyze_compiled(_Compiled())
    assert analysis.memory is not None and analysis.memory.total_bytes == 1234
    assert (analysis.flops, analysis.bytes_accessed, analysis.collectives) == (5e9, 7e6, ())
    assert analysis.compiler_seconds is None  # negative: not an estimate
    assert analysis.missing == (
        "collectives and loop trip counts: XLA's text of the program failed (as_text(): RuntimeError: "
        "INTERNAL: RET_CHECK failure (async_update.cc:91) async-update; hlo_modules(): "
        "NotImplementedError: no executable for a compile-only target)",
    )


def test_when_as_text_fails_the_executables_own_modules_give_the_collectives():
    text = "ENTRY %main (p: f32[4]) -> f32[4] {\n  %a = f32[4]{0} all-reduce(%p), replica_groups={{0,1}}\n}\n"
    analysis = analyze_compiled(_Compiled(modules_text=text))
    assert [c.kind for c in analysis.collectives] == ["all-reduce"]
    assert analysis.missing == ()


RET_CHECK = "INTERNAL: RET_CHECK failure (hlo_instruction.cc:1234) async-update"
MLP = [
    "inspect",
    "examples/mlp.py:train_step",
    "--mesh",
    "2x4",
    "--axes",
    "data,model",
    "--arg",
    "f32[256,1024]@data,None",
    "--arg",
    "f32[1024,4096]@None,model",
    "--arg",
    "f32[4096,1024]@model,None",
    "--format",
    "json",
]


def _text_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """XLA cannot print the compiled program, by either way shardcli asks (as libtpu on big programs)."""

    def refuse(self: object) -> str:
        raise RuntimeError(RET_CHECK)

    monkeypatch.setattr(jax.stages.Compiled, "as_text", refuse)
    monkeypatch.setattr(jax.stages.Compiled, "runtime_executable", refuse)


def test_inspect_reads_the_dumped_text_when_xla_cannot_print_the_program(cli, monkeypatch):
    import json

    whole = json.loads(cli(MLP).stdout)["program"]
    _text_fails(monkeypatch)
    out = cli(MLP)
    assert out.exit_code == 0, out.output
    program = json.loads(out.stdout)["program"]
    assert program["missing"] == []
    assert (
        program["collectives"] == whole["collectives"]
        and program["flops_per_device"] == whole["flops_per_device"]
    )


def test_inspect_answers_without_the_text_and_says_what_is_missing(cli, monkeypatch):
    import json

    import shardcli.analysis.program as pa

    _text_fails(monkeypatch)
    monkeypatch.setattr(pa, "dump_hlo_text", lambda lowered: (None, "--xla_dump_to wrote no optimized HLO"))
    out = cli(MLP)
    assert out.exit_code == 0, out.output
    program = json.loads(out.stdout)["program"]
    assert program["collectives"] == [] and program["flops_per_device"] > 0 and program["memory"] is not None
    assert program["missing"] == [
        f"collectives and loop trip counts: XLA's text of the program failed (as_text(): RuntimeError: "
        f"{RET_CHECK}; hlo_modules(): RuntimeError: {RET_CHECK}; --xla_dump_to wrote no optimized HLO)"
    ]
    text = cli(MLP[:-2] + ["-q"])
    assert text.exit_code == 0 and "missing: collectives and loop trip counts" in text.stdout


def test_the_dtype_of_the_dots_is_the_one_most_of_their_results_come_in():
    text = """
%fused (p0: bf16[64,128], p1: bf16[128,256]) -> f32[64,256] {
  %p0 = bf16[64,128]{1,0} parameter(0)
  %p1 = bf16[128,256]{1,0} parameter(1)
  ROOT %d = f32[64,256]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
ENTRY %main (a: f32[8,8], b: bf16[64,128], c: bf16[128,256]) -> f32[64,256] {
  %a = f32[8,8]{1,0} parameter(0)
  %small = f32[8,8]{1,0} dot(%a, %a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %b = bf16[64,128]{1,0} parameter(1)
  %c = bf16[128,256]{1,0} parameter(2)
  ROOT %f = f32[64,256]{1,0} fusion(%b, %c), kind=kOutput, calls=%fused
}
"""
    assert dot_dtype(parse_module(text)) == "bfloat16"
    assert (
        dot_dtype(parse_module("ENTRY %main (a: f32[4]) -> f32[4] {\n  %a = f32[4]{0} parameter(0)\n}\n"))
        is None
    )


# The scan of tests/looped_programs.py with jax_enable_x64 on, as libtpu printed it (trimmed): the
# 64-bit counter split into u32 halves, low at index 0 and high at index 1.
WIDE_LOOP = """
%body (p: (u32[], u32[], f32[4])) -> (u32[], u32[], f32[4]) {{
  %one = u32[]{{:T(128)}} constant(1)
  %p = (u32[], u32[], f32[4]{{0}}) parameter(0)
  %lo = u32[]{{:T(128)}} get-tuple-element(%p), index=0
  %loc = u32[]{{:T(128)S(6)}} copy(%lo)
  %lo1 = u32[]{{:T(128)}} add(%loc, %one)
  %wrap = pred[]{{:T(512)S(6)}} compare(%lo1, %loc), direction=LT
  %hi = u32[]{{:T(128)}} get-tuple-element(%p), index=1
  %hi1 = u32[]{{:T(128)S(6)}} add(%hi, %one)
  %hi2 = u32[]{{:T(128)}} select(%wrap, %hi1, %hi)
  %x = f32[4]{{0}} get-tuple-element(%p), index=2
  ROOT %t = (u32[], u32[], f32[4]{{0}}) tuple(%lo1, %hi2, %x)
}}

%cond (p: (u32[], u32[], f32[4])) -> pred[] {{
  %zero = s32[]{{:T(128)}} constant(0)
  %uzero = u32[]{{:T(128)}} constant(0)
  %n = u32[]{{:T(128)}} constant(8)
  %p = (u32[], u32[], f32[4]{{0}}) parameter(0)
  %hi = u32[]{{:T(128)}} get-tuple-element(%p), index=1
  %his = s32[]{{:T(128)S(6)}} bitcast-convert(%hi)
  %neg = pred[]{{:T(512)S(6)}} compare(%his, %zero), direction=LT
  %hi0 = pred[]{{:T(512)S(6)}} compare(%hi, %uzero), direction=EQ
  %lo = u32[]{{:T(128)}} get-tuple-element(%p), index=0
  %below = pred[]{{:T(512)S(6)}} compare(%lo, %n), direction=LT
  %both = pred[]{{:T(512)S(6)}} and(%hi0, %below)
  ROOT %go = pred[]{{:T(512)}} or(%neg, %both)
}}

ENTRY %main (x: f32[4]) -> f32[4] {{
  %x = f32[4]{{0}} parameter(0)
  %lo0 = u32[]{{:T(128)}} constant(0)
  %hi0 = u32[]{{:T(128)}} constant({high})
  %loc = u32[]{{:T(128)}} copy(%lo0)
  %t = (u32[], u32[], f32[4]{{0}}) tuple(%loc, %hi0, %x)
  %w = (u32[], u32[], f32[4]{{0}}) while(%t), condition=%cond, body=%body
  ROOT %r = f32[4]{{0}} get-tuple-element(%w), index=2
}}
"""


@pytest.mark.parametrize(
    ("high", "trips"),
    [pytest.param(0, 8, id="high-half-0-counts-8"), pytest.param(1, None, id="high-half-1-unknown")],
)
def test_a_64_bit_counter_split_in_two_u32_halves_is_counted_by_its_low_half(high, trips):
    (loop,) = find_loops(parse_module(WIDE_LOOP.format(high=high)))
    assert loop.trips == trips


def test_the_users_stack_is_every_frame_of_theirs_once_innermost_first():
    from shardcli.analysis.hlo.sources import user_stack

    chain = [f"{_SITE}/jax/core.py:1", "/u/m.py:5", "/u/m.py:9", "/u/m.py:5", "/u/m.py:9", "/u/w.py:3"]
    assert user_stack(chain) == ("/u/m.py:5", "/u/m.py:9", "/u/w.py:3")
    assert user_stack([f"{_SITE}/jax/core.py:1", f"{_SITE}/jax/api.py:2"]) == (f"{_SITE}/jax/core.py:1",)


_OWN = str(Path(__file__).resolve().parent.parent / "shardcli" / "playground" / "einsum.py")
_SITE = "/usr/lib/python3/site-packages"


@pytest.mark.parametrize(
    ("chain", "user_files", "picked"),
    [
        pytest.param(
            ["/u/model.py:56", "/u/wrapper.py:33"], (), "/u/model.py:56", id="innermost-of-the-user"
        ),
        pytest.param(
            [f"{_SITE}/flax/linear.py:9", "/u/model.py:56"], (), "/u/model.py:56", id="past-a-library"
        ),
        pytest.param(
            ["/u/model.py:56", "/u/wrapper.py:33"],
            ("/u/wrapper.py",),
            "/u/model.py:56",
            id="a-named-thin-wrapper-blames-the-model",
        ),
        pytest.param(
            [f"{_SITE}/flax/linear.py:9", f"{_SITE}/mine/model.py:5", "/u/wrapper.py:3"],
            (f"{_SITE}/mine",),
            f"{_SITE}/mine/model.py:5",
            id="a-named-package-in-site-packages",
        ),
        pytest.param(
            ["/u/model.py:56", f"{_OWN}:250", f"{_SITE}/typer/main.py:1445"],
            (),
            "/u/model.py:56",
            id="what-calls-shardcli-is-not-the-user",
        ),
        pytest.param(
            [f"{_OWN}:250", f"{_SITE}/typer/main.py:1445", "<string>:1"], (), None, id="a-playground-program"
        ),
        pytest.param(
            ["/another/checkout/shardcli/playground/einsum.py:250", "<string>:1"],
            (),
            None,
            id="a-cached-checkout",
        ),
        pytest.param([f"{_SITE}/flax/linear.py:9"], (), f"{_SITE}/flax/linear.py:9", id="only-a-library"),
    ],
)
def test_a_collectives_source_is_the_users_line(chain, user_files, picked):
    from shardcli.analysis.hlo.sources import pick_source

    assert pick_source(chain, user_files) == picked
