"""`shardcli collective`: every collective verified on 1-D, 2-D and 3-D meshes, and its CLI."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from shardcli.analysis.program import find_collectives
from shardcli.cli import app
from shardcli.errors import ShardcliError
from shardcli.playground.collective import cases as registry
from shardcli.playground.collective.cases import COLLECTIVES, busbw_factor
from shardcli.playground.collective.entries import CollectiveParams
from shardcli.playground.collective.references import ref_sum
from shardcli.playground.collective.request import CollectiveRequest, validate_request
from shardcli.playground.collective.run import run_collective
from shardcli.results.documents import SCHEMA_VERSION, document_problems
from shardcli.specs.meshes import parse_mesh
from shardcli.specs.runs import Platform, RunOptions
from shardcli.specs.values import parse_bytes, parse_dtype, parse_perm, parse_sizes

FAST = dict(warmup=0, iters=1)


def request(
    name: str,
    mesh: str,
    axes: str | None = None,
    over: tuple[str, ...] | None = None,
    dtype: str = "float32",
    **kw,
) -> CollectiveRequest:
    spec = parse_mesh(mesh, axes)
    params_kw = {
        k: kw.pop(k) for k in list(kw) if k in {f.name for f in dataclasses.fields(CollectiveParams)}
    }
    params = CollectiveParams(axes=over or spec.axes, **params_kw)
    return _validated(
        CollectiveRequest(
            collective=name,
            mesh=spec,
            params=params,
            dtype=parse_dtype(dtype),
            set_params=frozenset(params_kw),
            options=RunOptions(platform=Platform.CPU),
            **{**FAST, **kw},
        )
    )


def _validated(req: CollectiveRequest) -> CollectiveRequest:
    """run_collective takes a validated request, as the CLI's builder gives it."""
    validate_request(req)
    return req


MESHES = [
    pytest.param("4", None, None, id="1d"),
    pytest.param("2x4", "data,model", ("model",), id="2d-one-axis"),
    pytest.param("2x4", "data,model", ("data", "model"), id="2d-both-axes"),
    pytest.param("2x2x2", None, ("y", "z"), id="3d-two-axes"),
]


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("mesh,axes,over", MESHES)
@pytest.mark.parametrize("name", list(COLLECTIVES))
def test_every_collective_matches_numpy(name, mesh, axes, over, dtype):
    result = run_collective(request(name, mesh, axes, over, dtype, init="random"))
    run = result.runs[0]
    assert result.wrong == 0, run.placements
    assert run.missing_op is None
    ops = {h.op for h in run.placements[0].hlo}
    assert ops == ({COLLECTIVES[name].hlo_op} if COLLECTIVES[name].hlo_op else set())
    # every device was checked: one block per device of the mesh
    assert len(run.devices) == result.request.mesh.size


@pytest.mark.parametrize(
    "name,kw",
    [
        pytest.param("all_gather", dict(shape=(8, 4), tiled=False, gather_dim=1), id="gather-untiled-dim1"),
        pytest.param("all_gather", dict(shape=(8, 4), gather_dim=1), id="gather-tiled-dim1"),
        pytest.param("psum_scatter", dict(shape=(4, 16), scatter_dim=1), id="scatter-dim1"),
        pytest.param("all_to_all", dict(shape=(8, 8), split_dim=1, concat_dim=0), id="a2a-reshard"),
        pytest.param("all_to_all", dict(shape=(16, 8), split_dim=0, concat_dim=1), id="a2a-other-way"),
        pytest.param("ppermute", dict(perm=((0, 2), (2, 1), (1, 0))), id="permute-partial"),
        pytest.param("ppermute", dict(shift=3), id="permute-shift3"),
        pytest.param("broadcast", dict(root=3), id="broadcast-root3"),
        pytest.param("pmean", dict(dtype="int32"), id="pmean-int-gives-float"),
        pytest.param("psum", dict(dtype="bfloat16"), id="psum-bf16"),
        pytest.param("pmax", dict(dtype="int8", init="arange", shape=(512,)), id="pmax-int8-wraps"),
    ],
)
def test_non_default_parameters(name, kw):
    result = run_collective(request(name, "4", **kw))
    assert result.wrong == 0


def test_groups_stay_independent_with_a_spec_over_every_axis():
    # dim 0 split over data and model: each group (a data row) reduces different numbers
    from shardcli.specs.meshes import parse_sharding

    req = request("psum", "2x4", "data,model", ("model",), show_values=True)
    req = dataclasses.replace(req, sharding=parse_sharding("data+model", req.mesh))
    result = run_collective(req)
    run = result.runs[0]
    assert result.wrong == 0 and result.n_groups == 2 and result.group_size == 4
    by_group = {d.group: d.output for d in run.devices}
    x = np.arange(32, dtype=np.float32).reshape(2, 4, 4)
    np.testing.assert_array_equal(by_group[0], x[0].sum(axis=0))
    np.testing.assert_array_equal(by_group[1], x[1].sum(axis=0))


# Hand-computed results pin the NumPy references themselves.
@pytest.mark.parametrize(
    "name,kw,expected",
    [
        pytest.param("psum", {}, {d: [14, 17] for d in range(4)}, id="psum"),
        pytest.param("pmax", {}, {d: [5, 9] for d in range(4)}, id="pmax"),
        pytest.param("pmin", {}, {d: [2, 1] for d in range(4)}, id="pmin"),
        pytest.param("all_gather", {}, {d: [3, 1, 4, 1, 5, 9, 2, 6] for d in range(4)}, id="all_gather"),
        pytest.param("ppermute", {}, {0: [2, 6], 1: [3, 1], 2: [4, 1], 3: [5, 9]}, id="ppermute-ring"),
        pytest.param("psum_scatter", {}, {0: [14], 1: [17]}, id="psum_scatter-2dev"),
        pytest.param("broadcast", dict(root=2), {d: [5, 9] for d in range(4)}, id="broadcast"),
        pytest.param("axis_index", {}, {d: [d] for d in range(4)}, id="axis_index"),
    ],
)
def test_known_answers(name, kw, expected):
    mesh = "2" if name == "psum_scatter" else "4"
    values = (3, 1, 4, 1, 5, 9, 2, 6) if name != "psum_scatter" else (3, 1, 4, 1)
    result = run_collective(request(name, mesh, dtype="int32", values=values, show_values=True, **kw))
    got = {d.device_id: d.output.tolist() for d in result.runs[0].devices}
    if name == "psum_scatter":
        expected = {0: [3 + 4], 1: [1 + 1]}
    assert got == expected
    assert result.wrong == 0


def test_a_wrong_reference_is_caught(monkeypatch):
    def off_by_one(blocks, p, n):
        return [b + 1 for b in ref_sum(blocks, p, n)]

    bad = dataclasses.replace(COLLECTIVES["psum"], reference=off_by_one)
    monkeypatch.setitem(COLLECTIVES, "psum", bad)
    result = run_collective(request("psum", "4"))
    assert result.wrong == 16
    assert result.runs[0].placements[0].wrong_devices == (0, 1, 2, 3)
    out = CliRunner().invoke(app, ["collective", "psum", "--mesh", "4", "--iters", "1"])
    assert out.exit_code == 1
    assert "WRONG: 16 element(s) differ from NumPy on device(s) 0, 1, 2, 3" in out.stdout


def test_a_wrong_device_result_is_caught(monkeypatch):
    # The device computes something else than the collective: the check must notice.
    bad = dataclasses.replace(COLLECTIVES["pmax"], body=COLLECTIVES["pmin"].body)
    monkeypatch.setitem(COLLECTIVES, "pmax", bad)
    result = run_collective(request("pmax", "4"))
    assert result.wrong > 0


def test_in_place_donates_and_aliases():
    result = run_collective(request("psum", "4", placement="both", sizes=(4096,), iters=2))
    out, inplace = result.runs[0].placements
    assert (out.placement, inplace.placement) == ("out", "in")
    assert inplace.aliased is True and inplace.wrong == 0
    gather = run_collective(request("all_gather", "4", placement="both", sizes=(4096,)))
    assert gather.runs[0].placements[1].not_run is not None


@pytest.mark.parametrize(
    "name,dtype",
    [("psum", "float32"), ("all_gather", "int32"), ("all_to_all", "bfloat16"), ("ppermute", "bool")],
)
def test_out_buffers_preallocated_and_fresh(name, dtype):
    init = "arange" if dtype != "bool" else "random"
    pre = run_collective(request(name, "4", dtype=dtype, init=init, sizes=(4096,), iters=3))
    fresh = run_collective(
        request(name, "4", dtype=dtype, init=init, sizes=(4096,), iters=3, out_buffer="fresh")
    )
    (p,), (f,) = pre.runs[0].placements, fresh.runs[0].placements
    assert (p.out_buffer, p.aliased, p.wrong) == ("preallocated", True, 0)
    assert (f.out_buffer, f.aliased, f.wrong) == ("fresh", None, 0)
    assert len(p.timing.samples) == len(f.timing.samples) == 3


def test_a_program_that_leaves_the_out_buffer_alone_is_caught(monkeypatch):
    # The verifying call writes into a poisoned buffer: a program that does not write its result
    # there leaves the poison, and every element counts as wrong.
    import jax

    from shardcli.playground.collective import placement as core

    real = core._shard_map_program

    def lazy(collective, session, request, in_entries, out_entries, n, donate):
        if donate != "output":
            return real(collective, session, request, in_entries, out_entries, n, donate)
        return jax.jit(lambda x, out: out, donate_argnums=(1,), keep_unused=True)

    monkeypatch.setattr(core, "_shard_map_program", lazy)
    for dtype in ("float32", "int32"):
        result = run_collective(request("psum", "4", dtype=dtype, sizes=(64,)))
        assert result.wrong == 4 * 16, dtype  # 16 elements on each of 4 devices


class _Result:
    def __init__(self, value):
        self.value = value

    def block_until_ready(self):
        return self


@pytest.mark.parametrize(
    "kw,calls",
    [
        (dict(), [(0,), (0,), (0,), (0,)]),  # fresh output: step(x)
        (dict(chain=True), [(0,), (1,), (2,), (3,)]),  # in place: each result is the next input
        (dict(out=100), [(0, 100), (0, 101), (0, 102), (0, 103)]),  # each result the next out buffer
    ],
)
def test_time_iterations_feeds_inputs_and_out_buffers(kw, calls):
    from shardcli.runtime.timing import time_iterations

    seen = []

    def step(*args):
        seen.append(tuple(a.value if isinstance(a, _Result) else a for a in args))
        return _Result(args[-1].value + 1 if isinstance(args[-1], _Result) else args[-1] + 1)

    samples, last = time_iterations(step, 0, warmup=1, iters=3, **kw)
    assert seen == calls and len(samples) == 3 and last.value == calls[-1][-1] + 1
    with pytest.raises(ValueError, match="not both"):
        time_iterations(step, 0, warmup=0, iters=1, chain=True, out=1)


@pytest.mark.parametrize(
    "malloc,out_buffer,platform,chosen",
    [
        (None, "preallocated", "auto", ("reuse", None)),
        (None, "preallocated", "cpu", ("reuse", None)),
        (None, "fresh", "auto", ("system", "the default with --out-buffer fresh")),
        ("reuse", "fresh", "auto", ("reuse", None)),
        ("system", "preallocated", "auto", ("system", None)),
        (
            None,
            "preallocated",
            "gpu",
            ("system", "the default with --platform gpu: device buffers do not come from malloc"),
        ),
        ("reuse", "preallocated", "tpu", ("reuse", None)),
    ],
)
def test_default_malloc_follows_the_out_buffer_and_platform(malloc, out_buffer, platform, chosen):
    from shardcli.commands.requests.collective import default_malloc

    assert default_malloc(malloc, out_buffer, platform) == chosen


def test_bandwidth_follows_nccl_tests_conventions():
    result = run_collective(request("all_gather", "8", sizes=(65536,), iters=3))
    run = result.runs[0]
    p = run.placements[0]
    assert run.algbw_bytes == 8 * 65536  # S is the gathered size
    assert p.algbw == pytest.approx(run.algbw_bytes / p.timing.stats.p50 / 1e9)
    assert p.busbw == pytest.approx(p.algbw * 7 / 8)
    assert run.sent_bytes == 7 * 65536


@pytest.mark.parametrize(
    "name,n,factor",
    [
        ("psum", 8, 2 * 7 / 8),
        ("all_gather", 4, 3 / 4),
        ("psum_scatter", 2, 1 / 2),
        ("all_to_all", 8, 7 / 8),
        ("ppermute", 8, 1.0),
        ("broadcast", 8, 1.0),
        ("axis_index", 8, None),
    ],
)
def test_busbw_factors(name, n, factor):
    assert busbw_factor(COLLECTIVES[name], n) == (pytest.approx(factor) if factor else None)


def test_find_collectives_reads_sync_async_and_tuple_forms():
    hlo = """
  %all-reduce.1 = f32[4]{0} all-reduce(f32[4]{0} %p), replica_groups={{0,1}}, to_apply=%add
  %ag = (bf16[2,2]{1,0}, bf16[8,2]{1,0}) all-gather-start(bf16[2,2]{1,0} %x), dimensions={0}
  %agd = bf16[8,2]{1,0} all-gather-done(%ag)
  ROOT %cp = s32[16]{0} collective-permute(s32[16]{0} %y), source_target_pairs={{0,1}}
  %a2a = (f32[1]{0}, f32[1]{0}, f32[1]{0}, f32[1]{0}, f32[1]{0}, /*index=5*/f32[1]{0}) all-to-all(%s)
"""
    found = {h.op: (h.count, h.result_bytes) for h in find_collectives(hlo)}
    assert found == {
        "all-reduce": (1, 16),
        "all-gather": (1, 32),  # an async start's (operand, result): the result
        "collective-permute": (1, 64),
        "all-to-all": (1, 24),
    }


def test_gpu_groups_over_several_hosts_follow_their_device_ids():
    """XLA's GPU compiler on 2 hosts of 8 names groups by a mesh of its own whose positions hold the
    devices `device_ids` lists: over axis_0, the 8 GPUs of a host (fsdp); over axis_2, one per host."""
    from shardcli.analysis.program import parse_collectives

    groups = "replica_groups=mesh['axis_0'=8,'axis_1'=1,'axis_2'=2], device_ids=([2,8]T(1,0))"
    hlo = f"""
  %rs = ((f32[1024,1024]{{1,0}}), f32[128,1024]{{1,0}}) reduce-scatter-start(%g), {groups} {{'axis_0'}}
  %ar = f32[128,1024]{{1,0}} all-reduce-start(%r), {groups} {{'axis_2'}}, to_apply=%add
"""
    ops = {op.kind: op for op in parse_collectives(hlo, (2, 8), ("data", "fsdp"))}
    assert (ops["reduce-scatter"].mesh_axes, ops["reduce-scatter"].group_size) == (("fsdp",), 8)
    assert (ops["all-reduce"].mesh_axes, ops["all-reduce"].group_size) == (("data",), 2)


def test_a_gpu_async_start_counts_its_results_not_its_operands():
    """XLA's GPU compiler writes ((operands), results): a reduce-scatter of f32[4096,4096] over 8
    devices returns f32[512,4096], and each device sends 7 of those."""
    hlo = """
  %rs = ((f32[4096,4096]{1,0}), f32[512,4096]{1,0}) reduce-scatter-start(%g), dimensions={0}
  %rsd = f32[512,4096]{1,0} reduce-scatter-done(%rs)
  %ar = ((f32[1024]{0}, f32[8]{0}), f32[1024]{0}, f32[8]{0}) all-reduce-start(%m, %n), replica_groups={{0,1}}
  %ard = (f32[1024]{0}, f32[8]{0}) all-reduce-done(%ar)
"""
    found = {h.op: (h.count, h.result_bytes) for h in find_collectives(hlo)}
    assert found == {"reduce-scatter": (1, 512 * 4096 * 4), "all-reduce": (1, (1024 + 8) * 4)}


@pytest.mark.parametrize(
    "text,sizes",
    [
        ("1K:8K", (1024, 2048, 4096, 8192)),
        ("1K:64K:x4", (1024, 4096, 16384, 65536)),
        ("4K,1M", (4096, 1048576)),
        ("16", (16,)),
    ],
)
def test_parse_sizes(text, sizes):
    assert parse_sizes(text) == sizes


@pytest.mark.parametrize(
    "text,message",
    [
        ("64M:1K", "runs backwards"),
        ("1K:4K:x1", "factor of 2 or more"),
        ("1Q", "not a byte size"),
        ("4K,4K", "lists a size twice"),
        ("1:2:3:4", "MIN:MAX"),
    ],
)
def test_parse_sizes_errors(text, message):
    with pytest.raises(ShardcliError, match=message):
        parse_sizes(text)


def test_parse_bytes_and_perm():
    assert parse_bytes("16M") == 16 * 2**20 and parse_bytes("2G") == 2 * 2**30 and parse_bytes("512") == 512
    assert parse_perm("0:1, 1:0") == ((0, 1), (1, 0))
    with pytest.raises(ShardcliError, match="SRC:DST"):
        parse_perm("0-1")


# --- the CLI --------------------------------------------------------------------------------------


def invoke(*args: str):
    return CliRunner().invoke(app, ["collective", *args])


@pytest.mark.parametrize(
    "args,message",
    [
        pytest.param(
            ["nosuch", "--mesh", "4"], "unknown collective 'nosuch'; choose one of psum, pmean", id="unknown"
        ),
        pytest.param(["psum", "--mesh", "4", "--axis", "q"], "--axis 'q' is not a mesh axis", id="axis"),
        pytest.param(
            ["ppermute", "--mesh", "4", "--perm", "0:1,1:1"], "is not a permutation of axis 'x'", id="perm"
        ),
        pytest.param(
            ["ppermute", "--mesh", "4", "--perm", "0:4"], "outside axis 'x' of size 4", id="perm-range"
        ),
        pytest.param(
            ["psum_scatter", "--mesh", "4", "--shape", "4x3", "--spec", "x", "--scatter-dim", "1"],
            "not divisible by the group size 4",
            id="scatter-divisible",
        ),
        pytest.param(
            ["all_to_all", "--mesh", "4", "--shape", "4x6", "--spec", "x", "--split-dim", "1"],
            "not divisible by the group size 4",
            id="a2a-divisible",
        ),
        pytest.param(
            ["psum", "--mesh", "4", "--size", "2"], "not a whole number of float32 elements", id="size-small"
        ),
        pytest.param(["psum", "--mesh", "4", "--sizes", "64M:1K"], "runs backwards", id="backwards"),
        pytest.param(["psum", "--mesh", "4", "--size", "100G"], "available; use a smaller size", id="memory"),
        pytest.param(
            ["psum", "--mesh", "4", "--root", "1"], "--root does not apply to psum", id="wrong-flag"
        ),
        pytest.param(
            ["all_gather", "--mesh", "4", "--placement", "in"], "use --placement out", id="in-place"
        ),
        pytest.param(
            ["psum", "--mesh", "4", "--values", "1,2,3"], "give a multiple of 4 values", id="values"
        ),
        pytest.param(
            ["psum", "--mesh", "4", "--size", "1K", "--shape", "8"], "give only one of them", id="two-inputs"
        ),
        pytest.param(["psum", "--format", "xml"], "choose one of table, json, csv", id="format"),
        pytest.param(["psum", "--mesh", "16"], "the mesh needs 16 devices", id="too-many-devices"),
        pytest.param(["psum", "--dtype", "bool"], "needs a numeric --dtype", id="bool"),
        pytest.param(
            ["psum", "--out-buffer", "reused"],
            "--out-buffer 'reused' is not valid; choose one of preallocated, fresh",
            id="out-buffer",
        ),
        pytest.param(
            ["psum", "--out-buffer", "fresh", "--placement", "in"],
            "--out-buffer is for out-of-place runs",
            id="out-buffer-in-place",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(args, message):
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


PMEAN_INT_NOTE = "pmean of int32 gives float32, so the result cannot overwrite the input"


@pytest.mark.parametrize(
    ("args", "exit_code", "expected"),
    [
        pytest.param(
            ["pmean", "--dtype", "int32", "--placement", "in"],
            2,
            f"--placement in needs pmean's result to fit its input buffer, but {PMEAN_INT_NOTE}; "
            "use --placement out",
            id="pmean-int-in-refused",
        ),
        pytest.param(
            ["pmean", "--dtype", "int64", "--placement", "in"],
            2,
            "but pmean of int64 gives float64, so the result cannot overwrite the input",
            id="pmean-int64-in-refused",
        ),
        pytest.param(
            ["pmean", "--dtype", "int32", "--placement", "both"],
            0,
            f"in-place: n/a ({PMEAN_INT_NOTE})",
            id="pmean-int-both-runs-out",
        ),
        pytest.param(
            ["axis_index", "--shape", "4", "--placement", "in"],
            2,
            "but axis_index gives int32 whatever the input, so the result cannot overwrite the input",
            id="axis-index-same-shape",
        ),
        pytest.param(
            ["pmean", "--dtype", "float32", "--placement", "in"], 0, "in (aliased)", id="pmean-float"
        ),
        pytest.param(["psum", "--dtype", "int32", "--placement", "both"], 0, "in (aliased)", id="psum-int"),
    ],
)
def test_in_place_needs_the_inputs_shape_and_dtype(args, exit_code, expected):
    result = invoke(*args, "--mesh", "4", "--iters", "1", "--warmup", "0", "--no-color")
    assert result.exit_code == exit_code, result.output
    if exit_code == 2:
        assert expected in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    else:
        assert expected in result.stdout
        assert "in-place: n/a" not in result.stdout or expected.startswith("in-place")


def test_human_output_shows_before_after_hlo_and_timing():
    result = invoke("psum", "--mesh", "2x4", "--axes", "data,model", "--axis", "model", "--no-color")
    assert result.exit_code == 0, result.output
    text = result.stdout
    for needle in (
        "2 group(s) of 4 device(s); data stay(s) independent",
        "BEFORE and AFTER",
        "data=1 model=3",
        "all-reduce x1",
        "busbw factor 1.500",
        " p50 ",
        "verified: every device's result matches NumPy",
    ):
        assert needle in text, needle
    assert "\x1b[" not in text


def test_json_contract():
    result = invoke("all_gather", "--mesh", "4", "--format", "json", "--iters", "2", "--placement", "both")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert document_problems(doc, "collective") == []  # exactly the keys shardcli/results/documents.py gives
    assert doc["schema"] == SCHEMA_VERSION and doc["command"] == "collective"
    size = doc["sizes"][0]
    out, inplace = size["placements"]
    assert doc["config"]["out_buffer"] == "preallocated"
    assert (out["out_buffer"], out["aliased"]) == ("preallocated", True)
    assert inplace["out_buffer"] is None
    assert out["timing"]["processes"] is None  # one process
    assert len(out["timing"]["samples_s"]) == 2
    assert inplace["not_run"] and inplace["timing"] is None
    values = size["values"]
    assert values["global_input"] == list(range(16))
    assert all(d["output"] == list(range(16)) for d in values["devices"])


def test_sweep_table_csv_and_health_check():
    table = invoke("psum", "--mesh", "4", "--sizes", "1K:4K", "--iters", "2", "--no-color")
    assert table.exit_code == 0, table.output
    assert all(s in table.stdout for s in ("1K", "2K", "4K", "average busbw over all sizes (none >= 1M)"))
    csv_out = invoke(
        "psum", "--mesh", "4", "--sizes", "1K,4K", "--iters", "2", "--format", "csv", "--placement", "both"
    )
    assert csv_out.exit_code == 0
    lines = csv_out.stdout.strip().splitlines()
    assert lines[0] == (
        "collective,size_bytes,count,dtype,placement,time_p50_us,algbw_gbps,busbw_gbps,wrong,roofline_fraction,"
        "out_buffer"
    )
    assert [line.split(",")[-1] for line in lines[1:]] == ["preallocated", "", "preallocated", ""]
    assert [line.split(",")[:5] for line in lines[1:]] == [
        ["psum", "1024", "256", "float32", "out"],
        ["psum", "1024", "256", "float32", "in"],
        ["psum", "4096", "1024", "float32", "out"],
        ["psum", "4096", "1024", "float32", "in"],
    ]
    unhealthy = invoke("psum", "--mesh", "4", "--sizes", "4K", "--iters", "2", "--min-busbw", "1e6", "-q")
    assert unhealthy.exit_code == 1
    assert "below --min-busbw" in unhealthy.stdout


def test_collective_help_lists_every_collective():
    result = CliRunner().invoke(app, ["collective", "--help"])
    assert result.exit_code == 0
    for name in COLLECTIVES:
        assert name in result.stdout


@pytest.mark.parametrize("name", list(COLLECTIVES))
def test_every_registry_entry_has_what_it_needs(name):
    """Every per-collective fact lives on the entry: what one that moves data or rounds must carry."""
    entry = COLLECTIVES[name]
    moves = entry.bus_factor is not None
    assert (entry.algbw_bytes is not None) == moves
    assert (entry.hlo_op is not None) == moves
    assert (entry.min_bytes is not None) == moves, "a collective that moves data needs a min-bytes rule"
    if entry.min_bytes is not None:
        read, written = entry.min_bytes.count(1024, 4, 4)
        assert read > 0 and written > 0 and entry.min_bytes.words
    assert (entry.bound_blocks is not None) == (not entry.exact), "an inexact one needs its error bounds"
    assert not entry.mean or not entry.exact
    assert entry.options <= set(registry.PARAM_FLAGS), "each option needs its flag"
    if entry.senders is not None:
        assert 1 <= entry.senders(CollectiveParams(axes=("x",)), 4) <= 4


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("name", ["pmean", "psum_scatter", "ppermute", "all_to_all", "axis_index"])
def test_a_collective_is_its_entry_not_its_name(monkeypatch, name, dtype):
    """A copy of an entry under another name runs, checks and counts bytes as the original does."""
    copy = dataclasses.replace(COLLECTIVES[name], name=f"my_{name}")
    monkeypatch.setitem(COLLECTIVES, copy.name, copy)
    kw = dict(perm=((0, 2), (2, 1))) if name == "ppermute" else {}
    kw["placement"] = "both"  # pmean of integers gives floats: its in-place run is left out, with why
    mine = run_collective(request(copy.name, "4", dtype=dtype, init="random", **kw))
    theirs = run_collective(request(name, "4", dtype=dtype, init="random", **kw))
    assert mine.wrong == 0
    assert mine.runs[0].global_shape == theirs.runs[0].global_shape
    assert mine.runs[0].tolerance == theirs.runs[0].tolerance
    assert mine.runs[0].min_bytes == theirs.runs[0].min_bytes
    assert [p.not_run is None for p in mine.runs[0].placements] == [
        p.not_run is None for p in theirs.runs[0].placements
    ]
    assert mine.roofline.rule == theirs.roofline.rule
