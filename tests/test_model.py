"""`shardcli model`: a sharded Flax NNX model, its annotations and rules, training, checkpoints."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from numerics import tf32
from test_cli_foundation import assert_one_line_error

from shardcli.errors import ShardcliError
from shardcli.results.documents import document_problems
from shardcli.specs import model as model_spec
from shardcli.specs.meshes import MeshSpec
from shardcli.specs.model import Annotations, check_layout, make_annotations, memory_need, parse_rules

# Compiles, processes or whole programs: left out of the quick subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

MESH_2X4 = MeshSpec((2, 4), ("data", "model"))
SMALL = ("--depth", "32", "--batch", "8", "--steps", "3")


def run_json(cli, *args: str, code: int = 0) -> dict:
    result = cli(["model", *args, "--format", "json"])
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def params_by_name(doc: dict) -> dict[str, dict]:
    return {p["name"]: p for p in doc["params"]}


def checks_by_what(doc: dict) -> dict[str, dict]:
    return {c["what"]: c for c in doc["checks"]}


def distinct_tiles(param: dict) -> list[list[list[int]]]:
    return sorted(t["index"] for t in param["tiles"])


# --- pure: rules, layout, memory ----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("batch=data,hidden=model,embed=None", (("batch", "data"), ("hidden", "model"), ("embed", None))),
        ("hidden=model", (("batch", None), ("hidden", "model"), ("embed", None))),
        (" embed = model , batch = data ", (("batch", "data"), ("hidden", None), ("embed", "model"))),
    ],
)
def test_parse_rules(text, expected):
    assert parse_rules(text, MESH_2X4) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("batch", "is not NAME=AXIS"),
        ("batch=", "is not NAME=AXIS"),
        ("", "is not NAME=AXIS"),
        ("heads=model", "'heads', which the model does not use; its logical axes are batch, hidden, embed"),
        ("batch=rows", "'rows', which is not an axis of the mesh; choose one of data, model, None"),
        ("batch=data,batch=model", "gives 'batch' twice"),
    ],
)
def test_parse_rules_refuses(text, message):
    with pytest.raises(ShardcliError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_rules(text, MESH_2X4)


def test_default_annotations_name_the_first_two_mesh_axes():
    ann = make_annotations(MeshSpec((2, 4), ("rows", "cols")), None)
    assert ann.annotation(("embed", "hidden")) == (None, "cols")
    assert ann.resolved(("batch", "hidden")) == ("rows", "cols")
    with pytest.raises(ShardcliError, match="need a 2-axis mesh"):
        make_annotations(MeshSpec((8,), ("x",)), None)


@pytest.mark.parametrize(
    "rules, depth, batch, message",
    [
        ("batch=data,hidden=data", 32, 8, "would use mesh axis 'data' for two of its dimensions"),
        ("hidden=model,embed=model", 32, 8, "would use mesh axis 'model' for two of its dimensions"),
        ("batch=model,embed=model", 32, 8, "outputs"),
        (None, 30, 8, "--depth 30 does not split over mesh axis 'model' (4 devices)"),
        (None, 32, 3, "--batch 3 does not split over mesh axis 'data' (2 devices)"),
        ("embed=data", 31, 8, "--depth 31 does not split over mesh axis 'data'"),
    ],
)
def test_check_layout_refuses(rules, depth, batch, message):
    ann = make_annotations(MESH_2X4, rules)
    with pytest.raises(ShardcliError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_layout(ann, depth, batch)


def test_memory_need_splits_the_parameters_over_the_model_axis():
    per_device, total = memory_need(Annotations(MESH_2X4), 1024, 8)
    params = (2 * 1024 * 1024 + 1024) * 4
    assert per_device == 5 * params // 4 + 4 * 8 * 1024 * 4 // 2
    assert total == 8 * per_device + 4 * params


# --- train ----------------------------------------------------------------------------------------


def test_train_shards_parameters_as_annotated_and_the_loss_goes_down(cli):
    doc = run_json(cli, "train", "--mesh", "2x4", "--axes", "data,model", *SMALL)
    assert doc["command"] == "model train" and doc["ok"]
    params = params_by_name(doc)
    assert list(params) == ["dot1.kernel", "dot1.bias", "w2"]
    kernel, bias, w2 = params["dot1.kernel"], params["dot1.bias"], params["w2"]
    assert kernel["annotation"] == kernel["resolved"] == "(None, 'model')"
    assert w2["annotation"] == "('model', None)" and bias["annotation"] == "('model',)"
    assert kernel["sharding"] == "P(None, 'model')" and all(p["ok"] for p in params.values())
    # (None, model) on 2x4: columns in four blocks of 8, each block on the two devices of a column.
    assert distinct_tiles(kernel) == [[[0, 32], [c, c + 8]] for c in range(0, 32, 8)]
    assert all(len(t["device_ids"]) == 2 for t in kernel["tiles"])
    assert distinct_tiles(w2) == [[[r, r + 8], [0, 32]] for r in range(0, 32, 8)]
    # adam: 3 params, mu and nu of each, its count, the optimizer's step.
    assert doc["state_arrays"] == 11
    losses = [s["loss"] for s in doc["steps"]]
    assert [s["step"] for s in doc["steps"]] == [1, 2, 3]
    assert doc["final_loss"] < losses[0]
    assert set(doc["compile_s"]) == {"init", "train step"}
    assert doc["output_sharding"] in ("P('data',)", "P('data', None)")
    assert doc["activation_sharding"] == "('data', 'model')"
    assert any(op["op"] == "all-reduce" for op in doc["collectives"]["forward"])
    checks = checks_by_what(doc)
    for what in (
        "every parameter has the sharding its annotation gives",
        "adam's moments are sharded like their parameters",
        "the loss goes down",
        "the output is sharded as its annotation gives",
        "the output matches NumPy",
        "the loss matches NumPy",
        "the first step's gradients match NumPy",
        "the first step's loss matches NumPy",
    ):
        assert checks[what]["ok"], checks[what]
    assert doc["checkpoint"] is None


def test_train_table_shows_parameters_pictures_and_steps(cli):
    result = cli(["model", "train", *SMALL, "--no-color"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in (
        "annotations  mesh axes named directly (no --rules)",
        "dot1.kernel: global (32, 32), P(None, 'model')",
        "compile train step",
        "after",
        "between the layers: constrained to ('data', 'model')",
        "verified: every check passed",
    ):
        assert text in out, text
    assert "rules: logical axis" not in out


@pytest.mark.parametrize(
    "mesh, axes, rules, kernel, w2, output",
    [
        (
            "2x4",
            "data,model",
            "batch=data,hidden=model,embed=None",
            "(None, 'model')",
            "('model', None)",
            ("data", None),
        ),
        ("2x4", "data,model", "batch=model,hidden=data", "(None, 'data')", "('data', None)", ("model", None)),
        (
            "2x4",
            "data,model",
            "batch=data,hidden=None,embed=model",
            "('model', None)",
            "(None, 'model')",
            ("data", "model"),
        ),
        ("8", "model", "hidden=model", "(None, 'model')", "('model', None)", (None, None)),
        ("2x2x2", "x,y,z", "batch=x,hidden=y,embed=z", "('z', 'y')", "('y', 'z')", ("x", "z")),
    ],
)
def test_rules_resolve_logical_annotations(cli, mesh, axes, rules, kernel, w2, output):
    doc = run_json(cli, "train", "--mesh", mesh, "--axes", axes, "--rules", rules, *SMALL)
    assert doc["ok"], doc["checks"]
    params = params_by_name(doc)
    assert params["dot1.kernel"]["annotation"] == "('embed', 'hidden')"
    assert params["w2"]["annotation"] == "('hidden', 'embed')"
    assert params["dot1.kernel"]["resolved"] == kernel and params["w2"]["resolved"] == w2
    assert doc["rules"] == dict(
        parse_rules(rules, MeshSpec(tuple(map(int, mesh.split("x"))), tuple(axes.split(","))))
    )
    spec = "P(" + ", ".join(repr(a) if a else "None" for a in output) + ")"
    trimmed = list(output)
    while trimmed and trimmed[-1] is None:
        trimmed.pop()
    short = (
        "P(" + ", ".join(repr(a) if a else "None" for a in trimmed) + ("," if len(trimmed) == 1 else "") + ")"
    )
    assert doc["output_sharding"] in (spec, short)


def test_rules_table_in_the_human_output(cli):
    result = cli(["model", "train", *SMALL, "--rules", "batch=data,hidden=model", "--no-color"])
    assert result.exit_code == 0, result.output
    assert "rules: logical axis -> mesh axis" in result.stdout
    assert "embed         None (replicated)" in result.stdout


def test_a_loss_that_does_not_go_down_exits_1(cli):
    doc = run_json(cli, "train", *SMALL, "--lr", "100", code=1)
    check = checks_by_what(doc)["the loss goes down"]
    assert not check["ok"] and not doc["ok"]
    assert doc["final_loss"] > doc["steps"][0]["loss"]


# --- checkpoints ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, cli):
    folder = tmp_path_factory.mktemp("ckpt") / "run"
    doc = run_json(cli, "train", "--mesh", "2x4", *SMALL, "--checkpoint", str(folder))
    assert doc["ok"]
    return folder, doc


def _snapshot(folder) -> dict[str, float]:
    return {
        os.path.join(root, name): os.stat(os.path.join(root, name)).st_mtime_ns
        for root, _, files in os.walk(folder)
        for name in files
    }


def test_train_writes_the_state_and_its_metadata(checkpoint):
    folder, doc = checkpoint
    assert doc["checkpoint"] == {
        "folder": str(folder),
        "state": str(folder / "state"),
        "metadata": str(folder / "shardcli-model.json"),
    }
    meta = json.loads((folder / "shardcli-model.json").read_text())
    assert meta["depth"] == 32 and meta["mesh"] == {"shape": [2, 4], "axes": ["data", "model"]}
    assert len(meta["digests"]) == doc["state_arrays"] == 11
    assert meta["final_loss"] == doc["final_loss"]


@pytest.mark.parametrize(
    "mesh, extra",
    [
        ("2x4", ()),
        ("4x2", ()),
        ("8x1", ()),
        ("2x4", ("--rules", "batch=data,hidden=None,embed=model")),
    ],
)
def test_restore_round_trips_onto_any_mesh(cli, checkpoint, mesh, extra):
    folder, saved = checkpoint
    before = _snapshot(folder)
    doc = run_json(cli, "restore", str(folder), "--mesh", mesh, *extra)
    assert doc["command"] == "model restore" and doc["ok"], doc["checks"]
    assert doc["saved_mesh"] == "2x4 (data=2, model=4)"
    assert doc["mesh"]["shape"] == [int(n) for n in mesh.split("x")]
    assert checks_by_what(doc)["the restored values equal the saved ones"]["ok"]
    assert checks_by_what(doc)["the loss at save time is the restored model's"]["ok"]
    params = params_by_name(doc)
    assert all(p["ok"] for p in params.values())
    model_ways = int(mesh.split("x")[1])
    if not extra:
        # (None, model) recomputed for this mesh: as many column blocks as the model axis has devices.
        assert len(distinct_tiles(params["dot1.kernel"])) == model_ways
    assert abs(doc["final_loss"] - saved["final_loss"]) <= 1e-4 * saved["final_loss"]
    assert _snapshot(folder) == before  # restore writes nothing


def test_restore_detects_values_that_differ(cli, checkpoint, tmp_path):
    import shutil

    folder, _ = checkpoint
    copy = tmp_path / "tampered"
    shutil.copytree(folder, copy)
    meta = json.loads((copy / "shardcli-model.json").read_text())
    meta["digests"]["0.w2"] = "0" * 16
    (copy / "shardcli-model.json").write_text(json.dumps(meta))
    doc = run_json(cli, "restore", str(copy), code=1)
    check = checks_by_what(doc)["the restored values equal the saved ones"]
    assert not check["ok"] and "differ: 0.w2" in check["detail"]


def test_refusals_leave_an_existing_checkpoint_alone(cli, checkpoint):
    folder, _ = checkpoint
    before = _snapshot(folder)
    line = assert_one_line_error(cli(["model", "train", *SMALL, "--checkpoint", str(folder)]))
    assert "not empty and nothing is overwritten" in line
    assert _snapshot(folder) == before


def _bad_meta(folder, tmp_path, **changes):
    import shutil

    copy = tmp_path / "meta"
    shutil.copytree(folder, copy)
    meta = json.loads((copy / "shardcli-model.json").read_text())
    meta.update(changes)
    (copy / "shardcli-model.json").write_text(json.dumps(meta))
    return copy


def _bad_state(folder, tmp_path):
    """An emptied state under metadata from before shardcli recorded the state's files (orbax alone
    judges it; tests/test_fuzz.py damages the files of a recorded one: exit 1 naming the array)."""
    import shutil

    copy = tmp_path / "broken"
    shutil.copytree(folder, copy)
    shutil.rmtree(copy / "state")
    (copy / "state").mkdir()
    meta = json.loads((copy / "shardcli-model.json").read_text())
    del meta["files"]
    (copy / "shardcli-model.json").write_text(json.dumps(meta))
    return copy


@pytest.mark.parametrize(
    "make_args, message",
    [
        (lambda f, t: ["restore", str(t / "missing")], "does not exist"),
        (
            lambda f, t: ["restore", str(f), "--mesh", "1x64"],
            "the checkpoint's depth 32 does not split over mesh axis 'model' (64 devices), which the hidden "
            "dimension uses; give a mesh whose 'model' axis divides 32",
        ),
        (
            lambda f, t: ["restore", str(_bad_meta(f, t, batch=0))],
            "cannot be read as shardcli model metadata",
        ),
        (
            lambda f, t: ["restore", str(_bad_meta(f, t, depth=-4))],
            "cannot be read as shardcli model metadata",
        ),
        (
            lambda f, t: ["restore", str(_bad_meta(f, t, mesh={"shape": [0], "axes": []}))],
            "cannot be read as shardcli model metadata",
        ),
        (
            lambda f, t: ["restore", str(_bad_meta(f, t, depth=64, digests={}))],
            "holds 0.dot1.bias with shape (32,), but the model needs (64,)",
        ),
        (
            lambda f, t: ["restore", str(t)],
            "is not a shardcli model checkpoint (it needs shardcli-model.json",
        ),
        (lambda f, t: ["restore", str(f), "--depth", "64"], "saved with --depth 32, not 64"),
        (lambda f, t: ["restore", str(_bad_state(f, t))], "orbax finds no arrays in the saved state"),
        (lambda f, t: ["restore", str(f / "shardcli-model.json")], "is a file, not a folder"),
    ],
)
def test_bad_checkpoints_exit_2(cli, checkpoint, tmp_path, make_args, message):
    folder, _ = checkpoint
    line = assert_one_line_error(cli(["model", *make_args(folder, tmp_path)]))
    assert message in line, line


def test_unreadable_metadata_exits_2(cli, checkpoint, tmp_path):
    import shutil

    folder, _ = checkpoint
    copy = tmp_path / "meta"
    shutil.copytree(folder, copy)
    (copy / "shardcli-model.json").write_text("{")
    line = assert_one_line_error(cli(["model", "restore", str(copy)]))
    assert "cannot be read as shardcli model metadata" in line


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["--steps", "1"], "--steps 1 is not valid; give at least 2"),
        (["--depth", "0"], "--depth 0 is not valid"),
        (["--batch", "-2"], "--batch -2 is not valid"),
        (["--lr", "0"], "--lr 0.0 is not valid"),
        (["--lr", "nan"], "--lr nan is not valid"),
        (["--depth", "30"], "--depth 30 does not split over mesh axis 'model' (4 devices)"),
        (["--mesh", "8"], "need a 2-axis mesh (data x model)"),
        (["--rules", "heads=model"], "which the model does not use"),
        (["--rules", "batch=data,hidden=data"], "would use mesh axis 'data' for two of its dimensions"),
        (["--depth", "400000"], "needs about"),
        (["--checkpoint", "/nonexistent-shardcli/ckpt"], "the folder /nonexistent-shardcli does not exist"),
        (["--mesh", "2x4", "--axes", "data"], "names 1 axes but the mesh has 2"),
        (["--seed", "-2"], "--seed -2 is not valid; give a number from 0 to 4294967295"),
        (["--seed", "4294967296"], "--seed 4294967296 is not valid"),
    ],
)
def test_bad_train_input_exits_2_with_one_line(cli, args, message):
    line = assert_one_line_error(cli(["model", "train", *args]))
    assert message in line, line


def test_a_broken_link_as_checkpoint_folder_exits_2_before_training(cli, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    line = assert_one_line_error(cli(["model", "train", *SMALL, "--checkpoint", str(link)]))
    assert "is a file (or a broken link)" in line


def test_an_upper_case_mesh_still_gets_data_and_model(cli):
    doc = run_json(cli, "train", "--mesh", "2X4", *SMALL)
    assert doc["mesh"]["axes"] == ["data", "model"]
    assert params_by_name(doc)["dot1.kernel"]["resolved"] == "(None, 'model')"


def test_moments_sharded_unlike_their_parameters_fail_the_check(cli, monkeypatch):
    """Initialise everything replicated: the parameters' and the moments' checks must both fail."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from shardcli.training.model import train as core

    real = core.abstract_state

    def replicated(*args):
        graphdef, abstract, shardings = real(*args)
        mesh = args[-1]
        return graphdef, abstract, jax.tree.map(lambda _: NamedSharding(mesh, P()), shardings)

    monkeypatch.setattr(core, "abstract_state", replicated)
    doc = run_json(cli, "train", *SMALL, code=1)
    checks = checks_by_what(doc)
    assert not checks["every parameter has the sharding its annotation gives"]["ok"]
    moments = checks["adam's moments are sharded like their parameters"]
    assert not moments["ok"] and "1.opt_state.0.mu.dot1.kernel" in moments["detail"]
    assert checks["the first step's gradients match NumPy"]["ok"]  # the numbers do not depend on it


def test_json_documents_fit_the_schema(cli, checkpoint):
    folder, _ = checkpoint
    train = run_json(cli, "train", *SMALL)
    restore = run_json(cli, "restore", str(folder))
    assert document_problems(train, "model") == []
    assert document_problems(restore, "model") == []
    assert (train["command"], restore["command"]) == ("model train", "model restore")
    assert train["checkpoint"] is None
    assert restore["checkpoint"]["folder"] == str(folder)


def test_a_file_as_checkpoint_folder_exits_2(cli, tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    line = assert_one_line_error(cli(["model", "train", *SMALL, "--checkpoint", str(target)]))
    assert "is a file (or a broken link); give a new or empty folder" in line


def test_without_the_model_extra_exits_2_naming_it(cli, monkeypatch):
    monkeypatch.setattr(model_spec, "MODEL_PACKAGES", ("flax", "shardcli_no_such_package"))
    for args in (["train"], ["restore", "somewhere"]):
        line = assert_one_line_error(cli(["model", *args]))
        assert "needs shardcli_no_such_package, from the model extra" in line
        assert "pip install 'shardcli[model]'" in line


def test_help_and_bad_input_do_not_import_jax_or_flax(python_subprocess):
    script = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "import shardcli.cli\n"
        "r = CliRunner()\n"
        "for args in (['model', '--help'], ['model', 'train', '--help'], ['model', 'restore', '--help'],\n"
        "             ['model', 'train', '--steps', '1'], ['model', 'restore', '/nonexistent']):\n"
        "    result = r.invoke(shardcli.cli.app, args)\n"
        "    assert result.exit_code in (0, 2), (args, result.output)\n"
        "    assert 'jax' not in sys.modules and 'flax' not in sys.modules, args\n"
        "print('ok')\n"
    )
    proc = python_subprocess("-c", script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"


# --- the digest -----------------------------------------------------------------------------------


def test_digest_is_the_same_on_any_sharding_and_changes_with_the_values():
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from shardcli.training.model.checkpoint import digest

    mesh = jax.make_mesh((2, 4), ("a", "b"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    host = np.random.default_rng(0).standard_normal((8, 16), dtype=np.float32)
    placed = [
        jax.device_put(host, NamedSharding(mesh, P(*spec))) for spec in ((), ("a", "b"), ("b",), (None, "a"))
    ]
    digests = {digest(a) for a in placed}
    assert len(digests) == 1
    changed = host.copy()
    changed[3, 5] = np.nextafter(changed[3, 5], np.float32(np.inf))
    swapped = host.copy()
    swapped[[0, 1]] = swapped[[1, 0]]
    for other in (changed, swapped, host.T.copy().reshape(8, 16)):
        assert digest(jax.device_put(other, NamedSharding(mesh, P("a", "b")))) not in digests


def test_a_damaged_checkpoint_is_one_line_in_a_real_process(shardcli_subprocess, checkpoint, tmp_path):
    """Nothing from orbax's logging or tensorstore's late reads reaches stderr besides the error."""
    import shutil

    folder, _ = checkpoint
    copy = tmp_path / "truncated"
    shutil.copytree(folder, copy)
    (copy / "state" / "0.w2.value" / "0.0").write_bytes(b"")
    proc = shardcli_subprocess("model", "restore", str(copy))
    assert proc.returncode == 1
    size = json.loads((folder / "shardcli-model.json").read_text())["files"]["0.w2.value/0.0"][0]
    assert proc.stderr.splitlines() == [
        f"shardcli: error: {copy}: array 0.w2 is damaged: its file 0.w2.value/0.0 is truncated (0 of {size} "
        "bytes); the checkpoint cannot be restored"
    ]
    assert proc.stdout == ""


# --- verification on a GPU's default precision ----------------------------------------------------


def _tf32_run(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, mode: str = "nearest"):
    """The model's output and first gradients in float32 with every dot's inputs rounded to TF32,
    as XLA runs them on a recent GPU at the default precision (emulated in NumPy)."""

    def t(a):
        return tf32(a, mode)

    w1, b1, w2 = (params[k].astype(np.float32) for k in ("dot1.kernel", "dot1.bias", "w2"))
    pre = t(x) @ t(w1) + b1
    hidden = np.maximum(pre, 0)
    out = t(hidden) @ t(w2)
    g = (2 * (out - y) / y.size).astype(np.float32)
    dh = (t(g) @ t(w2).T) * (pre > 0)
    grads = {"dot1.kernel": t(x).T @ t(dh), "dot1.bias": dh.sum(axis=0), "w2": t(hidden).T @ t(g)}
    return out, grads


def _random_model(depth: int, seed: int = 0, batch: int = 8):
    rng = np.random.default_rng(seed)
    params = {
        "dot1.kernel": rng.standard_normal((depth, depth)) / np.sqrt(depth),
        "dot1.bias": rng.standard_normal(depth) * 0.1,
        "w2": rng.standard_normal((depth, depth)) / np.sqrt(depth),
    }
    params = {k: v.astype(np.float32).astype(np.float64) for k, v in params.items()}
    x, y = (rng.standard_normal((batch, depth)).astype(np.float32) for _ in range(2))
    return params, x, y


@pytest.mark.parametrize("mode", ["nearest", "truncate"])
@pytest.mark.parametrize("depth, batch, seed", [(64, 8, 0), (1024, 8, 1), (512, 64, 2)])
def test_tf32_results_pass_on_a_gpu_and_would_fail_the_cpu_bound(depth, batch, seed, mode):
    """On a GPU the model's float32 dots round their inputs to TF32 (seen on an H100: the first
    gradients 6.6e-4 x max off, the CPU bound 1e-4); the bound there allows for it, whether the
    tensor cores round to nearest or truncate."""
    from shardcli.training.model.reference import gradient_check, loss_check, reference

    params, x, y = _random_model(depth, seed, batch)
    out, grads = _tf32_run(params, x, y, mode)
    for platform, ok in (("gpu", True), ("cpu", False)):
        ref = reference(params, x, platform)
        assert bool(np.all(np.abs(out - ref.out) <= ref.bound)) is ok, platform
        check = gradient_check(ref, params, x, y, grads)
        assert check.ok is ok, (platform, check.detail)
    ref = reference(params, x, "gpu")
    assert loss_check("the loss", float(np.mean((out.astype(np.float64) - y) ** 2)), ref, y).ok
    assert (
        "10 sigma and the truncation bias of TF32 inputs" in gradient_check(ref, params, x, y, grads).detail
    )


def test_the_gpu_bound_still_catches_a_value_off_by_one_percent():
    from shardcli.training.model.reference import gradient_check, loss_check, reference

    params, x, y = _random_model(1024)
    out, grads = _tf32_run(params, x, y)
    ref = reference(params, x, "gpu")
    assert np.median(ref.bound) < 0.005 * np.max(np.abs(ref.out))
    bad_out = out.copy()
    bad_out[3, 100] += 0.01 * np.max(np.abs(ref.out))
    assert int(np.count_nonzero(np.abs(bad_out - ref.out) > ref.bound)) == 1
    bad = dict(grads, w2=grads["w2"].copy())
    bad["w2"][100, 7] += 0.01 * np.max(np.abs(grads["w2"]))
    check = gradient_check(ref, params, x, y, bad)
    assert not check.ok and check.detail.endswith("off: w2")
    loss = float(np.mean((out.astype(np.float64) - y) ** 2))
    assert loss_check("the loss", loss, ref, y).ok
    assert not loss_check("the loss", loss * 1.01, ref, y).ok
