"""`shardcli einsum` and `shardcli reshard`: the user's own operation from flags."""

from __future__ import annotations

import csv
import io
import json

import pytest
from conftest import run_shardcli

from shardcli.errors import ShardcliError
from shardcli.results import documents
from shardcli.specs.einsum import parse_einsum

FAST = ("--warmup", "1", "--iters", "2")
BSF = ("einsum", "bsd,df->bsf", "--shape", "8x16x32", "--shape", "32x64")
ATTENTION = ("einsum", "bqhd,bkhd->bhqk", "--shape", "4x8x4x16", "--shape", "4x8x4x16")


def run_json(cli, *args: str) -> dict:
    out = cli([*args, *FAST, "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert documents.document_problems(doc) == []
    return doc


def collectives(impl: dict) -> list[tuple[str, tuple[str, ...]]]:
    return [(c["kind"], tuple(c["mesh_axes"])) for c in impl["program"]["collectives"]]


# --- the notation (no devices) --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shapes", "canonical", "out_shape", "summed", "flops"),
    [
        pytest.param(
            "bsd,df->bsf", ((2, 3, 4), (4, 5)), "bsd,df->bsf", (2, 3, 5), "d", 2 * 2 * 3 * 4 * 5, id="dense"
        ),
        pytest.param("ij,jk", ((2, 3), (3, 4)), "ij,jk->ik", (2, 4), "j", 2 * 2 * 3 * 4, id="implicit"),
        pytest.param("ij->ji", ((2, 3),), "ij->ji", (3, 2), "", 0, id="transpose"),
        pytest.param("ij->i", ((2, 3),), "ij->i", (2,), "j", 6, id="summed-away"),
        pytest.param(
            "bqhd,bkhd->bhqk",
            ((2, 5, 3, 4), (2, 6, 3, 4)),
            "bqhd,bkhd->bhqk",
            (2, 3, 5, 6),
            "d",
            2 * 2 * 5 * 3 * 4 * 6,
            id="attention",
        ),
        pytest.param(
            "...ij,...jk",
            ((5, 2, 3), (5, 3, 4)),
            "Aij,Ajk->Aik",
            (5, 2, 4),
            "j",
            2 * 5 * 2 * 3 * 4,
            id="ellipsis",
        ),
        pytest.param(
            "ij,jk,kl->il",
            ((4, 8), (8, 16), (16, 2)),
            "ij,jk,kl->il",
            (4, 2),
            "jk",
            2 * 8 * 16 * 2 + 2 * 4 * 8 * 2,
            id="three",
        ),
    ],
)
def test_subscripts_become_letters_sizes_and_flops(text, shapes, canonical, out_shape, summed, flops):
    notation = parse_einsum(text, shapes)
    assert notation.canonical == canonical
    assert notation.output_shape == out_shape
    assert notation.summed == summed
    assert notation.model_flops() == flops


@pytest.mark.parametrize(
    ("text", "shapes", "message"),
    [
        ("ij,jk", ((2, 3),), "einsum 'ij,jk' has 2 operand(s) but --shape was given 1 time(s)"),
        ("ij,jk->il", ((2, 3), (3, 4)), "Output character l did not appear in the input"),
        ("ij,jk", ((2, 3), (4, 4)), "Size of label 'j' for operand 1 (3) does not match previous terms (4)"),
        ("i1,jk", ((2, 3), (3, 4)), "einsum 'i1,jk' has '1'; subscripts are letters"),
        ("ij", ((2, 3, 4),), "operand 0 has subscripts 'ij' (2 dims) but --shape 2x3x4 has 3"),
        ("a,b,c,d,e", ((1,),) * 5, "has 5 operands; shardcli einsum takes 1 to 4"),
        ("ij->jj", ((2, 2),), "Output character j appeared more than once in the output"),
        ("ij,j->i", ((2, 3), (1,)), "dim 'j' is 3 in one operand and 1 in another"),
    ],
)
def test_subscripts_jax_would_reject_are_one_line(text, shapes, message):
    with pytest.raises(ShardcliError) as error:
        parse_einsum(text, shapes)
    assert message in str(error.value) and "\n" not in str(error.value)


# --- runs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mesh", "b_local"),
    [(("2x4", "data,model"), 32 * 64 // 4), (("2x2x2", "data,model,seq"), 32 * 64 // 2)],
)
def test_the_issue_example_runs_both_ways_and_matches_numpy(cli, mesh, b_local):
    doc = run_json(
        cli,
        *BSF,
        "--in",
        "data,None,None",
        "--in",
        "None,model",
        "--out",
        "data,None,model",
        "--mesh",
        mesh[0],
        "--axes",
        mesh[1],
    )
    assert doc["summary"]["wrong"] == 0
    impls = {i["impl"]: i for i in doc["sizes"][0]["impls"]}
    assert set(impls) == {"auto", "explicit"}
    for impl in impls.values():
        assert impl["status"] == "ok" and impl["out_spec"] == [["data"], None, ["model"]]
        assert collectives(impl) == []  # no sharded contracting dim: no communication
        # memory_analysis: each device's block of A (batch halved over data) and of B
        assert impl["program"]["memory"]["argument_bytes"] == (8 * 16 * 32 // 2 + b_local) * 4


def test_a_contracting_dim_sharded_on_both_sides_is_an_all_reduce_and_explicit_refuses(cli):
    doc = run_json(
        cli, *BSF, "--in", "data,None,model", "--in", "model,None", "--mesh", "2x4", "--axes", "data,model"
    )
    auto, explicit = doc["sizes"][0]["impls"]
    assert auto["status"] == "ok" and ("all-reduce", ("model",)) in collectives(auto)
    assert explicit["status"] == "refused"
    assert explicit["message"].startswith("ShardingTypeError: Contracting dimensions are sharded")
    assert doc["summary"]["refused"] == [{"scale": 1.0, "impl": "explicit", "message": explicit["message"]}]


def test_without_out_the_report_says_what_the_compiler_chose(cli):
    doc = run_json(
        cli,
        *BSF,
        "--in",
        "data,None,None",
        "--in",
        "None,model",
        "--impl",
        "auto",
        "--mesh",
        "2x4",
        "--axes",
        "data,model",
    )
    assert doc["config"]["out_spec"] is None
    assert doc["sizes"][0]["impls"][0]["out_spec"] == [["data"], None, ["model"]]


@pytest.mark.parametrize("mesh", [("2x4", "data,model"), ("2x2x2", "data,model,seq")])
def test_attention_scores_on_every_mesh(cli, mesh):
    doc = run_json(
        cli,
        *ATTENTION,
        "--in",
        "data,None,model",
        "--in",
        "data,None,model",
        "--out",
        "data,model,None,None",
        "--mesh",
        mesh[0],
        "--axes",
        mesh[1],
    )
    assert doc["summary"]["wrong"] == 0
    for impl in doc["sizes"][0]["impls"]:
        assert impl["status"] == "ok" and collectives(impl) == []
        assert impl["program"]["flops_per_device"] > 0


def test_a_gathered_weight_is_named_with_its_mesh_axis(cli):
    """A weight sharded on its contracting dim while the activations are not: the compiler gathers."""
    doc = run_json(
        cli,
        *BSF,
        "--in",
        "data,None,None",
        "--in",
        "model,None",
        "--out",
        "data,None,None",
        "--impl",
        "auto",
        "--mesh",
        "2x4",
        "--axes",
        "data,model",
    )
    kinds = collectives(doc["sizes"][0]["impls"][0])
    assert kinds and all(axes == ("model",) for _, axes in kinds), kinds


def test_table_output_shows_pictures_collectives_and_the_verdict(cli):
    out = cli(
        [
            *BSF,
            "--in",
            "data,None,model",
            "--in",
            "model,None",
            *FAST,
            "--mesh",
            "2x4",
            "--axes",
            "data,model",
        ],
        env={"COLUMNS": "200"},
    )
    assert out.exit_code == 0, out.output
    for text in ("A [bsd]", "B [df]", "all-reduce", "model", "JAX's lesson", "cost model", "verified"):
        assert text in out.stdout, text


def test_a_wrong_block_exits_1(cli, monkeypatch):
    from shardcli.playground import einsum as core

    real = core._program

    def off_by_one(notation, out_spec):
        fn = real(notation, out_spec)
        return lambda *ops: fn(*ops) + 1

    monkeypatch.setattr(core, "_program", off_by_one)
    out = cli([*BSF, "--mesh", "4", *FAST])
    assert out.exit_code == 1, out.output
    assert "WRONG" in out.stdout


def test_csv_has_a_row_per_size_and_way(cli):
    out = cli([*BSF, "--in", "x", "--mesh", "2", "--sizes", "1,2", *FAST, "--format", "csv"])
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [(r["scale"], r["impl"]) for r in rows] == [
        ("1", "auto"),
        ("1", "explicit"),
        ("2", "auto"),
        ("2", "explicit"),
    ]
    assert rows[2]["shapes"] == "16x32x64,64x128"
    assert all(r["wrong"] == "0" for r in rows)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ("einsum", "ij,jk", "--shape", "4x4"), "has 2 operand(s) but --shape was given 1", id="count"
        ),
        pytest.param(
            (*BSF, "--in", "data,None,None", "--mesh", "4"),
            "--in 'data,None,None' names mesh axis 'data'",
            id="unknown-axis",
        ),
        pytest.param((*BSF, "--in", "x,None,x", "--mesh", "4"), "uses mesh axis 'x' twice", id="axis-twice"),
        pytest.param(
            (*BSF, "--in", "None,None,x", "--mesh", "3"), "dim 2 (32) is not divisible by 3", id="divisible"
        ),
        pytest.param(
            (*BSF, "--out", "x,None", "--mesh", "4", "--shape", "1"),
            "has 2 operand(s) but --shape was given 3",
            id="extra-shape",
        ),
        pytest.param(
            (*BSF, "--in", "x", "--in", "x", "--in", "x", "--mesh", "4"),
            "--in was given 3 times",
            id="in-count",
        ),
        pytest.param(
            (*BSF, "--out", "x,None,None,None", "--mesh", "4"),
            "--out 'x,None,None,None' has 4 entries",
            id="out-rank",
        ),
        pytest.param(
            (*BSF, "--dtype", "int32", "--mesh", "4"), "--dtype int32 is not supported by einsum", id="dtype"
        ),
        pytest.param((*BSF, "--impl", "manual", "--mesh", "4"), "--impl 'manual' is not valid", id="impl"),
        pytest.param(
            ("einsum", "ij,jk", "--shape", "200000x200000", "--shape", "200000x200000", "--mesh", "2"),
            "needs about 3.5 TiB across 2 CPU devices but this machine has",
            id="memory",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, args, message):
    out = cli([*args, *FAST])
    assert out.exit_code == 2, out.output
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stdout == ""


# --- reshard --------------------------------------------------------------------------------------

RESHARD = ("reshard", "--shape", "8x64", "--mesh", "2x4", "--axes", "data,model")


def test_reshard_moves_with_the_collectives_it_needs_and_matches_exactly(cli):
    doc = run_json(cli, *RESHARD, "--from", "data,model", "--to", "model,data")
    assert doc["summary"]["wrong"] == 0 and doc["summary"]["needs_communication"]
    ways = {w["impl"]: w for w in doc["impls"]}
    assert set(ways) == {"reshard", "jit", "device_put"}
    for name in ("reshard", "jit"):
        assert ways[name]["out_spec"] == [["model"], ["data"]]
        assert {k for k, _ in collectives(ways[name])} & {"all-to-all", "collective-permute", "all-gather"}
    assert ways["device_put"]["program"] is None and ways["device_put"]["algbw_gbps"] > 0
    # device 0 held rows 0:4, cols 0:16; it now holds rows 0:2, cols 0:32: half its new block is new
    first = doc["devices"][0]
    assert (first["before"], first["after"]) == ([[0, 4], [0, 16]], [[0, 2], [0, 32]])
    assert first["receive_bytes"] == 2 * 16 * 4


def test_a_reshard_that_needs_no_communication_says_so(cli):
    doc = run_json(cli, *RESHARD, "--from", "data,None", "--to", "data,model")
    assert not doc["summary"]["needs_communication"] and doc["summary"]["min_receive_bytes_per_device"] == 0
    for way in doc["impls"]:
        assert way["program"] is None or collectives(way) == []
    out = cli([*RESHARD, "--from", "data,None", "--to", "data,model", *FAST])
    assert "no communication needed" in out.stdout


def test_reshard_gathers_to_replicated_over_every_axis(cli):
    doc = run_json(cli, *RESHARD, "--from", "data,model", "--impl", "jit")
    (way,) = doc["impls"]
    assert way["out_spec"] == [None, None]
    # XLA gathers one axis at a time
    assert sorted(collectives(way)) == [("all-gather", ("data",)), ("all-gather", ("model",))]


def test_reshard_csv_and_bad_specs(cli):
    out = cli([*RESHARD, "--from", "data", "--to", "model", *FAST, "--format", "csv"])
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [r["impl"] for r in rows] == ["reshard", "jit", "device_put"]
    bad = cli([*RESHARD, "--from", "data", "--to", "nosuch", *FAST])
    assert bad.exit_code == 2 and "--to 'nosuch' names mesh axis 'nosuch'" in bad.stderr
    bad = cli(["reshard", "--shape", "6x8", "--to", "model", "--mesh", "2x4", "--axes", "data,model", *FAST])
    assert bad.exit_code == 2 and "dim 0 (6) is not divisible by 4" in bad.stderr


def test_reshard_checks_every_element(cli, monkeypatch):
    from shardcli.playground import reshard as core

    real = core._program

    def corrupt(way, *args):
        step, x, compiled, seconds, cached, mesh = real(way, *args)
        return (lambda a: step(a) * 2), x, compiled, seconds, cached, mesh

    monkeypatch.setattr(core, "_program", corrupt)
    out = cli([*RESHARD, "--from", "data", "--to", "model", *FAST])
    assert out.exit_code == 1 and "WRONG" in out.stdout
    assert "differ from NumPy in reshard (" in out.stdout


# --- several processes ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        pytest.param((*BSF, "--in", "data,None,model", "--in", "model,None"), id="einsum"),
        pytest.param(
            ("reshard", "--shape", "8x64", "--from", "data,model", "--to", "model,data"), id="reshard"
        ),
    ],
)
def test_launch_two_processes_verifies_across_both(args):
    proc = run_shardcli(
        "launch",
        "-n",
        "2",
        "--",
        *args,
        "--mesh",
        "2x2",
        "--axes",
        "data,model",
        *FAST,
        "--format",
        "json",
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["runtime"]["process_count"] == 2 and doc["summary"]["wrong"] == 0
    impls = doc["sizes"][0]["impls"] if doc["command"] == "einsum" else doc["impls"]
    timed = [i for i in impls if i["timing"] is not None]
    assert timed and all(len(i["timing"]["processes"]) == 2 for i in timed)


# --- compare: a CI guard for a layout's memory, bytes and time --------------------------------------


def _save(tmp_path, name: str, doc: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("metric", ["time", "memory", "sent"])
def test_compare_two_einsum_runs_finds_a_regression(cli, tmp_path, metric):
    args = (*BSF, "--in", "data,None,model", "--in", "model,None", "--mesh", "2x4", "--axes", "data,model")
    base = run_json(cli, *args)
    worse = json.loads(json.dumps(base))
    auto = worse["sizes"][0]["impls"][0]
    if metric == "time":
        auto["timing"]["stats_s"]["p50"] *= 3
    elif metric == "memory":
        auto["program"]["memory"]["total_bytes"] *= 2
    else:
        auto["program"]["sent_bytes_per_device"] *= 2
    a, b = _save(tmp_path, "a.json", base), _save(tmp_path, "b.json", worse)
    same = cli(["compare", a, a, "--metric", metric])
    assert same.exit_code == 0, same.output
    regressed = cli(["compare", a, b, "--metric", metric, "--format", "json"])
    assert regressed.exit_code == 1, regressed.output
    rows = json.loads(regressed.stdout)["rows"]
    assert [r["status"] for r in rows] == ["regression", "n/a"]  # explicit was refused in both


def test_compare_two_reshards_and_refuses_a_different_move(cli, tmp_path):
    base = run_json(cli, *RESHARD, "--from", "data,model", "--to", "model,data")
    other = run_json(cli, *RESHARD, "--from", "data,model", "--to", "None,data")
    a, b = _save(tmp_path, "a.json", base), _save(tmp_path, "b.json", other)
    ok = cli(["compare", a, a, "--metric", "sent"])
    assert ok.exit_code == 0 and "8x64 from data,model to model,data" in ok.stdout, ok.output
    refused = cli(["compare", a, b])
    assert refused.exit_code == 2
    assert "compare needs the same --shape, --from and --to in both" in refused.stderr
