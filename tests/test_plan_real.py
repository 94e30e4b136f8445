"""`shardcli plan FILE.py:FN` of programs as they are written: logical names shorter than the array
(Flax pads them with None), and a step jitted with its own in_shardings (MaxText's, flax lm1b's)."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import jax
import pytest

from shardcli.results import documents

PROGRAMS = Path(__file__).parent / "programs"
PADDED = str(PROGRAMS / "plan_padded_names.py")
OWN = str(PROGRAMS / "plan_own_shardings.py")
V5E = ["--target", "tpu-v5e:2x2"]


def _plan(cli, program, args, code=0):
    """`plan FILE.py:train_step --inputs FILE.py:inputs ARGS --format json`, checked against the schema."""
    out = cli(
        ["plan", f"{program}:train_step", "--inputs", f"{program}:inputs", *args, "--format", "json"],
        env={"SHARDCLI_CACHE_DIR": os.environ["SHARDCLI_CACHE_DIR"]},
    )
    assert out.exit_code == code, out.output
    doc = json.loads(out.stdout)
    assert documents.document_problems(doc, "plan-program") == []
    return doc


def _row(doc, layout):
    return next(c for c in doc["candidates"] if c["layout"] == layout)


def _reproduced(cli, doc):
    """The winner's inspect command, run: its memory per chip is the plan's figures for the winner."""
    words = shlex.split(doc["winner"]["inspect_command"])
    assert words[:2] == ["shardcli", "inspect"]
    out = cli([*words[1:], "--format", "json"])
    assert out.exit_code == 0, out.output
    memory = json.loads(out.stdout)["program"]["memory"]
    compiled = _row(doc, doc["winner"]["layout"])["compiled"]
    assert (memory["argument_bytes"], memory["temp_bytes"], memory["total_bytes"]) == (
        compiled["argument_bytes"],
        compiled["temp_bytes"],
        compiled["needed_bytes"],
    )
    return words


# --- names shorter than the array: padded with None at the end, as Flax pads them ------------------


@pytest.mark.parametrize(
    ("names", "shape", "want"),
    [
        pytest.param(("embed", "kv"), (256, 4, 64), ("embed", "kv", None), id="lm1b-key-kernel"),
        pytest.param(("embed",), (8, 4), ("embed", None), id="one-name"),
        pytest.param(("embed", "mlp"), (8, 4), ("embed", "mlp"), id="one-per-dim"),
    ],
)
def test_a_box_with_fewer_names_than_dims_is_padded_as_flax_pads_it(names, shape, want):
    """The names plan reads equal Flax's own partition spec of the box, dim by dim."""
    nn = pytest.importorskip("flax.linen")
    from shardcli.program.logical_axes import named_leaves

    box = nn.LogicallyPartitioned(jax.ShapeDtypeStruct(shape, jax.numpy.float32), names)
    ((_, _, got),) = named_leaves(lambda w: w, (box,), {})
    assert got == want
    flax_spec = tuple(box.get_partition_spec())
    assert got == flax_spec + (None,) * (len(shape) - len(flax_spec))


def test_a_box_with_more_names_than_dims_is_one_line(cli, tmp_path):
    pytest.importorskip("flax")
    path = tmp_path / "long.py"
    path.write_text(
        "import jax\nfrom flax import linen as nn\n\n"
        "def step(w):\n    return w\n\n"
        "def inputs():\n"
        "    return (nn.Partitioned(jax.ShapeDtypeStruct((8, 8), 'float32'), ('embed', 'mlp', 'kv')),)\n"
    )
    out = cli(["plan", f"{path}:step", "--inputs", f"{path}:inputs", *V5E])
    assert out.exit_code == 2, out.output
    assert "w has 2 dimension(s) (8, 8) but 3 logical axis name(s) ('embed', 'mlp', 'kv')" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


@pytest.mark.slow  # compiles whole programs
def test_a_linen_program_with_padded_names_is_laid_out(cli, plan_cache):
    """lm1b's (embed, heads, head_dim) kernel named ('embed', 'kv'): the last dim stays whole on every
    layout; the winner's inspect command compiles the same program."""
    pytest.importorskip("libtpu")
    pytest.importorskip("flax")
    doc = _plan(cli, PADDED, [*V5E, "-n", "1", "--rules", "embed=fsdp,kv=tensor,batch=data+fsdp"])
    assert (doc["config"]["named_leaves"], doc["config"]["leaves"]) == (3, 3)
    for c in doc["candidates"]:
        fsdp, tensor, data = (c["mesh"].get(a, 1) for a in ("fsdp", "tensor", "data"))
        # query (256, 4, 64) over embed=fsdp, kv=tensor; out (4, 64, 256) over kv=tensor, -, embed=fsdp;
        # the batch (64, 256) over data and fsdp: f32 throughout
        kernels = 2 * 256 * 4 * 64 * 4 // (fsdp * tensor)
        assert c["argument_bytes"] == kernels + 64 * 256 * 4 // (data * fsdp), c["layout"]
    _reproduced(cli, doc)


# --- a step jitted with its own in_shardings: laid out by its own rules, per mesh -------------------


@pytest.mark.slow  # compiles whole programs
def test_a_step_with_its_own_shardings_is_laid_out_by_its_inputs_per_mesh(cli, plan_cache):
    """MaxText's pattern: inputs(mesh, rules=...) jits the step with in_shardings from its logical
    rules. Each layout is its inputs called on a mesh naming data, fsdp and tensor; plan's rule sets
    are handed over through `rules` too, once per layout they change; the winner (the program's own
    rules) is reproduced by its inspect command."""
    pytest.importorskip("libtpu")
    pytest.importorskip("flax")
    doc = _plan(cli, OWN, [*V5E, "-n", "2"])
    layouts = [c["layout"] for c in doc["candidates"]]
    assert len(layouts) == len(set(layouts))
    # on a mesh without tensor, plan's fsdp-tp (batch over data and fsdp) lays out what the program's
    # own rules (batch over data, fsdp and tensor) do: compiled once; with a tensor axis they differ
    assert "fsdp4 own" in layouts and "fsdp4 fsdp-tp" not in layouts
    assert {"tp4 own", "tp4 fsdp-tp", "fsdp2 tp2 own", "fsdp2 tp2 fsdp-tp"} <= set(layouts)
    for c in doc["candidates"]:
        fsdp, tensor, data = (c["mesh"].get(a, 1) for a in ("fsdp", "tensor", "data"))
        batch_split = data * fsdp * (tensor if c["rule_set"] == "own" else 1)
        weights = 2 * 512 * 2048 * 4 // (fsdp * tensor)
        assert c["argument_bytes"] == weights + 64 * 512 * 4 // batch_split, c["layout"]
    compiled = [c for c in doc["candidates"] if c["compiled"] is not None]
    assert [c["rule_set"] for c in compiled] == ["own", "own"]  # the fewest bytes per chip
    words = _reproduced(cli, doc)
    mesh = _row(doc, doc["winner"]["layout"])["mesh"]
    sizes = "x".join(str(mesh.get(a, 1)) for a in ("data", "fsdp", "tensor"))
    assert words[-4:] == ["--mesh", sizes, "--axes", "data,fsdp,tensor"]  # its own rules: no --rules


@pytest.mark.slow  # compiles whole programs
def test_a_rule_set_handed_to_the_program_is_what_it_compiles(cli, plan_cache):
    """A row of plan's rule set is the program called with them (its own rules after, for the names
    they do not map), compiled by hand: the same memory per chip."""
    pytest.importorskip("libtpu")
    pytest.importorskip("flax")
    import importlib.util

    from jax.experimental import topologies

    from shardcli.analysis.target import quiet_native_logs
    from shardcli.program.logical_axes import flax_rules
    from shardcli.specs.decoder import parse_rules

    doc = _plan(cli, OWN, [*V5E, "-n", "1", "--rules", "embed=fsdp,mlp=tensor,batch=data+fsdp"])
    row = next(c for c in doc["candidates"] if c["compiled"] is not None)
    assert row["rule_set"] == "--rules"
    spec = importlib.util.spec_from_file_location("plan_own_by_hand", OWN)
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    with quiet_native_logs():
        topology = topologies.get_topology_desc(topology_name="v5e:2x2", platform="tpu")
    sizes = tuple(row["mesh"].get(a, 1) for a in ("data", "fsdp", "tensor"))
    mesh = topologies.make_mesh(topology, sizes, ("data", "fsdp", "tensor"))
    rules = flax_rules(parse_rules(row["rules"]))
    step, args = program.inputs(mesh, rules=rules)
    memory = step.lower(*args).compile().memory_analysis()
    assert row["compiled"]["argument_bytes"] == memory.argument_size_in_bytes == row["argument_bytes"]
    assert row["compiled"]["temp_bytes"] == memory.temp_size_in_bytes
    # the winner's inspect command hands the same rules to the program: the same figures
    words = _reproduced(cli, doc)
    assert "--rules" in words


FIXED = """
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

MESH = jax.make_mesh((4,), ("batch",))  # the program's own mesh, built at import


def step(w, x):
    return x @ w


STEP = jax.jit(step, in_shardings=(NamedSharding(MESH, P()), NamedSharding(MESH, P("batch"))))


def fixed(mesh):
    return STEP, (jax.ShapeDtypeStruct((8, 8), jnp.float32), jax.ShapeDtypeStruct((8, 8), jnp.float32))


def unreachable(mesh):
    shard = NamedSharding(mesh, P("fsdp"))
    return jax.jit(step, in_shardings=(shard, shard)), (
        jax.ShapeDtypeStruct((8, 8), jnp.float32),
        jax.ShapeDtypeStruct((8, 8), jnp.float32),
    )
"""


@pytest.mark.parametrize(
    ("inputs", "args", "message"),
    [
        pytest.param(
            "fixed",
            [],
            [
                "plan {path}:step: argument w carries its own sharding, on a mesh no layout can change: "
                "the jit's in_shardings give it NamedSharding(mesh=Mesh('batch': 4",  # JAX's repr, whole
                # the first mesh plan hands over is its 4 chips in a row, as the program's own: the
                # next one is not
                "not on the mesh plan hands --inputs {path}:fixed (1x2x2 (data, fsdp, tensor)); build the "
                "jit inside inputs(mesh) from that mesh",
            ],
            id="jit-on-its-own-mesh",
        ),
        pytest.param(
            "unreachable",
            ["--rules", "embed=fsdp"],
            [
                "--rules embed=fsdp: --inputs {path}:unreachable lays the arguments out by rules plan cannot "
                "reach; give it a rules= keyword (def inputs(mesh, rules=RULES)) or define "
                "LOGICAL_AXIS_RULES in its file"
            ],
            id="rules-unreachable",
        ),
    ],
)
def test_a_layout_that_cannot_move_is_one_line(cli, tmp_path, inputs, args, message):
    pytest.importorskip("libtpu")
    path = tmp_path / "fixed.py"
    path.write_text(FIXED)
    out = cli(["plan", f"{path}:step", "--inputs", f"{path}:{inputs}", *V5E, *args])
    assert out.exit_code == 2, out.output
    for part in message:
        assert part.format(path=path) in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "Traceback" not in out.output


REFUSES = """
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P


def step(w, x):
    return x @ w


def inputs(mesh):
    if mesh.shape.get("tensor", 1) > 1:
        raise ValueError("4 heads cannot split over tensor")
    w = NamedSharding(mesh, P("fsdp", None))
    x = NamedSharding(mesh, P(("data", "fsdp"), None))
    return jax.jit(step, in_shardings=(w, x)), (
        jax.ShapeDtypeStruct((256, 256), jnp.float32, sharding=w),
        jax.ShapeDtypeStruct((64, 256), jnp.float32, sharding=x),
    )
"""


def test_a_layout_the_program_refuses_is_pruned_with_its_reason(cli, plan_cache, tmp_path):
    """MaxText refuses 4 KV heads over tensor=8: that mesh's row says why; the others are laid out."""
    pytest.importorskip("libtpu")
    path = tmp_path / "refuses.py"
    path.write_text(REFUSES)
    out = cli(
        ["plan", f"{path}:step", "--inputs", f"{path}:inputs", *V5E, "-n", "1", "--format", "json"],
        env={"SHARDCLI_CACHE_DIR": os.environ["SHARDCLI_CACHE_DIR"]},
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    refused = {c["layout"]: c["why"] for c in doc["candidates"] if "tensor" in c["mesh"]}
    assert refused and all(
        why == f"the program refuses it: --inputs {path}:inputs raised ValueError: 4 heads cannot split over "
        "tensor"
        for why in refused.values()
    ), refused
    assert "tensor" not in _row(doc, doc["winner"]["layout"])["mesh"]
