"""The one hardware table and the one step-time estimate: figures, sources, torus rules, by hand."""

from __future__ import annotations

import importlib.util
import json

import pytest

from shardcli.analysis.exposed import Overlap
from shardcli.analysis.program import CollectiveOp, LoopCount, ProgramAnalysis
from shardcli.analysis.step_time import AxisLink, axis_links, devices_per_chip, estimate_step
from shardcli.errors import ShardcliError
from shardcli.hardware.chips import CHIPS, chip_for_kind
from shardcli.hardware.targets import parse_target

# --- the table ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CHIPS))
def test_every_figure_names_its_source(name):
    chip = CHIPS[name]
    figures = [chip.hbm_bytes, chip.bf16_flops, chip.f32_flops, chip.hbm_bytes_per_s, chip.link_bytes_per_s]
    for figure in figures:
        assert figure.value > 0
        assert any(s in figure.source for s in ("Cloud TPU docs, TPU v", "How To Scale Your Model", "NVIDIA"))


@pytest.mark.parametrize(
    ("kind", "name", "bf16", "hbm_bw", "link"),
    [
        ("TPU v4", "tpu-v4", 275e12, 1200e9, 45e9),
        ("TPU v5 lite", "tpu-v5e", 197e12, 819e9, 45e9),
        ("TPU v5", "tpu-v5p", 459e12, 2765e9, 90e9),
        ("TPU v6 lite", "tpu-v6e", 918e12, 1638e9, 90e9),
        ("NVIDIA H100 80GB HBM3", "gpu-h100", 989e12, 3.35e12, 450e9),
        ("NVIDIA H200", "gpu-h200", 989e12, 4.8e12, 450e9),
    ],
)
def test_device_kinds_find_their_figures(kind, name, bf16, hbm_bw, link):
    chip = chip_for_kind(kind)
    assert chip is not None and chip.name == name
    assert (chip.bf16_flops.value, chip.hbm_bytes_per_s.value, chip.link_bytes_per_s.value) == (
        bf16,
        hbm_bw,
        link,
    )


@pytest.mark.parametrize(
    ("name", "size", "topology", "wraps"),
    [
        ("tpu-v5e", 16, (16, 16), True),
        ("tpu-v5e", 8, (8, 16), False),
        ("tpu-v6e", 16, (8, 16), True),
        ("tpu-v5p", 4, (4, 4, 4), True),
        ("tpu-v5p", 4, (2, 2, 4), False),
        ("tpu-v4", 8, (4, 4, 8), True),
        ("tpu-v4", 2, (2, 2, 2), False),
        ("gpu-h100", 8, (1, 8), False),
    ],
)
def test_which_torus_dimensions_wrap_around(name, size, topology, wraps):
    assert CHIPS[name].wraps(size, topology) is wraps


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "tpu-v5e:4x4x4",
            "--target 'tpu-v5e:4x4x4': TPU v5e slices are 2-D tori, not 3-D; "
            "valid: NxN up to 16x16 (256 chips), such as tpu-v5e:4x4",
            id="v5e-is-2d",
        ),
        pytest.param(
            "tpu-v4:2x2",
            "--target 'tpu-v4:2x2': TPU v4 slices are 3-D tori, not 2-D; "
            "valid: NxNxN up to 16x16x16 (4096 chips), such as tpu-v4:2x2x2",
            id="v4-is-3d",
        ),
        pytest.param(
            "tpu-v5e:1000x1000",
            "--target 'tpu-v5e:1000x1000': beyond the largest TPU v5e slice; "
            "valid: NxN up to 16x16 (256 chips), such as tpu-v5e:4x4",
            id="v5e-too-big",
        ),
        pytest.param(
            "tpu-v5p:16x24x24",
            "--target 'tpu-v5p:16x24x24': beyond the largest TPU v5p slice; "
            "valid: NxNxN up to 16x16x24 (6144 chips), such as tpu-v5p:4x4x4",
            id="v5p-too-big",
        ),
        pytest.param(
            "gpu-h100:16",
            "--target 'gpu-h100:16': a host has at most 8 H100 SXM GPUs; "
            "valid: GPUS (1-8) or HOSTSxGPUS, such as gpu-h100:8 or gpu-h100:2x8",
            id="gpus-per-host",
        ),
    ],
)
def test_topologies_a_generation_does_not_offer_are_refused_in_one_line(text, message):
    with pytest.raises(ShardcliError) as error:
        parse_target(text)
    assert str(error.value) == message


@pytest.mark.parametrize("text", ["tpu-v5p:24x16x16", "tpu-v5e:16x16", "tpu-v4:16x16x16", "gpu-h200:4x8"])
def test_the_largest_slices_are_accepted(text):
    assert parse_target(text).name == text


def test_a_huge_mesh_target_is_refused_before_the_compiler_starts(cli):
    out = cli(["mesh", "--target", "tpu-v5e:1000x1000"])
    assert out.exit_code == 2
    assert "beyond the largest TPU v5e slice" in out.stderr and "Traceback" not in out.output


# --- how mesh axes lie on the hardware ------------------------------------------------------------


def _grid(rows: int, cols: int, place) -> list[tuple[int, ...]]:
    return [place(i, j) for i in range(rows) for j in range(cols)]


@pytest.mark.parametrize(
    ("name", "shape", "places", "expected"),
    [
        pytest.param(
            "tpu-v5e",
            (4, 4),
            _grid(4, 4, lambda i, j: (j, i, 0, 0)),
            {"a": 45e9, "b": 45e9},
            id="v5e-4x4-no-wrap",
        ),
        pytest.param(
            "tpu-v5e",
            (16, 16),
            _grid(16, 16, lambda i, j: (j, i, 0, 0)),
            {"a": 90e9, "b": 90e9},
            id="v5e-16x16-rings",
        ),
        pytest.param(
            "tpu-v5p",
            (16, 4),
            _grid(16, 4, lambda i, j: (i % 4, i // 4, j, 0)),
            {"a": 4 * 90e9, "b": 2 * 90e9},
            id="v5p-4x4x4-axis-over-two-dims",
        ),
        pytest.param(
            "tpu-v5p",
            (2, 8),
            _grid(2, 8, lambda i, j: (i, j // 4, j % 4, 0)),
            {"a": 90e9, "b": 2 * 90e9},
            id="v5p-2x2x4-lines",
        ),
        pytest.param(
            "tpu-v4",
            (2, 4),
            _grid(2, 4, lambda i, j: (j, 0, 0, i)),
            {"a": 1200e9, "b": 45e9},
            id="v4-two-cores",
        ),
        pytest.param(
            "gpu-h100", (2, 8), _grid(2, 8, lambda i, j: (i, j)), {"a": 50e9, "b": 450e9}, id="h100-2-hosts"
        ),
        pytest.param(
            "gpu-h100", (1, 8), _grid(1, 8, lambda i, j: (0, j)), {"a": None, "b": 450e9}, id="h100-1-host"
        ),
    ],
)
def test_axis_bandwidth_follows_the_torus_or_the_host(name, shape, places, expected):
    links = axis_links(CHIPS[name], shape, ("a", "b"), places)
    assert {a: link.bytes_per_s for a, link in links.items()} == expected
    assert all(link.source for link in links.values())


def test_cores_of_one_chip_share_it():
    places = [(x, 0, 0, core) for x in range(4) for core in range(2)]
    assert devices_per_chip(places, CHIPS["tpu-v4"]) == 2
    assert devices_per_chip([(0, 0, 0, 0), (1, 0, 0, 0)], CHIPS["tpu-v5e"]) == 1
    # two slices repeat each other's coords: twice the chips, one device on each
    twice = [(0, 0, 0, 0), (1, 0, 0, 0)] * 2
    assert devices_per_chip(twice, CHIPS["tpu-v5e"], [0, 0, 1, 1]) == 1
    assert devices_per_chip(twice, CHIPS["tpu-v5e"]) == 2  # without the slices: read as shared


# --- the estimate ---------------------------------------------------------------------------------


def _op(
    kind: str,
    axes: tuple[str, ...] | None,
    result_bytes: int,
    runs: int,
    group: int = 4,
    beside_s: float | None = None,
) -> CollectiveOp:
    """A collective; `beside_s`: an async one with that many seconds of ops between its start and done
    per run (None: a synchronous one, exposed whole)."""
    overlap = Overlap(ops_s=beside_s) if beside_s is not None else None
    return CollectiveOp(
        kind,
        "f32[1]",
        result_bytes,
        axes,
        group,
        runs,
        True,
        None,
        None,
        beside_s is not None,
        overlap=overlap,
    )


def _program(collectives=(), loops=(), compiler_seconds=None) -> ProgramAnalysis:
    return ProgramAnalysis(
        collectives=tuple(collectives),
        memory=None,
        flops=3.94e12,  # 20 ms at v5e's 197 TFLOP/s
        bytes_accessed=8.19e9,  # 10 ms at 819 GB/s
        loops=tuple(loops),
        compiler_seconds=compiler_seconds,
    )


LINKS = {
    "data": AxisLink("data", 4, 45e9, "ICI", "table"),
    "model": AxisLink("model", 4, 45e9, "ICI", "table"),
}
V5E = CHIPS["tpu-v5e"]


def test_the_roofline_by_hand():
    # all-reduce over model: 2(n-1)/n x 30 MB = 45 MB per run, 10 runs -> 450 MB / 45 GB/s = 10 ms;
    # all-gather over data: (n-1)/n x 60 MB = 45 MB once -> 1 ms. Both async, each with more than its
    # own time of ops between its start and done: hidden.
    program = _program(
        [
            _op("all-reduce", ("model",), 30_000_000, 10, beside_s=0.002),
            _op("all-gather", ("data",), 60_000_000, 1, beside_s=0.002),
        ]
    )
    step = estimate_step(program, V5E, LINKS, "bfloat16")
    assert step.math.seconds == pytest.approx(0.020) and step.hbm.seconds == pytest.approx(0.010)
    assert [(t.name, t.amount, t.seconds) for t in step.comm] == [
        ("model", 450_000_000, pytest.approx(0.010)),
        ("data", 45_000_000, pytest.approx(0.001)),
    ]
    assert step.t_comm_s == pytest.approx(0.011)
    assert (step.bound_s, step.sum_s, step.dominant) == (pytest.approx(0.020), pytest.approx(0.031), "math")
    assert step.estimate_s == pytest.approx(0.020)
    assert "197 TFLOP/s" in step.math.source and "819 GB/s" in step.hbm.source
    assert step.compiler_note.startswith("not given: the TPU compiler's optimal_seconds is negative")
    assert [(e.exposed_s, e.hidden_s) for e in step.exposure] == [(0.0, pytest.approx(0.010)), (0.0, 0.001)]


@pytest.mark.parametrize(
    ("beside_s", "exposed_s", "bound_s"),
    [
        pytest.param(None, 0.010, 0.030, id="synchronous-exposed-whole"),
        pytest.param(0.0, 0.010, 0.030, id="nothing-between"),
        pytest.param(0.0004, 0.006, 0.026, id="part-hidden"),
        pytest.param(0.001, 0.0, 0.020, id="just-hidden"),
        pytest.param(0.5, 0.0, 0.020, id="hidden"),
    ],
)
def test_a_collective_adds_what_the_ops_beside_it_do_not_hide(beside_s, exposed_s, bound_s):
    # 10 runs of 1 ms each (45 MB over 45 GB/s) after 20 ms of maths: each run exposes 1 ms less the
    # ops the scheduler placed between its start and done
    program = _program([_op("all-reduce", ("model",), 30_000_000, 10, beside_s=beside_s)])
    step = estimate_step(program, V5E, LINKS, "bfloat16")
    (found,) = step.exposure
    assert (found.seconds, found.exposed_s) == (pytest.approx(0.010), pytest.approx(exposed_s))
    assert step.t_exposed_s == pytest.approx(exposed_s)
    assert (step.bound_s, step.estimate_s) == (pytest.approx(bound_s), pytest.approx(bound_s))
    assert step.sum_s == pytest.approx(0.030)  # no overlap at all: the same whatever the schedule


def test_communication_bound_names_its_axis_and_efficiency_scales_the_bound():
    program = _program([_op("all-reduce", ("model",), 300_000_000, 10)])  # 4.5 GB -> 100 ms, exposed
    step = estimate_step(program, V5E, LINKS, "bfloat16", efficiency=0.5, efficiency_source="calibrated on X")
    assert (step.dominant, step.most_exposed) == ("model", "model")
    assert (step.bound_s, step.estimate_s) == (pytest.approx(0.12), pytest.approx(0.24))
    assert step.efficiency_source == "calibrated on X"
    with pytest.raises(ValueError, match="efficiency 0 is not in"):
        estimate_step(program, V5E, LINKS, "bfloat16", efficiency=0)


def test_a_collective_over_two_axes_uses_both_axes_links():
    program = _program([_op("all-reduce", ("data", "model"), 40_000_000, 1, group=16)])  # 75 MB
    (term,) = estimate_step(program, V5E, LINKS, "bfloat16").comm
    assert (term.name, term.rate, term.seconds) == ("data+model", 90e9, pytest.approx(75e6 / 90e9))


def test_devices_sharing_a_chip_share_its_peak_and_unknown_trips_are_said():
    loop = LoopCount("while.1", None, 1, 1.0, 1.0, None, None)
    step = estimate_step(_program(loops=[loop]), CHIPS["tpu-v4"], LINKS, "float32", per_chip=2)
    assert step.math.rate == 275e12 / 2 and step.math.seconds == pytest.approx(3.94e12 / 137.5e12)
    assert step.notes == (
        "1 loop(s) of unknown trip count counted once: FLOPs, bytes and times are at least these",
    )


def test_the_compilers_own_estimate_is_shown_only_where_positive():
    step = estimate_step(_program(compiler_seconds=0.025), CHIPS["tpu-v5p"], LINKS, "bfloat16")
    assert step.compiler_seconds == 0.025 and "optimal_seconds" in step.compiler_note
    gpu = estimate_step(_program(), CHIPS["gpu-h100"], LINKS, "float64")
    assert gpu.math.rate == 67e12 and gpu.compiler_note == "not given by this compiler"
    none = estimate_step(_program(), CHIPS["tpu-v5p"], LINKS, "int8")
    assert (none.math.seconds, none.bound_s, none.estimate_s) == (None, None, None)


# --- inspect shows it -----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="the tpu extra: libtpu")
def test_inspect_on_a_target_estimates_the_step_from_its_own_figures(cli):
    out = cli(
        [
            "inspect",
            "examples/transformer.py:block",
            "--inputs",
            "examples/transformer.py:inputs",
            "--target",
            "tpu-v5e:2x2",
            "--axes",
            "data,model",
            "--format",
            "json",
        ]
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    step, program = doc["step_time"], doc["program"]
    assert step["math"]["seconds"] == pytest.approx(program["flops_per_device"] / 197e12)
    assert step["hbm"]["seconds"] == pytest.approx(program["bytes_accessed_per_device"] / 819e9)
    sent = sum(c["sent_bytes"] * c["runs"] for c in program["collectives"] if c["mesh_axes"] == ["model"])
    (model,) = [t for t in step["comm"] if t["name"] == "model"]
    assert model["seconds"] == pytest.approx(sent / 45e9)  # 2 chips along a 2x2 torus: one way, one link
    compute = max(step["math"]["seconds"], step["hbm"]["seconds"])
    assert step["bound_s"] == pytest.approx(max(compute + step["t_exposed_s"], step["t_comm_s"]))


def test_the_docs_table_holds_the_hardware_tables_figures():
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "explanation" / "cost-model.md").read_text()
    rows = {
        line.split("|")[1].strip(): line
        for line in page.splitlines()
        if line.startswith("| tpu-") or line.startswith("| gpu-")
    }
    assert set(rows) == set(CHIPS)
    for name, chip in CHIPS.items():
        row = rows[name]
        assert f"{chip.bf16_flops.value / 1e12:g} TFLOP/s" in row
        assert f"{chip.link_bytes_per_s.value / 1e9:g} GB/s" in row
        assert chip.host_bytes_per_s is not None
        assert f"| {chip.host_bytes_per_s.value / 1e9:g} GB/s |" in row
        hbm = chip.hbm_bytes_per_s.value
        assert (f"{hbm / 1e9:g} GB/s" if chip.platform == "tpu" else f"{hbm / 1e12:g} TB/s") in row
        if chip.torus_rank:
            largest = "x".join(map(str, chip.max_topology))
            assert f"{chip.torus_rank}-D" in row and f"{largest} ({chip.max_chips})" in row


class _Device:
    def __init__(self, i: int, process: int, coords: tuple[int, ...] | None = None) -> None:
        self.id, self.process_index = i, process
        if coords is not None:
            self.coords, self.core_on_chip = coords, 0


class _Mesh:
    def __init__(self, devices: list[_Device], shape: tuple[int, ...], names: tuple[str, ...]) -> None:
        import numpy as np

        self.devices = np.array(devices, dtype=object).reshape(shape)
        self.axis_names = names


def test_real_gpus_of_one_process_meet_over_nvlink():
    from shardcli.analysis.step_time import step_time_of

    mesh = _Mesh([_Device(i, 0) for i in range(8)], (2, 4), ("data", "model"))
    program = _program([_op("all-reduce", ("model",), 30_000_000, 10)])
    step = step_time_of(program, mesh, "NVIDIA H100 80GB HBM3", "bfloat16")
    assert step is not None and step.chip == "H100 SXM"
    assert step.math.seconds == pytest.approx(3.94e12 / 989e12)
    assert step.hbm.seconds == pytest.approx(8.19e9 / 3.35e12)
    (term,) = step.comm
    assert (term.name, term.rate) == ("model", 450e9) and "NVLink" in term.source
    assert step_time_of(program, mesh, "cpu", "float32") is None


def test_a_gpu_collective_over_several_axes_moves_at_the_slowest():
    """Two hosts of 4: data crosses hosts (the network), model stays within one (NVLink); a
    collective over both is as fast as the network, and over model alone NVLink's, never a sum."""
    from shardcli.analysis.step_time import step_time_of

    mesh = _Mesh([_Device(i, i // 4) for i in range(8)], (2, 4), ("data", "model"))
    program = _program([_op("all-reduce", ("data", "model"), 30_000_000, 10)])
    step = step_time_of(program, mesh, "NVIDIA H100 80GB HBM3", "bfloat16")
    assert step is not None
    (term,) = step.comm
    assert (term.name, term.rate) == ("data+model", 50e9) and term.source.startswith("the slowest of ")


def test_given_figures_stand_in_for_an_unknown_device():
    from shardcli.analysis.step_time import step_time_of
    from shardcli.hardware.chips import Figure

    mesh = _Mesh([_Device(i, 0) for i in range(8)], (2, 4), ("data", "model"))
    program = _program([_op("all-reduce", ("model",), 30_000_000, 10)])
    step = step_time_of(
        program,
        mesh,
        "cpu",
        "float32",
        peak=Figure(1e12, "FLOP/s", "--peak-tflops"),
        link=Figure(10e9, "B/s", "--link-gbps"),
    )
    assert step is not None and step.chip == "figures given"
    assert (step.math.seconds, step.math.source) == (pytest.approx(3.94), "--peak-tflops")
    assert step.hbm.seconds is None and step.comm[0].seconds == pytest.approx(0.045)
    # a synchronous all-reduce (as a CPU compiles one): exposed whole after the maths
    assert step.bound_s == pytest.approx(3.94 + 0.045) and step.dominant == "math"


def test_a_real_tpu_slice_reads_the_torus_from_the_devices_coordinates():
    from shardcli.analysis.step_time import step_time_of

    devices = [_Device(4 * y + x, 0, (x, y, 0)) for y in range(4) for x in range(4)]
    mesh = _Mesh(devices, (4, 4), ("data", "model"))
    step = step_time_of(
        _program([_op("all-gather", ("data",), 60_000_000, 1)]), mesh, "TPU v5 lite", "bfloat16"
    )
    assert step is not None and step.comm[0].rate == 45e9  # a 4-chip line of a 4x4 v5e: one way


def test_a_slice_of_an_axis_named_in_its_text_uses_the_axis_links():
    program = _program([_op("all-reduce", ("model[::2]",), 30_000_000, 10, group=2)])  # 300 MB
    (term,) = estimate_step(program, V5E, LINKS, "bfloat16").comm
    assert (term.name, term.rate, term.seconds) == ("model[::2]", 45e9, pytest.approx(300e6 / 45e9))
