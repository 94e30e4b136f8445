"""`shardcli run FILE.py:FN`: concrete inputs, every device's blocks, probes, and the one-device check.

Every figure is checked against NumPy computed here; the in-process runs share the eight test
devices (mesh 8, or 2x4).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from test_cli_foundation import assert_one_line_error

from shardcli.errors import ShardcliError
from shardcli.program.run import compare_to_reference, tolerance_for
from shardcli.program.run_request import RunArg, parse_run_arg
from shardcli.results.documents import check_document
from shardcli.specs.meshes import ShardingSpec, parse_mesh
from shardcli.specs.values import DTYPES

LESSONS = str(Path(__file__).resolve().parents[1] / "examples" / "lessons.py")
MESH8 = ("--mesh", "8", "--axes", "x")
X32 = ("--arg", "i32[32]@x=arange")


def _json(cli, *args: str, code: int = 0) -> dict:
    result = cli(["run", *args, "--format", "json"])
    assert result.exit_code == code, result.output
    doc = json.loads(result.stdout)
    check_document(doc)
    return doc


# --- parsing (no devices) -------------------------------------------------------------------------

MESH = parse_mesh("2x4", "data,model")


@pytest.mark.parametrize(
    ("text", "init", "shape", "entries"),
    [
        pytest.param("f32[8,4]@data=arange", "arange", (8, 4), (("data",),), id="init"),
        pytest.param("i32[4]=ones", "ones", (4,), (), id="replicated-ones"),
        pytest.param("bf16[8]@model", None, (8,), (("model",),), id="no-init"),
    ],
)
def test_parse_run_arg(text, init, shape, entries):
    parsed = parse_run_arg(text, MESH)
    assert parsed.init == init and parsed.arg.shape == shape
    assert parsed.arg.sharding == ShardingSpec(entries)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "f32[8]@data=linspace",
            "--arg 'f32[8]@data=linspace': =linspace is not valid; give one of arange, ones, zeros, random, "
            "normal or a .npy file, e.g. 'f32[32]@x=arange'",
            id="unknown-init",
        ),
        pytest.param(
            "f32[8]=nowhere.npy",
            "--arg 'f32[8]=nowhere.npy': no file nowhere.npy; give the path of a .npy file",
            id="missing-file",
        ),
        pytest.param(
            "f32[6]@model=arange",
            "--arg 'f32[6]@model': dim 0 (6) is not divisible by 4",
            id="indivisible",
        ),
    ],
)
def test_parse_run_arg_refuses(text, message):
    with pytest.raises(ShardcliError) as caught:
        parse_run_arg(text, MESH)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    ("got", "want", "compared", "wrong"),
    [
        pytest.param(np.arange(4, dtype=np.int32), np.arange(4, dtype=np.int32), True, 0, id="int-equal"),
        pytest.param(np.array([1, 2], np.int32), np.array([1, 3], np.int32), True, 1, id="int-off-by-one"),
        pytest.param(
            np.array([1.0, 2.0], np.float32), np.array([1.0, 2.0001], np.float32), True, 0, id="float-within"
        ),
        pytest.param(
            np.array([1.0, 2.0], np.float32), np.array([1.0, 2.01], np.float32), True, 1, id="float-beyond"
        ),
        pytest.param(
            np.array([1.0, np.nan], np.float32), np.array([1.0, 2.0], np.float32), True, 1, id="nan-is-wrong"
        ),
        pytest.param(
            np.array([np.nan, 2.0], np.float32),
            np.array([np.nan, 2.0], np.float32),
            True,
            0,
            id="nan-in-both",
        ),
        pytest.param(
            np.array([np.nan, 2], np.float32), np.array([np.nan, 3], np.float32), True, 1, id="nan-and-off"
        ),
        pytest.param(np.arange(8), np.array([28]), False, 0, id="shape-depends-on-mesh"),
    ],
)
def test_compare_to_reference(got, want, compared, wrong):
    check = compare_to_reference("result", got, want)
    assert (check.compared, check.wrong) == (compared, wrong)


@pytest.mark.parametrize(
    ("dtype", "exact", "rtol"),
    [
        pytest.param("int32", True, 0.0, id="int32"),
        pytest.param("bool", True, 0.0, id="bool"),
        pytest.param("float32", False, 1e-4, id="float32"),
        pytest.param("float16", False, 8 * float(np.finfo(np.float16).eps), id="float16"),
    ],
)
def test_tolerance_for(dtype, exact, rtol):
    tol = tolerance_for(np.dtype(dtype))
    assert (tol.exact, tol.rtol) == (exact, rtol)


def test_run_arg_describes_itself():
    arg = RunArg(parse_run_arg("f32[8]@data", MESH).arg, init="ones")
    assert arg.describe() == "float32[8]@data=ones"
    assert arg.arg.dtype == DTYPES["float32"]


# --- runs -----------------------------------------------------------------------------------------


def _blocks(array: dict) -> dict[int, list]:
    return {b["device_ids"][0]: b["values"] for b in array["blocks"]}


def test_probes_show_each_shards_sum_before_the_psum(cli):
    doc = _json(cli, f"{LESSONS}:sum_then_psum", *MESH8, *X32)
    (probe,) = doc["probes"]
    assert probe["name"] == "per-shard sum" and probe["manual_axes"] == ["x"]
    per_device = {b["device_ids"][0]: b["values"] for b in probe["blocks"]}
    expected = np.arange(32).reshape(8, 4).sum(axis=1)
    assert per_device == {d: int(expected[d]) for d in range(8)}
    assert doc["results"][0]["values"] == int(np.arange(32).sum()) == 496
    assert doc["checks"][0]["compared"] and doc["checks"][0]["wrong"] == 0 and doc["ok"]


def test_each_device_holds_its_block_of_sin(cli):
    doc = _json(cli, f"{LESSONS}:sin_per_shard", *MESH8, *X32)
    x, result = doc["inputs"][0], doc["results"][0]
    expected = 2 * np.sin(np.arange(32, dtype=np.float32)) + 1
    assert _blocks(x) == {d: list(range(4 * d, 4 * d + 4)) for d in range(8)}
    for d, block in _blocks(result).items():
        np.testing.assert_allclose(block, expected[4 * d : 4 * d + 4], atol=4 * 2.0**-23 * 3)
    np.testing.assert_allclose(result["values"], expected, atol=4 * 2.0**-23 * 3)
    assert doc["ok"]


def test_a_per_shard_result_is_shown_not_compared(cli):
    result = cli(["run", f"{LESSONS}:sum_per_shard", *MESH8, *X32, "--no-color"])
    assert result.exit_code == 0, result.output
    assert "[  6  22  38  54  70  86 102 118]" in result.stdout
    assert "verified" not in result.stdout
    assert "the result depends on the mesh" in result.stdout


def test_three_ways_reproduce_the_lesson(cli):
    expected = np.array([0.02138916, 0.8931118, 0.5989196, 0.9774251], np.float32)
    for fn, inputs in (
        ("layer", "layer_inputs_sharded"),
        ("layer_auto", "layer_inputs"),
        ("layer_sharded", "layer_inputs"),
    ):
        doc = _json(cli, f"{LESSONS}:{fn}", *MESH8, "--inputs", f"{LESSONS}:{inputs}")
        np.testing.assert_allclose(doc["results"][0]["values"], expected, rtol=1e-6, err_msg=fn)
        assert doc["ok"], fn


WRONG = textwrap.dedent(
    """
    import jax
    from jax.sharding import PartitionSpec as P

    def plus_index(x):
        return jax.shard_map(lambda b: b + jax.lax.axis_index("x"), in_specs=P("x"), out_specs=P("x"))(x)

    def broken(x):
        return x @ x.T.T.T.T.reshape(3)
    """
)


def test_a_result_that_differs_on_one_device_exits_1(cli, tmp_path):
    path = tmp_path / "wrong.py"
    path.write_text(WRONG)
    result = cli(["run", f"{path}:plus_index", *MESH8, "--arg", "i32[8]@x=zeros", "--no-color"])
    assert result.exit_code == 1, result.output
    assert "WRONG: 7 element(s) of result differ from the function run on one device" in result.stdout
    assert "verified" not in result.stdout


def test_values_file(cli, tmp_path):
    values = np.arange(8, dtype=np.int32)[::-1].copy()
    np.save(tmp_path / "v.npy", values)
    doc = _json(cli, f"{LESSONS}:times_two", *MESH8, "--arg", f"i32[8]@x={tmp_path / 'v.npy'}")
    assert doc["results"][0]["values"] == (values * 2).tolist()
    assert doc["inputs"][0]["filled_with"].endswith("v.npy")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ("--arg", "i32[8]@x", "--inputs", f"{LESSONS}:layer_inputs"),
            "shardcli: error: give the arguments with --arg or with --inputs, not both",
            id="arg-and-inputs",
        ),
        pytest.param(
            ("--arg", "i32[8]@x", "--init", "linspace"),
            "shardcli: error: --init 'linspace' is not supported; choose one of arange, ones, zeros, random, "
            "normal",
            id="bad-init",
        ),
    ],
)
def test_bad_input_is_one_line(cli, args, message):
    result = cli(["run", f"{LESSONS}:times_two", *MESH8, *args])
    assert assert_one_line_error(result) == message


def test_an_error_in_the_users_function_shows_their_frames(cli, tmp_path):
    path = tmp_path / "wrong.py"
    path.write_text(WRONG)
    result = cli(["run", f"{path}:broken", *MESH8, "--arg", "f32[4,4]"])
    assert result.exit_code == 2, result.output
    assert (
        "Traceback (most recent call last; your frames and the library frame it failed in)" in result.stderr
    )
    import shardcli

    own = str(Path(shardcli.__file__).parent)  # no frame of shardcli's own
    assert "wrong.py" in result.stderr and own not in result.stderr


# --- the user's op names (psum, pmean), not JAX's primitives ----------------------------------------


def _user_ops(body) -> set[str | None]:
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType
    from jax.sharding import PartitionSpec as P

    from shardcli.analysis.program import analyze_compiled

    mesh = jax.make_mesh((4,), ("x",), axis_types=(AxisType.Auto,), devices=jax.devices()[:4])
    program = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P()))
    compiled = program.lower(jnp.zeros(8)).compile()
    return {c.op for c in analyze_compiled(compiled, mesh).collectives}


def _psum(b):
    return jax_lax().psum(b.sum(), "x")


def _pmean(b):
    return jax_lax().pmean(b.sum(), "x")


def _pmax(b):
    return jax_lax().pmax(b.sum(), "x")


def jax_lax():
    import jax

    return jax.lax


@pytest.mark.parametrize(
    ("body", "op"),
    [
        pytest.param(_psum, "psum", id="psum"),
        pytest.param(_pmean, "pmean", id="pmean"),
        pytest.param(_pmax, "pmax", id="pmax"),
    ],
)
def test_collectives_carry_the_users_op_name(body, op):
    assert _user_ops(body) == {op}


MORE = textwrap.dedent(
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import shardcli

    def sin_twice(x):
        return shardcli.probe(jnp.sin(x), "sin") * 2

    def add(x, y):
        return x + y

    def abstract(mesh):
        return (
            jax.ShapeDtypeStruct((8,), jnp.int32, sharding=NamedSharding(mesh, P("x"))),
            jax.ShapeDtypeStruct((8,), jnp.int32),
        )
    """
)


def test_a_probe_under_plain_jit_sees_the_global_value(cli, tmp_path):
    path = tmp_path / "more.py"
    path.write_text(MORE)
    result = cli(["run", f"{path}:sin_twice", *MESH8, "--arg", "f32[16]@x=arange", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""  # XLA's note on gathering the probed value stays off the screen
    doc = json.loads(result.stdout)
    (probe,) = doc["probes"]
    assert probe["manual_axes"] == [] and len(probe["blocks"]) == 1
    expected = np.sin(np.arange(16, dtype=np.float32))
    np.testing.assert_allclose(probe["blocks"][0]["values"], expected, atol=4 * 2.0**-23)
    np.testing.assert_allclose(doc["results"][0]["values"], 2 * expected, atol=8 * 2.0**-23)


def test_abstract_inputs_are_filled_with_init(cli, tmp_path):
    path = tmp_path / "more.py"
    path.write_text(MORE)
    doc = _json(cli, f"{path}:add", *MESH8, "--inputs", f"{path}:abstract", "--init", "ones")
    x, y = doc["inputs"]
    assert x["spec"] == "x" and len(x["blocks"]) == 8 and y["spec"] == "P() (replicated)"
    assert x["filled_with"] == y["filled_with"] == "ones"
    assert doc["results"][0]["values"] == [2] * 8 and doc["ok"]


@pytest.mark.parametrize("mode", ["auto", "explicit"])
def test_the_one_device_run_keeps_the_specs_in_every_mode(cli, mode):
    """Under explicit axes a shard_map's in_specs must match its inputs' specs: the one-device run
    gets the same PartitionSpecs on its mesh of size-1 axes."""
    doc = _json(cli, f"{LESSONS}:sum_then_psum", *MESH8, *X32, "--mode", mode)
    assert doc["mesh"]["mode"] == mode
    assert doc["results"][0]["values"] == 496 and doc["checks"][0]["compared"] and doc["ok"]


PYTREE = textwrap.dedent(
    """
    import jax
    from jax.sharding import PartitionSpec as P

    import shardcli

    def stats(x):
        def body(block):
            shardcli.probe({"max": block.max(), "min": block.min()}, "block")
            return jax.lax.psum(block.sum(), "x")

        return jax.shard_map(body, in_specs=P("x"), out_specs=P())(x)
    """
)


def test_a_probed_pytree_is_shown_leaf_by_leaf(cli, tmp_path):
    path = tmp_path / "tree.py"
    path.write_text(PYTREE)
    doc = _json(cli, f"{path}:stats", "--mesh", "4", "--axes", "x", "--arg", "i32[8]@x=arange")
    probes = {p["name"]: [b["values"] for b in p["blocks"]] for p in doc["probes"]}
    assert probes == {"block['max']": [1, 3, 5, 7], "block['min']": [0, 2, 4, 6]}


@pytest.mark.parametrize(
    ("flag", "shown"),
    [
        pytest.param((), True, id="small-shown"),
        pytest.param(("--no-show-values",), False, id="no-show-values"),
    ],
)
def test_show_values(cli, flag, shown):
    doc = _json(cli, f"{LESSONS}:sum_then_psum", *MESH8, *X32, *flag)
    x = doc["inputs"][0]
    assert (x["values"] is not None) == shown
    assert all((b["values"] is not None) == shown for b in x["blocks"])
    assert doc["ok"]  # the check runs either way


def test_large_arrays_hide_their_values_unless_asked(cli):
    doc = _json(cli, f"{LESSONS}:times_two", *MESH8, "--arg", "i32[512]@x")
    assert doc["inputs"][0]["values"] is None and doc["results"][0]["values"] is None
    doc = _json(cli, f"{LESSONS}:times_two", *MESH8, "--arg", "i32[512]@x", "--show-values")
    assert doc["results"][0]["values"] == (2 * np.arange(512)).tolist()


# --- the user's output is theirs (issue 54 item 2) ---------------------------------------------------

USER_OUTPUT = str(Path(__file__).resolve().parent / "programs" / "user_output.py")
# Each function of tests/programs/user_output.py that prints, and the mark it prints.
PRINTS = {
    "python_print": "MARK-print",
    "debug_print": "MARK-debug",
    "callback_print": "MARK-callback",
    "io_callback_print": "MARK-io-callback",
}
OUTPUT_FORMATS = {"json": ["--format", "json"], "csv": ["--format", "csv"], "default": []}
OUTPUT_CASES = [
    pytest.param(fn, fmt, id=f"{fn}-{fmt}")
    for fn in [*PRINTS, "raising_callback", "exiting_callback"]
    for fmt in OUTPUT_FORMATS
]


def line_of(path: str, text: str) -> int:
    """The line number of the first line of PATH holding TEXT."""
    return next(n for n, line in enumerate(Path(path).read_text().splitlines(), 1) if text in line)


@pytest.fixture
def user_output(tmp_path) -> str:
    """A fresh copy of tests/programs/user_output.py: imported and traced anew by this test's run (an
    in-process run of the same file would reuse the last test's trace, and print nothing at it)."""
    path = tmp_path / "user_output.py"
    path.write_text(Path(USER_OUTPUT).read_text())
    return str(path)


def check_the_users_output(
    result, path: str, fn: str, fmt: str, formats: tuple[str, ...] = ("table", "json")
) -> None:
    """What a run of PATH:FN (a copy of tests/programs/user_output.py) prints stays off stdout (a
    JSON document there is the document alone); a callback that raises is their error with their
    frames, one that calls sys.exit is one line; both exit 2, never an internal error."""
    stderr = result.stderr
    if fmt == "csv":  # refused before the file is imported
        line = assert_one_line_error(result)
        assert line.endswith(f"--format 'csv' is not valid; choose one of {', '.join(formats)}"), line
        assert "MARK" not in result.output
        return
    assert "MARK" not in result.stdout, result.stdout[-2000:]
    assert "internal error" not in stderr and "Exception ignored" not in stderr, stderr[-3000:]
    if fn in PRINTS:
        assert result.exit_code == 0, result.output[-3000:]
        assert PRINTS[fn] in stderr
        if fmt == "json":
            json.loads(result.stdout)
        return
    assert result.exit_code == 2, result.output[-3000:]
    assert result.stdout == ""
    if fn == "raising_callback":
        lines = stderr.splitlines()
        assert lines[0] == "Traceback (most recent call last; your frames only):", stderr
        assert f'  File "{path}", line {line_of(path, "raise ValueError")}, in _boom' in lines
        assert lines[-1].startswith(
            f"shardcli: error: {path}:raising_callback raised while it ran (in its jax.debug.callback): "
            "ValueError: MARK-boom "
        ), lines[-1]
        assert "jax/_src" not in stderr and len(lines) == 5, stderr
    else:
        assert stderr.splitlines() == [
            f"shardcli: error: {path}:{line_of(path, 'sys.exit(5)')} calls sys.exit(5) in a "
            "jax.debug.callback while shardcli was running your code: a callback cannot end the run or set "
            "its exit status; raise an exception in it instead"
        ], stderr


@pytest.mark.slow
@pytest.mark.parametrize(("fn", "fmt"), OUTPUT_CASES)
def test_what_the_program_prints_is_the_users(cli, user_output, fn, fmt):
    argv = ["run", f"{user_output}:{fn}", "--mesh", "2", "--axes", "x", "--arg", "f32[8]@x=arange"]
    check_the_users_output(cli([*argv, *OUTPUT_FORMATS[fmt]]), user_output, fn, fmt)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "inspect"])
@pytest.mark.parametrize("fmt", ["json", "default"])
def test_what_the_program_writes_to_descriptor_1_stays_off_the_document(shardcli_subprocess, command, fmt):
    """os.write(1, ...) while tracing and in a callback: under JSON on stderr, stdout the document
    alone; in a table run it reaches the terminal (stdout), the report whole."""
    argv = [command, f"{USER_OUTPUT}:os_write", "--mesh", "2", "--axes", "x", "--arg", "f32[8]@x=arange"]
    if command == "inspect":
        argv = [*argv[:-1], "f32[8]@x", "--run", "--iters", "1", "--warmup", "0"]
    done = shardcli_subprocess(*argv, *OUTPUT_FORMATS[fmt], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    if fmt == "json":
        assert json.loads(done.stdout)["command"] == command
        assert "MARK-fd1\n" in done.stderr and "MARK-fd1-callback\n" in done.stderr, done.stderr[-3000:]
    else:
        assert "MARK-fd1\n" in done.stdout + done.stderr and "MARK-fd1-callback" in done.stdout + done.stderr
        assert "\nmesh " in done.stdout and ("p50" in done.stdout if command == "inspect" else True)
