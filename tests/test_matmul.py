"""`shardcli matmul`: every case x impl verified on 1-D and 2-D meshes, the HLO each makes, the cost
model, bad input, and the JSON/CSV contracts."""

from __future__ import annotations

import csv
import dataclasses
import io
import json

import pytest

from shardcli.errors import ShardcliError
from shardcli.hardware.costmodel import CommCost, Hardware, estimate, lookup_peak, table_hardware
from shardcli.playground.matmul.cases import IMPLS, MATMUL_CASES, Axes, flops_per_device
from shardcli.playground.matmul.request import MatmulRequest, validate_request
from shardcli.playground.matmul.run import run_matmul, tolerance_for
from shardcli.render.matmul import CSV_COLUMNS
from shardcli.results.documents import document_problems
from shardcli.specs.meshes import parse_mesh
from shardcli.specs.runs import Platform, RunOptions
from shardcli.specs.values import parse_dims, parse_dtype, parse_scales, scale_dims

DIMS = (16, 32, 16)
FAST = dict(warmup=0, iters=1, peak_tflops=1.0, link_gbps=1.0)
FAST_ARGS = ["--dims", "16,32,16", "--warmup", "0", "--iters", "1", "--peak-tflops", "1", "--link-gbps", "1"]


def request(cases=("all",), mesh="2x4", axes=None, dtype="float32", impls=IMPLS, **kw) -> MatmulRequest:
    return MatmulRequest(
        cases=tuple(cases),
        mesh=parse_mesh(mesh, axes),
        dtype=parse_dtype(dtype),
        impls=impls,
        options=RunOptions(platform=Platform.CPU),
        **{"dims": DIMS, **FAST, **kw},
    )


@pytest.fixture(scope="module")
def every_case():
    """Every case x every impl, run once per mesh and shared by the table-driven tests below."""
    return {mesh: run_matmul(request(mesh=mesh)) for mesh in ("4", "2x4")}


def _impl(result, case, impl):
    run = next(r for r in result.runs if r.case.name == case)
    return run, next((i for i in run.impls if i.impl == impl), None)


CASE_IMPLS = [
    pytest.param(mesh, case, impl, id=f"{mesh}-{case}-{impl}")
    for mesh in ("4", "2x4")
    for case in MATMUL_CASES
    for impl in IMPLS
]


@pytest.mark.slow
@pytest.mark.parametrize("mesh,case,impl", CASE_IMPLS)
def test_every_case_and_impl_matches_numpy(every_case, mesh, case, impl):
    run, result = _impl(every_case[mesh], case, impl)
    if MATMUL_CASES[case].needs_y and mesh == "4":
        assert run.skipped and "needs a 2-D mesh" in run.skipped
        assert result is None
        return
    if case == "illegal" and impl in ("manual", "explicit"):
        assert result.status == "refused" and result.expected_refusal
        return
    assert result.status == "ok", result.message
    assert result.wrong == 0
    assert 0 <= result.max_rel_err <= run.tolerance
    assert result.timing is not None and result.achieved_flops > 0


# What the manual (shard_map) form of each case must compile to: its collectives and nothing else.
MANUAL_OPS = {
    "local": set(),
    "allgather": {"all-gather"},
    "allreduce": {"all-reduce"},
    "reducescatter": {"reduce-scatter"},
    "gather-a": {"all-gather"},
    "gather-b": {"all-gather"},
    "mac": set(),
    "weight-gather": {"all-gather"},
    "collective": {"collective-permute"},  # the ring replaces the all-gather
    "row-parallel": {"all-reduce"},
}


def test_manual_ops_cover_every_runnable_case():
    assert set(MANUAL_OPS) == {n for n, c in MATMUL_CASES.items() if not c.illegal}


@pytest.mark.parametrize(
    "mesh,case",
    [
        pytest.param(mesh, case, id=f"{mesh}-{case}")
        for mesh in ("4", "2x4")
        for case in sorted(MANUAL_OPS)
        if mesh == "2x4" or not MATMUL_CASES[case].needs_y
    ],
)
def test_manual_hlo_has_exactly_the_case_collectives(every_case, mesh, case):
    _, result = _impl(every_case[mesh], case, "manual")
    assert {h.op for h in result.hlo} == MANUAL_OPS[case]


def test_the_compiler_inserts_collectives_for_auto_and_explicit(every_case):
    result = every_case["2x4"]
    for impl in ("auto", "explicit"):
        assert {h.op for h in _impl(result, "local", impl)[1].hlo} == set()
        assert "all-reduce" in {h.op for h in _impl(result, "allreduce", impl)[1].hlo}


def test_illegal_case_is_a_lesson(every_case):
    run, explicit = _impl(every_case["2x4"], "illegal", "explicit")
    assert "illegally sharded result" in explicit.message
    _, manual = _impl(every_case["2x4"], "illegal", "manual")
    assert "duplicate entries" in manual.message
    # Left to itself, the compiler resolves the conflict by moving data.
    _, auto = _impl(every_case["2x4"], "illegal", "auto")
    assert auto.status == "ok" and auto.wrong == 0 and auto.hlo
    assert run.model is None


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", [c for c in MATMUL_CASES if c != "illegal"])
def test_half_precision_results_are_within_tolerance(case, dtype):
    # every impl: the compiler may pick another strategy than the manual form (for weight-gather
    # it adds partial products across X instead of gathering W), and the tolerance must allow it
    result = run_matmul(request(cases=(case,), dtype=dtype, dims=(32, 256, 32)))
    run = result.runs[0]
    assert [(i.impl, i.wrong) for i in run.impls] == [(i, 0) for i in IMPLS], run.tolerance


# --- wrong results are caught ---------------------------------------------------------------------


def _planted(monkeypatch, case: str, body):
    bad = dataclasses.replace(MATMUL_CASES[case], manual=lambda axes: body(axes))
    monkeypatch.setitem(MATMUL_CASES, case, bad)


def test_a_missing_psum_is_caught(monkeypatch, cli):
    from jax import lax

    # pmax instead of psum: type-correct (the result is invariant over X), numerically wrong.
    _planted(monkeypatch, "allreduce", lambda axes: lambda a, b: lax.pmax(a @ b, axes.x))
    result = run_matmul(request(cases=("allreduce",), impls=("manual",)))
    assert result.wrong > 0
    out = cli(["matmul", "--case", "allreduce", *FAST_ARGS])
    assert out.exit_code == 1
    assert "WRONG: elements beyond the tolerance in allreduce/manual" in out.stdout


@pytest.mark.parametrize("dtype,factor", [("float32", 1 + 1e-4), ("bfloat16", 1 + 1 / 16)])
def test_a_small_relative_error_is_caught(monkeypatch, dtype, factor):
    from jax import lax

    _planted(monkeypatch, "allreduce", lambda axes: lambda a, b: lax.psum(a @ b, axes.x) * factor)
    result = run_matmul(request(cases=("allreduce",), impls=("manual",), dtype=dtype, init="ones"))
    assert result.wrong == DIMS[0] * DIMS[2] * 8  # every element on every device


def test_tolerance_is_dtype_aware():
    axes = Axes(x="x", nx=4, y=None)
    f32, _ = tolerance_for(MATMUL_CASES["allreduce"], (16, 512, 16), axes, parse_dtype("float32"), "cpu")
    bf16, text = tolerance_for(MATMUL_CASES["allreduce"], (16, 512, 16), axes, parse_dtype("bfloat16"), "cpu")
    # float32 accumulation over J=512 plus 4 partial sums and the final rounding in the output dtype
    assert f32 == pytest.approx(513 * 2**-24 + 5 * 2**-24)
    assert bf16 == pytest.approx(513 * 2**-24 + 5 * 2**-8)
    assert "r=5 rounding(s) to bfloat16" in text
    gpu, gpu_text = tolerance_for(MATMUL_CASES["local"], (16, 512, 16), axes, parse_dtype("float32"), "gpu")
    assert gpu == pytest.approx(513 * 2**-24 + 2 * 2**-11 + 2 * 2**-24) and "TF32" in gpu_text


@pytest.mark.parametrize(
    "cost, expected",
    [
        pytest.param({"flops": 2048.0, "bytes accessed": 96.0}, (2048.0, 96.0), id="cpu"),
        pytest.param([{"flops": 2048.0}], (2048.0, None), id="list-without-bytes"),
        pytest.param({"flops": -1.0, "bytes accessed": -1.0}, (None, None), id="gpu-cublas-dot"),
        pytest.param({"flops": float("nan")}, (None, None), id="nan"),
        pytest.param(None, (None, None), id="none"),
    ],
)
def test_xla_cost_figures_the_backend_does_not_know_are_none(cost, expected):
    """XLA on an H100 gave flops -1 and bytes -1 for a dot it hands to cuBLAS; the table shows '-'."""
    from types import SimpleNamespace

    from shardcli.analysis.program import read_cost

    assert read_cost(SimpleNamespace(cost_analysis=lambda: cost)) == expected


# --- the cost model -------------------------------------------------------------------------------

AXES_2X4 = Axes(x="x", nx=2, y="y", ny=4)

# case: (model FLOPs per device, [(op, axis, bytes each device sends)]) for I,J,K = 16,32,16 float32
COSTS = {
    "local": (2 * 8 * 32 * 4, []),
    "allgather": (2 * 16 * 32 * 16, [("all-gather", "x", 16 * 32 * 4 // 2)]),
    "allreduce": (2 * 16 * 16 * 16, [("all-reduce", "x", 2 * 16 * 16 * 4 // 2)]),
    "reducescatter": (2 * 16 * 16 * 16, [("reduce-scatter", "x", 16 * 16 * 4 // 2)]),
    "gather-a": (2 * 16 * 32 * 8, [("all-gather", "x", 16 * 32 * 4 // 2)]),
    "gather-b": (2 * 8 * 32 * 16, [("all-gather", "x", 32 * 16 * 4 // 2)]),
    "mac": (2 * 8 * 32 * 4 + 8 * 4, []),
    "weight-gather": (2 * 8 * 32 * 16, [("all-gather", "x", 32 * 16 * 4 // 2)]),
    "collective": (2 * 16 * 32 * 8, [("collective-permute", "x", 16 * 32 * 4 // 2)]),
    "row-parallel": (2 * 8 * 8 * 16, [("all-reduce", "y", 2 * 3 * 8 * 16 * 4 // 4)]),
}


@pytest.mark.parametrize("case", sorted(COSTS))
def test_cost_model_counts_by_hand(every_case, case):
    run, _ = _impl(every_case["2x4"], case, "manual")
    flops, comm = COSTS[case]
    assert run.model.flops_per_device == flops
    assert [(c.op, c.axis, c.bytes_per_device) for c in run.model.comm] == comm
    # --peak-tflops 1 and --link-gbps 1
    assert run.model.t_math_s == pytest.approx(flops / 1e12)
    assert run.model.t_comm_s == pytest.approx(sum(c[2] for c in comm) / 1e9)


def test_xla_cost_analysis_agrees_with_the_model_where_there_is_no_loop(every_case):
    run, manual = _impl(every_case["2x4"], "allreduce", "manual")
    # the matmul's FLOPs plus a few adds of the all-reduce
    assert run.model.flops_per_device <= manual.xla_flops < 1.1 * run.model.flops_per_device


def test_roofline_bound_and_dominant():
    hw = Hardware(peak_flops=1e12, link_bytes_per_s=1e9, peak_source="t", link_source="t")
    compute_bound = estimate(10**9, (CommCost("all-reduce", "x", 2, 100_000),), hw)
    assert compute_bound.t_bound_s == pytest.approx(1e-3) and compute_bound.dominant == "compute"
    assert compute_bound.t_sum_s == pytest.approx(1e-3 + 1e-4)
    comm_bound = estimate(10**6, (CommCost("all-gather", "x", 2, 10**7),), hw)
    assert comm_bound.t_bound_s == pytest.approx(1e-2) and comm_bound.dominant == "communication"
    assert estimate(10**6, (), hw).t_comm_s == 0.0


@pytest.mark.parametrize(
    "kind,label",
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", None),  # lower clocks and no NVLink switch: not the SXM figures
        ("NVIDIA H100 NVL", None),
        ("NVIDIA H200", "H200 SXM"),
        ("TPU v4", "TPU v4"),
        ("TPU v5 lite", "TPU v5e"),
        ("TPU v5p", "TPU v5p"),
        ("TPU v6 lite", "TPU v6e"),
        ("cpu", None),
    ],
)
def test_device_table_lookup(kind, label):
    entry = lookup_peak(kind)
    assert (entry.label if entry else None) == label


def test_device_table_picks_the_dtype_peak():
    hw = table_hardware("NVIDIA H100 80GB HBM3", "bfloat16")
    assert hw.peak_flops == pytest.approx(989e12) and hw.link_bytes_per_s == pytest.approx(450e9)
    f32 = table_hardware("NVIDIA H100 80GB HBM3", "float32")
    assert f32.peak_flops == pytest.approx(495e12) and "TF32" in f32.peak_source  # JAX's default precision
    assert table_hardware("NVIDIA H200", "float64").peak_flops == pytest.approx(67e12)
    tpu = table_hardware("TPU v5p", "float64")
    assert tpu.peak_flops is None
    assert tpu.peak_source == "table: TPU v5p has no float64 figure; give --peak-tflops"


def test_cpu_calibration_is_measured_and_labelled():
    result = run_matmul(request(cases=("local",), impls=("manual",), peak_tflops=None, link_gbps=None))
    hw = result.hardware
    assert hw.peak_source.startswith("measured:") and hw.link_source.startswith("measured:")
    assert hw.peak_flops > 0 and hw.link_bytes_per_s > 0


def test_flags_override_the_model_inputs():
    result = run_matmul(request(cases=("local",), impls=("manual",), peak_tflops=2.0, link_gbps=3.0))
    assert result.hardware.peak_flops == 2e12 and result.hardware.peak_source == "--peak-tflops"
    assert result.hardware.link_bytes_per_s == 3e9


# --- cases, notation, parsing ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "case,notation",
    [
        ("allreduce", "A[I,J_X] . B[J_X,K] -> C[I,K]"),
        ("local", "A[I_X,J] . B[J,K_Y] -> C[I_X,K_Y]"),
        ("mac", "x[B_X,D] . W[D,F_Y] + b[F_Y] -> y[B_X,F_Y]"),
        ("illegal", "A[I_X,J] . B[J,K_X] -> C[I_X,K_X]"),
    ],
)
def test_notation(case, notation):
    assert MATMUL_CASES[case].notation() == notation


def test_flops_drop_y_on_a_1d_mesh():
    one_d = Axes(x="x", nx=4, y=None)
    assert flops_per_device(MATMUL_CASES["local"], DIMS, one_d) == 2 * 4 * 32 * 16


@pytest.mark.parametrize(
    "text,expected",
    [("1:8", (1, 2, 4, 8)), ("1:16:x4", (1, 4, 16)), ("0.5,1,2", (0.5, 1, 2)), ("2", (2,))],
)
def test_parse_scales(text, expected):
    assert parse_scales(text) == expected


def test_scale_dims_must_stay_whole():
    assert scale_dims((16, 32, 16), 0.5) == (8, 16, 8)
    with pytest.raises(ShardcliError, match="makes I=3 into 1.5"):
        scale_dims((3, 4, 4), 0.5)


def test_parse_dims():
    assert parse_dims("256, 512,256") == (256, 512, 256)
    for bad in ("256,512", "a,b,c", "0,1,1", "1,2,3,4"):
        with pytest.raises(ShardcliError, match="three positive integers I,J,K"):
            parse_dims(bad)


def test_validation_needs_no_devices():
    plan = validate_request(request(cases=("all",), mesh="8"))
    skipped = {c.name: why for c, why in plan.cases if why}
    assert list(skipped) == ["row-parallel"]
    assert plan.impls["illegal"] == IMPLS  # as asked
    default = validate_request(request(cases=("illegal", "allreduce"), impls=None))
    assert default.impls == {"illegal": ("explicit",), "allreduce": ("manual",)}


# --- the CLI --------------------------------------------------------------------------------------

BAD = [
    pytest.param(
        ["--case", "nope"], "--case 'nope' is not a matmul case; choose one of local,", id="unknown-case"
    ),
    pytest.param(
        ["--case", "allreduce", "--dims", "16,30,16", "--mesh", "4"],
        "J=30 is not divisible by the 4 devices of mesh axis x, which case allreduce shards J over",
        id="not-divisible",
    ),
    pytest.param(
        ["--case", "row-parallel", "--mesh", "8"],
        "case row-parallel needs a 2-D mesh (it shards over X and Y); this mesh has one axis",
        id="needs-2d",
    ),
    pytest.param(
        ["--case", "allgather", "--dims", "200000,200000,200000"],
        "use a smaller size",
        id="too-big-for-memory",
    ),
    pytest.param(["--dims", "16x32x16"], "give three positive integers I,J,K", id="dims-format"),
    pytest.param(
        ["--impl", "magic"], "--impl 'magic' is not valid; choose one of manual, auto, explicit", id="impl"
    ),
    pytest.param(["--dtype", "int32"], "--dtype int32 is not supported by matmul", id="int-dtype"),
    pytest.param(["--sizes", "1:x"], "every scale must be a positive number", id="bad-scale"),
    pytest.param(["--sizes", "0.3"], "not a whole number", id="scale-breaks-dims"),
    pytest.param(["--peak-tflops", "-1"], "--peak-tflops -1 is not valid", id="negative-peak"),
    pytest.param(["--iters", "0"], "--iters 0 is not valid", id="iters"),
    pytest.param(["--case", "local,local"], "--case 'local,local' names 'local' twice", id="case-twice"),
    pytest.param(["--impl", "auto,manual,auto"], "names 'auto' twice", id="impl-twice"),
    pytest.param(["--format", "xml"], "--format 'xml' is not valid", id="format"),
]


@pytest.mark.parametrize("args,message", BAD)
def test_bad_input_exits_2_with_one_line(cli, args, message):
    result = cli(["matmul", *FAST_ARGS, *args] if "--dims" not in args else ["matmul", *args, "--iters", "1"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardcli: error: "), result.stderr
    assert message in lines[0]
    assert "Traceback" not in result.output


def test_single_case_shows_layouts_compiler_timing_and_model(cli):
    out = cli(["matmul", "--case", "allreduce", "--impl", "all", *FAST_ARGS], env={"COLUMNS": "160"})
    assert out.exit_code == 0, out.output
    text = out.stdout
    for expected in (
        "allreduce: A[I,J_X] . B[J_X,K] -> C[I,K]",
        "A: global (16, 32), spec None,x, local (16, 16)",
        "B: global (32, 16), spec x,None, local (16, 16)",
        "C: global (16, 16), spec P() (replicated), local (16, 16)",
        "what the compiler did",
        "all-reduce x1",
        "T_math = FLOPs / peak",
        "bound max(T_math, T_comm)",
        "peak 1 TFLOP/s (--peak-tflops)",
        "verified: every device's block of every result matches NumPy",
    ):
        assert expected in text, expected
    for impl in IMPLS:
        assert f" {impl} " in text


def test_case_illegal_exits_0_and_shows_the_error(cli):
    out = cli(["matmul", "--case", "illegal", *FAST_ARGS], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "refused* (as expected)" in out.stdout and "illegally sharded result" in out.stdout


def test_case_all_is_one_comparison_table(cli):
    out = cli(["matmul", "--mesh", "8", *FAST_ARGS], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    for name in MATMUL_CASES:
        assert name in out.stdout
    assert "n/a (1-D mesh)" in out.stdout  # row-parallel is shown, not dropped


def test_json_contract(cli):
    out = cli(
        ["matmul", "--case", "allreduce,illegal", "--impl", "manual,auto", "--format", "json", *FAST_ARGS]
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert document_problems(doc, "matmul") == []  # exactly the keys shardcli/results/documents.py gives
    assert doc["command"] == "matmul"
    run = doc["runs"][0]
    assert run["model"] is not None  # so its keys were checked
    impl = run["impls"][0]
    assert run["operands"][0] == {
        "name": "A",
        "shape": [16, 32],
        "spec": [None, ["x"]],
        "local_shape": [16, 16],
    }
    assert run["dims"] == {"I": 16, "J": 32, "K": 16}
    assert impl["hlo_collectives"][0]["op"] == "all-reduce"
    assert doc["summary"]["wrong"] == 0
    assert doc["summary"]["refused"] == [
        {
            "case": "illegal",
            "impl": "manual",
            "expected": True,
            "message": doc["runs"][1]["impls"][0]["message"],
        }
    ]


def test_csv_sweep(cli):
    out = cli(["matmul", "--case", "allreduce", "--sizes", "1,2", "--format", "csv", *FAST_ARGS])
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [(r["I"], r["J"], r["K"]) for r in rows] == [("16", "32", "16"), ("32", "64", "32")]
    assert all(r["status"] == "ok" and r["wrong"] == "0" and float(r["time_p50_us"]) > 0 for r in rows)
    assert rows[0]["hlo_collectives"] == "all-reduce:1"


def test_help_lists_every_case(cli):
    out = cli(["matmul", "--help"], env={"COLUMNS": "200"})
    assert out.exit_code == 0
    for case in MATMUL_CASES.values():
        assert case.name in out.stdout


@pytest.mark.slow
def test_real_start_up_fakes_the_devices(shardcli_subprocess):
    proc = shardcli_subprocess(
        "matmul", "--case", "row-parallel", "--mesh", "2x2", "--format", "json", *FAST_ARGS, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["runtime"]["device_count"] == 4 and doc["runtime"]["faked"] is True
    assert doc["runs"][0]["impls"][0]["hlo_collectives"][0]["op"] == "all-reduce"
