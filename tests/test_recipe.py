"""`shardcli recipe`: every recipe runs, shows what it should, and is verified against NumPy."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_cli_foundation import assert_one_line_error

from shardcli.analysis.report import close_check
from shardcli.playground.recipe import lab as recipe_lab
from shardcli.playground.recipe import programs as recipe_programs
from shardcli.playground.recipe.cases import RECIPES
from shardcli.playground.recipe.lab import RecipeOutput
from shardcli.results.documents import document_problems


def run_json(cli, *args: str) -> dict:
    result = cli(["recipe", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def sections(doc: dict, kind: str) -> list[dict]:
    return [s for s in doc["sections"] if s["kind"] == kind]


def section(doc: dict, title_start: str) -> dict:
    (found,) = [s for s in doc["sections"] if s["title"].startswith(title_start)]
    return found


@pytest.mark.parametrize("name", list(RECIPES))
def test_every_recipe_passes_on_its_default_mesh(cli, name):
    doc = run_json(cli, name)
    assert document_problems(doc, "recipe") == []  # every section too, by its kind
    assert doc["recipe"]["name"] == name
    mesh = RECIPES[name].default_mesh
    assert "x".join(map(str, doc["mesh"]["shape"])) == mesh
    assert doc["checks"] and all(c["ok"] for c in doc["checks"]) and doc["ok"]


def test_elementwise_keeps_the_sharding_and_computes_2_sin_plus_1(cli):
    doc = run_json(cli, "elementwise", "--mesh", "8", "--axes", "rows")
    pin, pout = sections(doc, "sharding")
    assert pin["spec"] == pout["spec"] == "P('rows',)"
    assert pin["tiles"] == pout["tiles"]
    values = section(doc, "per device")
    assert len(values["rows"]) == 8
    assert section(doc, "compiled collectives")["lines"] == ["none"]


def test_reduce_forced_sharding_spreads_the_sum_over_every_device(cli):
    doc = run_json(cli, "reduce", "--mesh", "4x2", "--axes", "a,b")
    free = section(doc, "x.sum(axis=0)")
    forced = section(doc, "the sum under with_sharding_constraint")
    assert free["shape"] == forced["shape"] == [4 * 2]
    assert len(forced["tiles"]) == 8 and all(len(t["device_ids"]) == 1 for t in forced["tiles"])
    assert forced["spec"] == "P(('a', 'b'),)"
    assert "all-reduce" in section(doc, "compiled collectives (compiler")["lines"][0]


def test_reduce_writes_the_lessons_global_result(cli):
    """The lesson: x.sum(axis=0) of arange(32.0).reshape(4, 8) is [48. 52. ... 76.], gathered beside
    the per-device blocks, on the screen and in JSON."""
    args = ("reduce", "--shape", "4x8", "--init", "arange")
    gathered = section(run_json(cli, *args), "the sum, gathered")
    assert gathered["columns"] == ["x.sum(axis=0)", "sharding", "values"]
    expected = [float(v) for v in range(48, 77, 4)]
    assert [row[2] for row in gathered["rows"]] == [expected, expected]
    assert [row[1] for row in gathered["rows"]] == ["P('model',)", "P(('data', 'model'),)"]
    out = cli(["recipe", *args])
    assert out.exit_code == 0, out.output
    assert out.stdout.count("[48. 52. 56. 60. 64. 68. 72. 76.]") == 2, out.stdout


@pytest.mark.parametrize("mesh", [("--mesh", "8", "--axes", "x"), ("--mesh", "2x4", "--axes", "data,model")])
def test_three_ways_agree_and_each_reduces_over_the_contracting_axis(cli, mesh):
    doc = run_json(cli, "three-ways", *mesh)
    table = section(doc, "sigmoid(x @ W + b), three ways")
    assert [row[0].split(":")[0] for row in table["rows"]] == ["automatic", "semi-automatic", "manual"]
    assert all("all-reduce" in row[2] for row in table["rows"])
    assert [c["what"] for c in doc["checks"]][-1] == "the three agree"


def test_three_ways_on_a_1d_mesh_is_the_lessons_layer(cli):
    doc = run_json(cli, "three-ways", "--mesh", "8", "--axes", "x")
    rng = np.random.default_rng(0)
    x, w, b = rng.normal(size=(32,)), rng.normal(size=(32, 4)), rng.normal(size=(4,))
    expected = 1 / (1 + np.exp(-(x @ w + b)))
    np.testing.assert_allclose(expected, [0.02138916, 0.8931118, 0.5989196, 0.9774251], atol=5e-8)
    (line,) = section(doc, "the result (manual)")["lines"]
    assert line == "[0.02138916 0.8931118  0.5989196  0.9774251 ]"
    assert "ProJAX" in section(doc, "lesson")["lines"][0]


@pytest.mark.parametrize(("mesh", "axes"), [("4x2", "i,j"), ("2x4", "a,b")])
def test_normalize_is_parallel_normalize_element_by_element(cli, mesh, axes):
    doc = run_json(cli, "normalize", "--mesh", mesh, "--axes", axes)
    assert all(c["ok"] for c in doc["checks"])
    shape, mean, std = section(doc, "out = parallel_normalize(x)")["lines"]
    assert shape == "(192, 64)" and abs(float(mean.split()[1])) < 1e-5 and float(std.split()[1]) == 1
    assert section(doc, "compiled collectives")["lines"] == ["all-reduce x2"]


def test_normalize_rows_have_mean_0_and_std_1(cli):
    doc = run_json(cli, "normalize-rows", "--mesh", "2x2")
    rows = section(doc, "per row of the result")["rows"]
    assert len(rows) == 4
    assert all(abs(float(mean)) < 1e-5 and abs(float(std) - 1) < 1e-5 for _, mean, std in rows)
    assert "all-reduce" in section(doc, "compiled collectives")["lines"][0]


@pytest.mark.parametrize(("mesh", "axes"), [("8", "i"), ("2x4", "a,b"), ("2x2x2", "x,y,z")])
def test_axis_index_reports_each_devices_coordinates(cli, mesh, axes):
    doc = run_json(cli, "axis-index", "--mesh", mesh, "--axes", axes)
    coords = {d["id"]: [d["coords"][a] for a in axes.split(",")] for d in doc["mesh"]["devices"]}
    rows = section(doc, "axis_index per device")["rows"]
    assert len(rows) == 8
    for device, *indices, same in rows:
        assert indices == coords[device] and same == "yes"


def test_rng_fold_keys_agree_along_the_second_axis_and_differ_along_the_first(cli):
    doc = run_json(cli, "rng-fold", "--mesh", "2x4", "--axes", "data,model")
    keys: dict[int, set[str]] = {}
    for _, coords, key, draw in section(doc, "key and a uniform draw")["rows"]:
        keys.setdefault(int(coords.split()[0].split("=")[1]), set()).add(key)
        assert len(draw) == 2 and all(0 <= v < 1 for v in draw)
    assert [len(k) for k in keys.values()] == [1, 1]
    assert keys[0] != keys[1]


def test_pipeline_ring_rolls_one_device_per_step(cli):
    doc = run_json(cli, "pipeline-ring", "--mesh", "8", "--steps", "3")
    rows = section(doc, "each device's block")["rows"]
    assert [row[0] for row in rows] == [0, 1, 2, 3]
    start = np.array(rows[0][1:])
    for k, row in enumerate(rows):
        assert np.array_equal(np.array(row[1:]), np.roll(start, k, axis=0))
    assert "collective-permute" in section(doc, "the ring")["lines"][1]


def test_sharded_mac_needs_no_communication(cli):
    doc = run_json(cli, "sharded-mac")
    table = section(doc, "two ways")
    assert [row[1] for row in table["rows"]] == ["P('data', 'model')"] * 2
    assert [row[2] for row in table["rows"]] == ["none", "none"]


def test_table_output_shows_pictures_and_checks(cli):
    result = cli(["recipe", "sharded-mac", "--no-color"])
    assert result.exit_code == 0, result.output
    assert "\nrecipe    sharded-mac:" in result.stdout
    assert (
        "y = x @ W + b under jit (the compiler's choice): global (4, 8), P('data', 'model')" in result.stdout
    )
    assert "ok   shard_map result matches NumPy" in result.stdout
    assert result.stdout.rstrip().endswith("verified: every check passed")


def test_quiet_prints_only_the_checks(cli):
    result = cli(["recipe", "axis-index", "-q", "--no-color"])
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0].startswith("ok   axis_index equals")


def test_list(cli):
    result = cli(["recipe", "list", "--no-color"])
    assert result.exit_code == 0
    for name, r in RECIPES.items():
        assert name in result.stdout and r.default in result.stdout
    doc = json.loads(cli(["recipe", "list", "--format", "json"]).stdout)
    assert [r["name"] for r in doc["recipes"]] == list(RECIPES)


@pytest.mark.parametrize("name", list(RECIPES))
def test_each_recipe_names_a_program(name):
    assert callable(getattr(recipe_programs, RECIPES[name].program))


def test_a_wrong_value_fails_the_check():
    import jax.numpy as jnp

    good = jnp.arange(8.0)
    expected = np.arange(8.0)
    assert close_check("ok", good, expected, 0.0, "exact").ok
    bad = close_check("wrong", good, expected + np.eye(1, 8, 3)[0], 0.5, "|err| <= 0.5")
    assert not bad.ok and bad.detail.startswith("1 element(s) off")


def test_a_failed_check_exits_1_and_says_so(cli, monkeypatch):
    real = recipe_programs.elementwise

    def broken(lab):
        out = real(lab)
        check = out.checks[0]
        return RecipeOutput(out.sections, (type(check)(check.what, False, "planted"), *out.checks[1:]))

    monkeypatch.setattr(recipe_programs, "elementwise", broken)
    result = cli(["recipe", "elementwise", "--no-color"])
    assert result.exit_code == 1
    assert "FAIL values match NumPy (planted)" in result.stdout
    assert "WRONG: 1 check(s) failed" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["nosuch"], "unknown recipe 'nosuch'; choose one of elementwise, reduce", id="unknown"),
        pytest.param(
            ["reduce", "--mesh", "8"],
            "recipe reduce needs a 2-D mesh (rows x columns of devices), not --mesh 8; its default is "
            "--mesh 2x4 --axes data,model",
            id="reduce-1d",
        ),
        pytest.param(
            ["pipeline-ring", "--mesh", "2x4"],
            "recipe pipeline-ring needs a 1-D mesh (the ring), not --mesh 2x4; its default is --mesh 4 "
            "--axes stage",
            id="ring-2d",
        ),
        pytest.param(
            ["elementwise", "--mesh", "2x2x2"], "recipe elementwise needs a 1-D or 2-D mesh", id="3d"
        ),
        pytest.param(
            ["reduce", "--steps", "2"], "--steps is for the pipeline-ring recipe", id="steps-elsewhere"
        ),
        pytest.param(
            ["pipeline-ring", "--steps", "0"], "--steps 0 is not valid; give 1 to 1000", id="steps-0"
        ),
        pytest.param(
            ["pipeline-ring", "--steps", "100000"],
            "--steps 100000 is not valid; give 1 to 1000",
            id="steps-100000",
        ),
        pytest.param(
            ["reduce", "--axes", "a"], "--axes 'a' names 1 axes but the mesh has 2", id="axes-count"
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(cli, args, message):
    assert message in assert_one_line_error(cli(["recipe", *args]))


@pytest.mark.parametrize("d", [8, 16, 64])
def test_matmul_bound_allows_tf32_inputs_on_a_gpu_only(d):
    """A float32 x @ W + b as a GPU runs it (inputs rounded to TF32) is within the GPU's bound and
    outside the CPU's; a value off by 1% of the largest is outside both."""
    from types import SimpleNamespace

    from numerics import tf32

    rng = np.random.default_rng(d)
    x, w, b = (rng.uniform(-1, 1, shape).astype(np.float32) for shape in ((8, d), (d, 4), (4,)))
    got = tf32(x) @ tf32(w) + b
    exact = x.astype(np.float64) @ w.astype(np.float64) + b
    for platform, ok in (("gpu", True), ("cpu", False)):
        lab = SimpleNamespace(session=SimpleNamespace(runtime=SimpleNamespace(platform=platform)))
        bound, how = recipe_lab.matmul_bound(lab, x, w, b)
        assert bool(np.all(np.abs(got - exact) <= bound)) is ok, platform
        assert ("TF32" in how) is ok
        off = got.copy()
        off[2, 1] += 0.01 * np.max(np.abs(exact))
        assert not np.all(np.abs(off - exact) <= bound)
