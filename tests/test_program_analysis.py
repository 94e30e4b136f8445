"""The one reading of compiled programs: collectives with mesh axes, runs, source; memory; FLOPs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardcli.core.program_analysis import CollectiveOp, analyze_compiled, parse_collectives

MESH_2x4 = ((2, 4), ("data", "model"))


def _one(line: str, mesh=MESH_2x4) -> CollectiveOp:
    text = f"ENTRY %main (p: f32[4]) -> f32[4] {{\n  {line}\n}}\n"
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
