"""Every trip counted: a looped program's FLOPs and bytes against the unrolled compile of the same
program, on the CPU and for a TPU target (tests/looped_programs.py holds the programs)."""

from __future__ import annotations

import importlib.util

import pytest
from looped_programs import CASES, GPU_TARGET, TPU_TARGET, Case, analyze, compare

from shardcli.hardware.compilers import compiler_installed

# Compiles, processes or whole programs: left out of the quick subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

PLATFORMS = [
    "cpu",
    pytest.param(
        TPU_TARGET,
        marks=pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="the tpu extra: libtpu"),
    ),
]
NO_CUDA_PLUGIN = not compiler_installed("cuda")  # JAX's CUDA 12 or CUDA 13 plugin
BY_NAME = {case.name: case for case in CASES}
# Trip-counted bytes over the unrolled program's, measured (bench/trip_counts.py): the looped program
# really moves more (the loop carry's copies, dynamic slices of the stacked weights), most where the
# body is small. Layer stacks: 1.15 and 1.33 on the CPU, 1.05 and 1.17 on tpu-v5e:2x2 (1.04 and 1.15
# on gpu-h100:4).
LAYER_BYTES = (0.95, 1.4)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_trip_counted_flops_equal_the_unrolled_programs(case: Case, platform: str) -> None:
    looped, unrolled = compare(case, platform)
    assert looped.flops is not None and unrolled.flops is not None and unrolled.flops > 0
    assert looped.flops == pytest.approx(unrolled.flops, rel=0.01)
    assert len(looped.loops) == case.loops and all(loop.trips for loop in looped.loops)
    assert looped.trips_known and looped.missing == ()
    # XLA's own count leaves out every trip after the first: at most half of the work here
    assert looped.xla_flops is not None and looped.xla_flops < 0.5 * unrolled.flops
    assert unrolled.loops == () and unrolled.flops == unrolled.xla_flops


@pytest.mark.skipif(NO_CUDA_PLUGIN, reason="the gpu extra: JAX's CUDA plugin")
@pytest.mark.parametrize("name", ["scan-of-matmuls", "layers-full-remat"])
def test_a_gpu_target_gets_trip_counted_flops_from_xlas_analysis_of_its_text(name: str) -> None:
    """The GPU compiler gives no cost_analysis(): XLA's analysis of the compiled text stands in."""
    looped, unrolled = compare(BY_NAME[name], GPU_TARGET)
    assert looped.cost_source.startswith("XLA's HloCostAnalysis of the compiled HLO")
    assert looped.flops is not None and unrolled.flops is not None
    assert looped.flops == pytest.approx(unrolled.flops, rel=0.01)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("name", ["layers-full-remat", "layers-dots-saved"])
def test_trip_counted_bytes_of_a_layer_stack_are_near_the_unrolled_programs(name: str, platform: str) -> None:
    looped, unrolled = compare(BY_NAME[name], platform)
    assert looped.bytes_accessed is not None and unrolled.bytes_accessed
    low, high = LAYER_BYTES
    assert low <= looped.bytes_accessed / unrolled.bytes_accessed <= high


@pytest.mark.parametrize("platform", PLATFORMS)
def test_bytes_and_flops_grow_by_one_body_per_trip(platform: str) -> None:
    """Twice the layers: XLA's once-counted figures stay, the trip-counted ones grow by the body's."""
    four = Case("scan-4", BY_NAME["scan-of-matmuls"].make, (("w", (4, 128, 128)),), 1)
    eight = Case("scan-8", BY_NAME["scan-of-matmuls"].make, (("w", (8, 128, 128)),), 1)
    a, b = analyze(four, platform, False), analyze(eight, platform, False)
    (body,) = b.loops
    assert body.trips == 8 and body.body_flops and body.body_bytes
    assert a.xla_flops == b.xla_flops
    assert b.flops - a.flops == pytest.approx(4 * body.body_flops, rel=1e-9)  # type: ignore[operator]
    assert b.bytes_accessed - a.bytes_accessed == pytest.approx(  # type: ignore[operator]
        4 * body.body_bytes + (b.xla_bytes_accessed - a.xla_bytes_accessed),  # type: ignore[operator]
        rel=1e-9,
    )


@pytest.mark.parametrize("platform", PLATFORMS)
def test_collectives_in_a_loop_run_once_per_trip_on_every_compiler(platform: str) -> None:
    """The TPU compiler writes no known_trip_count: the trips are read from the loop itself."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    from looped_programs import mesh_for

    from shardcli.analysis.program import analyze_compiled
    from shardcli.analysis.target import quiet_native_logs
    from shardcli.runtime.cache import unreadable_entries_compiled_again

    mesh = mesh_for(platform)
    dtype = jnp.float32 if platform == "cpu" else jnp.bfloat16
    x = jax.ShapeDtypeStruct((64, 128), dtype, sharding=NamedSharding(mesh, P("data", "model")))
    ws = jax.ShapeDtypeStruct((8, 128, 128), dtype, sharding=NamedSharding(mesh, P(None, "model", None)))
    step = BY_NAME["scan-of-matmuls"].make(False)
    with quiet_native_logs(), jax.set_mesh(mesh), unreadable_entries_compiled_again():
        compiled = jax.jit(lambda x, w: step(x, {"w": w})).lower(x, ws).compile()
    analysis = analyze_compiled(compiled, mesh)
    in_loop = [c for c in analysis.collectives if c.mesh_axes == ("model",) and c.kind == "all-reduce"]
    assert in_loop and all((c.runs, c.runs_known) == (8, True) for c in in_loop)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_64_bit_loop_counter_is_read_as_the_32_bit_one(platform: str) -> None:
    """With jax_enable_x64 on (a user's process, or a run with int64 values) the scan's counter is
    64-bit; the TPU compiler splits it into two u32 halves (`hi < 0 or (hi == 0 and lo < 8)`)."""
    import jax

    case = BY_NAME["scan-of-matmuls"]
    narrow = analyze(case, platform, False)
    before = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
        wide = analyze(case, platform, False)
    finally:
        jax.config.update("jax_enable_x64", before)
    assert [loop.trips for loop in narrow.loops] == [loop.trips for loop in wide.loops] == [8]
    assert wide.trips_known and wide.flops == pytest.approx(narrow.flops, rel=0.01)


ASYNC_ALL_REDUCE = """HloModule m, entry_computation_layout={(f32[1024]{0})->f32[1024]{0}}, num_partitions=2

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %a = f32[] add(%x, %y)
}

ENTRY %main (p: f32[1024]) -> f32[1024] {
  %p = f32[1024]{0} parameter(0)
  %m = f32[1024]{0} multiply(%p, %p)
  %all-reduce-start = ((f32[1024]{0}), f32[1024]{0}) all-reduce-start(%m), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=%add, output_to_operand_aliasing={{1}: (0, {})}, metadata={op_name="jit(f)/psum" stack_frame_id=2}
  ROOT %all-reduce-done = f32[1024]{0} all-reduce-done(%all-reduce-start)
}
"""  # noqa: E501 - one HLO instruction a line, as XLA prints it


def test_xlas_analysis_reads_the_attributes_xla_prints_and_its_parser_refuses() -> None:
    """jaxlib 0.12 prints `output_to_operand_aliasing` on a GPU target's all-reduce-start and its own
    parser refuses it ("unexpected attribute"): left out, the module is counted (1,024 multiplies)."""
    from shardcli.analysis.loops import xla_cost_of_text

    flops, bytes_accessed = xla_cost_of_text(ASYNC_ALL_REDUCE)
    assert flops >= 1024 and bytes_accessed >= 3 * 4096
