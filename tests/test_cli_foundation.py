"""The CLI foundation end to end: bad input, happy paths, the JSON contract, start-up."""

from __future__ import annotations

import json
import re

import jax
import numpy as np
import pytest
from conftest import IN_PROCESS_DEVICES, pythonpath_first

import shardcli
from shardcli.results.documents import SCHEMA_VERSION, document_problems

ANSI = re.compile(r"\x1b\[([0-9;]*)m")


def assert_one_line_error(result, exit_code: int = 2) -> str:
    """Bad input: the exit code, one stderr line starting with 'shardcli', nothing else."""
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == exit_code, (result.exit_code, result.output)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("shardcli"), lines[0]
    assert result.stdout == "", result.stdout
    return lines[0]


def has_color(text: str) -> bool:
    """Whether any SGR escape sets a foreground or background color (bold alone is not color)."""
    for match in ANSI.finditer(text):
        for param in match.group(1).split(";"):
            if param.isdigit() and (30 <= int(param) <= 49 or 90 <= int(param) <= 107):
                return True
    return False


# Bad input ------------------------------------------------------------------------------------

MESH_2X4 = ["--mesh", "2x4", "--axes", "data,model"]

BAD_INPUT = [
    pytest.param(
        ["mesh", "--mesh", "2x4", "--axes", "data"],
        "--axes 'data' names 1 axes but the mesh has 2; give 2 comma-separated names",
        id="axes-count-too-few",
    ),
    pytest.param(
        ["mesh", "--mesh", "8", "--axes", "data,model"],
        "--axes 'data,model' names 2 axes but the mesh has 1",
        id="axes-count-too-many",
    ),
    pytest.param(
        ["mesh", "--mesh", "2x2x2x2x2"],
        "a 5-D mesh needs --axes with 5 names; default names exist for up to 4 axes",
        id="5d-mesh-without-axes",
    ),
    pytest.param(
        ["mesh", "--mesh", "0"],
        "--mesh '0' has a size of 0; every size must be a positive integer",
        id="mesh-zero",
    ),
    pytest.param(["mesh", "--mesh", "2x0"], "--mesh '2x0' has a size of 0", id="mesh-zero-inner"),
    pytest.param(
        ["mesh", "--mesh", "-2"],
        "--mesh '-2' is not valid: mesh sizes are positive integers joined by 'x'",
        id="mesh-negative",
    ),
    pytest.param(["mesh", "--mesh", "2x-4"], "--mesh '2x-4' is not valid", id="mesh-negative-inner"),
    pytest.param(["mesh", "--mesh", "1.5"], "--mesh '1.5' is not valid", id="mesh-float"),
    pytest.param(["mesh", "--mesh", "two"], "--mesh 'two' is not valid", id="mesh-word"),
    pytest.param(["mesh", "--mesh", "2x"], "--mesh '2x' is not valid", id="mesh-trailing-x"),
    pytest.param(["mesh", "--mesh", ""], "--mesh is empty", id="mesh-empty"),
    pytest.param(
        ["mesh", "--mesh", "2x4", "--axes", "data,data"],
        "--axes 'data,data' names axis 'data' twice; axis names must be unique",
        id="axes-duplicate",
    ),
    pytest.param(
        ["mesh", "--mesh", "2", "--axes", "1st"],
        "--axes name '1st' is not valid; axis names are Python identifiers",
        id="axes-not-identifier",
    ),
    pytest.param(["mesh", "--mesh", "2", "--axes", "_"], "--axes name '_' is reserved", id="axes-reserved"),
    pytest.param(
        ["shard", *MESH_2X4, "--spec", "data,foo"],
        "--spec 'data,foo' names mesh axis 'foo', which is not in the mesh; the mesh axes are data, model",
        id="spec-unknown-axis",
    ),
    pytest.param(
        ["shard", *MESH_2X4, "--spec", "data,data"],
        "--spec 'data,data' uses mesh axis 'data' twice (entries 0 and 1)",
        id="spec-axis-twice",
    ),
    pytest.param(
        ["shard", *MESH_2X4, "--spec", "data+data"],
        "--spec 'data+data' uses mesh axis 'data' twice",
        id="spec-axis-twice-joined",
    ),
    pytest.param(
        ["shard", *MESH_2X4, "--spec", "data,,model"],
        "--spec 'data,,model' has an empty entry at position 1",
        id="spec-empty-entry",
    ),
    pytest.param(
        ["shard", *MESH_2X4, "--shape", "8x6", "--spec", "data,model"],
        "--shape 8x6: dim 1 (6) is not divisible by 4, the size of mesh axis 'model'",
        id="shape-not-divisible",
    ),
    pytest.param(
        ["shard", *MESH_2X4, "--shape", "12", "--spec", "data+model"],
        "--shape 12: dim 0 (12) is not divisible by 8",
        id="shape-not-divisible-joined",
    ),
    pytest.param(
        ["shard", *MESH_2X4, "--shape", "8", "--spec", "data,model"],
        "--spec 'data,model' has 2 entries but the array has rank 1 (--shape 8); give at most 1",
        id="spec-longer-than-rank",
    ),
    pytest.param(
        ["shard", "--dtype", "complex64"],
        "--dtype 'complex64' is not supported; choose one of float32, bfloat16",
        id="unknown-dtype",
    ),
    pytest.param(
        ["shard", "--init", "eye"],
        "--init 'eye' is not supported; choose one of arange, ones, zeros, random, normal",
        id="unknown-init",
    ),
    pytest.param(
        ["mesh", "--platform", "cuda"],
        "--platform 'cuda' is not valid; choose one of auto, cpu, gpu, tpu",
        id="unknown-platform",
    ),
    pytest.param(
        ["mesh", "--mode", "manual"],
        "--mode 'manual' is not valid; choose one of auto, explicit",
        id="unknown-mode",
    ),
    pytest.param(
        ["shard", "--format", "csv"],
        "--format 'csv' is not valid; choose one of table, json",
        id="unknown-format",
    ),
    pytest.param(
        ["mesh", "--mesh", "2x4", "--devices", "4"],
        "the mesh needs 8 devices but --devices is 4; use --devices 8 or a smaller mesh",
        id="mesh-needs-more-than-devices",
    ),
    pytest.param(
        ["mesh", "--devices", "0"],
        "--devices 0 is not valid; give a positive device count",
        id="devices-zero",
    ),
    pytest.param(
        ["mesh", "--mesh", "4x4"],
        f"the mesh needs 16 devices but JAX was already started in this process with "
        f"{IN_PROCESS_DEVICES} CPU devices",
        id="mesh-needs-more-than-backend",
    ),
    pytest.param(
        ["mesh", "--platform", "gpu"],
        "--platform gpu was asked for but this machine has no GPU devices JAX can use; use --platform cpu",
        id="no-gpu",
    ),
    pytest.param(
        ["mesh", "--platform", "tpu"],
        "this machine has no TPU devices JAX can use; use --platform cpu",
        id="no-tpu",
    ),
    pytest.param(
        ["shard", "--mesh", "2", "--shape", "100000x100000x100"],
        "--shape 100000x100000x100 float32 needs about",
        id="array-too-large",
    ),
    pytest.param(
        ["shard", "--mesh", "2", "--shape", "100000x100000x100000", "--spec", "x"],
        "this machine has",
        id="array-too-large-even-sharded",
    ),
    pytest.param(
        ["shard", "--shape", "8xjunk"],
        "--shape '8xjunk' is not valid: array dims are positive integers joined by 'x'",
        id="shape-junk",
    ),
    pytest.param(["shard", "--shape", "8x0"], "--shape '8x0' has a size of 0", id="shape-zero"),
    pytest.param(
        ["shard", "--shape", "64x64", "--show-values"],
        "--show-values prints arrays of up to 1024 elements; this one has 4096",
        id="show-values-too-large",
    ),
    pytest.param(
        ["shard", "--shape", "4x4x8", "--view-dims", "0,3"],
        "--view-dims '0,3' must name two different dims below the array's rank 3",
        id="view-dims-out-of-range",
    ),
    pytest.param(["shard", "--view-dims", "0"], "--view-dims '0' is not valid", id="view-dims-one"),
    pytest.param(["mesh", "--bogus"], "No such option: --bogus", id="unknown-option"),
    pytest.param(["shard", "--mesh"], "'--mesh' requires an argument", id="missing-value"),
    pytest.param(["mesh", "--devices", "many"], "Invalid value for '--devices'", id="devices-not-int"),
    pytest.param(["nonsense"], "No such command", id="unknown-command"),
]


@pytest.mark.parametrize(("args", "message"), BAD_INPUT)
def test_bad_input_exits_2_with_one_line(cli, args, message):
    result = cli(args)
    line = assert_one_line_error(result)
    assert message in line


def test_error_line_names_the_program(cli):
    line = assert_one_line_error(cli(["mesh", "--mesh", "0"]))
    assert line.startswith("shardcli: error: --mesh '0'")


# Happy paths: mesh ----------------------------------------------------------------------------


def test_mesh_2d_shows_every_device_and_its_coords(cli):
    # Wide enough that rich does not wrap "data=1 model=2" inside a cell (it does at 80 columns).
    result = cli(["mesh", "--mesh", "2x4", "--axes", "data,model"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    out = result.stdout
    for device_id in range(8):
        assert f"dev {device_id}" in out
    for d in range(2):
        for m in range(4):
            assert f"data={d} model={m}" in out
    assert "data=2 model" not in out and "model=4" not in out.split("auto axes")[1]


def test_mesh_header_facts(cli):
    """The short header says what ran on what, and the compiler that judged it (jax and jaxlib); -v
    adds shardcli's version and the process count."""
    import jaxlib

    out = cli(["mesh", "--mesh", "2x4", "--axes", "data,model"]).stdout
    assert "cpu, 8 faked CPU devices, kind cpu" in out
    assert "2x4 (data=2, model=4), auto axes" in out
    lines = [line.rstrip() for line in out.splitlines()]
    assert f"compiler  jax {jax.__version__}, jaxlib {jaxlib.__version__}" in lines
    assert "this is process 0" not in out and f"shardcli  {shardcli.__version__}" not in out
    for flag in ("-v", "--verbose"):
        verbose = cli(["mesh", "--mesh", "2x4", "--axes", "data,model", flag]).stdout
        assert f"shardcli   {shardcli.__version__}\n" in verbose
        assert "1 (this is process 0)" in verbose
        assert "2x4 (data=2, model=4), auto axes" in verbose


def test_mesh_smaller_than_backend_says_so(cli):
    out = cli(["mesh", "--mesh", "2x2"]).stdout
    assert f"4 of {IN_PROCESS_DEVICES} faked CPU devices" in out
    assert f"JAX was already started with {IN_PROCESS_DEVICES} CPU devices; the mesh uses the first 4" in out


def test_mesh_1d(cli):
    result = cli(["mesh", "--mesh", "8"])
    assert result.exit_code == 0, result.output
    for i in range(8):
        assert f"dev {i}" in result.stdout
        assert f"x={i}" in result.stdout


def test_mesh_3d_one_grid_per_leading_coordinate(cli):
    result = cli(["mesh", "--mesh", "2x2x2", "--axes", "pp,dp,tp"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "2x2x2 (pp=2, dp=2, tp=2)" in out
    for i in range(2):
        for j in range(2):
            for k in range(2):
                assert f"pp={i} dp={j} tp={k}" in out
    for device_id in range(8):
        assert f"dev {device_id}" in out


def test_mesh_explicit_mode(cli):
    doc = json.loads(cli(["mesh", "--mesh", "2x4", "--mode", "explicit", "--format", "json"]).stdout)
    assert doc["mesh"]["axis_types"] == ["Explicit", "Explicit"]
    assert doc["mesh"]["mode"] == "explicit"


# Happy paths: shard ---------------------------------------------------------------------------


def test_shard_2d_with_values(cli):
    result = cli(["shard", *MESH_2X4, "--shape", "8x8", "--spec", "data,model", "-v"])  # -v: JAX's spec
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    out = result.stdout
    assert "8x8 float32, init arange" in out
    assert "P('data', 'model')" in out
    assert "jax.debug.visualize_sharding" in out
    assert "CPU 7" in out  # JAX's own picture
    assert "8 distinct tile(s) of shape (4, 2); each held by one device" in out
    assert "[4:8, 6:8]" in out
    assert "local values" in out
    assert "63." in out  # the last element is shown
    assert "verified: every device holds its NumPy slice exactly" in out


def test_shard_3d_view_dims(cli):
    result = cli(["shard", "--mesh", "2x2x2", "--shape", "4x4x8", "--spec", "x,y,z", "--view-dims", "0,2"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "draws 1-D and 2-D arrays only" in out
    assert "dims (0, 2); dim 1 = 0:2" in out
    assert "dims (0, 2); dim 1 = 2:4" in out
    assert "[2:4, 2:4, 4:8]" in out
    assert "8 distinct tile(s) of shape (2, 2, 4)" in out


def test_shard_3d_default_view_dims(cli):
    out = cli(["shard", "--mesh", "2x2x2", "--shape", "4x4x8", "--spec", "x,y,z"]).stdout
    assert "dims (1, 2); dim 0 = 0:2" in out
    assert "dims (1, 2); dim 0 = 2:4" in out


def test_shard_replicated(cli):
    result = cli(["shard", *MESH_2X4, "--shape", "4x4"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "P() (replicated)" in out
    assert "1 distinct tile(s) of shape (4, 4); each replicated on 8 devices" in out
    assert "dev 0,1,2,3,4,5,6,7" in out


def test_shard_joined_axes(cli):
    result = cli(["shard", *MESH_2X4, "--shape", "16x4", "--spec", "data+model,None", "-v"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "data+model,None" in out
    assert "P(('data', 'model'), None)" in out
    assert "8 distinct tile(s) of shape (2, 4)" in out
    assert "[14:16, 0:4]" in out


def test_shard_explicit_mode_shows_sharded_type(cli):
    result = cli(["shard", *MESH_2X4, "--shape", "8x8", "--spec", "data", "--mode", "explicit"])
    assert result.exit_code == 0, result.output
    assert "float32[8@data,8]" in result.stdout
    assert "explicit axes" in result.stdout


def test_shard_auto_mode_type_has_no_sharding(cli):
    out = cli(["shard", *MESH_2X4, "--shape", "8x8", "--spec", "data"]).stdout
    assert "float32[8,8]" in out
    assert "@data" not in out


@pytest.mark.parametrize(
    ("dtype", "type_text", "itemsize"),
    [
        pytest.param("bfloat16", "bfloat16[16@data,4@model]", 2, id="bfloat16"),
        pytest.param("int32", "int32[16@data,4@model]", 4, id="int32"),
    ],
)
def test_shard_dtypes(cli, dtype, type_text, itemsize):
    args = ["shard", *MESH_2X4, "--shape", "16x4", "--spec", "data,model", "--dtype", dtype]
    table = cli([*args, "--mode", "explicit"])
    assert table.exit_code == 0, table.output
    assert type_text in table.stdout
    assert "verified" in table.stdout
    doc = json.loads(cli([*args, "--format", "json"]).stdout)
    assert doc["array"]["dtype"] == dtype
    assert doc["array"]["nbytes"] == 64 * itemsize
    expected = np.arange(64).reshape(16, 4)
    for shard in doc["shards"]:
        assert shard["nbytes"] == 8 * itemsize
        (r0, r1), (c0, c1) = shard["index"]
        np.testing.assert_array_equal(np.array(shard["values"]), expected[r0:r1, c0:c1])
    if dtype == "int32":
        assert all(isinstance(v, int) for v in doc["array"]["values"][0])


def test_quiet_omits_header(cli):
    args = ["shard", *MESH_2X4, "--shape", "8x8", "--spec", "data,model"]
    loud = cli(args).stdout
    quiet = cli([*args, "--quiet"])
    assert quiet.exit_code == 0, quiet.output
    for text in ("platform", "8x8 float32", "jax.debug.visualize_sharding", "tiles ("):
        assert text in loud
        assert text not in quiet.stdout
    assert "per-device shards" in quiet.stdout
    assert "verified" in quiet.stdout
    mesh_quiet = cli(["mesh", "--mesh", "2x4", "-q"]).stdout
    assert "platform" not in mesh_quiet
    assert "dev 7" in mesh_quiet


# A terminal that shows color; FORCE_COLOR makes rich emit escapes into the captured stream.
COLOR_ENV = {"FORCE_COLOR": "1", "TERM": "xterm-256color"}
COLOR_COMMANDS = [
    pytest.param(["mesh", "--mesh", "2x4"], id="mesh"),
    pytest.param(["shard", "--mesh", "2x4", "--shape", "8x8", "--spec", "x,y"], id="shard"),
]


@pytest.mark.parametrize("command", COLOR_COMMANDS)
def test_color_by_default_in_a_color_terminal(cli, command):
    colored = cli(command, env=COLOR_ENV)
    assert colored.exit_code == 0, colored.output
    assert has_color(colored.stdout)  # so the two tests below can fail


@pytest.mark.parametrize("command", COLOR_COMMANDS)
def test_no_color_flag_gives_plain_text(cli, command):
    plain = cli([*command, "--no-color"], env=COLOR_ENV)
    assert plain.exit_code == 0, plain.output
    assert "\x1b[" not in plain.stdout


@pytest.mark.parametrize("command", COLOR_COMMANDS)
def test_no_color_env_is_honoured(cli, command):
    result = cli(command, env={**COLOR_ENV, "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    assert not has_color(result.stdout)  # no-color.org: no color; bold may stay


# JSON contract --------------------------------------------------------------------------------


def json_of(result) -> dict:
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    return json.loads(result.stdout)  # the whole of stdout is the document


def test_mesh_json_contract(cli):
    doc = json_of(cli(["mesh", "--mesh", "2x4", "--axes", "data,model", "--format", "json"]))
    assert document_problems(doc, "mesh") == []  # exactly the keys shardcli/results/documents.py gives
    assert doc["schema"] == SCHEMA_VERSION
    assert doc["command"] == "mesh"
    assert doc["shardcli_version"] == shardcli.__version__
    assert doc["runtime"]["platform"] == "cpu"
    assert doc["runtime"]["device_count"] == 8
    assert doc["runtime"]["devices_present"] == IN_PROCESS_DEVICES
    assert doc["runtime"]["faked"] is True
    assert doc["runtime"]["process_count"] == 1
    assert doc["runtime"]["jax_version"] == jax.__version__
    assert doc["runtime"]["compiler"] == {"jax": jax.__version__, "jaxlib": jax.lib.__version__}
    mesh = doc["mesh"]
    assert mesh["shape"] == [2, 4]
    assert mesh["axes"] == ["data", "model"]
    assert mesh["axis_types"] == ["Auto", "Auto"]
    assert mesh["mode"] == "auto"
    assert len(mesh["devices"]) == 8
    for device in mesh["devices"]:
        assert device["platform"] == "cpu"
    assert sorted(d["id"] for d in mesh["devices"]) == list(range(8))
    coords = [(d["coords"]["data"], d["coords"]["model"]) for d in mesh["devices"]]
    assert coords == [(a, b) for a in range(2) for b in range(4)]  # row-major


def check_shard_doc(doc: dict, shape: tuple[int, ...], expected: np.ndarray, itemsize: int = 4) -> None:
    """Every shard's values are the NumPy slice; tiles cover the array; replication adds up."""
    assert document_problems(doc, "shard") == []
    assert doc["command"] == "shard"
    assert doc["verified"] == {"ok": True, "wrong_devices": []}
    assert doc["array"]["shape"] == list(shape)
    np.testing.assert_array_equal(np.array(doc["array"]["values"]), expected)

    mesh_coords = {d["id"]: d["coords"] for d in doc["mesh"]["devices"]}
    holders: dict[tuple, set[int]] = {}
    for shard in doc["shards"]:
        assert shard["coords"] == mesh_coords[shard["device_id"]]
        block = expected[tuple(slice(a, b) for a, b in shard["index"])]
        np.testing.assert_array_equal(np.array(shard["values"]), block)
        assert shard["local_shape"] == list(block.shape)
        assert shard["nbytes"] == block.size * itemsize
        holders.setdefault(tuple(map(tuple, shard["index"])), set()).add(shard["device_id"])
    assert sorted(s["device_id"] for s in doc["shards"]) == sorted(mesh_coords)

    coverage = np.zeros(shape, dtype=int)
    for tile in doc["tiles"]:
        coverage[tuple(slice(a, b) for a, b in tile["index"])] += 1
        assert len(tile["device_ids"]) == doc["replication"]
        assert set(tile["device_ids"]) == holders[tuple(map(tuple, tile["index"]))]
    assert (coverage == 1).all(), coverage
    assert len(doc["tiles"]) * doc["replication"] == len(doc["shards"])


def test_shard_json_contract_full_sharding(cli):
    doc = json_of(cli(["shard", *MESH_2X4, "--shape", "8x8", "--spec", "data,model", "--format", "json"]))
    check_shard_doc(doc, (8, 8), np.arange(64, dtype=np.float32).reshape(8, 8))
    assert doc["array"]["spec"] == [["data"], ["model"]]
    assert doc["array"]["jax_type"] == "float32[8,8]"
    assert doc["replication"] == 1
    for shard in doc["shards"]:
        d, m = shard["coords"]["data"], shard["coords"]["model"]
        assert shard["index"] == [[4 * d, 4 * d + 4], [2 * m, 2 * m + 2]]


def test_shard_json_partial_replication(cli):
    doc = json_of(cli(["shard", *MESH_2X4, "--shape", "4x8", "--spec", "None,model", "--format", "json"]))
    check_shard_doc(doc, (4, 8), np.arange(32, dtype=np.float32).reshape(4, 8))
    assert doc["array"]["spec"] == [None, ["model"]]
    assert doc["replication"] == 2
    assert len(doc["tiles"]) == 4
    for shard in doc["shards"]:
        m = shard["coords"]["model"]
        assert shard["index"] == [[0, 4], [2 * m, 2 * m + 2]]
    for tile in doc["tiles"]:
        data_coords = {
            doc["shards"][i]["coords"]["data"]
            for i in range(8)
            if doc["shards"][i]["device_id"] in tile["device_ids"]
        }
        assert data_coords == {0, 1}  # replicated across the data axis


def test_shard_json_joined_axes_3d(cli):
    doc = json_of(
        cli(["shard", "--mesh", "2x2x2", "--shape", "8x2x3", "--spec", "x+z,y", "--format", "json"])
    )
    check_shard_doc(doc, (8, 2, 3), np.arange(48, dtype=np.float32).reshape(8, 2, 3))
    assert doc["array"]["spec"] == [["x", "z"], ["y"]]
    for shard in doc["shards"]:
        c = shard["coords"]
        block = 2 * c["x"] + c["z"]  # x major, z minor
        assert shard["index"] == [[2 * block, 2 * block + 2], [c["y"], c["y"] + 1], [0, 3]]


def test_shard_json_replicated(cli):
    doc = json_of(cli(["shard", "--mesh", "2x2", "--shape", "3x5", "--format", "json"]))
    check_shard_doc(doc, (3, 5), np.arange(15, dtype=np.float32).reshape(3, 5))
    assert doc["array"]["spec"] == []
    assert doc["replication"] == 4
    assert doc["tiles"] == [{"index": [[0, 3], [0, 5]], "device_ids": [0, 1, 2, 3]}]


@pytest.mark.parametrize(
    ("init", "check"),
    [
        pytest.param("ones", lambda a: (a == 1).all(), id="ones"),
        pytest.param("zeros", lambda a: (a == 0).all(), id="zeros"),
        pytest.param("random", lambda a: ((a >= 0) & (a < 1)).all() and len(np.unique(a)) > 1, id="random"),
        pytest.param(
            "normal", lambda a: (a < 0).any() and (a > 1).any() and abs(a.mean()) < 0.5, id="normal"
        ),
    ],
)
def test_shard_json_inits(cli, init, check):
    args = ["shard", *MESH_2X4, "--shape", "4x8", "--spec", "data,model", "--init", init, "--format", "json"]
    doc = json_of(cli(args))
    values = np.array(doc["array"]["values"])
    assert check(values)
    check_shard_doc(doc, (4, 8), values)
    assert json_of(cli(args))["array"]["values"] == doc["array"]["values"]  # fixed seed


def test_shard_json_large_array_has_no_values(cli):
    doc = json_of(cli(["shard", *MESH_2X4, "--shape", "32x32", "--spec", "data,model", "--format", "json"]))
    assert doc["array"]["values"] is None
    assert all(s["values"] is None for s in doc["shards"])
    assert doc["verified"]["ok"] is True


def test_show_values_forced_on_and_off(cli):
    on = json_of(cli(["shard", *MESH_2X4, "--shape", "32x32", "--show-values", "--format", "json"]))
    assert np.array(on["shards"][0]["values"]).shape == (32, 32)
    off = cli(["shard", *MESH_2X4, "--shape", "8x8", "--no-show-values"])
    assert off.exit_code == 0, off.output
    assert "local values" not in off.stdout
    assert "global array" not in off.stdout


# Version and help -----------------------------------------------------------------------------


def test_version(cli):
    result = cli(["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"shardcli {shardcli.__version__}\n"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(["--help"], ["mesh", "shard"], id="root"),
        pytest.param(["-h"], ["mesh", "shard"], id="root-short"),
        pytest.param([], ["mesh", "shard"], id="no-args"),
        pytest.param(
            ["shard", "--help"], ["--spec", "--shape", "--mesh", "--view-dims", "Example"], id="shard"
        ),
        pytest.param(["mesh", "--help"], ["--mesh", "--axes", "--platform", "Example"], id="mesh"),
    ],
)
def test_help(cli, args, expected):
    result = cli(args)
    assert result.exit_code == 0, result.output
    for text in expected:
        assert text in result.stdout


def test_root_help_lists_each_command_on_one_line_when_it_fits(cli):
    """Summaries wrapped in the source used to keep their line breaks in the command list."""
    result = cli(["--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if re.match(r"│ [a-z]+ ", line)]
    assert [row.split()[1] for row in rows] == [
        "mesh", "shard", "collective", "matmul", "einsum", "reshard", "inspect", "run", "plan", "calibrate",
        "recipe", "pipeline", "compare", "launch", "model",
    ]  # fmt: skip
    pipeline = next(row for row in rows if row.startswith("│ pipeline"))
    assert "activations and gradients moved between stages" in pipeline
    assert "verified against the same model run unpipelined on one device." in pipeline


@pytest.mark.parametrize(
    ("command", "joined"),
    [
        pytest.param("plan", "your own program instead: its arguments carry", id="plan"),
        pytest.param("inspect", "(its folder first on the Python path)", id="inspect"),
    ],
)  # fmt: skip
def test_command_help_wraps_each_paragraph_whole(cli, command, joined):
    """A docstring paragraph after the first is wrapped as one paragraph at 80 columns (typer kept its
    source line breaks: "instead: its" ended a line, then "arguments carry ..." began the next)."""
    result = cli([command, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    description = result.stdout.split("Usage:", 1)[1].split("╭", 1)[0]
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", description) if p.strip()]
    assert any(joined in p for p in paragraphs), description
    lines = [line.rstrip() for line in description.splitlines()]
    for line, after in zip(lines, lines[1:], strict=False):
        # a line broken early (under 60 columns) ends its paragraph: a blank line follows
        assert len(line) >= 60 or not after.strip() or not line.strip(), (line, description)


# The check can fail ---------------------------------------------------------------------------


def test_shard_check_fails_when_a_device_holds_the_wrong_block(cli, monkeypatch):
    import shardcli.playground.shard as core_shard

    place = core_shard.place_array

    def place_corrupted(host, sharding):
        corrupted = host.copy()
        corrupted[-1, -1] += 1  # the last element lives on device 7 for P('data', 'model')
        return place(corrupted, sharding)

    monkeypatch.setattr(core_shard, "place_array", place_corrupted)
    args = ["shard", *MESH_2X4, "--shape", "8x8", "--spec", "data,model"]
    table = cli(args)
    assert "Traceback" not in table.output
    assert table.exit_code == 1, table.output
    assert "WRONG: devices 7 do not hold their NumPy slice" in table.stdout
    assert "verified: every device" not in table.stdout

    doc = json.loads(cli([*args, "--format", "json"]).stdout)
    assert doc["verified"] == {"ok": False, "wrong_devices": [7]}


def test_shard_check_names_every_replica(cli, monkeypatch):
    import shardcli.playground.shard as core_shard

    place = core_shard.place_array

    def place_corrupted(host, sharding):
        corrupted = host.copy()
        corrupted[0, 0] = -5
        return place(corrupted, sharding)

    monkeypatch.setattr(core_shard, "place_array", place_corrupted)
    # P(None, 'model'): column block 0 is held by devices 0 and 4.
    result = cli(["shard", *MESH_2X4, "--shape", "4x8", "--spec", "None,model", "--format", "json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["verified"] == {"ok": False, "wrong_devices": [0, 4]}


# The honest start-up path: fresh processes ----------------------------------------------------


@pytest.mark.slow
def test_subprocess_fakes_exactly_the_mesh(shardcli_subprocess):
    # --platform cpu: under the default (auto) a GPU host would run a 1-GPU fallback and say so.
    proc = shardcli_subprocess("mesh", "--mesh", "2x2", "--platform", "cpu", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    runtime = json.loads(proc.stdout)["runtime"]
    assert runtime["platform"] == "cpu"
    assert runtime["device_count"] == 4
    assert runtime["faked"] is True
    assert runtime["devices_present"] == 4
    assert runtime["note"] is None


@pytest.mark.slow
def test_subprocess_devices_overrides_the_count(shardcli_subprocess):
    proc = shardcli_subprocess("mesh", "--mesh", "2x2", "--devices", "6", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["runtime"]["devices_present"] == 6
    assert doc["runtime"]["device_count"] == 4
    assert len(doc["mesh"]["devices"]) == 4


@pytest.mark.slow
def test_subprocess_mesh_larger_than_the_in_process_backend(shardcli_subprocess):
    proc = shardcli_subprocess(
        "shard",
        "--mesh",
        "4x4",
        "--axes",
        "data,model",
        "--shape",
        "8x8",
        "--spec",
        "data,model",
        "--format",
        "json",
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["runtime"]["devices_present"] == 16
    check_shard_doc(doc, (8, 8), np.arange(64, dtype=np.float32).reshape(8, 8))
    assert len(doc["shards"]) == 16


# A JAX plugin that fails to start (JAX's CUDA plugin on a host whose GPU is hidden or missing)
# makes JAX log a traceback while its backends start. shardcli keeps it for the note, or for the
# error when the platform asked for did not start. The plant is a real plugin JAX discovers.
PLANTED_FAILURE = "operation cuInit(0) failed: CUDA_ERROR_NO_DEVICE (planted by a test)"


@pytest.fixture
def broken_plugin(tmp_path) -> dict[str, str]:
    where = tmp_path / "jax_plugins" / "shardcli_planted"
    where.mkdir(parents=True)
    (where / "__init__.py").write_text(f"def initialize():\n    raise RuntimeError({PLANTED_FAILURE!r})\n")
    return {**pythonpath_first(tmp_path), "CUDA_VISIBLE_DEVICES": ""}


@pytest.mark.slow
@pytest.mark.parametrize(
    "platform, note_starts",
    [
        ("auto", "auto: no GPU or TPU backend started, so the CPU runs the mesh; JAX at start-up: "),
        ("cpu", "JAX at start-up: "),
    ],
)
def test_a_failing_jax_plugin_is_a_note_not_a_traceback(
    shardcli_subprocess, broken_plugin, platform, note_starts
):
    proc = shardcli_subprocess(
        "mesh", "--mesh", "2", "--platform", platform, "--format", "json", env=broken_plugin
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    runtime = json.loads(proc.stdout)["runtime"]
    assert runtime["platform"] == "cpu"
    assert runtime["note"].startswith(note_starts), runtime["note"]
    assert f"jax_plugins.shardcli_planted.initialize(): {PLANTED_FAILURE}" in runtime["note"]
    human = shardcli_subprocess("mesh", "--mesh", "2", "--platform", platform, env=broken_plugin)
    assert human.returncode == 0 and human.stderr == ""
    assert "note" in human.stdout and "CUDA_ERROR_NO_DEVICE" in human.stdout


@pytest.mark.slow
def test_a_failing_jax_plugin_is_named_when_its_platform_was_asked_for(shardcli_subprocess, broken_plugin):
    proc = shardcli_subprocess("mesh", "--mesh", "2", "--platform", "gpu", env=broken_plugin)
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line.startswith(
        "shardcli: error: --platform gpu was asked for but this machine has no GPU devices JAX can use "
        "(JAX at start-up: "
    ), line
    assert f"jax_plugins.shardcli_planted.initialize(): {PLANTED_FAILURE}" in line
    assert line.endswith("); use --platform cpu to fake devices on the CPU")
    assert proc.stdout == ""


@pytest.mark.slow
def test_a_backend_jax_cannot_start_is_one_line_with_what_jax_said(shardcli_subprocess, broken_plugin):
    """JAX_PLATFORMS names a backend that cannot start: JAX raises (RuntimeError or, with no CUDA
    plugin at all, a bare AssertionError); the error keeps what the failing plugin said."""
    proc = shardcli_subprocess("mesh", "--mesh", "2", env={**broken_plugin, "JAX_PLATFORMS": "cuda"})
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line.startswith("shardcli: error: JAX could not start its backends ("), line
    assert PLANTED_FAILURE in line
    assert line.endswith("; unset JAX_PLATFORMS (it is 'cuda') or use --platform cpu")
    pinned = shardcli_subprocess(
        "mesh", "--mesh", "2", "--platform", "cpu", "--format", "json", env={"JAX_PLATFORMS": "cuda"}
    )
    assert pinned.returncode == 0 and pinned.stderr == ""


def test_only_jax_start_up_complaints_are_kept(caplog):
    import logging

    from shardcli.runtime.devices import jax_start_complaints

    logger = logging.getLogger("jax._src.xla_bridge")
    with caplog.at_level(logging.DEBUG, logger="jax._src.xla_bridge"), jax_start_complaints() as kept:
        try:
            try:
                raise OSError("libcusparse.so.12: cannot open shared object file\nmore")
            except OSError as error:
                raise RuntimeError("Unable to load cuSPARSE. Is it installed?\nsecond line") from error
        except RuntimeError:
            logger.exception("Jax plugin configuration error: Exception when calling x.initialize()")
        try:
            try:
                raise RuntimeError("Backend 'cuda' is not in the list of known backends")
            except RuntimeError as error:
                raise RuntimeError(
                    "Unable to initialize backend 'cuda': Backend 'cuda' is not in the list of known backends"
                ) from error
        except RuntimeError:
            logger.exception("Jax plugin configuration error: Exception when calling z.initialize()")
        try:
            raise ImportError("No module named 'jax_plugins.y'")
        except ImportError:
            logger.exception("Jax plugin configuration error: Plugin module %s could not be loaded")
        logger.warning(
            "An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not installed."
        )
        logger.warning(
            "Platform 'x' is experimental and not all JAX functionality may be correctly supported!"
        )
        logger.info("Jax plugin configuration error: at INFO it is not a complaint")
    assert kept == [
        "Jax plugin configuration error: Exception when calling x.initialize(): Unable to load cuSPARSE. "
        "Is it installed? (libcusparse.so.12: cannot open shared object file)",
        "Jax plugin configuration error: Exception when calling z.initialize(): Unable to initialize "
        "backend 'cuda': Backend 'cuda' is not in the list of known backends",  # the cause not repeated
        "Jax plugin configuration error: Plugin module could not be loaded: No module named 'jax_plugins.y'",
        "An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not installed",
    ]
    assert [r.getMessage()[:20] for r in caplog.records] == ["Platform 'x' is expe", "Jax plugin configura"]
    logger.warning("An NVIDIA GPU may be present (after the block: printed as JAX prints it)")
    assert len(caplog.records) == 3


PLUGIN = "Jax plugin configuration error: Exception when calling jax_plugins.xla_cuda13.initialize(): boom"
GUESS = "An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not installed"


@pytest.mark.parametrize(
    "complaints, said",
    [
        # the plugin's own failure says what happened; JAX's guess beside it is wrong
        ([PLUGIN, f"{GUESS}. Falling back to cpu"], f"JAX at start-up: {PLUGIN}"),
        # alone, the guess is kept, without the fallback shardcli may not make
        ([f"{GUESS}. Falling back to cpu"], f"JAX at start-up: {GUESS}"),
        (
            ["CUDA backend failed to initialize: INTERNAL: no memory", f"{GUESS}. Falling back to cpu"],
            f"JAX at start-up: CUDA backend failed to initialize: INTERNAL: no memory; {GUESS}",
        ),
    ],
)
def test_what_jax_said_leaves_out_its_wrong_guesses(complaints, said):
    from shardcli.runtime.devices import _said

    assert _said(complaints) == said


@pytest.mark.slow
def test_subprocess_refuses_to_fake_too_many(shardcli_subprocess):
    proc = shardcli_subprocess("mesh", "--mesh", "600")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        "shardcli: error: faking 600 CPU devices is more than the 512 shardcli allows in one "
        "process; use a smaller mesh"
    ]
    assert proc.stdout == ""


@pytest.mark.slow
def test_cli_import_help_and_bad_flags_do_not_import_jax(python_subprocess):
    script = (
        "import sys\n"
        "import shardcli.cli\n"
        "assert 'jax' not in sys.modules, 'import'\n"
        "from typer.testing import CliRunner\n"
        "r = CliRunner()\n"
        "for args in (['--help'], ['shard', '--help'], ['--version'], ['mesh', '--mesh', '0'],\n"
        "             ['shard', '--spec', 'nope']):\n"
        "    result = r.invoke(shardcli.cli.app, args)\n"
        "    assert result.exit_code in (0, 2), (args, result.output)\n"
        "    assert 'jax' not in sys.modules, args\n"
        "print('ok')\n"
    )
    proc = python_subprocess("-c", script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"


WRONG_PSUM = """
    import dataclasses
    from shardcli.playground.collective import cases as collectives
    psum = collectives.COLLECTIVES["psum"]
    collectives.COLLECTIVES["psum"] = dataclasses.replace(
        psum, body=lambda x, params, n: psum.body(x, params, n) + 1
    )
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "plant", "code"),
    [
        pytest.param(("collective", "psum", "--mesh", "4"), None, 0, id="table"),
        pytest.param(("collective", "psum", "--mesh", "4", "--format", "json"), None, 0, id="json"),
        pytest.param(("mesh", "--mesh", "4", "--format", "csv"), None, 2, id="bad-input-stays-2"),
        pytest.param(("collective", "psum", "--mesh", "4"), WRONG_PSUM, 1, id="wrong-result-stays-1"),
    ],
)
def test_a_reader_that_left_is_not_a_failure(tmp_path, args, plant, code):
    """stdout is a pipe whose reader is gone (`| head -1` once head has its line): every write
    fails with EPIPE. The run's own exit code stands, with nothing on stderr but its own verdict."""
    import os
    import subprocess
    import sys
    import textwrap

    from conftest import clean_env

    env = {}
    if plant is not None:
        (tmp_path / "sitecustomize.py").write_text(textwrap.dedent(plant))
        env = pythonpath_first(tmp_path)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "shardcli", *args, "--size", "64"] if args[0] == "collective" else
            [sys.executable, "-m", "shardcli", *args],
            stdout=write_end, stderr=subprocess.PIPE, text=True, env=clean_env(env), timeout=120,
            check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr
    if code == 0:
        assert proc.stderr == ""
    else:
        assert len(proc.stderr.strip().splitlines()) <= 1, proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["collective", "psum", "--mesh", "4", "--dtype", "int64"], id="collective-int64"),
        pytest.param(["shard", "--mesh", "2x2", "--shape", "8x8", "--dtype", "float64"], id="shard-float64"),
    ],
)
def test_a_run_with_64_bit_values_leaves_x64_as_it_found_it(cli, args: list[str]) -> None:
    """A process that runs commands one after another (the tests, a notebook) compiles the next
    program in the dtypes its user wrote: a scan's int32 counter, a float32 carry."""
    import jax

    assert jax.config.read("jax_enable_x64") is False
    out = cli(args)
    assert out.exit_code == 0, out.output
    assert jax.config.read("jax_enable_x64") is False


def test_the_default_format_choices_are_the_specs_ones():
    # options keeps them as text so that --help does not import specs; they must not drift apart.
    from shardcli.commands import options
    from shardcli.specs import runs

    assert options.FORMATS == runs.FORMATS
    assert [type(f) for f in options.FORMATS] == [str, str]
