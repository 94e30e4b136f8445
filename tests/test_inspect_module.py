"""`shardcli inspect PATH.hlo.txt --target ...`: a module compiled elsewhere, read on this machine.

The H200 fixtures (examples/gpu_h200) are what a user's job on a real GPU writes; a module
compiled here for a target is read back and must give what the compile gave.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
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


# Issue 54: hostile module texts, each a row that failed before its fix.
DEEP_CONFIG = '{"operation_queue_id":"0","gemm_backend_config":' + "[" * 100_000 + "]" * 100_000 + "}"
ATTENTION = (
    "  %fmha = (f32[2,4,64,16]{3,2,1,0}, s8[16]{0}) custom-call(%q, %q), "
    'custom_call_target="__cudnn$fmhaSoftmax", '
    'backend_config={"cudnn_fmha_backend_config":{"intermediate_tensor_shape":{"dimensions":'
    '["' + "9" * 300 + '","4","64","64"]}}}\n'
)
CONVOLUTION = (
    "  %conv = (f32[2,64,32]{2,1,0}, u8[0]{0}) custom-call(%a, %b), window={size=3}, "
    'dim_labels=b0f_0io->b0f, feature_group_count=0, custom_call_target="__cudnn$convForward", '
    'backend_config={"cudnn_conv_backend_config":{}}\n'
)
WIDE_CONVOLUTION = CONVOLUTION.replace("feature_group_count=0", "feature_group_count=1").replace(
    "size=3", "size=" + "9" * 200
)
SOURCES = '\n\nFileNames\n\u00b2 "/a.py"\n1 "/b.py"\n\nFileLocations\n1 {file_name_id=1 line=3}\n'


def _module_cases() -> list:
    from hlo_modules import call_chain, gpu_module

    q = "  %q = f32[2,4,64,16]{3,2,1,0} parameter(3)\n"
    return [
        pytest.param(gpu_module(trips="9" * 400), 0, "", id="known-trips-400-digits"),
        pytest.param(gpu_module(trips="x", bound="9" * 400), 0, "", id="bound-400-digits"),
        pytest.param(gpu_module(trips="x", bound="9" * 5000), 0, "", id="bound-5000-digits"),
        pytest.param(
            gpu_module(body="nobody"),
            2,
            "%loop calls %nobody, which the module does not define",
            id="no-body",
        ),
        pytest.param(
            gpu_module(lhs="f32[2," + "9" * 200 + ",16]"),
            2,
            "more elements than XLA allows",
            id="dims-200-digits",
        ),
        pytest.param(gpu_module(contracting="1e999"), 0, "__cublas$lt$matmul x1", id="contracting-1e999"),
        pytest.param(gpu_module(contracting='"-1"'), 0, "__cublas$lt$matmul x1", id="contracting-negative"),
        pytest.param(gpu_module(gemm_config=DEEP_CONFIG), 0, "__cublas$lt$matmul x1", id="deep-config"),
        pytest.param(gpu_module(extra=q + ATTENTION), 0, "__cudnn$fmhaSoftmax x1", id="attention-300-digits"),
        pytest.param(gpu_module(extra=CONVOLUTION), 0, "__cudnn$convForward x1", id="feature-groups-0"),
        pytest.param(gpu_module(extra=WIDE_CONVOLUTION), 0, "__cudnn$convForward x1", id="window-200-digits"),
        pytest.param(gpu_module(header=SOURCES), 0, "", id="file-id-superscript"),
        pytest.param(gpu_module(groups="[2,4]<=[3]"), 0, "", id="iota-bad-shape"),
        pytest.param(
            gpu_module(groups="[4000000000,4000000000]<=[16000000000000000000]"), 0, "", id="iota-huge"
        ),
        pytest.param(gpu_module(groups="[2,4]<=[4,2]T(1,5)"), 0, "", id="iota-transpose-out-of-range"),
        pytest.param(gpu_module(groups="[2,4]<=[4,2]T(0,0)"), 0, "", id="iota-transpose-repeated"),
        pytest.param(
            gpu_module(partitions="0"),
            2,
            "num_partitions=0: a module is partitioned over 1 device",
            id="partitions-0",
        ),
        pytest.param("\ufeff" + gpu_module(), 0, "", id="utf8-bom"),
        # XLA's parser aborts the process on these, and its cost analysis walks every call path
        pytest.param(
            gpu_module(extra="  %tk = token[4]{0} after-all()\n"),
            0,
            "XLA could not analyse the text (a token has no dimensions (token[4]))",
            id="token-with-dimensions",
        ),
        pytest.param(
            gpu_module(groups="mesh['a'=2,'b'=4]{'c'}"),
            0,
            "XLA could not analyse the text (replica groups over axes their mesh does not have)",
            id="mesh-groups-of-no-axis",
        ),
        pytest.param(call_chain(40), 0, "its calls reach %c17 more than 100,000 times", id="calls-fan-out"),
    ]


@needs_cuda_plugin
@pytest.mark.parametrize(("text", "code", "message"), _module_cases())
def test_a_hostile_module_text_ends_by_the_contract(cli, tmp_path, text, code, message):
    path = tmp_path / "m.hlo.txt"
    path.write_text(text)
    out = cli(["inspect", str(path), "--target", "gpu-h200:1", "--format", "json"])
    assert out.exit_code == code, out.output
    if code == 2:
        assert (
            out.stderr.startswith("shardcli: error: inspect ") and len(out.stderr.strip().splitlines()) == 1
        )
        assert message in out.stderr, out.stderr
        return
    doc = json.loads(out.stdout)
    assert message in " ".join(doc["program"]["missing"])
    if "constant(" + "9" * 400 in text:  # a bound past XLA's int64: counted once and said to be
        assert [loop["trips"] for loop in doc["program"]["loops"]] == [None]


def _gzip_flipped(text: str) -> bytes:
    data = bytearray(gzip.compress(text.encode()))
    data[len(data) // 2] ^= 0xFF
    return bytes(data)


@needs_cuda_plugin
def test_a_damaged_gzip_is_one_line(cli, tmp_path):
    from hlo_modules import gpu_module

    path = tmp_path / "m.hlo.txt.gz"
    path.write_bytes(_gzip_flipped(gpu_module()))
    out = cli(["inspect", str(path), "--target", "gpu-h200:1"])
    assert out.exit_code == 2, out.output
    assert "cannot read it: the gzip is damaged" in out.stderr and len(out.stderr.strip().splitlines()) == 1


@needs_cuda_plugin
@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_folder_or_fifo_named_like_a_module_says_what_it_is(cli, tmp_path, kind):
    path = tmp_path / "x.hlo.txt"
    if kind == "folder":
        path.mkdir()
    else:
        os.mkfifo(path)  # never opened: a FIFO with no writer would block the read
    out = cli(["inspect", str(path), "--target", "gpu-h200:1"])
    assert out.exit_code == 2, out.output
    said = {"folder": "is a folder, not a file", "fifo": "is a FIFO, not a file"}[kind]
    assert said in out.stderr and "no such file" not in out.stderr, out.stderr


@needs_cuda_plugin
@pytest.mark.parametrize("through_link", [False, True], ids=["same-path", "symlink"])
def test_save_onto_the_module_being_read_is_refused(cli, tmp_path, through_link):
    from hlo_modules import gpu_module

    path = tmp_path / "m.hlo.txt"
    path.write_text(gpu_module())
    save = path
    if through_link:
        save = tmp_path / "link.txt"
        save.symlink_to(path)
    out = cli(["inspect", str(path), "--target", "gpu-h200:1", "--save", str(save)])
    assert out.exit_code == 2, out.output
    assert "is the module being read" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert path.read_text() == gpu_module()


def test_a_gzip_that_inflates_past_the_limit_is_refused_as_it_is_read(tmp_path, monkeypatch):
    """The limit counts the inflated bytes as they come: 64 MiB of zeros against a 4 MiB cap never
    holds more than the cap and a chunk."""
    import tracemalloc

    from shardcli.errors import ShardcliError
    from shardcli.program import module

    monkeypatch.setattr(module, "MAX_MODULE_BYTES", 4 << 20)
    path = tmp_path / "bomb.hlo.txt.gz"
    path.write_bytes(gzip.compress(b"HloModule m, is_scheduled=true\n" + bytes(64 << 20)))
    tracemalloc.start()
    try:
        with pytest.raises(ShardcliError, match="inflates to more than 4,194,304 bytes"):
            module.read_module(str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak  # the cap and a chunk, never the 64 MiB


@needs_cuda_plugin
def test_a_gemm_is_counted_whole_not_one_short(cli, tmp_path):
    """XLA's cost analysis counts each custom call as -1 FLOP and -1 byte: left in, every cuBLAS
    GEMM read one short (131,071 for this 131,072)."""
    from hlo_modules import GEMM_FLOPS, gpu_module

    path = tmp_path / "m.hlo.txt"
    path.write_text(gpu_module(loop=False))
    doc = json_of(cli, "inspect", str(path), "--target", "gpu-h200:1")
    assert doc["program"]["xla_flops_per_device"] == 0
    assert doc["program"]["flops_per_device"] == GEMM_FLOPS


@needs_cuda_plugin
def test_a_loop_of_no_trips_runs_its_body_no_times(cli, tmp_path):
    from hlo_modules import GEMM_FLOPS, gpu_module

    path = tmp_path / "m.hlo.txt"
    path.write_text(gpu_module(trips="0", bound="0"))
    doc = json_of(cli, "inspect", str(path), "--target", "gpu-h200:1")
    (loop,) = doc["program"]["loops"]
    assert loop["trips"] == 0 and loop["runs"] == 0
    # the body's 9 FLOPs (8 adds and the counter's) never run; the condition's compare runs once
    assert doc["program"]["flops_per_device"] == GEMM_FLOPS + 1
    assert doc["step_time"]["ops"]["loop_trips"] == 0


@needs_cuda_plugin
def test_a_read_module_does_not_name_the_compiler_installed_here(cli, tmp_path):
    from hlo_modules import gpu_module

    path = tmp_path / "m.hlo.txt"
    path.write_text(gpu_module())
    doc = json_of(cli, "inspect", str(path), "--target", "gpu-h200:1")
    assert "jax" not in doc["runtime"]["compiler"]
    said = "(the module's text does not say which compiler wrote it)"
    assert doc["runtime"]["compiler"] == {"unknown": said}
    out = cli(["inspect", str(path), "--target", "gpu-h200:1"], env={"COLUMNS": "120"})
    assert f"compiler  unknown {said}" in out.stdout


@pytest.mark.parametrize(
    ("header", "counts"),
    [
        pytest.param(", entry_computation_layout={(f32[4]{0}, s8[2]{0})->(f32[4]{0})}", (2, 1), id="plain"),
        pytest.param(", entry_computation_layout={(" + ")->}x" * 40_000, (0, 0), id="hostile-200kb"),
    ],
)
def test_the_entry_layout_is_read_in_one_pass(header, counts):
    """A 200 KB header of `)->}x` took the old regex over a minute (quadratic backtracking)."""
    import signal

    from shardcli.analysis.hlo.header import entry_array_counts

    def late(*_):
        raise TimeoutError("the header took more than 5 s")

    old = signal.signal(signal.SIGALRM, late)
    signal.alarm(5)
    try:
        assert entry_array_counts("HloModule m" + header + "\n") == counts
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_call_graph_that_fans_out_is_walked_once_per_computation():
    """40 computations each calling the next twice: 2**40 call paths, 41 computations."""
    import signal

    from hlo_modules import call_chain

    from shardcli.analysis.hlo.module import parse_module
    from shardcli.analysis.kernels import kernel_launches
    from shardcli.analysis.loops import runs_per_computation

    def late(*_):
        raise TimeoutError("the walk took more than 5 s")

    module = parse_module(call_chain(40))
    old = signal.signal(signal.SIGALRM, late)
    signal.alarm(5)
    try:
        runs = runs_per_computation(module)
        launches = kernel_launches(module, runs)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert runs["c40"] == (2**40, True) and runs["c0"] == (1, True)
    assert launches == sum(2**k for k in range(41))  # each computation's add, once per run


def test_a_call_graph_with_a_cycle_is_no_module():
    from hlo_modules import call_chain

    from shardcli.analysis.hlo.module import ModuleTextError, parse_module
    from shardcli.analysis.loops import runs_per_computation

    text = call_chain(3).replace(
        "ROOT %r3 = f32[8]{0} add(%p3, %p3)", "ROOT %r3 = f32[8]{0} call(%p3), to_apply=%c1"
    )
    with pytest.raises(ModuleTextError, match="calls itself"):
        runs_per_computation(parse_module(text))


@pytest.mark.parametrize(
    ("shape", "size"),
    [
        ("f8e4m3fnuz[4]", 4),
        ("f8e4m3b11fnuz[4]", 4),
        ("f8e5m2fnuz[4]", 4),
        ("f8e8m0fnu[4]", 4),
        ("f8e4m3[4]", 4),
        ("f8e3m4[4]", 4),
        ("f4e2m1fn[64]", 32),
        ("s2[7]", 2),
        ("u2[8]", 2),
        ("s4[3]", 2),
        ("u1[9]", 2),
        ("s16[2]", 4),
        ("(f4e2m1fn[2,3]{1,0}, f8e8m0fnu[2]{0})", 5),
        ("token[]", 0),
    ],
)
def test_every_xla_element_type_has_its_bytes(shape, size):
    from shardcli.analysis.hlo.arrays import shape_bytes

    assert shape_bytes(shape) == size


@needs_cuda_plugin
@pytest.mark.parametrize(
    ("name", "packed"),
    [("m.hlo.txt", True), ("m.hlo.txt.gz", False), ("m.hlo.txt.gz", "two-members")],
    ids=["gzip-named-txt", "text-named-gz", "two-gzip-members"],
)
def test_a_gzip_is_known_by_its_bytes_not_its_name(cli, tmp_path, name, packed):
    from hlo_modules import gpu_module

    text = gpu_module()
    path = tmp_path / name
    if packed == "two-members":
        half = len(text) // 2
        path.write_bytes(gzip.compress(text[:half].encode()) + gzip.compress(text[half:].encode()))
    else:
        path.write_bytes(gzip.compress(text.encode()) if packed else text.encode())
    doc = json_of(cli, "inspect", str(path), "--target", "gpu-h200:1")
    assert [loop["trips"] for loop in doc["program"]["loops"]] == [4]


@pytest.mark.parametrize(
    ("metadata", "blocks"),
    [
        ('{"block_q": 512, "block_kv": 256}', (512, 256)),
        ('{"block_q": ' + "9" * 5000 + ', "block_kv": 256}', None),  # int() refused 5000 digits
        ('{"block_q": 5120000000, "block_kv": 256}', None),
    ],
    ids=["read", "5000-digits", "10-digits"],
)
def test_splash_block_sizes_past_any_sequence_are_not_read(metadata, blocks):
    from shardcli.analysis.splash import block_sizes

    assert block_sizes("fwd", metadata) == blocks
