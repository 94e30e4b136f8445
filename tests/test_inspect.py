"""`shardcli inspect FILE.py:FUNCTION` and the Python API (`shardcli.show`, `shardcli.inspect`)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import clean_env

from shardcli import json_schema as schema

ROOT = Path(__file__).resolve().parent.parent
MLP = str(ROOT / "examples" / "mlp.py")
TRANSFORMER = str(ROOT / "examples" / "transformer.py")
MLP_ARGS = (
    "--arg",
    "f32[256,1024]@data,None",
    "--arg",
    "f32[1024,4096]@None,model",
    "--arg",
    "f32[4096,1024]@model,None",
)
MESHES = [("2x4", "data,model"), ("2x2x2", "data,model,seq")]


def inspect_json(cli, *args: str) -> dict:
    out = cli(["inspect", *args, "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert schema.document_problems(doc) == []
    return doc


def kinds(doc: dict) -> list[tuple[str, tuple[str, ...]]]:
    return [(c["kind"], tuple(c["mesh_axes"])) for c in doc["program"]["collectives"]]


def user_file(tmp_path: Path, code: str, name: str = "user.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(code))
    return str(path)


# --- the examples ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mesh", MESHES)
def test_the_mlp_train_step(cli, mesh):
    doc = inspect_json(cli, f"{MLP}:train_step", *MLP_ARGS, "--mesh", mesh[0], "--axes", mesh[1])
    names = [a["name"] for a in doc["arguments"]]
    assert names == ["x", "w1", "w2"]
    assert [r["spec"] for r in doc["results"]][:2] == [[None, ["model"]], [["model"], None]]
    # Megatron's MLP: the second layer's partial sums are all-reduced over model; the gradients'
    # over data
    assert ("all-reduce", ("model",)) in kinds(doc) and ("all-reduce", ("data",)) in kinds(doc)
    model = 4 if mesh[0] == "2x4" else 2
    data = 2
    expected = (256 // data * 1024 + 1024 * 4096 // model * 2) * 4
    assert doc["program"]["memory"]["argument_bytes"] == expected
    assert doc["program"]["flops_per_device"] > 0
    assert doc["findings"] == []
    sources = [c["source"] for c in doc["program"]["collectives"] if c["source"]]
    assert sources and all(s.startswith(MLP + ":") for s in sources)


@pytest.mark.parametrize("mesh", MESHES)
def test_the_transformer_block_with_its_parameters_as_a_pytree(cli, mesh):
    doc = inspect_json(
        cli, f"{TRANSFORMER}:block", "--inputs", f"{TRANSFORMER}:inputs", "--mesh", mesh[0], "--axes", mesh[1]
    )
    names = {a["name"] for a in doc["arguments"]}
    assert {"params['wq']", "params['w_up']", "x"} <= names
    assert doc["findings"] == []
    assert kinds(doc) and all(k == ("all-reduce", ("model",)) for k in kinds(doc))


def test_hundreds_of_gib_per_device_are_inspected_without_allocating(cli):
    """256 GiB of float32 per device for each weight: compiled from shapes, reported in full."""
    big = 1 << 18  # 256Ki x 256Ki float32 = 256 GiB; sharded 4 ways on the model axis: 64 GiB each
    doc = inspect_json(
        cli,
        f"{MLP}:train_step",
        "--arg",
        f"f32[{1 << 12},{big}]@data,None",
        "--arg",
        f"f32[{big},{big}]@None,model",
        "--arg",
        f"f32[{big},{big}]@model,None",
        "--mesh",
        "2x4",
        "--axes",
        "data,model",
    )
    weights = 2 * big * big * 4 // 4
    assert doc["program"]["memory"]["argument_bytes"] == weights + (1 << 12) // 2 * big * 4
    assert doc["arguments"][1]["bytes_per_device"] == big * big


# --- the classic mistakes -------------------------------------------------------------------------

MISTAKES = """
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def matmul(x, w):
    return x @ w


def layout_change(x):
    y = x * 2
    y = jax.lax.with_sharding_constraint(y, P(None, "data"))
    return y * 3
"""


@pytest.mark.parametrize(
    ("fn", "args", "kind", "words"),
    [
        pytest.param(
            "matmul",
            ("--arg", "f32[64,1024]@data,None", "--arg", "f32[1024,1024]"),
            "replicated",
            "argument w (f32[1024,1024], 4 MiB) is fully replicated: each of the 8 devices holds all of it",
            id="replicated-weight",
        ),
        pytest.param(
            "matmul",
            (
                "--mesh",
                "8",
                "--axes",
                "data",
                "--arg",
                "f32[64,1024]@data,None",
                "--arg",
                "f32[1024,1024]@data,None",
            ),
            "gathered-whole",
            "w (f32[1024,1024]) is all-gathered whole over data at dot_general",
            id="weight-gathered-whole",
        ),
        pytest.param(
            "layout_change",
            (
                "--arg",
                "f32[64,64]@data,None",
            ),
            "reshard",
            "to reshard between operations",
            id="reshard-between-ops",
        ),
        pytest.param(
            "matmul",
            ("--arg", "f32[64,256]@data,None", "--arg", "f32[256,256]@None,model", "--out", "data,None"),
            "result-sharding",
            "result came out data,model but --out asked for data,None",
            id="result-sharded-otherwise",
        ),
    ],
)
def test_each_planted_mistake_is_named(cli, tmp_path, fn, args, kind, words):
    path = user_file(tmp_path, MISTAKES)
    doc = inspect_json(
        cli, f"{path}:{fn}", "--mesh", "2x4", "--axes", "data,model", *args
    )  # a later --mesh wins
    found = [f for f in doc["findings"] if f["kind"] == kind]
    assert found, (doc["findings"], doc["program"]["collectives"], doc["mesh"]["shape"])
    assert any(words in f["message"] for f in found), found
    table = cli(
        ["inspect", f"{path}:{fn}", "--mesh", "2x4", "--axes", "data,model", *args], env={"COLUMNS": "200"}
    )
    assert f"warning ({kind})" in table.stdout


def test_a_clean_program_has_no_findings(cli, tmp_path):
    path = user_file(tmp_path, MISTAKES)
    doc = inspect_json(
        cli,
        f"{path}:matmul",
        "--arg",
        "f32[64,1024]@data,None",
        "--arg",
        "f32[1024,1024]@None,model",
        "--out",
        "data,model",
        "--mesh",
        "2x4",
        "--axes",
        "data,model",
    )
    assert doc["findings"] == [] and kinds(doc) == []
    out = cli(
        [
            "inspect",
            f"{path}:matmul",
            "--arg",
            "f32[64,1024]@data,None",
            "--arg",
            "f32[1024,1024]@None,model",
            "--mesh",
            "2x4",
            "--axes",
            "data,model",
        ]
    )
    assert "no classic sharding mistakes found" in out.stdout


def test_run_times_it_on_generated_inputs(cli):
    doc = inspect_json(
        cli,
        f"{MLP}:train_step",
        "--arg",
        "f32[16,32]@data,None",
        "--arg",
        "f32[32,64]@None,model",
        "--arg",
        "f32[64,32]@model,None",
        "--run",
        "--iters",
        "3",
        "--mesh",
        "2x4",
        "--axes",
        "data,model",
    )
    assert len(doc["timing"]["samples_s"]) == 3 and doc["timing"]["stats_s"]["p50"] > 0
    plain = inspect_json(
        cli,
        f"{MLP}:train_step",
        "--arg",
        "f32[16,32]@data,None",
        "--arg",
        "f32[32,64]@None,model",
        "--arg",
        "f32[64,32]@model,None",
        "--mesh",
        "2x4",
        "--axes",
        "data,model",
    )
    assert plain["timing"] is None


# --- errors ---------------------------------------------------------------------------------------

BROKEN_IMPORT = """
import math

def helper():
    return 1 / 0

VALUE = helper()
"""
RAISES_WHEN_TRACED = """
import jax.numpy as jnp

def step(x):
    return check(x) * 2

def check(x):
    if x.shape[0] != 3:
        raise ValueError(f"step wants 3 rows, got {x.shape[0]}")
    return x
"""


@pytest.mark.parametrize(
    ("target", "args", "message"),
    [
        pytest.param("nosuch.py:f", (), "inspect 'nosuch.py:f': no file nosuch.py", id="no-file"),
        pytest.param(f"{MLP}:nosuch", (), "has no 'nosuch'; it defines loss, train_step", id="no-function"),
        pytest.param("mlp.py", (), "is not FILE.py:FUNCTION or package.module:FUNCTION", id="no-colon"),
        pytest.param("nosuchpkg.mod:f", (), "no module 'nosuchpkg' on the Python path", id="no-module"),
        pytest.param(f"{MLP}:LEARNING_RATE", (), "names a float, not a function", id="not-callable"),
        pytest.param(
            f"{MLP}:train_step",
            ("--arg", "f32[4,4]", "--inputs", f"{TRANSFORMER}:inputs"),
            "give the arguments with --arg or with --inputs, not both",
            id="arg-and-inputs",
        ),
        pytest.param(f"{MLP}:train_step", ("--arg", "q3[4]"), "dtype 'q3' is not supported", id="bad-dtype"),
        pytest.param(
            f"{MLP}:train_step", ("--arg", "f32[4]@nosuch"), "names mesh axis 'nosuch'", id="bad-axis"
        ),
        pytest.param(
            f"{MLP}:train_step",
            (
                "--arg",
                "f32[8,8]",
            ),
            "JAX could not compile",
            id="wrong-arity",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(cli, target, args, message):
    out = cli(["inspect", target, *args, "--mesh", "2x4", "--axes", "data,model"])
    assert out.exit_code == 2, out.output
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


@pytest.mark.parametrize(
    ("code", "args", "last", "frames"),
    [
        pytest.param(
            BROKEN_IMPORT, (), "importing", ["VALUE = helper()", "return 1 / 0"], id="import-raises"
        ),
        pytest.param(
            RAISES_WHEN_TRACED,
            ("--arg", "f32[8,8]"),
            "raised while JAX traced it",
            ["return check(x) * 2", 'raise ValueError(f"step wants 3 rows'],
            id="trace-raises",
        ),
    ],
)
def test_an_error_in_the_users_file_shows_their_frames_then_one_line(cli, tmp_path, code, args, last, frames):
    path = user_file(tmp_path, code)
    out = cli(["inspect", f"{path}:step", *args, "--mesh", "2x4", "--axes", "data,model"])
    assert out.exit_code == 2, out.output
    lines = out.stderr.strip().splitlines()
    assert lines[0].startswith("Traceback (most recent call last; your frames only)")
    assert last in lines[-1] and lines[-1].startswith("shardcli")
    for frame in frames:
        assert frame in out.stderr
    assert "site-packages" not in out.stderr and "shardcli/" not in "\n".join(lines[:-1])


def test_inputs_that_raise_or_return_nonsense(cli, tmp_path):
    path = user_file(
        tmp_path, "def inputs(mesh):\n    raise KeyError('no such layer')\n\ndef bad(mesh):\n    return 3\n"
    )
    out = cli(["inspect", f"{MLP}:train_step", "--inputs", f"{path}:inputs"])
    assert out.exit_code == 2 and "raise KeyError('no such layer')" in out.stderr
    out = cli(["inspect", f"{MLP}:train_step", "--inputs", f"{path}:bad"])
    assert out.exit_code == 2 and "returned a int; return the tuple" in out.stderr


# --- compare: a CI guard for a model's sharding ---------------------------------------------------


@pytest.mark.parametrize("metric", ["memory", "sent", "collectives"])
def test_compare_two_inspects_flags_a_regression(cli, tmp_path, metric):
    good = inspect_json(cli, f"{MLP}:train_step", *MLP_ARGS, "--mesh", "2x4", "--axes", "data,model")
    worse = inspect_json(
        cli,
        f"{MLP}:train_step",
        "--arg",
        "f32[256,1024]@data,None",
        "--arg",
        "f32[1024,4096]",
        "--arg",
        "f32[4096,1024]",
        "--mesh",
        "2x4",
        "--axes",
        "data,model",
    )
    if metric == "collectives":  # replicated weights need no all-reduce over model: plant one more op
        worse["program"]["collectives"].append(dict(worse["program"]["collectives"][0], runs=5))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(good))
    b.write_text(json.dumps(worse))
    assert cli(["compare", str(a), str(a), "--metric", metric]).exit_code == 0
    out = cli(["compare", str(a), str(b), "--metric", metric])
    # replicated weights: 4x the memory, and their whole gradients are all-reduced over data
    assert out.exit_code == 1 and "REGRESSION" in out.stdout, out.output


# --- the Python API -------------------------------------------------------------------------------


def test_importing_shardcli_does_not_import_jax():
    code = "import sys, shardcli; print('jax' in sys.modules, 'numpy' in sys.modules, shardcli.__all__)"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(), check=True
    )
    assert proc.stdout.startswith("False False"), proc.stdout


def test_api_show_and_inspect():
    import io

    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P
    from rich.console import Console

    import shardcli

    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    x = jax.device_put(jnp.arange(64.0).reshape(8, 8), NamedSharding(mesh, P("data", "model")))
    buffer = io.StringIO()
    Console(file=buffer, width=120).print(shardcli.picture(x, "x"))
    assert "x: spec data,model" in buffer.getvalue() and "dev 7" in buffer.getvalue()
    w = jax.ShapeDtypeStruct((8, 1024), jnp.float32, sharding=NamedSharding(mesh, P(None, "model")))
    report = shardcli.inspect(lambda x, w: x @ w, x, w, outs=[P("data", None)])
    assert isinstance(report, shardcli.InspectReport)
    assert [c.kind for c in report.collectives] == ["all-gather"] or report.collectives
    assert any("--out asked for data,None" in f for f in report.findings)
    doc = json.loads(report.to_json())
    assert schema.document_problems(doc) == [] and doc["target"] == "<lambda>"
    Console(file=buffer, width=120).print(report)
    assert "collectives: 1 op in 1 group" in buffer.getvalue()
    assert report.memory.argument_bytes == (4 * 2 + 8 * 256) * 4


def test_inspect_over_two_processes():
    from conftest import run_shardcli

    proc = run_shardcli(
        "launch", "-n", "2", "--", "inspect", f"{MLP}:train_step", "--mesh", "2x2", "--axes", "data,model",
        "--arg", "f32[16,32]@data,None", "--arg", "f32[32,64]@None,model", "--arg", "f32[64,32]@model,None",
        "--format", "json", timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["runtime"]["process_count"] == 2
    assert [c["mesh_axes"] for c in doc["program"]["collectives"]] == [["model"], ["data"]]
