"""Fuzzing the flags: random strings never give a traceback; random valid shardings match NumPy."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from shardcli.errors import ShardcliError
from shardcli.specs import parse_shape

NEAR_MESH = [
    "2x4",
    "8",
    "2x2x2",
    "4",
    "1",
    "2x",
    "x4",
    "2xx4",
    "0",
    "-1",
    "1.5",
    "2x0",
    " 2 x 4 ",
    "9",
    "4x4",
    "",
]
NEAR_AXES = ["data,model", "x,y", "x", "x,y,z", "a,,b", "data,data", "None,y", "_", "1a,b", "x,y,z,w,v", ""]
NEAR_SHAPE = ["8x8", "16", "4x4x8", "8x6", "0", "-1", "8x", "x8", "8xjunk", "1", "2x2x2x2", ""]
NEAR_SPEC = [
    "data,model",
    "x,y",
    "x",
    "None,y",
    "_,_",
    "data+model",
    "x+y",
    "data+data",
    "x,,y",
    "x+",
    ",",
    "None",
    "z,y,x",
    "x,y,z,w",
    "",
]

# Keep arrays small: a random digit string could otherwise ask for gigabytes that do fit.
MAX_ELEMENTS = 1 << 16


def flag(near: list[str]) -> st.SearchStrategy[str]:
    near_valid = st.sampled_from(near)
    return st.one_of(near_valid, near_valid, st.text(max_size=12))  # two parts near-valid, one random


def optional_flag(near: list[str]) -> st.SearchStrategy[str | None]:
    """None leaves the flag out (default axis names / replicated)."""
    return st.one_of(st.none(), flag(near))


def small_enough(shape_text: str) -> bool:
    try:
        return math.prod(parse_shape(shape_text)) <= MAX_ELEMENTS
    except ShardcliError:
        return True


@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    mesh=flag(NEAR_MESH), axes=optional_flag(NEAR_AXES), shape=flag(NEAR_SHAPE), spec=optional_flag(NEAR_SPEC)
)
def test_random_flags_exit_0_or_2_without_traceback(cli, mesh, axes, shape, spec):
    assume(small_enough(shape))
    args = ["shard", "--mesh", mesh, "--shape", shape, "--quiet"]
    if axes is not None:
        args += ["--axes", axes]
    if spec is not None:
        args += ["--spec", spec]
    result = cli(args)
    assert "Traceback" not in result.output, (args, result.output)
    assert result.exit_code in (0, 2), (args, result.exit_code, result.output)
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("shardcli"), (args, result.stderr)
    else:
        assert "verified: every device holds its NumPy slice exactly" in result.stdout
    event(f"exit {result.exit_code}")


@st.composite
def valid_shard_args(draw) -> tuple[list[str], tuple[int, ...], int]:
    """A mesh of at most 8 devices, a spec using some of its axes, and a shape that fits."""
    mesh_shape = draw(
        st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=3).filter(lambda s: math.prod(s) <= 8)
    )
    axes = ["x", "y", "z"][: len(mesh_shape)]
    sizes = dict(zip(axes, mesh_shape, strict=True))
    rank = draw(st.integers(1, 3))
    unused = draw(st.permutations(axes))
    entries, shape = [], []
    for _ in range(rank):
        take = draw(st.integers(0, min(2, len(unused))))
        entry, unused = unused[:take], unused[take:]
        entries.append("+".join(entry) if entry else draw(st.sampled_from(["None", "_"])))
        shape.append(math.prod(sizes[a] for a in entry) * draw(st.integers(1, 3)))
    spec_len = draw(st.integers(0, rank))
    args = [
        "shard",
        "--mesh",
        "x".join(map(str, mesh_shape)),
        "--shape",
        "x".join(map(str, shape)),
        "--spec",
        ",".join(entries[:spec_len]),
        "--format",
        "json",
    ]
    return args, tuple(shape), math.prod(mesh_shape)


@settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=valid_shard_args())
def test_valid_random_shardings_match_numpy(cli, case):
    from test_cli_foundation import check_shard_doc

    args, shape, devices = case
    result = cli(args)
    assert result.exit_code == 0, (args, result.output)
    doc = json.loads(result.stdout)
    check_shard_doc(doc, shape, np.arange(math.prod(shape), dtype=np.float32).reshape(shape))
    assert len(doc["shards"]) == devices


# --- damaged files: every file shardcli reads ------------------------------------------------------

FILE_SETTINGS = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")
_VALUE = re.compile(r'(?<=: )("[^"]*"|-?[\d.eE+-]+|true|false|null|\[\]|\{\})')
ODD_VALUES = ['"text"', "[]", "{}", "null", "true", "-1", "0", "1e308", "[1, [2]]", '{"a": 1}']


@st.composite
def damaged(draw, good: str) -> bytes:
    """`good` (a JSON document) damaged one way: the ways files arrive broken or hostile."""
    how = draw(
        st.sampled_from(["truncated", "nested", "huge number", "nan", "wrong type", "binary", "flipped"])
    )
    event(f"damage: {how}")
    if how == "truncated":
        return good.encode()[: draw(st.integers(0, len(good) - 1))]
    if how == "nested":
        depth = draw(st.sampled_from([10, 1_000, 100_000]))
        opener = draw(st.sampled_from(["[", '{"a":']))
        inner = opener * depth + ("]" if opener == "[" else "}") * depth
        return (good.replace(": ", ": " + inner + ", ", 1) if draw(st.booleans()) else inner).encode()
    spans = [m.span() for m in (_NUMBER if how in ("huge number", "nan") else _VALUE).finditer(good)]
    if how in ("huge number", "nan", "wrong type") and spans:
        start, end = draw(st.sampled_from(spans))
        new = {
            "huge number": draw(st.sampled_from(["9" * 5000, "1e999", "-1e999", "1" + "0" * 400])),
            "nan": draw(st.sampled_from(["NaN", "Infinity", "-Infinity"])),
            "wrong type": draw(st.sampled_from(ODD_VALUES)),
        }[how]
        return (good[:start] + new + good[end:]).encode()
    if how == "binary":
        return draw(st.binary(min_size=1, max_size=64)) + good.encode()[: draw(st.integers(0, 200))]
    data = bytearray(good.encode())
    for _ in range(draw(st.integers(1, 4))):
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data)


def assert_bad_input_or_fine(result) -> None:
    assert "Traceback" not in result.output, result.output
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.output)
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("shardcli"), result.stderr


@pytest.fixture(scope="module")
def compare_inputs(cli, tmp_path_factory) -> dict[str, Path]:
    """One real collective and one real matmul document, made once."""
    folder = tmp_path_factory.mktemp("compare-inputs")
    runs = {
        "collective": ["collective", "psum", "--mesh", "4", "--sizes", "1K", "--iters", "2", "--warmup", "1"],
        "matmul": ["matmul", "--case", "allreduce", "--mesh", "2x4", "--axes", "data,model", "--iters", "2"],
    }
    paths = {}
    for name, args in runs.items():
        result = cli([*args, "--format", "json"])
        assert result.exit_code == 0, result.output
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(result.stdout)
    return paths


@FILE_SETTINGS
@given(data=st.data(), which=st.sampled_from(["collective", "matmul"]), side=st.sampled_from(["base", "new"]))
def test_a_damaged_compare_input_is_bad_input_never_a_crash(cli, compare_inputs, tmp_path, data, which, side):
    good = compare_inputs[which]
    bad = tmp_path / "damaged.json"
    bad.write_bytes(data.draw(damaged(good.read_text())))
    files = [str(good), str(bad)] if side == "new" else [str(bad), str(good)]
    assert_bad_input_or_fine(cli(["compare", *files]))


def _checkpoint_metadata() -> str:
    from shardcli.model_spec import LOGICAL_AXES, SavedModel
    from shardcli.specs import MeshSpec

    saved = SavedModel(
        depth=32,
        batch=8,
        seed=0,
        steps=3,
        learning_rate=0.01,
        mesh=MeshSpec((2, 4), ("data", "model")),
        rules=tuple((axis, None) for axis in LOGICAL_AXES),
        digests={"0.dot1.kernel": "0123abcd"},
        final_loss=1.5,
    )
    return json.dumps(saved.to_json(), indent=2)


@FILE_SETTINGS
@given(data=st.data())
def test_damaged_checkpoint_metadata_is_bad_input_never_a_crash(tmp_path_factory, data):
    from shardcli.model_spec import METADATA_FILE, STATE_DIR, RestoreRequest, validate_restore
    from shardcli.specs import MeshSpec

    folder = tmp_path_factory.mktemp("checkpoint")
    (folder / STATE_DIR).mkdir()
    (folder / METADATA_FILE).write_bytes(data.draw(damaged(_checkpoint_metadata())))
    try:
        validate_restore(RestoreRequest(folder=str(folder), mesh=MeshSpec((2, 4), ("data", "model"))))
    except ShardcliError as error:
        assert "\n" not in str(error) and str(folder) in str(error), str(error)
        event("refused")


@FILE_SETTINGS
@given(data=st.data())
def test_a_damaged_copy_bandwidth_cache_is_measured_again(tmp_path_factory, data):
    from shardcli import roofline

    folder = tmp_path_factory.mktemp("copy-cache")
    measured = roofline.CopyBandwidth(bytes_per_s=2e10, threads=2, nbytes=64 << 20, repeats=10)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(roofline, "measure_copy_bandwidth", lambda **kw: measured)
        patch.setattr(roofline, "measure_streaming_copy_bandwidth", lambda **kw: None)
        roofline._host_copy_bandwidth.cache_clear()
        roofline.host_copy_bandwidth(str(folder))
        cache = folder / roofline.COPY_CACHE_FILE
        cache.write_bytes(data.draw(damaged(cache.read_text())))
        roofline._host_copy_bandwidth.cache_clear()
        figure = roofline.host_copy_bandwidth(str(folder))
        roofline._host_copy_bandwidth.cache_clear()
    assert math.isfinite(figure.bytes_per_s) and figure.bytes_per_s > 0
    event("read from the cache" if figure.cached else "measured again")


NEAR_SUBSCRIPTS = [
    "ij,jk->ik",
    "bsd,df->bsf",
    "ij,jk",
    "ij->ji",
    "ii->i",
    "...ij,...jk",
    "ij,jk->il",
    "i1",
    "ij,,jk",
    "->",
    "ij->jj",
    "a,b,c,d,e",
    "",
]


def _one_line_or_ok(result, args: list[str]) -> None:
    assert "Traceback" not in result.output, (args, result.output)
    assert result.exit_code in (0, 2), (args, result.exit_code, result.output)
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("shardcli"), (args, result.stderr)
    event(f"exit {result.exit_code}")


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    subscripts=flag(NEAR_SUBSCRIPTS),
    shapes=st.lists(flag(NEAR_SHAPE), max_size=3),
    ins=st.lists(flag(NEAR_SPEC), max_size=3),
    out=optional_flag(NEAR_SPEC),
    mesh=flag(NEAR_MESH),
    axes=optional_flag(NEAR_AXES),
)
def test_random_einsum_flags_exit_0_or_2_without_traceback(cli, subscripts, shapes, ins, out, mesh, axes):
    assume(all(small_enough(s) for s in shapes))
    args = ["einsum", subscripts, "--mesh", mesh, "--quiet", "--warmup", "0", "--iters", "1"]
    args += [a for s in shapes for a in ("--shape", s)] + [a for s in ins for a in ("--in", s)]
    args += ["--axes", axes] if axes is not None else []
    args += ["--out", out] if out is not None else []
    _one_line_or_ok(cli(args), args)


@settings(
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    shape=flag(NEAR_SHAPE),
    source=optional_flag(NEAR_SPEC),
    target=optional_flag(NEAR_SPEC),
    mesh=flag(NEAR_MESH),
    axes=optional_flag(NEAR_AXES),
)
def test_random_reshard_flags_exit_0_or_2_without_traceback(cli, shape, source, target, mesh, axes):
    assume(small_enough(shape))
    args = ["reshard", "--shape", shape, "--mesh", mesh, "--quiet", "--warmup", "0", "--iters", "1"]
    args += ["--axes", axes] if axes is not None else []
    args += ["--from", source] if source is not None else []
    args += ["--to", target] if target is not None else []
    result = cli(args)
    _one_line_or_ok(result, args)
    if result.exit_code == 0:
        assert "verified: every device's new block matches NumPy exactly" in result.stdout


@st.composite
def valid_einsum_args(draw) -> list[str]:
    """A random contraction of two operands over letters a-e, each dim sharded or not, that fits."""
    axes = {"x": 2, "y": 4}
    letters = "abcde"
    sizes = {c: draw(st.sampled_from([4, 8])) for c in letters}
    lhs = "".join(draw(st.permutations(letters))[: draw(st.integers(1, 3))])
    rhs = "".join(draw(st.permutations(letters))[: draw(st.integers(1, 3))])
    seen = sorted(set(lhs + rhs))
    out = "".join(c for c in draw(st.permutations(seen)) if draw(st.booleans()))
    args = ["einsum", f"{lhs},{rhs}->{out}", "--mesh", "2x4", "--axes", "x,y", "--format", "json"]
    for operand in (lhs, rhs):
        free = list(axes)
        entries = []
        for c in operand:
            pick = draw(st.sampled_from([None, *free]))
            if pick is not None and sizes[c] % axes[pick] == 0:
                free.remove(pick)
                entries.append(pick)
            else:
                entries.append("None")
        args += ["--shape", "x".join(str(sizes[c]) for c in operand), "--in", ",".join(entries)]
    return args


@settings(
    max_examples=15,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(args=valid_einsum_args())
def test_valid_random_einsums_match_numpy_or_are_refused_as_lessons(cli, args):
    result = cli([*args, "--warmup", "0", "--iters", "1"])
    assert result.exit_code == 0, (args, result.output)
    doc = json.loads(result.stdout)
    auto = doc["sizes"][0]["impls"][0]
    assert auto["impl"] == "auto" and auto["status"] == "ok" and auto["wrong"] == 0, (args, auto)
    explicit = doc["sizes"][0]["impls"][1]
    assert explicit["status"] == "ok" or explicit["message"].split(":")[0].endswith("Error"), explicit
