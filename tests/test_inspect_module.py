"""`shardcli inspect PATH.hlo.txt --target ...`: a module compiled elsewhere, read on this machine.

The H200 fixtures (examples/gpu_h200) are what a user's job on a real GPU writes; a module
compiled here for a target is read back and must give what the compile gave.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import pytest
from conftest import json_of

FIXTURES = Path(__file__).resolve().parent.parent / "examples" / "gpu_h200"
CUDA_PLUGIN = any(importlib.util.find_spec(m) for m in ("jax_cuda12_plugin", "jax_cuda13_plugin"))
needs_cuda_plugin = pytest.mark.skipif(
    not CUDA_PLUGIN, reason="the gpu extra: JAX's CUDA plugin (CI installs it)"
)
needs_libtpu = pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None, reason="the tpu extra: libtpu (CI installs it)"
)


@pytest.fixture(scope="module")
def llama1b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("modules") / "llama1b.hlo.txt"
    path.write_bytes(gzip.decompress((FIXTURES / "llama1b.hlo.txt.gz").read_bytes()))
    return path


@needs_cuda_plugin
@pytest.mark.parametrize("gzipped", [False, True], ids=["text", "gzipped"])
def test_a_real_h200_module_reads_as_a_report(cli, llama1b, gzipped):
    path = str(FIXTURES / "llama1b.hlo.txt.gz") if gzipped else str(llama1b)
    doc = json_of(cli, "inspect", path, "--target", "gpu-h200:1")
    program, step = doc["program"], doc["step_time"]
    # the reference count (the CPU compiler's, trips counted) where XLA's cost_analysis() said 3.76e12
    assert program["flops_per_device"] == pytest.approx(3.261e14, rel=0.02)
    assert program["xla_flops_per_device"] == pytest.approx(3.76e12, rel=0.01)
    # 28 cuBLAS calls in the text: 3 outside the scans, 25 in two 16-trip scans' bodies
    assert sum(k["calls"] for k in program["kernels"]) == 403
    assert [loop["trips"] for loop in program["loops"]] == [16, 16]
    # measured 1.203 s on the H200
    assert step["method"] == "per-op roofline" and 0.8 <= step["estimate_s"] / 1.203 <= 1.25
    assert doc["module"] == {
        "path": path,
        "platform": "cuda",
        "partitions": 1,
        "argument_count": 36,
        "argument_bytes_per_device": 14830034948,
    }
    assert program["memory"] is None and doc["fit"] is None
    assert any("only a compile knows" in line for line in program["missing"])


@needs_cuda_plugin
def test_the_default_view_says_what_only_a_compile_knows(cli, llama1b):
    out = cli(["inspect", str(llama1b), "--target", "gpu-h200:1"], env={"COLUMNS": "100"})
    assert out.exit_code == 0, out.output
    text = " ".join(out.stdout.split())
    assert "per op: 403 library kernel calls" in text
    assert "temporaries: only a compile knows" in text
    assert "missing: memory (memory_analysis(): temporaries, outputs, aliasing), the fit verdict" in text
    assert "no classic sharding mistakes" not in text  # the findings need a compile
    assert len(out.stdout.splitlines()) <= 30


def _compiled_here(target: str, mesh: str, tmp_path: Path):
    """A scanned, sharded train step compiled for `target`: (its analysis, its text's path)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    from looped_programs import BATCH, CASES, SEQ, D

    from shardcli.analysis.program import analyze_compiled
    from shardcli.analysis.target import open_target_session, quiet_native_logs
    from shardcli.hardware.targets import parse_target
    from shardcli.specs.runs import RunOptions

    case = next(c for c in CASES if c.name == "layers-full-remat")
    session = open_target_session(parse_target(target), mesh, "data,model", RunOptions())
    m = session.mesh
    x = jax.ShapeDtypeStruct((BATCH, SEQ, D), jnp.bfloat16, sharding=NamedSharding(m, P("data")))
    ws = {
        name: jax.ShapeDtypeStruct(shape, jnp.bfloat16, sharding=NamedSharding(m, P(None, None, "model")))
        for name, shape in case.weights
    }
    with quiet_native_logs(), jax.set_mesh(m):
        compiled = jax.jit(case.make(False)).lower(x, ws).compile()
    path = tmp_path / "step.hlo.txt"
    path.write_text(str(compiled.as_text()))
    return analyze_compiled(compiled, m), path


@pytest.mark.slow
@pytest.mark.parametrize(
    "target",
    [
        pytest.param("gpu-h100:4", marks=needs_cuda_plugin, id="gpu"),
        pytest.param("tpu-v5e:2x2", marks=needs_libtpu, id="tpu"),
    ],
)
def test_a_module_read_back_gives_what_its_compile_gave(cli, tmp_path, target):
    analysis, path = _compiled_here(target, "2x2", tmp_path)
    doc = json_of(cli, "inspect", str(path), "--target", target, "--mesh", "2x2", "--axes", "data,model")
    program = doc["program"]
    read = {
        (c["kind"], tuple(c["mesh_axes"] or ()), c["runs"], c["sent_bytes"]) for c in program["collectives"]
    }
    compiled = {(c.kind, tuple(c.mesh_axes or ()), c.runs, c.sent_bytes) for c in analysis.collectives}
    assert read == compiled and compiled
    assert [loop["trips"] for loop in program["loops"]] == [loop.trips for loop in analysis.loops]
    assert analysis.flops is not None
    assert program["flops_per_device"] == pytest.approx(analysis.flops, rel=0.01)
    assert doc["step_time"]["estimate_s"] > 0


@pytest.mark.parametrize(
    ("make", "args", "message"),
    [
        pytest.param(
            None, ["--target", "gpu-h200:1"], "no such file; give the text of a compiled module", id="none"
        ),
        pytest.param(
            "hello\n", ["--target", "gpu-h200:1"], "its first line does not start with 'HloModule'", id="junk"
        ),
        pytest.param(
            "module @jit_f {\n}\n",
            ["--target", "gpu-h200:1"],
            "it is StableHLO (lowered.as_text())",
            id="stablehlo",
        ),
        pytest.param(
            "HloModule jit_f, entry_computation_layout={()->f32[]}\n\nENTRY %main () -> f32[] {\n}\n",
            ["--target", "gpu-h200:1"],
            "it is HLO before XLA's optimizations",
            id="unoptimized",
        ),
        pytest.param(
            "llama1b", ["--target", "tpu-v5e:2x2"], "was compiled for a GPU, but --target", id="platform"
        ),
        pytest.param(
            "llama1b", ["--target", "gpu-h200:8"], "compiled for 1 device(s) (num_partitions=1)", id="devices"
        ),
        pytest.param("llama1b", [], "give the hardware it was compiled for with --target", id="no-target"),
        pytest.param("llama1b", ["--target", "gpu-h200:1", "--run"], "--run shape(s) a compile", id="run"),
        pytest.param(
            "llama1b",
            ["--target", "gpu-h200:1", "--arg", "f32[8]", "--out", "P()"],
            "--arg, --out shape(s) a compile of FILE.py:FUNCTION; leave them out",
            id="arg-out",
        ),
    ],
)
def test_what_is_no_module_for_the_target_is_one_line(cli, tmp_path, llama1b, make, args, message):
    if make == "llama1b":
        path = llama1b
    else:
        path = tmp_path / "m.hlo.txt"
        if make is not None:
            path.write_text(make)
    out = cli(["inspect", str(path), *args])
    assert out.exit_code == 2, out.output
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
