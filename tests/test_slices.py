"""TPU multislice (`--slices N`): the DCN table, bad flags, the layouts plan makes, one compile each."""

from __future__ import annotations

import json
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import json_of

from shardcli.analysis.axis_links import axis_links
from shardcli.analysis.dcn import SliceView, dcn_collectives, slice_view
from shardcli.analysis.hlo.module import parse_module
from shardcli.errors import ShardcliError
from shardcli.hardware.chips import CHIPS
from shardcli.hardware.slices import DCN, dcn_figure, dcn_split, parse_slices
from shardcli.hardware.targets import parse_target
from shardcli.plan.analytic import chip_figures, model_candidate
from shardcli.plan.candidates import Candidate, enumerate_candidates
from shardcli.plan.slices import dcn_splits, multislice_mesh_choices, named_multislice_mesh, slice_meshes
from shardcli.specs.decoder import build_config

# --- the DCN table --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("generation", "per_chip_gbps", "words"),
    [
        pytest.param("tpu-v5e", 25, "2 x 100 Gbps NIC", id="v5e-2x100-for-8"),
        pytest.param("tpu-v5p", 50, "(DCN) bandwidth per chip (Gbps) 50", id="v5p-50-a-chip"),
        pytest.param("tpu-v6e", 100, "4 x 200 Gbps NIC", id="v6e-4x200-for-8"),
    ],
)
def test_dcn_per_chip_is_the_hosts_nics_over_its_chips(generation, per_chip_gbps, words):
    figure = dcn_figure(generation)
    assert figure is not None
    assert figure.value == pytest.approx(per_chip_gbps / 8 * 1e9)
    assert words in figure.source and "cloud.google.com/tpu/docs/" in figure.source


def test_the_docs_table_holds_each_generations_dcn():
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "explanation" / "cost-model.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line for line in page.splitlines() if line.startswith("| `tpu-")}
    assert set(rows) == set(DCN)
    for name, host in DCN.items():
        assert f"| {host.chips_per_host} | {host.per_chip_bytes_per_s / 1e9:g} GB/s" in rows[name]


def test_v4_has_no_dcn_figure_and_none_is_guessed():
    assert dcn_figure("tpu-v4") is None and "tpu-v4" not in DCN


# --- --slices as typed ----------------------------------------------------------------------------

BAD_SLICES = [
    pytest.param(
        "0", "tpu-v5e:2x2", "--slices '0' is not a number of slices; give a whole number from 1", id="zero"
    ),
    pytest.param("x", "tpu-v5e:2x2", "--slices 'x' is not a number of slices", id="word"),
    pytest.param("-2", "tpu-v5e:2x2", "--slices '-2' is not a number of slices", id="negative"),
    pytest.param("65", "tpu-v5e:2x2", "from 1 to 64", id="too-many"),
    pytest.param("2", "gpu-h100:2x8", "--target gpu-h100:2x8 is GPU hosts", id="gpu-target"),
    pytest.param("2", "tpu-v4:2x2x2", "states no DCN figure; multislice targets: tpu-v5e, tpu-v5p", id="v4"),
]


@pytest.mark.parametrize(("text", "target", "message"), BAD_SLICES)
def test_bad_slices_name_what_is_valid(text, target, message):
    with pytest.raises(ShardcliError, match=None) as error:
        parse_target(target, slices=text)
    assert message in str(error.value)


def test_slices_multiply_the_chips_and_keep_the_target_name():
    target = parse_target("tpu-v5e:16x16", slices="2")
    assert (target.name, target.slices, target.chips, target.slice_chips) == ("tpu-v5e:16x16", 2, 512, 256)
    assert parse_target("tpu-v5e:16x16", slices="1").slices == 1
    assert parse_slices("2", "tpu-v6e:8x8", "tpu", "tpu-v6e") == 2


PLAN = ["plan", "--preset", "tiny", "--target"]
INSPECT = ["inspect", "examples/mlp.py:train_step"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param([*PLAN, "tpu-v5e:2x2", "--slices", "0"], "--slices '0' is not", id="plan-zero"),
        pytest.param([*PLAN, "tpu-v5e:2x2", "--slices", "x"], "--slices 'x' is not", id="plan-word"),
        pytest.param([*PLAN, "gpu-h100:2x8", "--slices", "2"], "is GPU hosts", id="plan-gpu"),
        pytest.param([*INSPECT, "--slices", "2"], "but no --target is given", id="inspect-no-target"),
        pytest.param([*INSPECT, "--target", "gpu-h200:8", "--slices", "2"], "is GPU hosts", id="inspect-gpu"),
    ],
)
def test_bad_slices_flags_exit_2_with_one_line(cli, args, message):
    out = cli(args)
    assert out.exit_code == 2 and message in out.stderr, out.output
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


# --- how a mesh lies over the slices --------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "slices", "dcn"),
    [
        pytest.param((2, 4), 2, (2, 1), id="outer-takes-them"),
        pytest.param((3, 4), 2, (1, 2), id="next-axis-when-outer-cannot"),
        pytest.param((4, 4), 4, (4, 1), id="four-on-data"),
        pytest.param((2, 2, 4), 4, (2, 2, 1), id="split-over-two"),
    ],
)
def test_dcn_split_fills_the_outer_axes_first(shape, slices, dcn):
    assert dcn_split(shape, tuple("abc"[: len(shape)]), slices) == dcn


def test_a_mesh_the_slices_do_not_divide_is_refused():
    with pytest.raises(ShardcliError, match=r"--mesh 3x3 \(a,b\) cannot be laid over 2 slices"):
        dcn_split((3, 3), ("a", "b"), 2)


def _places(slices: int, torus: tuple[int, int]) -> tuple[list[tuple[int, ...]], list[int]]:
    """Hybrid-mesh order: slice outermost, then the slice's chips row-major."""
    places: list[tuple[int, ...]] = []
    slice_of: list[int] = []
    for s in range(slices):
        for x in range(torus[0]):
            for y in range(torus[1]):
                places.append((x, y, 0, 0))
                slice_of.append(s)
    return places, slice_of


def test_an_axis_across_slices_moves_at_the_dcn_share_and_one_within_keeps_ici():
    chip = CHIPS["tpu-v5e"]
    places, slice_of = _places(2, (2, 2))
    one = axis_links(chip, (2, 4), ("data", "fsdp"), places)
    links = axis_links(chip, (2, 4), ("data", "fsdp"), places, slices=slice_of)
    assert links["data"].bytes_per_s == pytest.approx(25 / 8 * 1e9)
    assert links["data"].how.startswith("across 2 slices: the data-center network, 3.125 GB/s a chip")
    assert "cloud.google.com/tpu/docs/v5e" in links["data"].source
    assert links["fsdp"] == one["fsdp"]  # within each slice: ICI, as without --slices


def _fake_mesh(shape: tuple[int, ...], names: tuple[str, ...], slice_of: list[int]) -> SimpleNamespace:
    devices = np.empty(len(slice_of), dtype=object)
    devices[:] = [SimpleNamespace(slice_index=s) for s in slice_of]
    return SimpleNamespace(devices=devices.reshape(shape), axis_names=names)


@pytest.mark.parametrize(
    ("shape", "slice_of", "view"),
    [
        pytest.param((2, 4), [0] * 4 + [1] * 4, SliceView((1, 4), ("data",), 2), id="data-across"),
        pytest.param((2, 4), [0, 0, 1, 1] * 2, SliceView((2, 2), ("fsdp",), 2), id="fsdp-across"),
    ],
)
def test_slice_view_reads_each_axis_within_and_across(shape, slice_of, view):
    names = ("data", "fsdp")
    assert slice_view(_fake_mesh(shape, names, slice_of)) == view
    assert slice_view(_fake_mesh(shape, names, [0] * 8)) is None


MEGASCALE_HLO = textwrap.dedent(
    """\
    HloModule jit_step, entry_computation_layout={(f32[128,512]{1,0})->f32[128,512]{1,0}}

    ENTRY %main (p: f32[128,512]) -> f32[128,512] {
      %p = f32[128,512]{1,0} parameter(0)
      %bitcast.1 = f32[64,8,128]{2,1,0} bitcast(%p)
      %after-all = token[] after-all(), frontend_attributes={MegascaleRendezvousKeyName="all-reduce.1_0"}
      {SEND}
      %send-done = token[] send-done(%send), channel_id=2, is_host_transfer=true
      ROOT %r = f32[128,512]{1,0} copy(%p)
    }
    """
).replace(
    "{SEND}",
    "%send = (f32[64,8,128]{2,1,0:T(8,128)}, u32[], token[]) send(%bitcast.1, %after-all), channel_id=2, "
    'is_host_transfer=true, frontend_attributes={_xla_host_transfer_handler_name="xla_megascale_runtime",'
    '_xla_megascale_reduce_operation="SUM",_xla_megascale_transfer_type="ALL_REDUCE"}',
)


def test_a_megascale_send_is_an_all_reduce_over_the_axes_across_slices():
    (op,) = dcn_collectives(parse_module(MEGASCALE_HLO), SliceView((1, 4), ("data",), 2))
    assert (op.kind, op.mesh_axes, op.group_size, op.result_bytes) == (
        "all-reduce",
        ("data",),
        2,
        64 * 8 * 128 * 4,
    )
    assert op.sent_bytes == 64 * 8 * 128 * 4  # 2(n-1)/n of it over two slices


# --- plan's layouts over slices -------------------------------------------------------------------


def test_dcn_splits_put_data_first_then_fsdp():
    assert dcn_splits(2) == [(("data", 2),), (("fsdp", 2),)]
    assert dcn_splits(4) == [(("data", 4),), (("data", 2), ("fsdp", 2)), (("fsdp", 4),)]


def test_multislice_layouts_never_put_tensor_or_sequence_across_slices():
    meshes = multislice_mesh_choices((2, 2), 2, sequence=True)
    assert meshes and all(np.prod(m.shape) == 8 for m in meshes)
    assert {a for m in meshes for a in m.crossing} == {"data", "fsdp"}
    labels = {m.label for m in meshes}
    assert {"dp2(dcn2) fsdp4", "fsdp8(dcn2)", "dp2(dcn2) tp4", "fsdp2(dcn2) tp4"} <= labels
    assert all(m.ici_size(a) * m.dcn_size(a) == m.size(a) for m in meshes for a in m.axes)


@pytest.mark.parametrize(
    ("named", "dcn"),
    [
        pytest.param((("data", 2), ("fsdp", 4)), (("data", 2),), id="data-first"),
        pytest.param((("fsdp", 8),), (("fsdp", 2),), id="fsdp-when-no-data"),
        pytest.param((("data", 4), ("tensor", 2)), (("data", 2),), id="part-of-data"),
    ],
)
def test_a_named_mesh_spans_the_slices_over_data_then_fsdp(named, dcn):
    (mesh,) = named_multislice_mesh((2, 2), 2, named)
    assert (mesh.sizes, mesh.dcn) == (named, dcn)


def test_a_named_mesh_with_only_tensor_is_refused():
    with pytest.raises(ShardcliError, match="only data and fsdp cross the data-center network"):
        named_multislice_mesh((2, 2), 2, (("tensor", 8),))


def test_the_model_charges_the_axis_across_slices_at_the_dcn_share():
    cfg = build_config("tiny")
    chip = chip_figures("tpu-v5e", (2, 2), slices=2)
    assert chip.dcn_bytes_per_s == pytest.approx(3.125e9)
    candidates, _ = enumerate_candidates(
        chip.torus, global_batch=64, per_device_batch=None, seq_len=cfg.seq,
        meshes=slice_meshes(chip.torus, 2, False, None), slices=2,
    )  # fmt: skip
    (c,) = [c for c in candidates if c.label == "dp2(dcn2) fsdp4" and c.remat == "full"]
    assert isinstance(c, Candidate) and c.chips == 8 and "dcn[data=2]" in c.key
    m = model_candidate(cfg, c, chip, 1.0)
    comm, t_comm = dict(m.comm_bytes), dict(m.t_comm_s)
    assert t_comm["data"] == pytest.approx(comm["data"] / 3.125e9)
    assert t_comm["fsdp"] == pytest.approx(comm["fsdp"] / chip.axis_bytes_per_s(4, 1))


# --- compiles ---------------------------------------------------------------------------------------

GRADIENT = """
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def step(w, x):
    return jax.grad(lambda w, x: jnp.sum(jnp.tanh(x @ w)))(w, x)


def inputs(mesh):
    w = jax.ShapeDtypeStruct((512, 512), jnp.float32, sharding=NamedSharding(mesh, P("fsdp", None)))
    x = jax.ShapeDtypeStruct((64, 512), jnp.float32, sharding=NamedSharding(mesh, P(("data", "fsdp"), None)))
    return w, x
"""


@pytest.mark.slow
def test_inspect_two_slices_reads_the_gradient_all_reduce_across_them(cli, tmp_path):
    pytest.importorskip("libtpu", reason="the tpu extra")
    program = tmp_path / "grad.py"
    program.write_text(GRADIENT)
    doc = json_of(
        cli, "inspect", f"{program}:step", "--inputs", f"{program}:inputs", "--target", "tpu-v5e:2x2",
        "--slices", "2", "--mesh", "2x4", "--axes", "data,fsdp",
    )  # fmt: skip
    assert "in 2 slices of 4 chips, joined over the data-center network" in doc["runtime"]["note"]
    groups = {(g["kind"], tuple(g["mesh_axes"])) for g in doc["collective_groups"]}
    assert ("all-reduce", ("data",)) in groups  # across the slices: a Megascale transfer
    assert {axes for _, axes in groups} == {("data",), ("fsdp",)}  # within each: ICI collectives
    comm = {t["name"]: t for t in doc["step_time"]["comm"]}
    assert comm["data"]["rate"] == pytest.approx(3.125e9)
    # each device is a chip of its own: the slices repeat each other's coords, they share no chip
    assert "shared by" not in json.dumps(doc["step_time"]), doc["step_time"]


@pytest.mark.slow
def test_plan_two_slices_compiles_a_layout_across_them(cli, plan_cache):
    pytest.importorskip("libtpu", reason="the tpu extra")
    doc = json_of(cli, "plan", "--preset", "tiny", "--target", "tpu-v5e:2x2", "--slices", "2", "-n", "1")
    assert (doc["config"]["slices"], doc["config"]["chips"]) == (2, 8)
    (row,) = [c for c in doc["candidates"] if c["compiled"] is not None]
    assert row["crosses_slices"] and set(row["crosses_slices"]) <= {"data", "fsdp"}
    axis = next(iter(row["crosses_slices"]))
    traffic = {t["axes"]: t for t in row["compiled"]["traffic"]}
    assert traffic[axis]["top_kind"] == "all-reduce"
    assert row["estimate"]["t_comm_s"][axis] == pytest.approx(traffic[axis]["sent_bytes"] / 3.125e9, rel=1e-6)
    assert "--slices 2" in doc["winner"]["inspect_command"]
