"""`shardcli pipeline`: schedules, MPMD and SPMD pipelines verified against the unpipelined model."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_cli_foundation import assert_one_line_error

from shardcli.training.pipeline.schedules import gpipe, max_in_flight, one_f_one_b, textbook_bubble

# Compiles, processes or whole programs: left out of the quick subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

SMALL = ("--layers", "4", "--width", "16", "--batch", "8", "--microbatches", "4")


# --- schedules (no devices) -----------------------------------------------------------------------


@pytest.mark.parametrize("make", [gpipe, one_f_one_b], ids=["gpipe", "1f1b"])
@pytest.mark.parametrize(("stages", "microbatches"), [(2, 4), (4, 8), (4, 2), (3, 5)])
def test_every_stage_runs_every_microbatch_once_each_way(make, stages, microbatches):
    schedule = make(stages, microbatches)
    assert len(schedule) == stages
    for steps in schedule:
        forwards = [m for k, m in steps if k == "F"]
        backwards = [m for k, m in steps if k == "B"]
        assert sorted(forwards) == sorted(backwards) == list(range(microbatches))
        assert forwards == sorted(forwards)  # forwards in order
        for m in range(microbatches):  # a microbatch's backward comes after its forward
            assert steps.index(("F", m)) < steps.index(("B", m))


def test_1f1b_holds_fewer_activations_than_gpipe():
    assert max_in_flight(gpipe(4, 8)) == [8, 8, 8, 8]
    assert max_in_flight(one_f_one_b(4, 8)) == [4, 3, 2, 1]


def test_1f1b_on_the_last_stage_alternates_from_the_start():
    assert one_f_one_b(4, 3)[3] == (("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2))
    assert one_f_one_b(2, 3)[0] == (("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("B", 2))


def test_forward_only_has_no_backward_steps():
    assert gpipe(2, 3, forward_only=True) == ((("F", 0), ("F", 1), ("F", 2)),) * 2
    assert one_f_one_b(2, 3, forward_only=True) == gpipe(2, 3, forward_only=True)


def test_textbook_bubble():
    assert textbook_bubble(4, 8) == pytest.approx(3 / 11)
    assert textbook_bubble(2, 1) == pytest.approx(1 / 2)


# --- runs -----------------------------------------------------------------------------------------


def run_json(cli, *args: str) -> dict:
    result = cli(["pipeline", *SMALL, *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("mesh", ["2x2", "4x2"])
def test_both_impls_match_the_unpipelined_model(cli, schedule, mesh):
    doc = run_json(cli, "--mesh", mesh, "--schedule", schedule, "--impl", "both")
    stages = int(mesh.split("x")[0])
    assert doc["config"]["stages"] == stages
    assert doc["ok"] and all(c["ok"] for c in doc["checks"])
    whats = [c["what"] for c in doc["checks"]]
    for impl in ("mpmd", "spmd"):
        assert f"{impl}: the output matches the unpipelined run" in whats
        assert f"{impl}: every layer's gradients match the unpipelined run" in whats
    want = numpy_loss(mesh)
    assert doc["mpmd"]["loss"] == pytest.approx(want, rel=1e-5)
    assert doc["spmd"]["loss"] == pytest.approx(want, rel=1e-5)
    assert doc["reference_loss"] == pytest.approx(want, rel=1e-5)


def numpy_loss(mesh: str) -> float:
    """The loss of the SMALL model, in float64 NumPy: h = tanh(h @ W + b) layer by layer, then
    0.5 x mean((y - target)^2). Only the model's random parameters and data come from shardcli."""
    from shardcli.specs.meshes import parse_mesh
    from shardcli.training.pipeline.request import PipelineRequest
    from shardcli.training.pipeline.threads import _host_model

    request = PipelineRequest(mesh=parse_mesh(mesh, None), batch=8, layers=4, width=16)
    params, x, target = _host_model(request)
    h = x.astype(np.float64)
    for w, b in params:
        h = np.tanh(h @ w.astype(np.float64) + b.astype(np.float64))
    return float(0.5 * np.mean((h - target.astype(np.float64)) ** 2))


def test_timeline_events_follow_the_schedule(cli):
    doc = run_json(cli, "--mesh", "4x2", "--schedule", "1f1b")
    events = doc["mpmd"]["events"]
    stages = doc["config"]["stages"]
    for s in range(stages):
        steps = sorted(
            (e for e in events if e["stage"] == s and e["kind"] in ("F", "B")), key=lambda e: e["start_s"]
        )
        assert [f"{e['kind']}{e['microbatch']}" for e in steps] == doc["config"]["steps_per_stage"][s]
        assert all(b["start_s"] >= a["end_s"] for a, b in zip(steps, steps[1:], strict=False))
    sends = [e for e in events if e["kind"] == "send"]
    assert len(sends) == (stages - 1) * 4
    grads = [e for e in events if e["kind"] == "send-grad"]
    assert len(grads) == (stages - 1) * 4
    bubble = doc["mpmd"]["bubble"]
    assert bubble["textbook"] == pytest.approx(3 / 7) and 0 <= bubble["measured"] < 1


def test_forward_only(cli):
    doc = run_json(cli, "--mesh", "2x2", "--forward-only", "--impl", "both")
    assert doc["ok"] and doc["mpmd"]["loss"] is None
    assert {e["kind"] for e in doc["mpmd"]["events"]} == {"F", "send"}


def test_fewer_stages_than_the_leading_axis(cli):
    doc = run_json(cli, "--mesh", "4x2", "--stages", "2")
    assert [s["sub_mesh"] for s in doc["mpmd"]["stages"]] == [[2, 2], [2, 2]]
    assert doc["ok"]


def test_table_output_shows_the_timeline(cli):
    result = cli(["pipeline", *SMALL, "--mesh", "2x2", "--no-color"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "stage 0 F │" in out and "stage 1 B │" in out
    assert "bubble" in out and "textbook (S-1)/(M+S-1)" in out
    assert out.rstrip().endswith("verified: every check passed")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--batch", "10", "--microbatches", "4"],
            "--microbatches 4 does not divide --batch 10; every microbatch must have the same size",
            id="microbatches",
        ),
        pytest.param(
            ["--mesh", "4x2", "--stages", "8"],
            "--stages 8 is more than the leading mesh axis (stage=4) allows",
            id="too-many-stages",
        ),
        pytest.param(
            ["--mesh", "4x2", "--layers", "6"], "--layers 6 is not divisible by 4 stages", id="layers"
        ),
        pytest.param(
            ["--mesh", "4x2", "--stages", "3"],
            "--stages 3 does not divide the leading mesh axis",
            id="uneven",
        ),
        pytest.param(["--mesh", "1x8"], "a pipeline needs at least 2 stages", id="one-stage"),
        pytest.param(
            ["--schedule", "zb"], "--schedule 'zb' is not valid; choose one of gpipe, 1f1b", id="schedule"
        ),
        pytest.param(["--impl", "x"], "--impl 'x' is not valid; choose one of mpmd, spmd, both", id="impl"),
        pytest.param(
            ["--mesh", "4x2", "--stages", "2", "--impl", "spmd"],
            "--impl spmd puts one stage on each position",
            id="spmd",
        ),
        pytest.param(
            ["--mesh", "2x3", "--width", "16"],
            "--width 16 does not split over the other mesh axes",
            id="width",
        ),
    ],
)
def test_bad_input_exits_2(cli, args, message):
    assert message in assert_one_line_error(cli(["pipeline", *args]))


def test_stages_0_is_named_as_given(cli):
    line = assert_one_line_error(cli(["pipeline", "--stages", "0"]))
    assert "a pipeline needs at least 2 stages, but --stages is 0" in line


def test_a_wrong_gradient_fails_and_the_detail_names_the_worst_layer():
    import numpy as np

    from shardcli.training.pipeline.threads import _grad_checks

    reference = [(np.ones((2, 2)), np.ones(2)) for _ in range(3)]
    grads = [(w.copy(), b.copy()) for w, b in reference]
    grads[1][0][0, 0] += 0.01  # layer 1's W is off by 1e-2, far beyond 1e-4 x max|ref|
    (check,) = _grad_checks("mpmd", grads, reference)
    assert not check.ok
    assert check.detail.startswith("wrong in layers [1]; 3 layers; worst layer 1 W: max |err| 1.00e-02")


# Planted in the child: the stage threads' hand-off (`_take`) says it was reached with a file and
# takes 0.2 s more each time, so the run is in its threads when the test interrupts it and cannot
# finish first, however idle or busy the machine.
IN_THE_THREADS = """
    import os, pathlib, time
    import shardcli.training.pipeline.threads as pipeline
    real_take = pipeline._take
    def slow_take(q, stop):
        pathlib.Path(os.environ["PLANT_MARKER"]).touch()
        time.sleep(0.2)
        return real_take(q, stop)
    pipeline._take = slow_take
"""


@pytest.mark.once  # shardcli's handling of Ctrl-C
def test_ctrl_c_during_the_threaded_run_exits_130_with_one_line(tmp_path):
    import signal
    import subprocess
    import sys
    import textwrap
    import time

    from conftest import clean_env, pythonpath_first

    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent(IN_THE_THREADS))
    marker = tmp_path / "in-the-threads"
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardcli", "pipeline", "-M", "16", "--batch", "64", "--width", "64", "-q"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env({"PLANT_MARKER": str(marker), **pythonpath_first(tmp_path)}),
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the run never reached its stage threads"
        # each stage thread takes 16 forwards (and as many gradients) at >= 0.2 s each: seconds left
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "shardcli: error: interrupted"
    assert "terminate called" not in err and "Fatal Python error" not in err


# --- MPMD over processes (launch -n N -- pipeline) --------------------------------------------------


@pytest.mark.parametrize("forward_only", [False, True], ids=["train", "forward-only"])
@pytest.mark.parametrize("make", [gpipe, one_f_one_b], ids=["gpipe", "1f1b"])
@pytest.mark.parametrize(("stages", "microbatches"), [(2, 4), (4, 8), (4, 2), (3, 5)])
def test_global_order_follows_each_schedule_and_sends_before_use(make, stages, microbatches, forward_only):
    from shardcli.training.pipeline.processes import global_order

    schedule = make(stages, microbatches, forward_only)
    order = global_order(schedule, forward_only)
    at = {step: k for k, step in enumerate(order)}
    assert len(at) == len(order)  # each step and transfer once
    for s, steps in enumerate(schedule):  # each stage keeps its schedule's order
        assert [(kind, m) for kind, t, m in order if t == s and kind in ("F", "B")] == list(steps)
    for kind, s, m in order:
        if kind == "F" and s > 0:
            assert at["send", s - 1, m] < at["F", s, m]
        if kind == "B" and s < stages - 1:
            assert at["send-grad", s + 1, m] < at["B", s, m]
        if kind == "send":
            assert at["F", s, m] < at["send", s, m]
        if kind == "send-grad":
            assert at["B", s, m] < at["send-grad", s, m]
    sends = [step for step in order if step[0] == "send"]
    assert len(sends) == (stages - 1) * microbatches


def _launch(*args: str):
    from conftest import run_shardcli

    return run_shardcli("launch", *args, timeout=240)


@pytest.mark.parametrize(
    ("processes", "schedule"),
    [pytest.param(2, "1f1b", id="2-processes"), pytest.param(4, "gpipe", id="4-processes")],
)
def test_mpmd_over_processes_is_verified_with_one_timeline(processes, schedule):
    flags = ("--mesh", "4x2", "--schedule", schedule, *SMALL, "--format", "json")
    proc = _launch("-n", str(processes), "--", "pipeline", *flags)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["runtime"]["process_count"] == processes
    assert doc["ok"] and [c["ok"] for c in doc["checks"]] == [True, True, True]
    owner = {d["id"]: d["process_index"] for d in doc["mesh"]["devices"]}
    stages = doc["mpmd"]["stages"]
    per_stage = [{owner[d] for d in s["device_ids"]} for s in stages]
    assert all(len(p) == 1 for p in per_stage)  # each stage on one process
    assert len({p for (p,) in per_stage}) == processes  # and every process holds a stage
    events = doc["mpmd"]["events"]
    kinds = {(e["kind"], e["stage"]) for e in events}
    assert kinds == {("F", s) for s in range(4)} | {("B", s) for s in range(4)} | {
        ("send", s) for s in range(3)
    } | {("send-grad", s) for s in range(1, 4)}
    assert len(events) == 4 * 4 * 2 + 3 * 4 * 2  # every step and transfer, from every process
    assert doc["mpmd"]["loss"] == pytest.approx(doc["reference_loss"], rel=1e-4)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ("-n", "2", "--", "pipeline", "--mesh", "4x2", "--impl", "spmd", *SMALL),
            "shardcli: error: --impl spmd runs in one process; over 2 processes give --impl mpmd",
            id="spmd",
        ),
        pytest.param(
            ("-n", "8", "--", "pipeline", "--mesh", "4x2", *SMALL),
            "shardcli: error: stage 0's sub-mesh spans processes 0, 1; over 8 processes give at most 4 (-n)",
            id="stage-over-two-processes",
        ),
    ],
)
def test_mpmd_over_processes_refuses_what_it_cannot_place(args, message):
    proc = _launch(*args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
