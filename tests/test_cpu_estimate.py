"""Two causes of a wrong CPU step-time estimate (issue 53), each pinned on a small program.

- A fusion that takes a slice of a parameter through a bitcast (the layout change's eight slice
  fusions feeding its all-to-all) reads the slice, not the parameter: XLA's cost analysis charges
  such a parameter whole (it charges a slice of the parameter itself as the slice; measured below).
- The profile's GEMM curve is read at each dot's own FLOPs, not at the program's FLOPs per launch.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardcli.analysis.op_roofline import op_roofline
from shardcli.analysis.program import analyze_compiled, analyze_text
from shardcli.hardware.calibration import LaunchCosts, OpEfficiency
from shardcli.hardware.chips import Figure

MIB = 1 << 20
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
_MODULE = """HloModule m
%f (p: f32[512,4096]) -> OUT {
  %p = f32[512,4096]{1,0} parameter(0)
  BODY
}
ENTRY %main (param: f32[512,4096]) -> OUT {
  %param = f32[512,4096]{1,0} parameter(0)
  ROOT %fu = OUT fusion(%param), kind=kLoop, calls=%f
}
"""
_ONE = "f32[512,1,512]{2,1,0}"
_TWO = "(f32[512,1,512]{2,1,0}, f32[512,512]{1,0})"
_BITCAST_SLICE = (
    "%b = f32[512,8,512]{2,1,0} bitcast(%p)\n"
    "  ROOT %s = f32[512,1,512]{2,1,0} slice(%b), slice={[0:512], [7:8], [0:512]}"
)
_MIXED = (
    "%b = f32[512,8,512]{2,1,0} bitcast(%p)\n"
    "  %s = f32[512,1,512]{2,1,0} slice(%b), slice={[0:512], [7:8], [0:512]}\n"
    "  %t = f32[512,512]{1,0} slice(%p), slice={[0:512], [0:512]}\n"
    f"  ROOT %r = {_TWO} tuple(%s, %t)"
)
_DIRECT = (
    "%s = f32[512,512]{1,0} slice(%p), slice={[0:512], [0:512]}\n"
    "  ROOT %b = f32[512,1,512]{2,1,0} bitcast(%s)"
)
_WHOLE = (
    "%b = f32[512,8,512]{2,1,0} bitcast(%p)\n"
    "  %s = f32[512,1,512]{2,1,0} slice(%b), slice={[0:512], [7:8], [0:512]}\n"
    "  %n = f32[512,8,512]{2,1,0} negate(%b)\n"
    "  ROOT %r = (f32[512,1,512]{2,1,0}, f32[512,8,512]{2,1,0}) tuple(%s, %n)"
)


@pytest.mark.parametrize(
    ("out", "body", "xla_mib", "read_mib"),
    [
        # XLA: the whole 8 MiB parameter and the 1 MiB result; it reads 1 MiB
        pytest.param(_ONE, _BITCAST_SLICE, 9, 2, id="bitcast-then-slice"),
        # XLA: 8 MiB whole (the bitcast) + 1 MiB (the slice of the parameter itself) + 2 MiB out
        pytest.param(_TWO, _MIXED, 11, 4, id="bitcast-slice-and-direct-slice"),
        pytest.param(_ONE, _DIRECT, 2, 2, id="direct-slice-already-the-slice"),
        pytest.param(
            "(f32[512,1,512]{2,1,0}, f32[512,8,512]{2,1,0})", _WHOLE, 17, 17, id="one-use-reads-it-whole"
        ),
    ],
)
def test_a_fusion_that_slices_a_parameter_through_a_bitcast_is_charged_the_slice(
    out, body, xla_mib, read_mib
):
    text = _MODULE.replace("BODY", body).replace("OUT", out)
    analysis = analyze_text(text, None, None, platform="cpu")
    assert analysis.xla_bytes_accessed == xla_mib * MIB  # XLA's own count, as it is
    assert analysis.bytes_accessed == read_mib * MIB
    # another backend's cost analysis is not corrected (its rule was not measured)
    assert analyze_text(text, None, None).bytes_accessed == xla_mib * MIB


def test_the_layout_change_reads_each_slice_of_its_block_once(cli):
    """f32[4096,4096] over 8 devices: eight slice fusions read 1 MiB each of the 8 MiB block and
    write 1 MiB (16 MiB), the all-to-all 8 MiB in and out, the copy after it the same: 48 MiB, where
    XLA's cost analysis charges every slice fusion the whole block (104 MiB)."""
    args = ["examples/mistakes.py:layout_change", "--mesh", "8", "--axes", "data"]
    out = cli(["inspect", *args, "--arg", "f32[4096,4096]@data,None", "-f", "json"])
    assert out.exit_code == 0, out.output
    program = json.loads(out.stdout)["program"]
    assert program["xla_bytes_accessed_per_device"] == 104 * MIB
    assert program["bytes_accessed_per_device"] == 48 * MIB


def _mlp_analysis():
    """examples/mlp.py's train step on 2x4 with bench/calibrated_cpu.py's arguments: five dots of
    128 x 512 x 1024 per device, 2 x that = 134 MFLOP each, in 675 MFLOP over 15 launches."""
    spec = importlib.util.spec_from_file_location("mlp_example", EXAMPLES / "mlp.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)

    def arg(shape, spec):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))

    args = (
        arg((256, 1024), P("data", None)),
        arg((1024, 2048), P(None, "model")),
        arg((2048, 1024), P("model", None)),
    )
    return analyze_compiled(example.train_step.lower(*args).compile(), mesh)


DOT = 2 * 128 * 512 * 1024


def test_each_dot_s_flops_are_read_from_the_text():
    analysis = _mlp_analysis()
    assert sorted((d.flops, d.dtype, d.runs) for d in analysis.dots) == [(DOT, "float32", 1)] * 5
    assert analysis.flops is not None and 5 * DOT < analysis.flops < 5 * DOT * 1.01


def test_a_dot_in_a_loop_runs_every_trip():
    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))

    def step(x, w):
        return jax.lax.fori_loop(0, 3, lambda i, c: jnp.tanh(c @ w), x)

    x = jax.ShapeDtypeStruct((64, 32), jnp.float32, sharding=NamedSharding(mesh, P("data", None)))
    w = jax.ShapeDtypeStruct((32, 32), jnp.float32, sharding=NamedSharding(mesh, P()))
    analysis = analyze_compiled(jax.jit(step).lower(x, w).compile(), mesh)
    assert [(d.flops, d.runs) for d in analysis.dots] == [(2 * 8 * 32 * 32, 3)]


# A curve of 0.1 at 1 MFLOP and 0.9 at 1 GFLOP, log-linear between: 134 MFLOP reads 0.67, 45 MFLOP 0.54
CURVE = OpEfficiency(
    dot=1.0,
    hbm=1.0,
    dot_source="by hand",
    hbm_source="by hand",
    curve=(("float32", 1e6, 0.1), ("float32", 1e9, 0.9)),
)
CPU = LaunchCosts(call_s=0.0, kernel_s=0.0, trip_s=0.0, buffer_s=0.0, source="by hand", overlaps=False)


def test_the_gemm_curve_is_read_at_each_dot_s_flops_not_at_the_flops_per_launch():
    """At 1 GFLOP/s and 1 GB/s: each of the five dots at the curve's 134 MFLOP efficiency, the few
    other FLOPs (the loss, the update) at the FLOPs per launch; not every FLOP at 675 / 15 = 45 MFLOP."""
    analysis = _mlp_analysis()
    assert analysis.flops is not None and analysis.launches is not None
    peak, stream = Figure(1e9, "FLOP/s", "by hand"), Figure(1e9, "B/s", "by hand")
    ops = op_roofline(analysis, None, peak, stream, CURVE, launch=CPU)
    assert ops is not None
    rest = analysis.flops - 5 * DOT
    maths = 5 * DOT / (1e9 * CURVE.dot_at("float32", DOT)) + rest / (
        1e9 * CURVE.dot_at("float32", rest / analysis.launches.kernels)
    )
    assert ops.other_s == pytest.approx(maths + ops.other_bytes / 1e9)
    per_launch = analysis.flops / analysis.launches.kernels
    assert CURVE.dot_at("float32", per_launch) < 0.6 < 0.65 < CURVE.dot_at("float32", DOT)
