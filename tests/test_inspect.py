"""`shardcli inspect FILE.py:FUNCTION` and the Python API (`shardcli.show`, `shardcli.inspect`)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import clean_env

from shardcli.results import documents

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


def inspect_json(cli, *args: str, env: dict[str, str] | None = None) -> dict:
    out = cli(["inspect", *args, "--format", "json"], env=env)
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert documents.document_problems(doc) == []
    return doc


def kinds(doc: dict) -> list[tuple[str, tuple[str, ...]]]:
    return [(c["kind"], tuple(c["mesh_axes"])) for c in doc["program"]["collectives"]]


def user_file(tmp_path: Path, code: str, name: str = "user.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(code))
    return str(path)


def line_of(code: str, text: str) -> int:
    """The line number of `text` in `code` as user_file writes it."""
    return next(i for i, line in enumerate(code.splitlines(), 1) if line.strip() == text)


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


# --- findings that are true: by identity, in total, one line per cause, the user's line -----------

FSDP = """
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

LAYERS, D = 4, 64


def loss(params, x):
    def layer(h, w):
        return jnp.tanh(h @ w), None

    h, _ = jax.lax.scan(layer, x, params["layers"])
    return jnp.mean(h @ params["head"])


def step(params, mu, x):
    grads = jax.grad(loss)(params, x)
    mu = jax.tree.map(lambda m, g: 0.9 * m + g, mu, grads)
    return jax.tree.map(lambda p, m: p - 0.1 * m, params, mu), mu


def unrolled(params, x):
    for w in params:
        x = jnp.tanh(x @ w)
    return x


def both(x, w, m):
    return x @ w, m * 2


def replicated_leaves(params, x):
    for k, b in enumerate(params["scales"]):
        x = x * b if k % 2 else x + b
    return x @ params["w"]


def inputs(mesh):
    def arg(shape, *spec):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, P(*spec)))

    # FSDP: each layer's weight sharded over data, gathered inside the layer loop where it is used
    params = {"layers": arg((LAYERS, D, D), None, "data", None), "head": arg((D, 8))}
    mu = {"layers": arg((LAYERS, D, D), None, "data", None), "head": arg((D, 8))}
    return params, mu, arg((32, D), "data", None)


def unrolled_inputs(mesh):
    weight = jax.ShapeDtypeStruct((D, D), jnp.float32, sharding=NamedSharding(mesh, P("data", None)))
    x = jax.ShapeDtypeStruct((32, D), jnp.float32, sharding=NamedSharding(mesh, P("data", None)))
    return [weight] * 6, x


def many_replicated(mesh):
    # 40 replicated leaves of 32 KiB: each 2.4% of the memory a device needs, together 1.25 MiB
    scale = jax.ShapeDtypeStruct((8, 1024), jnp.float32, sharding=NamedSharding(mesh, P()))
    w = jax.ShapeDtypeStruct((1024, 2048), jnp.float32, sharding=NamedSharding(mesh, P(None, "model")))
    x = jax.ShapeDtypeStruct((8, 1024), jnp.float32, sharding=NamedSharding(mesh, P()))
    return {"scales": [scale] * 40, "w": w}, x
"""


def test_a_weight_gathered_in_a_layer_loop_is_fsdp_not_a_mistake(cli, tmp_path):
    """Stacked weights sharded over data and gathered layer by layer inside the scan: no finding,
    and every all-gather names the argument it gathers (optimizer moments of the same shape are
    never gathered, never named)."""
    path = user_file(tmp_path, FSDP)
    doc = inspect_json(cli, f"{path}:step", "--inputs", f"{path}:inputs", "--mesh", "8", "--axes", "data")
    gathers = [c for c in doc["program"]["collectives"] if c["kind"] == "all-gather"]
    assert {c["operand"] for c in gathers} == {"params['layers']"}, gathers
    assert all(c["runs"] == 4 and c["shape"] == "f32[64,64]" for c in gathers), gathers
    assert doc["findings"] == []


def test_a_gathered_argument_is_found_by_identity_not_by_its_shape(cli, tmp_path):
    """w is gathered whole; m has w's shape and sharding but is never gathered: only w is named."""
    path = user_file(tmp_path, FSDP)
    args = (
        "--arg",
        "f32[32,1024]@data,None",
        "--arg",
        "f32[1024,1024]@data,None",
        "--arg",
        "f32[1024,1024]@data,None",
    )
    doc = inspect_json(cli, f"{path}:both", *args, "--mesh", "8", "--axes", "data")
    found = [f for f in doc["findings"] if f["kind"] == "gathered-whole"]
    assert [(f["count"], f["paths"]) for f in found] == [(1, ["w"])], doc["findings"]
    assert found[0]["source"] == f"{path}:{line_of(FSDP, 'return x @ w, m * 2')}"
    assert "w (f32[1024,1024]) is all-gathered whole over data at dot_general" in found[0]["message"]


def test_one_line_per_cause_with_its_count(cli, tmp_path):
    """Six layers' weights gathered whole at the same line: one finding naming all six."""
    path = user_file(tmp_path, FSDP)
    doc = inspect_json(
        cli, f"{path}:unrolled", "--inputs", f"{path}:unrolled_inputs", "--mesh", "8", "--axes", "data"
    )
    (found,) = [f for f in doc["findings"] if f["kind"] == "gathered-whole"]
    assert found["count"] == 6 and found["paths"] == [f"params[{i}]" for i in range(6)]
    line = line_of(FSDP, "x = jnp.tanh(x @ w)")
    assert found["message"].startswith(
        f"6 arguments (96 KiB) are all-gathered whole over data at dot_general ({path}:{line}): "
    ), found
    assert "params[0], params[1], params[2] and 3 more" in found["message"]
    table = cli(
        [
            "inspect",
            f"{path}:unrolled",
            "--inputs",
            f"{path}:unrolled_inputs",
            "--mesh",
            "8",
            "--axes",
            "data",
        ]
    )
    assert table.stdout.count("warning (gathered-whole) x6:") == 1, table.stdout


def test_replicated_arguments_are_judged_in_total(cli, tmp_path):
    """40 replicated leaves, each under 5% of the memory per device, together over it: one finding
    with the sum, the share and the largest leaves."""
    path = user_file(tmp_path, FSDP)
    doc = inspect_json(
        cli,
        f"{path}:replicated_leaves",
        "--inputs",
        f"{path}:many_replicated",
        "--mesh",
        "2x4",
        "--axes",
        "data,model",
    )
    (found,) = [f for f in doc["findings"] if f["kind"] == "replicated"]
    memory = doc["program"]["memory"]["total_bytes"]
    held = 41 * 8 * 1024 * 4  # the 40 scales and x, each 32 KiB on every device
    assert all(a["bytes_per_device"] < 0.05 * memory for a in doc["arguments"] if a["replication"] == 8)
    assert found["count"] == 41 and len(found["paths"]) == 41
    assert found["message"].startswith(
        f"41 fully replicated arguments hold 1.3 MiB per device ({held / memory:.0%} of the "
    ), found["message"]
    # paths as every screen writes them (string keys as attributes); JSON's `paths` keep keystr's
    assert "the largest: params.scales[0] (f32[8,1024], 32 KiB)" in found["message"]
    assert "params['scales'][0]" in found["paths"]


LIBRARY = """
import jax.numpy as jnp


def dense(x, w):
    return jnp.tanh(x @ w)
"""
USES_LIBRARY = """
import dense_lib


def step(x, w):
    return dense_lib.dense(x, w) * 2
"""


def test_source_is_the_users_line_not_the_librarys(cli, tmp_path, monkeypatch):
    """A collective made inside an installed library (a site-packages folder) is shown at the
    user's line that called it."""
    library = tmp_path / "site-packages"
    library.mkdir()
    (library / "dense_lib.py").write_text(textwrap.dedent(LIBRARY))
    monkeypatch.syspath_prepend(str(library))
    path = user_file(tmp_path, USES_LIBRARY)
    doc = inspect_json(
        cli,
        f"{path}:step",
        "--arg",
        "f32[32,1024]@data,None",
        "--arg",
        "f32[1024,1024]@data,None",
        "--mesh",
        "8",
        "--axes",
        "data",
    )
    sources = {c["source"] for c in doc["program"]["collectives"]}
    assert sources == {f"{path}:6"}, sources


@pytest.mark.parametrize(
    ("flags", "full"),
    [
        pytest.param((), False, id="default-first-screen"),
        pytest.param(("--wide",), True, id="wide-everything"),
        pytest.param(("-v",), True, id="verbose-everything"),
    ],
)
def test_the_default_view_is_the_first_screen_and_wide_shows_everything(cli, flags, full):
    out = cli(["inspect", f"{MLP}:train_step", *MLP_ARGS, "--mesh", "2x4", "--axes", "data,model", *flags])
    assert out.exit_code == 0, out.output
    first = ("arguments: 3 leaves, ", "collectives: ", "step time ")
    everything = ("arguments and results", "collectives the compiler inserted", "cost model (roofline")
    assert all((text in out.stdout) != full for text in first), out.stdout
    assert all((text in out.stdout) == full for text in everything), out.stdout


def test_a_flax_model_shows_the_users_lines_and_its_layer_gathers_are_no_finding(cli):
    """Flax linen (nn.Dense in a scanned layer, FSDP-partitioned params in a TrainState): every
    collective's line is in the user's file, never flax/linen; each weight the layer loop gathers is
    named by its pytree path and is no finding; nor is the tied embedding gathered whole for the
    logits: FSDP shards it over the batch axis to gather it for use (issue 51: MaxText's logits_dense)."""
    pytest.importorskip("flax")
    program = str(ROOT / "tests" / "programs" / "linen_fsdp.py")
    doc = inspect_json(
        cli, f"{program}:train_step", "--inputs", f"{program}:make", "--mesh", "2x4", "--axes", "data,model"
    )
    sources = {c["source"].rpartition(":")[0] for c in doc["program"]["collectives"]}
    assert sources == {program}, sources
    names = {a["name"] for a in doc["arguments"]}
    gathers = [c for c in doc["program"]["collectives"] if c["kind"] == "all-gather"]
    assert gathers and all(c["operand"] in names for c in gathers), gathers
    layers = {c["operand"] for c in gathers if c["runs"] == 2}
    assert layers == {
        f"state.params['layers']['{w}']['kernel'].value"
        for w in ("query", "key", "value", "out", "up", "down")
    }
    whole = [f for f in doc["findings"] if f["kind"] == "gathered-whole"]
    assert whole == [], doc["findings"]
    embedding = [c for c in gathers if c["operand"] == "state.params['Embed_0']['embedding'].value"]
    assert embedding and {c["role"] for c in embedding} == {"fsdp-gather"}, embedding
    assert {c["role"] for c in gathers} == {"fsdp-gather"}, gathers


MISTAKES_EXAMPLE = str(ROOT / "examples" / "mistakes.py")


@pytest.mark.parametrize(
    ("args", "kind", "paths"),
    [
        pytest.param(
            (
                "matmul",
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
            ["w"],
            id="weight-gathered-whole",
        ),
        pytest.param(
            ("layout_change", "--mesh", "2x4", "--axes", "data,model", "--arg", "f32[64,64]@data,None"),
            "reshard",
            ["x"],
            id="reshard-between-ops",
        ),
        pytest.param(
            ("matmul", "--inputs", f"{MISTAKES_EXAMPLE}:replicated", "--mesh", "2x4", "--axes", "data,model"),
            "replicated",
            ["w"],
            id="16-gib-replicated",
        ),
    ],
)
def test_the_mistakes_planted_in_the_example_are_found(cli, args, kind, paths):
    fn, *rest = args
    doc = inspect_json(cli, f"{MISTAKES_EXAMPLE}:{fn}", *rest)
    assert [(f["kind"], f["paths"]) for f in doc["findings"]] == [(kind, paths)], doc["findings"]
    assert doc["findings"][0]["count"] == 1


SOURCE_TABLES = """\
FileNames
1 "/home/me/model.py"
2 "/venv/lib/python3.11/site-packages/flax/linen/linear.py"

FunctionNames
1 "<module>"

FileLocations
1 {file_name_id=1 function_name_id=1 line=40 end_line=40 column=1 end_column=1}
2 {file_name_id=1 function_name_id=1 line=12 end_line=12 column=1 end_column=1}
3 {file_name_id=2 function_name_id=1 line=199 end_line=199 column=1 end_column=1}

StackFrames
{frames}
"""


@pytest.mark.parametrize(
    ("frames", "user_files", "source"),
    [
        # XLA prints a parent as its id + 1: the outermost frame (1) says parent 1
        pytest.param(
            ["1 {file_location_id=1 parent_frame_id=1}", "2 {file_location_id=2 parent_frame_id=2}",
             "3 {file_location_id=3 parent_frame_id=3}"],
            (),
            "/home/me/model.py:12",
            id="library-innermost-user-line-wins",
        ),
        pytest.param(
            ["1 {file_location_id=1 parent_frame_id=0}", "2 {file_location_id=2 parent_frame_id=1}",
             "3 {file_location_id=3 parent_frame_id=2}"],
            (),
            "/home/me/model.py:12",
            id="parents-printed-as-ids",
        ),
        pytest.param(
            ["1 {file_location_id=1 parent_frame_id=1}", "2 {file_location_id=2 parent_frame_id=2}",
             "3 {file_location_id=3 parent_frame_id=3}"],
            ("/venv/lib/python3.11/site-packages/flax",),
            "/venv/lib/python3.11/site-packages/flax/linen/linear.py:199",
            id="the-users-own-package-in-site-packages",
        ),
        pytest.param(
            ["1 {file_location_id=3 parent_frame_id=0}", "2 {file_location_id=3 parent_frame_id=0}",
             "3 {file_location_id=3 parent_frame_id=2}"],
            (),
            "/venv/lib/python3.11/site-packages/flax/linen/linear.py:199",
            id="library-only-where-the-user-has-none",
        ),
    ],
)  # fmt: skip
def test_a_collectives_source_is_the_innermost_frame_in_the_users_files(frames, user_files, source):
    from shardcli.analysis.program import parse_collectives

    text = SOURCE_TABLES.replace("{frames}", "\n".join(frames)) + (
        "\nENTRY %main (p: f32[8]) -> f32[8] {\n"
        '  %p = f32[8]{0} parameter(0), metadata={op_name="x"}\n'
        "  ROOT %all-reduce = f32[8]{0} all-reduce(%p), replica_groups={{0,1}}, "
        'metadata={op_name="jit(f)/psum" stack_frame_id=3}\n}\n'
    )
    (op,) = parse_collectives(text, (2,), ("x",), user_files=user_files)
    assert op.source == source
    assert (op.operand, op.operand_parameter) == ("x", 0)


@pytest.mark.parametrize(
    "gather",
    [
        pytest.param(
            'all-gather(%p), replica_groups={{0,1}}, dimensions={0}, '
            'metadata={op_name="jit(f)/dot_general" stack_frame_id=3}',
            id="jax-0.10-the-users-operation",
        ),
        pytest.param(
            'all-gather(%p), replica_groups={{0,1}}, dimensions={0}, '
            'frontend_attributes={is_spmd_generated="true"}, metadata={op_name="w"}',
            id="jax-0.12-the-arguments-name",
        ),
    ],
)  # fmt: skip
def test_an_inserted_gathers_source_and_operation_are_those_of_the_operation_it_feeds(gather):
    """jax 0.12 gives a gather of an argument the argument's metadata (no line): the operation that
    uses it, through a copy that has no line either, names the line and the operation."""
    from shardcli.analysis.program import parse_collectives

    frames = ["1 {file_location_id=1 parent_frame_id=1}", "2 {file_location_id=2 parent_frame_id=2}",
              "3 {file_location_id=3 parent_frame_id=3}"]  # fmt: skip
    text = SOURCE_TABLES.replace("{frames}", "\n".join(frames)) + (
        "\nENTRY %main (p: f32[4], q: f32[8]) -> f32[8] {\n"
        '  %p = f32[4]{0} parameter(0), metadata={op_name="w"}\n'
        '  %q = f32[8]{0} parameter(1), metadata={op_name="x"}\n'
        f"  %all-gather = f32[8]{{0}} {gather}\n"
        '  %copy = f32[8]{0} copy(%all-gather), metadata={op_name="w"}\n'
        "  ROOT %dot = f32[8]{0} multiply(%q, %copy), "
        'metadata={op_name="jit(f)/dot_general" stack_frame_id=3}\n}\n'
    )
    (op,) = parse_collectives(text, (2,), ("x",))
    assert (op.source, op.op, op.operand) == ("/home/me/model.py:12", "dot_general", "w")


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


@pytest.mark.slow
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
    assert documents.document_problems(doc) == [] and doc["target"] == "<lambda>"
    Console(file=buffer, width=120).print(report)
    assert "collectives the compiler inserted" in buffer.getvalue()
    assert report.memory.argument_bytes == (4 * 2 + 8 * 256) * 4


@pytest.mark.slow
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


# --- what jax.jit(...).lower accepts (issue 31) -------------------------------------------------

KEYS = """
import jax
import jax.numpy as jnp


def noise(x, key):
    return x + jax.random.normal(key, x.shape)


def noises(x, keys):
    return x + jax.vmap(lambda k: jax.random.normal(k, x.shape[1:]))(keys)
"""


@pytest.mark.parametrize(
    ("fn", "key", "impl", "key_bytes"),
    [
        pytest.param("noise", "key<threefry>[]", "threefry2x32", 8, id="threefry-scalar"),
        pytest.param("noise", "key<fry>[]", "threefry2x32", 8, id="fry-as-jax-prints-it"),
        pytest.param("noises", "key<rbg>[8]@data", "rbg", 8 // 2 * 16, id="rbg-sharded"),
        pytest.param("noises", "key<unsafe_rbg>[8]", "unsafe_rbg", 8 * 16, id="unsafe-rbg-replicated"),
    ],
)
def test_typed_prng_keys_as_arg(cli, tmp_path, fn, key, impl, key_bytes):
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    path = user_file(tmp_path, KEYS)
    doc = inspect_json(
        cli, f"{path}:{fn}", "--arg", "f32[8,16]@data", "--arg", key, "--mesh", "2x4", "--axes", "data,model"
    )
    arg = doc["arguments"][1]
    assert arg["dtype"] == str(jax.eval_shape(lambda: jax.random.key(0, impl=impl)).dtype)
    assert arg["bytes_per_device"] == key_bytes
    # by hand
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    spec = P("data") if "@data" in key else P()
    shape = (8,) if "[8]" in key else ()
    dtype = jax.eval_shape(lambda: jax.random.key(0, impl=impl)).dtype
    x = jax.ShapeDtypeStruct((8, 16), "float32", sharding=NamedSharding(mesh, P("data")))
    k = jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))
    namespace: dict = {}
    exec(KEYS, namespace)  # noqa: S102 - the same source
    hand = jax.jit(namespace[fn]).lower(x, k).compile().memory_analysis()
    assert doc["program"]["memory"]["argument_bytes"] == hand.argument_size_in_bytes


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        pytest.param("key<philox>[]", "'key<philox>' names no PRNG key implementation", id="unknown-impl"),
        pytest.param("key<>[4]", "names no PRNG key implementation", id="no-impl"),
        pytest.param("key<rbg>[3]@data", "is not divisible", id="indivisible"),
    ],
)
def test_bad_key_args_are_one_line(cli, tmp_path, arg, message):
    path = user_file(tmp_path, KEYS)
    out = cli(["inspect", f"{path}:noises", "--arg", "f32[8,16]", "--arg", arg, "--axes", "data,model"])
    assert out.exit_code == 2, out.output
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


HOSTILE = """
import functools
import os
import sys

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def exits(x):
    sys.exit(3)


def hard_exits(x):
    os._exit(4)


def word(x):
    return "not an array"


@jax.jit
def pair(x, y):
    return x + y


@functools.partial(jax.jit, in_shardings=({"w": None, "b": None},))
def tree(params):
    return params["w"] + params["b"]


def tree_inputs(mesh):
    x = jax.ShapeDtypeStruct((8,), jnp.float32, sharding=NamedSharding(mesh, P()))
    return ({"w": x, "x": x},)


def wants_two(mesh, size):
    return ()


NOT_A_FUNCTION = 3


def wrong_key(x, key):
    return x + jax.random.normal(key, x.shape)


def one_arg(mesh):
    return (jax.ShapeDtypeStruct((8, 8), jnp.float32, sharding=NamedSharding(mesh, P())),)


def nameless(mesh):
    return {"argz": ()}


def abstract_mesh(mesh):
    other = jax.make_mesh((4, 2), ("data", "model")).abstract_mesh
    return (jax.ShapeDtypeStruct((8, 8), jnp.float32, sharding=NamedSharding(other, P("data"))),)
"""


LOUD = """
print("the user's banner")


def loud(x):
    print("tracing loud")
    return x * 2
"""


def test_what_the_users_code_prints_goes_to_stderr_and_json_stays_json(cli, tmp_path):
    path = user_file(tmp_path, LOUD)
    out = cli(["inspect", f"{path}:loud", "--arg", "f32[8,8]", "--format", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["arguments"][0]["name"] == "x"
    assert "the user's banner" in out.stderr and "tracing loud" in out.stderr


@pytest.mark.parametrize(
    ("fn", "call", "line"),
    [
        pytest.param("exits", "sys.exit(3)", "sys.exit(3)", id="sys-exit"),
        pytest.param("hard_exits", "os._exit(4)", "os._exit(4)", id="os-exit"),
    ],
)
def test_an_exit_in_the_users_code_is_one_line_naming_the_file_and_line(cli, tmp_path, fn, call, line):
    path = user_file(tmp_path, HOSTILE)
    number = HOSTILE.splitlines().index(f"    {line}") + 1
    out = cli(["inspect", f"{path}:{fn}", "--arg", "f32[8,8]"])
    assert out.exit_code == 2, out.output
    assert out.stderr.strip().splitlines() == [
        f"shardcli: error: {path}:{number} calls {call} while shardcli was tracing {path}:{fn}: shardcli "
        'keeps its own exit status and output; put the call under `if __name__ == "__main__":`'
    ]


def test_an_exit_at_import_is_one_line(cli, tmp_path):
    path = user_file(tmp_path, "import sys\n\nsys.exit('bye')\n")
    out = cli(["inspect", f"{path}:f", "--arg", "f32[8,8]"])
    assert out.exit_code == 2
    assert out.stderr.strip().splitlines() == [
        f"shardcli: error: {path}:3 calls sys.exit('bye') while shardcli was importing {path}: shardcli "
        'keeps its own exit status and output; put the call under `if __name__ == "__main__":`'
    ]


@pytest.mark.parametrize(
    ("fn", "args", "message"),
    [
        pytest.param("word", ("--arg", "f32[8,8]"), "JAX could not compile", id="not-jittable"),
        pytest.param(
            "pair", ("--arg", "f32[8,8]"), "missing 1 required positional argument: 'y'", id="too-few-args"
        ),
        pytest.param(
            "pair", ("--inputs", "{path}:wants_two"), "takes 2 arguments (mesh, size)", id="maker-arity"
        ),
        pytest.param(
            "tree", ("--inputs", "{path}:tree_inputs"), "pytree structure error", id="pytree-mismatch"
        ),
        pytest.param(
            "pair", ("--inputs", "{path}:NOT_A_FUNCTION"), "names a int, not a function", id="maker-not-fn"
        ),
        pytest.param("pair", ("--inputs", "{path}:nameless"), 'give "args"', id="maker-dict-keys"),
        pytest.param(
            "tree",
            ("--inputs", "{path}:tree_inputs", "--rules", "embed=data"),
            "(--rules) carries logical axis names: box them with nn.with_partitioning",
            id="rules-no-names",
        ),
        pytest.param(
            "tree",
            ("--inputs", "{path}:tree_inputs", "--rules", "embed"),
            "--rules entry 'embed' is not LOGICAL=MESH_AXIS[+MESH_AXIS]",
            id="rules-malformed",
        ),
        pytest.param(
            "pair",
            ("--arg", "f32[8]", "--arg", "f32[8]", "--rules", "embed=data"),
            "--rules lays out the arguments of --inputs FILE.py:NAME by their logical axis names; give "
            "--inputs (--arg takes its sharding as typed)",
            id="rules-without-inputs",
        ),
        pytest.param(
            "pair",
            ("--inputs", "{path}:abstract_mesh"),
            "abstract mesh 4x2 (data, model), which does not match this run's mesh 2x4 (data, model); "
            "run with --mesh 4x2 --axes data,model",
            id="abstract-mesh-mismatch",
        ),
    ],
)
def test_bad_programs_and_inputs_are_one_line(cli, tmp_path, fn, args, message):
    path = user_file(tmp_path, HOSTILE)
    given = [a.format(path=path) for a in args]
    out = cli(["inspect", f"{path}:{fn}", *given, "--mesh", "2x4", "--axes", "data,model"])
    assert out.exit_code == 2, out.output
    assert message in out.stderr.strip().splitlines()[-1], out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


PLAN_LINEN = str(ROOT / "tests" / "programs" / "plan_linen.py")


@pytest.mark.parametrize(
    ("rules", "code", "specs"),
    [
        pytest.param(
            "embed=data,mlp=model,batch=data",
            0,
            [["data"], ["model"]],
            id="by-names",
        ),
        pytest.param("mlp=model", 0, [None, ["model"]], id="embed-unmapped"),
        pytest.param(
            "embed=fsdp",
            2,
            "--rules embed=fsdp names mesh axis 'fsdp', which is not in the mesh (data, model); add it to "
            "--axes or leave it out of --rules",
            id="axis-not-in-mesh",
        ),
        pytest.param(
            "embed=data,heads=model",
            2,
            "--rules embed=data,heads=model maps logical axis 'heads', which no argument carries; the "
            "arguments carry batch, embed, mlp",
            id="name-not-carried",
        ),
    ],
)
def test_rules_lay_the_inputs_out_by_their_logical_axis_names(cli, rules, code, specs):
    """--rules maps nn.with_partitioning's names (and the LOGICAL_AXES table's) to this mesh's axes."""
    pytest.importorskip("flax")
    args = ["inspect", f"{PLAN_LINEN}:train_step", "--inputs", f"{PLAN_LINEN}:inputs"]
    out = cli([*args, "--mesh", "2x4", "--axes", "data,model", "--rules", rules, "--format", "json"])
    assert out.exit_code == code, out.output
    if code:
        assert out.stderr.strip().splitlines() == [f"shardcli: error: {specs}"]
        return
    arguments = {a["name"]: a["spec"] for a in json.loads(out.stdout)["arguments"]}
    assert arguments["params['params']['w1'].value"] == specs
    assert arguments["params['params']['w2'].value"] == specs[::-1]
    assert arguments["batch"][0] == (["data"] if "batch=data" in rules else None)  # the LOGICAL_AXES table


def test_a_key_of_the_wrong_kind_shows_the_users_frame_and_the_library_frame(cli, tmp_path):
    path = user_file(tmp_path, HOSTILE)
    out = cli(["inspect", f"{path}:wrong_key", "--arg", "f32[8,8]", "--arg", "u32[3]"])
    assert out.exit_code == 2, out.output
    lines = out.stderr.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last; your frames and the library frame it failed in):"
    assert "return x + jax.random.normal(key, x.shape)" in out.stderr and "jax/" in out.stderr
    assert lines[-1].startswith(f"shardcli: error: {path}:wrong_key raised while JAX traced it:")


EXPLICIT = """
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def step(x, w):
    return jnp.tanh(x @ w)


def inputs(mesh):
    own = jax.make_mesh(mesh.axis_sizes, mesh.axis_names)  # explicit axes: jax.make_mesh's default
    x = jax.ShapeDtypeStruct((16, 32), jnp.float32, sharding=NamedSharding(own, P("data", None)))
    w = jax.ShapeDtypeStruct((32, 64), jnp.float32, sharding=NamedSharding(own, P(None, "model")))
    return x, w
"""


@pytest.mark.parametrize(
    ("flags", "mode"),
    [
        pytest.param((), "explicit", id="follows-the-inputs"),
        pytest.param(("--mode", "auto"), "auto", id="mode-overrides"),
        pytest.param(("--mode", "explicit"), "explicit", id="mode-agrees"),
    ],
)
def test_the_mode_follows_the_inputs_mesh_and_mode_overrides_it(cli, tmp_path, flags, mode):
    path = user_file(tmp_path, EXPLICIT)
    doc = inspect_json(cli, f"{path}:step", "--inputs", f"{path}:inputs", "--axes", "data,model", *flags)
    assert doc["mesh"]["mode"] == mode
    assert [a["spec"] for a in doc["arguments"]] == [[["data"], None], [None, ["model"]]]


JITTED = """
import functools

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def make(mesh):
    rows = NamedSharding(mesh, P("data", None))

    @functools.partial(jax.jit, in_shardings=(rows, None), out_shardings=rows, static_argnums=2,
                       donate_argnums=0)
    def scale(x, y, times):
        return x * times + y

    y = jax.ShapeDtypeStruct((16, 32), jnp.float32, sharding=NamedSharding(mesh, P(None, "model")))
    return {"fn": scale, "args": (jax.ShapeDtypeStruct((16, 32), jnp.float32), y, 3)}
"""


def test_a_jitted_step_keeps_its_own_shardings_donation_and_static_arguments(cli, tmp_path):
    path = user_file(tmp_path, JITTED)
    doc = inspect_json(cli, f"{path}:make", "--inputs", f"{path}:make", "--axes", "data,model")
    # x has no sharding of its own: the jit's in_shardings place it; the static 3 is no argument
    assert [(a["name"], a["spec"]) for a in doc["arguments"]] == [
        ("x", [["data"], None]),
        ("y", [None, ["model"]]),
    ]
    assert doc["results"][0]["spec"] == [["data"], None]
    assert doc["program"]["memory"]["alias_bytes"] == 16 * 32 * 4 // 2  # x donated to the result


CPU_MESH_AT_IMPORT = """
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "model"))


def step(x):
    return x * 2


def inputs():
    return (jax.ShapeDtypeStruct((8, 8), jnp.float32, sharding=NamedSharding(mesh, P("data"))),)
"""


def test_a_mesh_of_this_hosts_devices_under_a_target_says_how_to_hand_it_over(cli, tmp_path):
    pytest.importorskip("libtpu", reason="the tpu extra")
    path = user_file(tmp_path, CPU_MESH_AT_IMPORT)
    out = cli(["inspect", f"{path}:step", "--inputs", f"{path}:inputs", "--target", "tpu-v5e:2x4"])
    assert out.exit_code == 2, out.output
    assert out.stderr.strip().splitlines() == [
        f"shardcli: error: the arguments of {path}:step are sharded on a mesh 2x4 (data, model) of cpu "
        "devices that this run does not have (8 TPU v5 lite chips of the compile-only target tpu-v5e:2x4); "
        "build the mesh from the one --inputs FILE.py:NAME receives (NAME(mesh)), or from jax.make_mesh"
    ]


def test_run_generates_typed_keys_on_their_devices(cli, tmp_path):
    path = user_file(tmp_path, KEYS)
    doc = inspect_json(
        cli,
        f"{path}:noises",
        "--arg",
        "f32[8,16]@data",
        "--arg",
        "key<rbg>[8]@data",
        "--run",
        "--iters",
        "2",
        "--warmup",
        "0",
        "--axes",
        "data,model",
    )
    assert len(doc["timing"]["samples_s"]) == 2
