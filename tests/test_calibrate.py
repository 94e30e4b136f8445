"""`shardcli calibrate` and `--hardware FILE`: the profile's schema, damaged and foreign profiles (one
line, exit 2), a tiny calibration, and the estimate each of inspect, plan, matmul, einsum and
collective makes from a profile whose figures give a result one can work out by hand."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from shardcli.errors import ShardcliError
from shardcli.hardware.profile import (
    BusPoint,
    HardwareProfile,
    MatmulPoint,
    Measured,
    load_profile,
    profile_from_json,
    profile_json,
)

GFLOP = 1e9
MLP = ["examples/mistakes.py:matmul", "--mesh", "8", "--axes", "data"]
MLP_ARGS = ["--arg", "f32[64,1024]@data,None", "--arg", "f32[1024,1024]@None,None"]

# One GEMM point (so every GEMM runs at its 1 GFLOP/s), a 1 GB/s stream and bus, a call of 1 ms:
# on a CPU a step's estimate is 1 ms + FLOPs / 1e9 + bytes / 1e9 + bytes sent / 1e9.
KNOWN = HardwareProfile(
    device_kind="cpu",
    platform="cpu",
    device_count=8,
    versions=(("jax", "0.10.2"), ("jaxlib", "0.10.2")),
    created="2026-11-29T08:00:00+00:00",
    matmul=(MatmulPoint("float32", 256, GFLOP, "by hand", (0.03,)),),
    stream=Measured(1e9, "B/s", "by hand", (0.01,)),
    collectives=(BusPoint("psum", "x", 8, 1 << 20, 1e9, "by hand", (0.002,)),),
    host_to_device=Measured(2e9, "B/s", "by hand"),
    device_to_host=Measured(4e9, "B/s", "by hand"),
    call=Measured(1e-3, "s", "by hand", (1e-3,)),
    loop_trip=Measured(0.0, "s", "by hand"),
    not_measured=("kernel launches",),
)


def _write(tmp_path, profile: HardwareProfile | dict, name: str = "known.json") -> str:
    path = tmp_path / name
    document = profile if isinstance(profile, dict) else profile_json(profile)
    path.write_text(json.dumps(document))
    return str(path)


# --- the schema -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "profile",
    [
        pytest.param(KNOWN, id="cpu-all-figures"),
        pytest.param(
            replace(
                KNOWN, collectives=(), host_to_device=None, device_to_host=None, call=None, loop_trip=None
            ),
            id="one-device-no-optional-figures",
        ),
        pytest.param(
            replace(
                KNOWN,
                device_kind="NVIDIA H100 80GB HBM3",
                platform="gpu",
                matmul=(
                    MatmulPoint("bfloat16", 1024, 4e14, "x", (1e-5,)),
                    MatmulPoint("bfloat16", 8192, 6e14, "x", (1.8e-3,)),
                ),
                kernel=Measured(1.4e-6, "s", "chain", (1e-4,)),
            ),
            id="gpu-with-kernel-launches",
        ),
    ],
)
def test_a_profile_round_trips_through_its_json(profile):
    document = json.loads(json.dumps(profile_json(profile)))
    assert document["schema"] == "shardcli-hardware-profile" and document["version"] == 1
    assert profile_from_json(document, "p.json") == profile


def _damaged(**changes: object) -> dict:
    document = profile_json(KNOWN)
    for dotted, value in changes.items():
        *parents, key = dotted.split("__")
        node = document
        for p in parents:
            node = node[p]
        if value is None:
            del node[key]
        else:
            node[key] = value
    return document


@pytest.mark.parametrize(
    ("document", "message"),
    [
        pytest.param([1, 2], "schema must be 'shardcli-hardware-profile'", id="not-an-object"),
        pytest.param(_damaged(schema="other"), "schema must be 'shardcli-hardware-profile'", id="schema"),
        pytest.param(_damaged(version=2), "version must be 1", id="newer-version"),
        pytest.param(_damaged(device=None), "device must be an object", id="no-device"),
        pytest.param(_damaged(device__count=0), "device.count must be a positive integer", id="no-devices"),
        pytest.param(
            _damaged(figures__matmul=[]), "figures.matmul must be a list of at least one", id="no-gemm"
        ),
        pytest.param(
            _damaged(
                figures__matmul=[
                    {"dtype": "float32", "size": 8, "flops_per_s": -1, "how": "", "samples_s": []}
                ]
            ),
            "figures.matmul[0].flops_per_s must be a positive number",
            id="negative-rate",
        ),
        pytest.param(_damaged(figures__stream=None), "figures.stream must be an object", id="no-stream"),
        pytest.param(
            _damaged(figures__call={"value": 1, "unit": "s", "how": "x", "samples_s": ["a"]}),
            "figures.call.samples_s must be a list of seconds",
            id="samples-not-numbers",
        ),
    ],
)
def test_a_damaged_profile_is_refused_in_one_line(document, message):
    with pytest.raises(ShardcliError) as caught:
        profile_from_json(document, "p.json")
    text = str(caught.value)
    assert message in text and "\n" not in text and text.startswith("--hardware p.json is no usable")


# --- the command line: refusals -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("write", "args", "message"),
    [
        pytest.param(
            lambda p: p.write_text("{"),
            [*MLP, *MLP_ARGS],
            "--hardware: {path} is not JSON",
            id="inspect-not-json",
        ),
        pytest.param(
            lambda p: p.write_text(json.dumps(_damaged(version=9))),
            ["matmul", "--case", "local", "--dims", "64,64,64"],
            "is no usable hardware profile: version must be 1",
            id="matmul-wrong-version",
        ),
        pytest.param(
            lambda p: p.write_text(
                json.dumps(profile_json(replace(KNOWN, device_kind="NVIDIA H100 80GB HBM3")))
            ),
            [*MLP, *MLP_ARGS],
            "was measured on 'NVIDIA H100 80GB HBM3' devices, not this run's 'cpu'",
            id="inspect-another-kind",
        ),
        pytest.param(
            lambda p: p.write_text(json.dumps(profile_json(replace(KNOWN, device_kind="TPU v5 lite")))),
            ["collective", "psum"],
            "was measured on 'TPU v5 lite' devices, not this run's 'cpu'",
            id="collective-another-kind",
        ),
        pytest.param(
            lambda p: p.write_text(json.dumps(profile_json(KNOWN))),
            ["plan", "--preset", "tiny", "--target", "tpu-v5e:2x2"],
            "was measured on 'cpu' devices, not --target tpu-v5e:2x2's TPU v5e",
            id="plan-target-another-kind",
        ),
        pytest.param(
            lambda p: p.write_text(json.dumps(profile_json(KNOWN))),
            ["einsum", "ij,jk->ik", "--shape", "16x16", "--shape", "16x16", "--target", "tpu-v5e:2x2"],
            "not --target tpu-v5e:2x2's TPU v5e",
            id="einsum-target-another-kind",
        ),
    ],
)
def test_a_bad_profile_is_one_line_and_exit_2(cli, tmp_path, write, args, message):
    path = tmp_path / "bad.json"
    write(path)
    first = args[0] if args[0] in ("matmul", "collective", "plan", "einsum") else "inspect"
    rest = args[1:] if first != "inspect" else args
    out = cli([first, *rest, "--hardware", str(path)])
    assert out.exit_code == 2, out.output
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message.format(path=path) in lines[0], out.stderr
    assert "Traceback" not in out.output


# --- the command line: a profile's estimate ------------------------------------------------------


def test_without_a_profile_the_cpu_has_no_estimate_and_with_one_it_is_the_sum_worked_by_hand(cli, tmp_path):
    """The known profile: every GEMM at 1 GFLOP/s, the stream at 1 GB/s, a call 1 ms, all one after
    another on a CPU: estimate = 1 ms + FLOPs / 1e9 + bytes / 1e9 (nothing is sent: w is replicated)."""
    path = _write(tmp_path, KNOWN)
    plain = json.loads(cli(["inspect", *MLP, *MLP_ARGS, "-f", "json"]).stdout)
    assert plain["step_time"] is None
    out = cli(["inspect", *MLP, *MLP_ARGS, "-f", "json", "--hardware", path])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    flops, moved = doc["program"]["flops_per_device"], doc["program"]["bytes_accessed_per_device"]
    assert flops == 2 * 8 * 1024 * 1024  # x's 8 rows per device times the whole w
    step = doc["step_time"]
    assert step["estimate_s"] == pytest.approx(1e-3 + flops / 1e9 + moved / 1e9)
    assert step["chip"] == "profile known.json (cpu x8, 2026-11-29)"
    assert doc["hardware"]["peak_flop_per_s"] == GFLOP and "known.json" in doc["hardware"]["peak_source"]
    screen = cli(["inspect", *MLP, *MLP_ARGS, "--hardware", path, "--no-color"]).stdout
    assert "on profile known.json (cpu x8, 2026-11-29)" in screen
    assert "step time unknown" not in screen


def test_on_a_cpu_a_collective_s_own_bytes_are_in_its_busbw_not_also_in_the_stream(cli, tmp_path):
    """w sharded over data is all-gathered: 512 KiB in and 4 MiB out per device. XLA's bytes accessed
    count them, and the all-gather's busbw (measured on the same CPU, writing its output) moves them
    too: charged once, at the busbw. estimate = 1 ms + FLOPs / 1e9 + (bytes - 4.5 MiB) / 1e9 + the
    bytes sent (7/8 of 4 MiB) / 1e9."""
    path = _write(tmp_path, KNOWN)
    gathered = ["--arg", "f32[64,1024]@data,None", "--arg", "f32[1024,1024]@data,None"]
    doc = json.loads(cli(["inspect", *MLP, *gathered, "-f", "json", "--hardware", path]).stdout)
    flops, moved = doc["program"]["flops_per_device"], doc["program"]["bytes_accessed_per_device"]
    gathered_bytes = (1 << 22) + (1 << 19)
    assert moved > gathered_bytes
    sent = 7 * (1 << 22) // 8
    expected = 1e-3 + flops / 1e9 + (moved - gathered_bytes) / 1e9 + sent / 1e9
    assert doc["step_time"]["estimate_s"] == pytest.approx(expected)


def test_inspect_run_prints_the_estimate_beside_the_measured_step(cli, tmp_path):
    path = _write(tmp_path, KNOWN)
    out = cli(["inspect", *MLP, *MLP_ARGS, "--run", "--iters", "2", "--hardware", path, "--no-color"])
    assert out.exit_code == 0, out.output
    step = next(line for line in out.stdout.splitlines() if line.startswith("step time"))
    assert "profile known.json" in step and "p50" in out.stdout


def test_the_gemm_curve_sets_a_gemm_s_rate_by_its_size(cli, tmp_path):
    """matmul's model reads the curve at the GEMM's FLOPs per device: the 512x64x64 local case on
    the default 2x4 mesh is 256x64x16 per device, 2 * 64^3 FLOPs, the curve's 64 point (1 GFLOP/s) of a
    curve that is 4 GFLOP/s at 256: T_math = 2 * 64^3 / 1e9, not the peak's quarter of it."""
    curve = (
        MatmulPoint("float32", 64, 1 * GFLOP, "x", (0.1,)),
        MatmulPoint("float32", 256, 4 * GFLOP, "x", (0.1,)),
    )
    path = _write(tmp_path, replace(KNOWN, matmul=curve))
    args = ["matmul", "--case", "local", "--dims", "512,64,64", "--iters", "1", "--warmup", "1", "-f", "json"]
    doc = json.loads(cli([*args, "--hardware", path]).stdout)
    (run,) = doc["runs"]
    assert run["model"]["flops_per_device"] == 2 * 64**3
    assert run["model"]["t_math_s"] == pytest.approx(2 * 64**3 / 1e9)
    assert doc["config"]["hardware"]["peak_flop_per_s"] == 4 * GFLOP
    assert "known.json" in doc["config"]["hardware"]["peak_source"]
    plain = json.loads(cli(args).stdout)
    assert plain["config"]["hardware"]["peak_source"].startswith("measured:")  # the built-in CPU calibration


def test_einsum_reads_the_curve_and_names_the_profile(cli, tmp_path):
    path = _write(tmp_path, KNOWN)
    args = [
        "einsum",
        "ij,jk->ik",
        "--shape",
        "64x64",
        "--shape",
        "64x64",
        "--in",
        "x,None",
        "--in",
        "None,None",
    ]
    out = cli(
        [
            *args,
            "--mesh",
            "8",
            "--axes",
            "x",
            "--out",
            "x,None",
            "--iters",
            "1",
            "-f",
            "json",
            "--hardware",
            path,
        ]
    )
    assert out.exit_code == 0, out.output
    hardware = json.loads(out.stdout)["config"]["hardware"]
    assert hardware["peak_flop_per_s"] == GFLOP and "known.json" in hardware["peak_source"]


def test_collective_holds_busbw_against_the_profile_s(cli, tmp_path):
    path = _write(tmp_path, KNOWN)
    out = cli(["collective", "psum", "--size", "64K", "--iters", "2", "-f", "json", "--hardware", path])
    assert out.exit_code == 0, out.output
    text = out.stdout
    assert "1 GB/s busbw (profile known.json" in text


@pytest.mark.slow  # plan compiles the decoder for GPU hosts
def test_plan_with_a_one_host_profile_describes_a_target_of_many_hosts(cli, plan_cache, tmp_path):
    """A profile of one H100 host (2 GPUs) on gpu-h100:2x2: the axis within a host moves at the
    profile's bus bandwidth (100 GB/s), the axis across the two hosts at the table's network (50 GB/s);
    a step's launches are the profile's (50 us a call, 2 us a kernel)."""
    from shardcli.hardware.chips import CHIPS
    from shardcli.hardware.compilers import compiler_installed

    if not compiler_installed("cuda"):
        pytest.skip("the gpu extra: pip install -e '.[gpu]'")
    h100 = replace(
        KNOWN,
        device_kind="NVIDIA H100 80GB HBM3",
        platform="gpu",
        device_count=2,
        matmul=(MatmulPoint("bfloat16", 4096, 5e14, "x", (1e-3,)),),
        stream=Measured(3e12, "B/s", "x"),
        collectives=(BusPoint("psum", "x", 2, 1 << 26, 1e11, "x"),),
        kernel=Measured(2e-6, "s", "x"),
        call=Measured(5e-5, "s", "x"),
    )
    path = _write(tmp_path, h100, "h100.json")
    args = [
        "plan",
        "--preset",
        "tiny",
        "--target",
        "gpu-h100:2x2",
        "--batch",
        "2",
        "--remat",
        "full",
        "-n",
        "2",
    ]
    out = cli([*args, "-f", "json", "--hardware", path])
    assert out.exit_code == 0, out.output
    net = CHIPS["gpu-h100"].network_bytes_per_s
    assert net is not None
    rates = set()
    for c in (c for c in json.loads(out.stdout)["candidates"] if c["compiled"] is not None):
        assert "profile h100.json (NVIDIA H100 80GB HBM3 x2" in c["estimate"]["efficiency_source"]
        traffic = {t["axes"]: t["sent_bytes"] for t in c["compiled"]["traffic"] if t["sent_bytes"]}
        for axes, sent in traffic.items():
            rates.add(round(sent / c["estimate"]["t_comm_s"][axes] / 1e9))
    assert rates == {100, round(net.value / 1e9)}
    screen = " ".join(cli([*args, "--no-color", "--hardware", path]).stdout.split())
    assert "estimate = per-op roofline with the figures of profile h100.json" in screen
    assert "measured on one H200" not in screen


# --- a tiny calibration ---------------------------------------------------------------------------


def test_a_quick_calibration_writes_a_profile_that_loads(cli, tmp_path):
    path = tmp_path / "here.json"
    out = cli(["calibrate", "--quick", "--mesh", "2x4", "--out", str(path), "--no-color"])
    assert out.exit_code == 0, out.output
    assert "calibrate: matmul float32 16, 32" in out.stderr  # progress on stderr
    assert f"profile written to {path}" in out.stdout
    profile = load_profile(str(path))
    assert (profile.device_kind, profile.platform, profile.device_count) == ("cpu", "cpu", 8)
    assert [(p.dtype, p.size) for p in profile.matmul] == [("float32", 16), ("float32", 32), ("bfloat16", 16)]
    assert all(p.flops_per_s > 0 and len(p.samples) == 3 for p in profile.matmul)
    assert [(b.axis, b.group_size) for b in profile.collectives] == [("x", 2), ("y", 4)]
    assert profile.kernel is None and any("kernel launches" in n for n in profile.not_measured)
    assert dict(profile.versions)["jax"]
    # the profile it wrote gives the CPU an estimate
    doc = json.loads(cli(["inspect", *MLP, *MLP_ARGS, "-f", "json", "--hardware", str(path)]).stdout)
    assert doc["step_time"]["estimate_s"] > 0


def test_calibrate_times_each_collective_with_a_fresh_output_as_a_jitted_program_does(
    cli, tmp_path, monkeypatch
):
    # A jitted program's collective writes a new output each call; nccl-tests' one donated buffer
    # never pays for new memory (on 8 faked CPU devices an all-gather of 4 MiB per device: 121 ms
    # with the donated buffer, 530 ms with a fresh one, 2026-11-29). The profile must time the first.
    from shardcli.playground.collective import run as collective_run
    from shardcli.specs.runs import OutBuffer

    seen = []
    original = collective_run.run_collective

    def recording(request, **kwargs):
        seen.append(request.out_buffer)
        return original(request, **kwargs)

    monkeypatch.setattr(collective_run, "run_collective", recording)
    path = tmp_path / "here.json"
    out = cli(["calibrate", "--quick", "--mesh", "8", "--out", str(path), "--no-color"])
    assert out.exit_code == 0, out.output
    assert seen == [OutBuffer.FRESH]
    assert "a fresh output per call" in load_profile(str(path)).collectives[0].how


# --- a collective timed alone ----------------------------------------------------------------------

MIB = 1 << 20


@pytest.mark.parametrize(
    "fastest, accessed, hlo, stream, alone, said",
    [
        # no cost analysis, or no stream: the run as it is
        (0.010, None, (("all-to-all", 1, 4 * MIB),), 1e9, 0.010, False),
        (0.010, 24 * MIB, (("all-to-all", 1, 4 * MIB),), 0.0, 0.010, False),
        # a psum that does nothing else: its operand and result are all XLA counts
        (0.010, 8 * MIB, (("all-reduce", 1, 4 * MIB),), 1e9, 0.010, False),
        # an all-to-all's slices and concatenation (16 MiB beyond its 8) at 4 GiB/s: 3.9 ms of 10
        (0.010, 24 * MIB, (("all-to-all", 1, 4 * MIB),), 4096 * MIB, 0.010 - 16 / 4096, True),
        # an all-gather's operand is 1/8 of its result: 4.5 MiB its own, 3.5 MiB around it
        (0.010, 8 * MIB, (("all-gather", 1, 4 * MIB),), 1024 * MIB, 0.010 - 3.5 / 1024, True),
        # never below a quarter of the run, however slow the stream was measured
        (0.010, 1024 * MIB, (("all-to-all", 1, 4 * MIB),), 1e9, 0.0025, True),
    ],
)
def test_a_collective_is_timed_alone_less_what_its_program_does_around_it(
    fastest, accessed, hlo, stream, alone, said
):
    from shardcli.analysis.collectives import HloCollective
    from shardcli.playground.calibrate import collective_alone

    found, how = collective_alone(fastest, accessed, tuple(HloCollective(*h) for h in hlo), 8, stream)
    assert found == pytest.approx(alone)
    assert bool(how) is said
    if said:
        assert "less the program's other ops" in how


def test_the_collective_playground_reads_its_program_s_bytes_accessed(cli, tmp_path):
    # On a CPU the all-to-all's program slices its input and concatenates what arrives (8 MiB
    # around the 4 MiB all-to-all's own operand and result at 2 MiB per device)
    from shardcli.playground.collective.entries import CollectiveParams
    from shardcli.playground.collective.request import CollectiveRequest, validate_request
    from shardcli.playground.collective.run import run_collective
    from shardcli.specs.meshes import parse_mesh
    from shardcli.specs.runs import OutBuffer, RunOptions
    from shardcli.specs.values import parse_dtype, parse_init

    request = CollectiveRequest(
        collective="all_to_all",
        mesh=parse_mesh("8", "x"),
        params=CollectiveParams(axes=("x",)),
        dtype=parse_dtype("float32"),
        init=parse_init("ones"),
        sizes=(2 * MIB,),
        out_buffer=OutBuffer.FRESH,
        warmup=1,
        iters=1,
        show_values=False,
        options=RunOptions(),
    )
    validate_request(request)
    placed = run_collective(request).runs[0].placements[0]
    own = sum(2 * h.result_bytes for h in placed.hlo)
    assert placed.bytes_accessed is not None and placed.bytes_accessed > own


@pytest.mark.parametrize(
    ("platform", "size", "chain"),
    [
        # on an accelerator a small GEMM alone is a call's jitter: chained to a 4096^3 GEMM's FLOPs
        ("gpu", 256, 64),
        ("gpu", 1024, 64),
        ("gpu", 2048, 8),
        ("gpu", 4096, 1),
        ("gpu", 8192, 1),
        ("tpu", 2048, 8),
        # on a CPU every GEMM alone, as the estimate's sum of ops and calls has it
        ("cpu", 64, 1),
        ("cpu", 1024, 1),
    ],
)
def test_small_gemms_are_chained_on_an_accelerator_alone_on_a_cpu(platform, size, chain):
    from shardcli.playground.calibrate import chain_length, sizes_for

    assert chain_length(size, sizes_for(platform)) == chain


def test_the_stream_is_timed_beyond_a_call():
    from shardcli.playground.calibrate import stream_measured

    # 1 GiB in and out in a fastest run of 0.7 ms, 0.065 ms of it the call (an H200's run)
    stream = stream_measured((0.8e-3, 0.7e-3, 0.75e-3), 1 << 30, 0.065e-3, 1)
    assert stream.value == pytest.approx(2 * (1 << 30) / 0.635e-3)
    assert stream.samples == (0.8e-3, 0.7e-3, 0.75e-3) and "a call" in stream.how
    # never more than twice the run's own rate, however slow the call was measured
    assert stream_measured((1e-3,), 1 << 20, 5e-3, 1).value == pytest.approx(2 * (1 << 20) / 0.5e-3)


@pytest.mark.parametrize(
    ("fastest", "kernels", "kernel_s", "per_trip"),
    [
        # an H200's loop: 7.14 ms for 1024 trips, a call of 65 us, 3,074 kernels at 1.32 us each
        (7.14e-3, 3074, 1.32e-6, (7.14e-3 - 65e-6 - 3073 * 1.32e-6) / 1024),
        # a CPU launches no kernels: the trips are all beyond the call
        (7.14e-3, 0, 0.0, (7.14e-3 - 65e-6) / 1024),
        # never below 0
        (1e-3, 3074, 1.32e-6, 0.0),
    ],
)
def test_a_loop_trip_is_what_a_trip_costs_beyond_its_kernels(fastest, kernels, kernel_s, per_trip):
    from shardcli.playground.calibrate import loop_trip_measured

    trip = loop_trip_measured((fastest * 1.1, fastest), 1024, 65e-6, kernels, kernel_s)
    assert trip.value == pytest.approx(per_trip)
    assert ("kernels" in trip.how) is bool(kernel_s)
