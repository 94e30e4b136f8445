"""Fuzzing the flags: random strings never give a traceback; random valid shardings match NumPy."""

from __future__ import annotations

import json
import math

import numpy as np
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
