"""`plan --pipeline`: the schedules' bubbles, the stages' devices, the memory in flight, the stage
transfers, bad flags, and one pipelined plan compiled for GPU hosts. (`tests/test_pipeline.py` is
the `pipeline` command's.)"""

from __future__ import annotations

import pytest
from conftest import json_of

from shardcli.errors import ShardcliError
from shardcli.hardware.chips import CHIPS
from shardcli.hardware.targets import parse_target
from shardcli.plan.analytic import chip_figures, model_candidate
from shardcli.plan.candidates import Candidate, MeshChoice
from shardcli.plan.pipeline import (
    PipelineRequest,
    exposed_transfer_s,
    model_layout,
    parse_pipeline,
    pipeline_candidates,
    pipeline_step,
    stage_link,
    stage_program,
    stage_target,
    transfer_bytes,
)
from shardcli.plan.schedules import PipelineChoice
from shardcli.specs.decoder import build_config

# --- the schedules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "fraction", "in_flight"),
    [
        # GPipe's bubble O((K-1)/(M+K-1)) (Huang et al. 2019); it holds every microbatch
        pytest.param(PipelineChoice(4, 16, "gpipe"), 3 / 19, 16, id="gpipe-4x16"),
        # 1F1B: the same bubble, at most S microbatches in flight (Narayanan et al. 2021)
        pytest.param(PipelineChoice(4, 16, "1f1b"), 3 / 19, 4, id="1f1b-4x16"),
        pytest.param(PipelineChoice(2, 8, "1f1b"), 1 / 9, 2, id="1f1b-2x8"),
        pytest.param(PipelineChoice(8, 4, "1f1b"), 7 / 11, 4, id="1f1b-fewer-microbatches-than-stages"),
        # MaxText's circular pipeline: R repeats cut the bubble to (S-1)/(R*M+S-1)
        pytest.param(PipelineChoice(4, 16, "circular", 8), 3 / 131, 16, id="circular-4x16-r8"),
    ],
)
def test_bubble_and_microbatches_in_flight(choice, fraction, in_flight):
    assert choice.bubble_fraction == pytest.approx(fraction)
    assert choice.in_flight == in_flight


@pytest.mark.parametrize(
    ("choice", "stage_s", "step_s", "bubble_s"),
    [
        pytest.param(PipelineChoice(4, 16), 1.0, 19.0, 3.0, id="1f1b-m-plus-s-minus-1-microbatches"),
        pytest.param(PipelineChoice(2, 8, "gpipe"), 0.5, 4.5, 0.5, id="gpipe"),
        pytest.param(PipelineChoice(4, 16, "circular", 4), 1.0, 16.75, 0.75, id="circular-r4"),
    ],
)
def test_the_step_is_m_microbatches_plus_the_bubble(choice, stage_s, step_s, bubble_s):
    cfg = build_config("tiny")
    mesh = MeshChoice((("fsdp", 4),), True)
    c = Candidate(mesh, "fsdp-tp", "full", 64, 8 * choice.stages, choice)
    step = pipeline_step(cfg, c, parse_target("gpu-h100:2x4"), 1e30, stage_s)
    assert step is not None
    assert step.bubble_s == pytest.approx(bubble_s)
    # an infinitely fast link: only the step's chunks
    assert step.step_s == pytest.approx(step_s)
    assert step.bubble_s / step.step_s == pytest.approx(choice.bubble_fraction)


# --- the stages' devices and the link between them -------------------------------------------------


@pytest.mark.parametrize(
    ("target", "slices", "stages", "stage_name", "stage_chips", "link"),
    [
        pytest.param(
            "gpu-h100:4x8", None, 2, "gpu-h100:2x8", 16, "the network between hosts", id="gpu-hosts"
        ),
        pytest.param(
            "gpu-h100:4x8", None, 4, "gpu-h100:1x8", 8, "the network between hosts", id="gpu-a-host"
        ),
        pytest.param("gpu-h100:8", None, 2, "gpu-h100:1x4", 4, "NVLink", id="gpu-one-host-halves"),
        pytest.param("tpu-v5e:4x4", "4", 2, "tpu-v5e:4x4", 32, "the data-center network", id="tpu-slices"),
        pytest.param("tpu-v5p:4x4x4", None, 2, "tpu-v5p:4x4x2", 32, "one ICI link", id="tpu-one-slice"),
    ],
)
def test_a_stage_is_hosts_or_slices_or_a_share_of_the_chips(
    target, slices, stages, stage_name, stage_chips, link
):
    spec = parse_target(target, slices=slices)
    stage = stage_target(spec, stages)
    assert stage.name == stage_name and stage.chips == stage_chips
    assert stage_link(spec, 1e9).words.startswith(link)


def test_a_stage_compiles_layers_over_s_at_the_microbatch():
    cfg = build_config("tiny")
    spec = parse_target("gpu-h100:2x4")
    c = Candidate(MeshChoice((("fsdp", 4),), True), "fsdp-tp", "full", 64, 8, PipelineChoice(2, 8))
    stage_cfg, stage, stage_spec = stage_program(cfg, c, spec)
    assert stage_cfg.layers == cfg.layers // 2
    assert stage.global_batch == 8 and stage.chips == 4 and stage.pipeline is None
    assert stage_spec.name == "gpu-h100:1x4"
    plain = Candidate(MeshChoice((("fsdp", 8),), True), "fsdp-tp", "full", 64, 8)
    assert stage_program(cfg, plain, spec) == (cfg, plain, spec)


def test_pipelined_layouts_are_the_stage_layouts_at_each_batch():
    cfg = build_config("tiny")
    spec = parse_target("gpu-h100:2x4")

    def layouts(per_device):
        return pipeline_candidates(
            PipelineRequest((2,)), cfg, spec, global_batch=None, per_device_batch=per_device,
            remats=("full",), rule_sets=("fsdp-tp",), sequence=False,
        )  # fmt: skip

    found, _ = layouts(4)  # 32 sequences, 8 microbatches of 4 over one host's 4 GPUs
    assert {c.label for c in found} == {"pp2 fsdp4", "pp2 dp4", "pp2 dp2 fsdp2", "pp2 fsdp2 tp2",
                                        "pp2 dp2 tp2", "pp2 tp4"}  # fmt: skip
    assert all(c.chips == 8 and c.global_batch == 32 and c.pipeline == PipelineChoice(2, 8) for c in found)
    found, pruned = layouts(1)  # a microbatch of 1 sequence splits over no data or fsdp axis
    assert {c.label for c in found} == {"pp2 tp4"}
    assert any(p.label == "pp2 fsdp4" and p.why.startswith("its microbatch: global batch 1") for p in pruned)


# --- memory in flight and the transfer term --------------------------------------------------------


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_the_first_stage_holds_its_microbatches_activations(schedule):
    cfg = build_config("tiny")
    spec = parse_target("gpu-h100:2x4")
    chip = chip_figures("gpu-h100", (2, 4), {})
    p = PipelineChoice(2, 8, schedule)
    c = Candidate(MeshChoice((("fsdp", 4),), True), "fsdp-tp", "none", 64, 8, p)
    stage_cfg, stage, _ = stage_program(cfg, c, spec)
    one = model_candidate(stage_cfg, stage, chip_figures("gpu-h100", (1, 4), {}), 1.0)
    m = model_layout(cfg, c, spec, chip, 1.0, {})
    held = 2 if schedule == "1f1b" else 8
    assert m.memory_bytes == int(one.memory_bytes + (held - 1) * one.activation_bytes)
    assert m.t_math_s == pytest.approx(one.t_math_s * (8 + 1))
    assert dict(m.t_comm_s)["stage"] > 0


def test_the_transfer_is_a_microbatchs_activations_over_the_network_between_hosts():
    cfg = build_config("tiny")
    spec = parse_target("gpu-h100:2x4")
    p = PipelineChoice(2, 8)
    c = Candidate(MeshChoice((("fsdp", 4),), True), "fsdp-tp", "full", 64, 8, p)
    moved = transfer_bytes(cfg, c)
    assert moved == 64 / 8 * cfg.seq * cfg.d_model * 2 / 4  # batch/M x seq x d_model x bf16 / 4 shards
    net = CHIPS["gpu-h100"].network_bytes_per_s
    assert net is not None
    step = pipeline_step(cfg, c, spec, 1.0, 1.0)  # a slow stage: the transfers hide but for fill and drain
    assert step is not None
    assert step.transfer_s == pytest.approx(moved / net.value)
    assert step.exposed_transfer_s == pytest.approx(2 * (2 - 1) * step.transfer_s)
    # a transfer longer than its chunk: the excess of each of M forwards and backwards is exposed too
    assert exposed_transfer_s(p, 3.0, 3.0) == pytest.approx(2 * 3.0 + 8 * ((3.0 - 1.0) + (3.0 - 2.0)))


# --- bad flags -------------------------------------------------------------------------------------

BAD = [
    pytest.param(["--pipeline", "0"], "--pipeline '0': '0' is not a stage count of 2 or more", id="zero"),
    pytest.param(["--pipeline", "x"], "--pipeline 'x': 'x' is not a stage count of 2 or more", id="word"),
    pytest.param(["--pipeline", "3"], "--pipeline 3 does not divide the model's 8 layers", id="not-layers"),
    pytest.param(
        ["--pipeline", "4"],
        "--pipeline 4 stages cannot split the 2 hosts of gpu-h100:2x4",
        id="more-than-hosts",
    ),
    pytest.param(
        ["--pipeline", "2", "--microbatches", "1"], "--microbatches 1 is fewer than the 2", id="m<s"
    ),
    pytest.param(["--pipeline", "2", "--schedule", "zb"], "--schedule 'zb' is not known", id="schedule"),
    pytest.param(["--microbatches", "4"], "--microbatches goes with --pipeline S", id="m-alone"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_pipeline_flags_exit_2_with_one_line(cli, args, message):
    out = cli(["plan", "--preset", "tiny", "--layers", "8", "--target", "gpu-h100:2x4", *args])
    assert out.exit_code == 2, out.output
    assert out.stderr.startswith(f"shardcli: error: {message}"), out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    if "stage count" in message or "divide" in message or "split" in message:
        assert out.stderr.strip().endswith(
            "stage counts that divide the 8 layers and the 2 hosts of gpu-h100:2x4: 2"
        )


def test_parse_pipeline_names_the_valid_counts():
    with pytest.raises(ShardcliError, match="chips of tpu-v5e:2x2: 2, 4"):
        parse_pipeline("8", None, "1f1b", 8, parse_target("tpu-v5e:2x2"))
    assert parse_pipeline("2,4,2", None, "gpipe", 8, parse_target("tpu-v5e:2x2")).stages == (2, 4)


# --- one pipelined plan compiled -------------------------------------------------------------------


@pytest.mark.slow
def test_a_pipelined_layout_is_ranked_beside_the_others(cli, plan_cache):
    from shardcli.hardware.compilers import compiler_installed

    if not compiler_installed("cuda"):
        pytest.skip("the gpu extra: pip install -e '.[gpu]' or '.[gpu-cuda13]' (CI installs gpu)")
    args = ["plan", "--preset", "tiny", "--target", "gpu-h100:2x4", "--pipeline", "2", "--batch", "4",
            "--remat", "full", "-n", "2", "--mesh", "fsdp=8"]  # fmt: skip
    doc = json_of(cli, *args)
    assert doc["config"]["pipeline"] == {"stages": [2], "microbatches": None, "schedule": "1f1b"}
    compiled = [c for c in doc["candidates"] if c["compiled"] is not None]
    piped = [c for c in compiled if c["pipeline"] is not None]
    assert piped and any(c["pipeline"] is None for c in compiled)
    p = piped[0]["pipeline"]
    assert (p["stages"], p["microbatches"], p["schedule"]) == (2, 8, "1f1b")
    assert p["bubble_s"] == pytest.approx(p["stage_step_s"])  # (S - 1) x t_mb
    step = piped[0]["estimate"]["step_s"]
    assert step == pytest.approx(9 * p["stage_step_s"] + p["exposed_transfer_s"])
    assert piped[0]["layout"].startswith("pp2 ")
    text = cli([*args, "--no-color"]).stdout
    assert "pp2 " in text and "no published pipelined row" in text


def test_a_pipelined_winner_is_reproduced_as_one_stage():
    from types import SimpleNamespace

    from shardcli.plan.search import PlanRequest, inspect_command, program_text

    cfg = build_config("tiny", layers=4)
    request = PlanRequest(model=cfg, target=parse_target("gpu-h100:2x4"))
    c = Candidate(MeshChoice((("fsdp", 4),), True), "fsdp-tp", "full", 64, 8, PipelineChoice(2, 8))
    row = SimpleNamespace(candidate=c)
    command = inspect_command(request, row, "w.py")
    assert command.endswith("--target gpu-h100:1x4 --mesh 4 --axes fsdp")
    text = program_text(request, row, "w.py")
    assert "'layers': 2" in text and "GLOBAL_BATCH = 8" in text
