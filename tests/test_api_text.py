"""The Python API's objects print as their text report: `print`, `str`, a short `repr`, Jupyter."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import shardcli


@pytest.fixture(scope="module")
def report():
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)

    def step(x, w):
        return jnp.tanh(x @ w).sum()

    x = jax.ShapeDtypeStruct((8, 16), jnp.float32, sharding=NamedSharding(mesh, P("data", "model")))
    w = jax.ShapeDtypeStruct((16, 4), jnp.float32, sharding=NamedSharding(mesh, P("model", None)))
    return shardcli.inspect(step, x, w, mesh=mesh)


def test_print_shows_the_text_report(report, capsys):
    print(report)
    printed = capsys.readouterr().out
    assert printed == str(report) + "\n"
    # the report as `shardcli inspect` prints it: the arguments, the collectives, memory per device
    for text in ("float32[8,16]", "data,model", "all-reduce", "per device"):
        assert text in printed, printed
    assert "\x1b[" not in printed and "InspectResult(" not in printed
    assert max(len(line) for line in printed.splitlines()) <= 100


def test_repr_is_one_short_line(report):
    text = repr(report)
    assert text.startswith("<InspectReport step: 2 argument(s), ")
    assert "\n" not in text and len(text) < 120


def test_jupyter_renders_the_report(report):
    bundle = report._repr_mimebundle_(include=None, exclude=None)
    assert "all-reduce" in bundle["text/plain"] and "float32[8,16]" in bundle["text/plain"]
    assert "all-reduce" in bundle["text/html"] and "<pre" in bundle["text/html"]


def test_a_picture_prints_as_its_tiles():
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    x = jax.device_put(jnp.zeros((8, 8)), NamedSharding(mesh, P("data", "model")))
    picture = shardcli.picture(x, "x")
    assert repr(picture) == "<ShardingPicture x: spec data,model, 1 cop(ies) of each tile>"
    assert "dev 0" in str(picture) and "[0:4, 0:2]" in str(picture)
