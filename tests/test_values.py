"""Your own values through every command, results shown, and only true lines (issue 33 part A, and the
--values/--dtype cases of issue 34)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from shardcli.errors import ShardcliError
from shardcli.render.human import format_duration
from shardcli.runtime.arrays import load_values_file, make_host_array
from shardcli.specs.values import ArraySpec, parse_dtype

FAST = ("--iters", "1", "--warmup", "0")


def error_line(result) -> str:
    """The one line a refused command prints (stderr), without the `shardcli: error: ` prefix."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0].removeprefix("shardcli: error: ")


# --- bad input: one line, exit 2 -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["collective", "psum", "--mesh", "4", "--values", "1,2,3,4", "--init", "random"],
            "--values and --init random both fill the input; give only one of them",
            id="values-with-init",
        ),
        pytest.param(
            ["shard", "--mesh", "4", "--values", "1,2,3,4", "--init", "arange"],
            "--values and --init arange both fill the input; give only one of them",
            id="values-with-init-even-the-default",
        ),
        pytest.param(
            ["shard", "--mesh", "4", "--values", "1e39,1,2,3"],
            "--values has 1e+39, beyond float32's largest finite value 3.40282e+38, so it would become inf; "
            "use smaller numbers or --dtype float64",
            id="values-overflow-float32",
        ),
        pytest.param(
            ["collective", "psum", "--mesh", "4", "--values", "70000,1,2,3", "--dtype", "float16"],
            "--values has 70000, beyond float16's largest finite value 65504, so it would become inf; "
            "use smaller numbers or --dtype float64",
            id="values-overflow-float16",
        ),
        pytest.param(
            ["shard", "--mesh", "4", "--values", "1.5,1,2,3", "--dtype", "int32"],
            "--values has 1.5, which is not a whole number, but --dtype is int32; use whole numbers or "
            "a float dtype",
            id="values-not-whole",
        ),
        pytest.param(
            ["shard", "--mesh", "4", "--values", "nan,1,2,3", "--dtype", "int32"],
            "--values has nan, which is not a whole number, but --dtype is int32; use whole numbers or "
            "a float dtype",
            id="values-nan-int",
        ),
        pytest.param(
            ["collective", "psum", "--mesh", "4", "--values", "300,1,2,3", "--dtype", "int8"],
            "--values has 300, outside int8's range -128..127",
            id="values-outside-int8",
        ),
        pytest.param(
            ["shard", "--mesh", "2", "--shape", "2x2", "--values", "1,2,3"],
            "--values has 3 numbers but --shape 2x2 holds 4; give one number per element, in row-major order",
            id="values-count-against-shape-shard",
        ),
        pytest.param(
            ["collective", "psum", "--mesh", "2", "--shape", "2x2", "--values", "1,2,3"],
            "--values has 3 numbers but --shape 2x2 holds 4; give one number per element, in row-major order",
            id="values-count-against-shape-collective",
        ),
        pytest.param(
            ["collective", "psum", "--mesh", "4", "--values", "1,2,3,4", "--size", "4K"],
            "--size and --values both set the input; give --values alone (1-D) or with --shape",
            id="values-with-size",
        ),
        pytest.param(
            ["shard", "--mesh", "4", "--values", "1,2,3,4", "--values-file", "x.npy"],
            "--values and --values-file both give the input's numbers; give only one of them",
            id="values-and-values-file",
        ),
        pytest.param(
            ["collective", "psum", "--mesh", "4", "--min-busbw", "nan"],
            "--min-busbw nan is not a bandwidth; give a finite number of GB/s, 0 or more",
            id="min-busbw-nan",
        ),
        pytest.param(
            ["collective", "psum", "--mesh", "4", "--min-busbw", "-1"],
            "--min-busbw -1 is not a bandwidth; give a finite number of GB/s, 0 or more",
            id="min-busbw-negative",
        ),
        pytest.param(
            ["recipe", "three-ways", "--shape", "4x4"],
            "--shape sets the input of elementwise, reduce, pipeline-ring; recipe three-ways sizes its own "
            "inputs",
            id="recipe-shape-where-it-has-no-input",
        ),
        pytest.param(
            ["recipe", "sharded-mac", "--shape", "4x4"],
            "--shape sets the input of elementwise, reduce, pipeline-ring; recipe sharded-mac sizes its own "
            "inputs",
            id="recipe-shape-for-several-inputs",
        ),
        pytest.param(
            ["recipe", "axis-index", "--init", "ones"],
            "--init fills the input of elementwise, reduce, pipeline-ring, sharded-mac; recipe axis-index "
            "builds no input to fill",
            id="recipe-init-where-it-has-no-input",
        ),
        pytest.param(
            ["recipe", "reduce", "--mesh", "2x4", "--axes", "x,y", "--shape", "3x8"],
            "--shape 3x8: dim 0 (3) is not divisible by 2, the size of mesh axis 'x' that --shape shards it "
            "over; use a multiple of 2",
            id="recipe-shape-that-does-not-split",
        ),
        pytest.param(
            ["matmul", "--case", "allreduce", "--mesh", "2x2", "--sizes", "1:2", "--show-values"],
            "--show-values is for a single run; --sizes runs several sizes",
            id="matmul-show-values-sweep",
        ),
        pytest.param(
            ["einsum", "ij->j", "--shape", "64x64", "--mesh", "2", "--show-values", "--sizes", "1:2"],
            "--show-values is for a single run; --sizes runs several sizes",
            id="einsum-show-values-sweep",
        ),
    ],
)
def test_bad_values_exit_2_with_one_line(cli, args, message):
    result = cli(args)
    assert result.exit_code == 2, result.output
    assert error_line(result) == message


def test_values_file_refuses_what_is_not_a_regular_npy_file(cli, tmp_path):
    fifo = tmp_path / "pipe.npy"
    os.mkfifo(fifo)
    text = tmp_path / "text.npy"
    text.write_text("3,1,4,1")
    pickled = tmp_path / "objects.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    strings = tmp_path / "strings.npy"
    np.save(strings, np.array(["a", "b"]))
    cases = {
        str(tmp_path): f"--values-file {tmp_path} is a directory; give a .npy file written by numpy.save",
        str(fifo): f"--values-file {fifo} is not a regular file (a fifo, device or socket); give a .npy file "
        "written by numpy.save",
        str(
            tmp_path / "missing.npy"
        ): f"--values-file {tmp_path / 'missing.npy'} cannot be read: No such file "
        "or directory; give a .npy file",
        str(strings): f"--values-file {strings} holds <U1, not numbers; save a bool, int or float array",
    }
    for path, message in cases.items():
        result = cli(["shard", "--mesh", "2", "--values-file", path])
        assert result.exit_code == 2, result.output
        assert error_line(result) == message
    for path in (text, pickled):  # NumPy's own words follow; the line names the file and the fix
        result = cli(["shard", "--mesh", "2", "--values-file", str(path)])
        assert result.exit_code == 2, result.output
        line = error_line(result)
        assert line.startswith(f"--values-file {path} is not a .npy array NumPy can read (")
        assert line.endswith("); write it with numpy.save")


def test_values_file_is_read_with_a_size_cap(tmp_path):
    path = tmp_path / "big.npy"
    np.save(path, np.zeros(1024, dtype=np.float32))
    with pytest.raises(ShardcliError, match="is over 0 MiB; --values-file is for small arrays to look at"):
        load_values_file(str(path), max_bytes=1000)
    assert load_values_file(str(path)).shape == (1024,)


# --- values in, values shown -----------------------------------------------------------------------


def test_values_file_brings_its_shape_and_numbers(cli, tmp_path):
    path = tmp_path / "x.npy"
    host = np.arange(16, dtype=np.int32).reshape(4, 4) * 3 - 7
    np.save(path, host)
    doc = json.loads(
        cli(["shard", "--mesh", "2x2", "--spec", "x,y", "--values-file", str(path), "-f", "json"]).stdout
    )
    assert doc["array"]["shape"] == [4, 4] and doc["array"]["init"] == "values"
    assert doc["array"]["values"] == host.astype(np.float32).tolist()
    for shard in doc["shards"]:
        (a, b), (c, d) = shard["index"]
        assert shard["values"] == host[a:b, c:d].astype(np.float32).tolist()


def test_values_with_shape_fill_row_major(cli):
    doc = json.loads(
        cli(
            ["shard", "--mesh", "2", "--shape", "2x3", "--spec", "x", "--values", "1,2,3,4,5,6", "-f", "json"]
        ).stdout
    )
    assert doc["array"]["values"] == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    assert [s["values"] for s in doc["shards"]] == [[[1.0, 2.0, 3.0]], [[4.0, 5.0, 6.0]]]


def test_nan_in_is_nan_out_as_numpy_says(cli):
    values = "nan,1,2,inf,4,5,6,7"  # column 0 sums to NaN, column 1 to inf
    result = cli(["collective", "psum", "--mesh", "4", "--values", values, *FAST, "-f", "json"])
    assert result.exit_code == 0, result.output
    size = json.loads(result.stdout)["sizes"][0]
    assert size["wrong"] == 0
    expected = np.array([float(v) for v in values.split(",")], dtype=np.float32).reshape(4, 2).sum(axis=0)
    got = np.array(size["values"]["global_output"], dtype=np.float64)
    np.testing.assert_array_equal(got, expected)  # NaN where NumPy has NaN, inf where it has inf
    assert math.isnan(got[0]) and math.isinf(got[1])


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["shard", "--mesh", "4", "--shape", "8", "--spec", "x"], id="shard"),
        pytest.param(["collective", "all_gather", "--mesh", "4", *FAST], id="collective"),
        pytest.param(
            ["reshard", "--mesh", "4", "--shape", "8", "--from", "x", "--to", "None", *FAST], id="reshard"
        ),
    ],
)
def test_int64_with_the_default_arange_works(cli, args):
    result = cli([*args, "--dtype", "int64"])
    assert result.exit_code == 0, result.output


def test_int64_arange_is_exact_and_narrow_ints_wrap():
    spec = ArraySpec(shape=(2, 3), dtype=parse_dtype("int64"))
    assert make_host_array(spec, start=2**40).tolist() == (np.arange(6).reshape(2, 3) + 2**40).tolist()
    narrow = make_host_array(ArraySpec(shape=(300,), dtype=parse_dtype("int8")))
    assert narrow[127] == 127 and narrow[128] == 0  # wraps at the dtype's top, never overflows


def test_matmul_shows_c_and_its_blocks(cli):
    args = ["matmul", "--case", "allgather", "--mesh", "2x2", "--dims", "4,4,4", "--init", "arange", *FAST]
    doc = json.loads(cli([*args, "-f", "json"]).stdout)
    values = doc["runs"][0]["impls"][0]["values"]
    c = np.arange(16.0).reshape(4, 4) @ np.arange(16.0, 32.0).reshape(4, 4)
    assert values["global_values"] == c.tolist()
    assert [b["device_id"] for b in values["blocks"]] == [0, 1, 2, 3]
    assert all(b["values"] == c.tolist() for b in values["blocks"])  # C is replicated
    text = cli([*args, "--no-color"]).stdout
    assert "C: global values (from manual)" in text and "[ 504.  526.  548.  570.]" in text
    assert "C: each device's block" in text


def test_large_results_show_no_values_unless_asked(cli):
    args = ["matmul", "--case", "allreduce", "--mesh", "2x2", "--dims", "32,8,32", *FAST, "-f", "json"]
    assert json.loads(cli(args).stdout)["runs"][0]["impls"][0]["values"] is None  # 1024 elements
    shown = json.loads(cli([*args, "--show-values"]).stdout)["runs"][0]["impls"][0]["values"]
    assert np.array(shown["global_values"]).shape == (32, 32)
    small = ["matmul", "--case", "allreduce", "--mesh", "2x2", "--dims", "4,4,4", *FAST, "-f", "json"]
    assert json.loads(cli([*small, "--no-show-values"]).stdout)["runs"][0]["impls"][0]["values"] is None


def test_einsum_shows_its_result_and_a_scalar_in_the_table_view(cli):
    result = cli(["einsum", "ij->", "--shape", "4x8", "--mesh", "2", "--init", "arange", *FAST, "--no-color"])
    assert result.exit_code == 0, result.output
    assert "a scalar: one value, held whole by device(s) 0, 1" in result.stdout
    assert "C: global values (from auto)\n496." in result.stdout


def test_an_einsum_over_52_letters_runs(cli):
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    shape = "x".join(["1"] * 52)
    result = cli(["einsum", f"{letters}->", "--shape", shape, "--mesh", "2", *FAST, "-f", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["summary"]["wrong"] == 0


# --- only true lines ---------------------------------------------------------------------------------


def test_nothing_verified_where_nothing_ran(cli):
    result = cli(["matmul", "--case", "illegal", "--mesh", "2x2", "--dims", "4,4,4", "--no-color"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "nothing ran (every implementation was refused or skipped), so nothing was verified" in out
    assert "verified:" not in out
    assert "timing and verification" not in out and "cost model" not in out  # no empty tables


def test_quiet_drops_provenance_never_the_result(cli):
    args = ["collective", "psum", "--mesh", "4", "--values", "3,1,4,1,5,9,2,6", "--dtype", "int32", *FAST]
    out = cli([*args, "-q", "--no-color"]).stdout
    assert "BEFORE and AFTER" in out and "global result\n[14 17]" in out
    assert "platform" not in out and "input sharding" not in out


def test_a_bound_beaten_by_the_measurement_says_why(cli):
    args = ["matmul", "--case", "allreduce", "--mesh", "2x2", "--dims", "4,4,4", "--peak-tflops", "1e-12"]
    short = cli([*args, *FAST, "--no-color"]).stdout.splitlines()
    # one line by default (issue 41: it was seven after most runs), the model's figures under -v
    note = [line for line in short if "p50/bound under 1x" in line]
    assert note == ["p50/bound under 1x for 1 run: the bound is a model, not a floor (-v says why)"], short
    out = " ".join(cli([*args, *FAST, "--no-color", "-v"]).stdout.split())
    assert "p50/bound under 1x (allreduce/manual " in out
    assert "the bound is a model, not a floor; it assumes peak 1 FLOP/s (--peak-tflops) and link " in out


def test_unknown_flops_are_unknown_never_zero(cli, tmp_path: Path):
    program = tmp_path / "act.py"
    program.write_text("import jax.numpy as jnp\n\n\ndef f(x):\n    return jnp.tanh(x)\n")
    args = ["inspect", f"{program}:f", "--mesh", "2", "--arg", "f32[8]@x", "--no-color"]
    result = cli(args)
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    # XLA's CPU cost analysis counts no FLOPs for tanh: the one-screen view's step-time line says so
    assert (
        "step time unknown (no figures for 'cpu': shardcli calibrate measures them); "
        "FLOPs unknown and 0 B sent" in out
    )
    assert "0 FLOP" not in out
    wide = cli([*args, "--wide"])  # the full report's cost model
    assert wide.exit_code == 0, wide.output
    out = " ".join(wide.stdout.split())
    assert "FLOPs unknown;" in out and "FLOPs of the program unknown" in out and "T_math unknown" in out
    assert "0 FLOP" not in out
    assert "peak unknown (for device kind 'cpu'" in out and "peak -" not in out


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(2.141964, "2.14 s", id="seconds"),
        pytest.param(2141.964, "2,142 s", id="long"),
        pytest.param(0.0123, "12.3 ms", id="milliseconds"),
        pytest.param(380e-6, "380 us", id="microseconds"),
        pytest.param(0.99996e-3, "1.00 ms", id="rounds-up-into-the-next-unit"),
        pytest.param(8.5e-7, "850 ns", id="nanoseconds"),
        pytest.param(0.0, "0.00 ns", id="zero"),
        pytest.param(None, "unknown", id="none"),
        pytest.param(float("nan"), "unknown", id="nan"),
    ],
)
def test_durations_read_in_a_persons_units(seconds, text):
    assert format_duration(seconds) == text


# --- the lesson never hides at 80 columns ------------------------------------------------------------


def test_matmul_cases_keep_the_compilers_collectives_at_80_columns(cli):
    args = ["matmul", "--case", "allgather,allreduce,gather-a", "--mesh", "2x2", "--dims", "4,4,4", *FAST]
    out = cli([*args, "--no-color"], env={"COLUMNS": "80"}).stdout
    header = next(line for line in out.splitlines() if line.lstrip().startswith("case "))
    assert "HLO collectives" in header
    assert "all-gather x1" in out and "all-reduce x1" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_the_pipeline_timeline_folds_into_80_columns(cli):
    args = [
        "pipeline",
        "--mesh",
        "4x2",
        "--layers",
        "4",
        "--width",
        "16",
        "--batch",
        "8",
        "--microbatches",
        "4",
    ]
    out = cli([*args, "--no-color"], env={"COLUMNS": "80"}).stdout
    rows = [line for line in out.splitlines() if line.startswith("stage ") and "│" in line]
    assert len(rows) == 8  # a forward and a backward row per stage, each on one line
    assert all(len(row) <= 80 and row.endswith("│") for row in rows), rows


def test_the_mesh_folds_into_80_columns_instead_of_splitting(cli):
    out = cli(["mesh", "--mesh", "2x4", "--axes", "data,model", "--no-color"], env={"COLUMNS": "80"}).stdout
    assert "of 4" not in out  # one grid, not blocks of columns
    assert "│    data=1    │  dev 4  │  dev 5  │  dev 6  │  dev 7  │" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    wide = cli(["mesh", "--mesh", "2x4", "--axes", "data,model", "--no-color"], env={"COLUMNS": "120"}).stdout
    assert "data=1 model=3" in wide  # where it fits, every cell still names its coordinates


def test_reshard_shows_every_devices_block_before_and_after(cli):
    args = ["reshard", "--mesh", "2x2", "--axes", "x,y", "--shape", "4x4", "--from", "x,y", "--to", "y,x"]
    doc = json.loads(cli([*args, "--impl", "jit", *FAST, "-f", "json"]).stdout)
    host = np.arange(16.0).reshape(4, 4)
    (way,) = doc["impls"]
    assert way["values"]["global_values"] == host.tolist() == way["values_before"]["global_values"]
    for when in ("values_before", "values"):
        for block in way[when]["blocks"]:
            (a, b), (c, d) = block["index"]
            assert block["values"] == host[a:b, c:d].tolist()
    moved = {b["device_id"]: b["index"] for b in way["values"]["blocks"]}
    assert moved[1] == [[2, 4], [0, 2]] and moved[2] == [[0, 2], [2, 4]]  # x and y swapped places
    text = cli([*args, *FAST, "--no-color", "-q"]).stdout
    assert "each device's block, before and after (reshard)" in text


def test_collective_keeps_before_and_after_at_80_columns(cli):
    args = ["collective", "all_gather", "--mesh", "2x4", "--axes", "data,model", "--axis", "model", *FAST]
    out = cli([*args, "--no-color"], env={"COLUMNS": "80"}).stdout
    header = next(line for line in out.splitlines() if "device" in line and "#wrong" in line)
    assert "BEFORE (input block)" in header and "AFTER (output block)" in header
    assert max(len(line) for line in out.splitlines()) <= 80
