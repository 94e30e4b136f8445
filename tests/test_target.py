"""Compile-only targets: `--target tpu-v5e:16x16` compiles through the real TPU compiler (libtpu)."""

from __future__ import annotations

import json
import textwrap
from importlib import metadata
from pathlib import Path

import jax
import pytest
from conftest import json_of, run_shardcli

from shardcli.errors import ShardcliError
from shardcli.hardware.targets import GIB, parse_target

# Compiles, processes or whole programs: left out of the quick subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

pytest.importorskip("libtpu", reason="the tpu extra: pip install -e '.[tpu]' (CI installs it)")

ROOT = Path(__file__).resolve().parent.parent
TRANSFORMER = str(ROOT / "examples" / "transformer.py")
REPLICATED = """
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def step(x, w):
    return jnp.tanh(x @ w)


def inputs(mesh):
    x = jax.ShapeDtypeStruct((4096, 65536), jnp.float32, sharding=NamedSharding(mesh, P("data", None)))
    w = jax.ShapeDtypeStruct((65536, 65536), jnp.float32, sharding=NamedSharding(mesh, P()))  # 16 GiB, whole
    return x, w
"""


@pytest.mark.parametrize(
    ("text", "name", "libtpu", "chips", "hbm"),
    [
        ("tpu-v5e:16x16", "tpu-v5e:16x16", "v5e:16x16", 256, 16),
        ("TPU-V5P:8x8x16", "tpu-v5p:8x8x16", "v5p:8x8x16", 1024, 95),
        ("tpu-v6e:8x8", "tpu-v6e:8x8", "v6e:8x8", 64, 32),
        ("tpu-v4:2x2x2", "tpu-v4:2x2x2", "v4:2x2x2", 8, 32),
        ("gpu-h100:8", "gpu-h100:8", "1x1x8", 8, 81_559 / 1024),  # MiB, as nvidia-smi reports them
        ("gpu-h200:2x8", "gpu-h200:2x8", "1x2x8", 16, 143_771 / 1024),
    ],
)
def test_target_names(text, name, libtpu, chips, hbm):
    target = parse_target(text)
    assert (target.name, target.libtpu_name, target.chips, target.generation.hbm_bytes) == (
        name,
        libtpu,
        chips,
        hbm * GIB,
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "tpu-v9:4x4",
            "--target 'tpu-v9:4x4' is not a known target; choose a generation and its topology: tpu-v4:2x2x2",
        ),
        ("h100:8", "is not a known target"),
        ("gpu-h100:8x8x8", "has topology '8x8x8', which is not GPUS or HOSTSxGPUS (whole numbers from 1)"),
        ("gpu-h100:0", "has topology '0', which is not GPUS or HOSTSxGPUS (whole numbers from 1), such as"),
        ("tpu-v5e", "needs a topology after the ':', two or three sizes, such as tpu-v5e:4x4"),
        ("tpu-v5e:4x", "has topology '4x', which is not two or three sizes (whole numbers from 1)"),
        (
            "tpu-v5e:0x4",
            "has topology '0x4', which is not two or three sizes (whole numbers from 1), such as tpu-v5e:4x4",
        ),
    ],
)
def test_bad_target_names_are_one_line(text, message):
    with pytest.raises(ShardcliError) as error:
        parse_target(text)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_transformer_block_on_v5e_16x16_fits_with_the_tpu_collectives(cli):
    doc = json_of(
        cli,
        "inspect",
        f"{TRANSFORMER}:block",
        "--inputs",
        f"{TRANSFORMER}:inputs",
        "--target",
        "tpu-v5e:16x16",
        "--axes",
        "data,model",
    )
    assert doc["compile_target"] == "tpu-v5e:16x16" and doc["runtime"]["device_kind"] == "TPU v5 lite"
    # the compiler that judged the fit: libtpu's memory figures depend on its version
    assert doc["runtime"]["compiler"] == {
        "jax": jax.__version__,
        "jaxlib": jax.lib.__version__,
        "libtpu": metadata.version("libtpu"),
    }
    assert doc["mesh"]["shape"] == [16, 16] and len(doc["mesh"]["devices"]) == 256
    assert doc["fit"]["fits"] and doc["fit"]["capacity_bytes"] == 16 * GIB
    assert doc["fit"]["status"] == "fits" and doc["fit"]["gpu_pool"] is None and doc["fit"]["advice"] is None
    assert doc["fit"]["needed_bytes"] == doc["program"]["memory"]["total_bytes"] < 16 * GIB
    kinds = {(c["kind"], tuple(c["mesh_axes"])) for c in doc["program"]["collectives"]}
    assert kinds and all(axes == ("model",) for _, axes in kinds), kinds
    assert doc["model"]["t_math_s"] > 0 and "TPU v5e" in doc["hardware"]["peak_source"]
    assert doc["timing"] is None


def test_a_replicated_large_weight_does_not_fit_and_exits_1(cli, tmp_path):
    path = tmp_path / "replicated.py"
    path.write_text(textwrap.dedent(REPLICATED))
    doc = json_of(
        cli,
        "inspect",
        f"{path}:step",
        "--inputs",
        f"{path}:inputs",
        "--target",
        "tpu-v5e:4x4",
        "--axes",
        "data,model",
        code=1,
    )
    assert not doc["fit"]["fits"] and doc["fit"]["text"].startswith("does not fit by")
    assert doc["fit"]["status"] == "does not fit" and doc["fit"]["margin_bytes"] is None
    assert any(f["kind"] == "replicated" for f in doc["findings"])
    table = cli(
        [
            "inspect",
            f"{path}:step",
            "--inputs",
            f"{path}:inputs",
            "--target",
            "tpu-v5e:4x4",
            "--axes",
            "data,model",
            "--quiet",
        ]
    )
    assert table.exit_code == 1 and "does not fit by" in table.stdout


def test_the_mesh_may_be_any_reshape_of_the_chips(cli):
    doc = json_of(
        cli,
        "inspect",
        f"{TRANSFORMER}:block",
        "--inputs",
        f"{TRANSFORMER}:inputs",
        "--target",
        "tpu-v5e:16x16",
        "--mesh",
        "32x8",
        "--axes",
        "data,model",
    )
    assert doc["mesh"]["shape"] == [32, 8] and "splits a physical axis" in doc["runtime"]["note"]
    out = cli(
        [
            "inspect",
            f"{TRANSFORMER}:block",
            "--inputs",
            f"{TRANSFORMER}:inputs",
            "--target",
            "tpu-v5e:4x4",
            "--mesh",
            "4x8",
            "--axes",
            "data,model",
        ]
    )
    assert (
        out.exit_code == 2 and "--mesh 4x8 has 32 devices but --target tpu-v5e:4x4 has 16 chips" in out.stderr
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--target", "tpu-v5e:3x3"), "libtpu does not know topology 'v5e:3x3'"),
        (("--target", "tpu-v9:2x2"), "is not a known target"),
        (
            ("--target", "tpu-v5e:4x4", "--run"),
            "--run needs devices to run on; --target tpu-v5e:4x4 only compiles",
        ),
    ],
)
def test_target_errors_are_one_line(cli, args, message):
    out = cli(
        [
            "inspect",
            f"{TRANSFORMER}:block",
            "--inputs",
            f"{TRANSFORMER}:inputs",
            "--axes",
            "data,model",
            *args,
        ]
    )
    assert out.exit_code == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1, (
        out.output
    )


def test_without_the_extra_target_says_how_to_install_it(cli, monkeypatch):
    from shardcli.analysis import target

    monkeypatch.setattr(target, "compiler_installed", lambda platform: False)
    out = cli(["mesh", "--target", "tpu-v5e:4x4"])
    assert out.exit_code == 2
    assert out.stderr.strip() == (
        "shardcli: error: --target tpu-v5e:4x4 needs the TPU compiler: pip install 'shardcli[tpu]' "
        "(libtpu, the TPU compiler: about 0.5 GB)"
    )


@pytest.mark.every_variant  # each JAX's keyword, under each JAX
@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        pytest.param(((2, 2), ("a", "b")), {}, id="positional"),
        pytest.param((), {"axis_sizes": (2, 2), "axis_names": ("a", "b")}, id="axis_sizes-jax-0.12"),
        pytest.param((), {"axis_shapes": (2, 2), "axis_names": ("a", "b")}, id="axis_shapes-jax-0.10"),
        pytest.param(((4,), ("a",)), {"axis_types": None}, id="another-shape"),
    ],
)
def test_a_users_make_mesh_builds_over_the_targets_chips_with_either_jax(args, kwargs):
    """A file's `jax.make_mesh` names its sizes positionally, or by either JAX's keyword."""
    import jax

    from shardcli.analysis.target import open_target_session, target_meshes
    from shardcli.specs.runs import RunOptions

    session = open_target_session(parse_target("tpu-v5e:2x2"), "2x2", "data,model", RunOptions())
    real = jax.make_mesh
    with target_meshes(session):
        mesh = jax.make_mesh(*args, **kwargs)
    assert jax.make_mesh is real  # given back
    assert {d.platform for d in mesh.devices.flat} == {"tpu"} and mesh.axis_names[0] == "a"
    assert mesh.devices.size == 4 and set(mesh.devices.flat) == set(session.devices)


def test_einsum_and_reshard_compile_for_a_target(cli):
    doc = json_of(
        cli,
        "einsum",
        "bsd,df->bsf",
        "--shape",
        "64x2048x8192",
        "--shape",
        "8192x32768",
        "--in",
        "data,None,model",
        "--in",
        "model,None",
        "--out",
        "data,None,None",
        "--target",
        "tpu-v5e:4x4",
        "--axes",
        "data,model",
        "--dtype",
        "bfloat16",
    )
    ways = {w["impl"]: w for w in doc["sizes"][0]["impls"]}
    assert (
        ways["auto"]["status"] == "compiled"
        and ways["auto"]["timing"] is None
        and ways["auto"]["fit"]["fits"]
    )
    assert any(c["mesh_axes"] == ["model"] for c in ways["auto"]["program"]["collectives"])
    assert ways["explicit"]["status"] == "compiled" and ways["explicit"]["out_spec"] == [["data"], None, None]
    doc = json_of(
        cli,
        "reshard",
        "--shape",
        "8192x65536",
        "--from",
        "data,model",
        "--to",
        "model,data",
        "--target",
        "tpu-v5e:4x4",
        "--axes",
        "data,model",
    )
    assert [w["impl"] for w in doc["impls"]] == ["reshard", "jit"]
    assert all(w["status"] == "compiled" and w["program"]["collectives"] for w in doc["impls"])
    out = cli(["reshard", "--impl", "device_put", "--target", "tpu-v5e:4x4", "--axes", "data,model"])
    assert out.exit_code == 2 and "--impl device_put moves the array eagerly" in out.stderr


def test_an_einsum_too_big_for_the_chip_is_a_verdict(cli):
    doc = json_of(
        cli,
        "einsum",
        "bsd,df->bsf",
        "--shape",
        "64x2048x8192",
        "--shape",
        "8192x262144",
        "--in",
        "data,None,None",
        "--target",
        "tpu-v5e:4x4",
        "--axes",
        "data,model",
        "--impl",
        "auto",
        code=1,
    )
    (way,) = doc["sizes"][0]["impls"]
    assert way["status"] == "does not fit" and "exceeds available HBM" in way["fit"]["compiler_message"]


def test_mesh_target_shows_the_chips(cli):
    out = cli(["mesh", "--target", "tpu-v5e:4x4", "--axes", "data,model"], env={"COLUMNS": "160"})
    assert out.exit_code == 0, out.output
    assert "16 TPU v5 lite chips of the compile-only target tpu-v5e:4x4" in out.stdout
    assert f"compiler  jax {jax.__version__}, jaxlib {jax.lib.__version__}, libtpu " in out.stdout
    assert "chips of the torus at each mesh coordinate" in out.stdout and "3,3,0" in out.stdout


def test_compare_two_targets(cli, tmp_path):
    # a small program: what is compared is the two reports (the example transformer's block took 24 s
    # a TPU compile here)
    args = (*_add_program(tmp_path), "--axes", "data,model")
    v5e = json_of(cli, *args, "--target", "tpu-v5e:4x4")
    v6e = json_of(cli, *args, "--target", "tpu-v6e:4x4")
    a, b = tmp_path / "v5e.json", tmp_path / "v6e.json"
    a.write_text(json.dumps(v5e))
    b.write_text(json.dumps(v6e))
    out = cli(["compare", str(a), str(b), "--metric", "memory", "--format", "json", "--tolerance", "1000%"])
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.stdout)["rows"]
    assert (
        row["base"] == v5e["program"]["memory"]["total_bytes"]
        and row["new"] == v6e["program"]["memory"]["total_bytes"]
    )
    v6e["program"]["memory"]["total_bytes"] *= 100
    b.write_text(json.dumps(v6e))
    assert cli(["compare", str(a), str(b), "--metric", "memory"]).exit_code == 1


def test_libtpu_never_reaches_the_screen_and_plain_runs_stay_quiet():
    """In a fresh process (where libtpu writes to the real stderr): a target run and a plain run."""
    target = run_shardcli("mesh", "--target", "tpu-v5e:4x4", "--quiet")
    assert target.returncode == 0 and target.stderr == "", target.stderr
    plain = run_shardcli("mesh", "--mesh", "4", "--format", "json")
    assert plain.returncode == 0 and plain.stderr == "", plain.stderr
    assert json.loads(plain.stdout)["runtime"]["note"] is None


@pytest.fixture
def cuda_plugin():
    from shardcli.hardware.compilers import compiler_installed

    if not compiler_installed("cuda"):
        pytest.skip("the gpu extra: pip install -e '.[gpu]' or '.[gpu-cuda13]' (CI installs gpu)")


def test_a_gpu_target_compiles_without_a_gpu(cli, cuda_plugin):
    """Judged against JAX's default pool there (tests/test_gpu_memory.py has the rest)."""
    doc = json_of(
        cli,
        "inspect",
        f"{TRANSFORMER}:block",
        "--inputs",
        f"{TRANSFORMER}:inputs",
        "--target",
        "gpu-h100:8",
        "--mesh",
        "2x4",
        "--axes",
        "data,model",
    )
    assert doc["runtime"]["device_kind"] == "NVIDIA H100 80GB HBM3" and doc["compile_target"] == "gpu-h100:8"
    assert doc["fit"]["status"] == "fits" and doc["fit"]["capacity_bytes"] == int(0.75 * 81_559 * 2**20)
    assert {(c["kind"], tuple(c["mesh_axes"])) for c in doc["program"]["collectives"]} == {
        ("all-reduce", ("model",))
    }
    assert "table: H100 SXM" in doc["hardware"]["link_source"]


def test_a_gpu_target_without_the_extra_says_how_to_install_it(cli, monkeypatch):
    from shardcli.analysis import target

    monkeypatch.setattr(target, "compiler_installed", lambda platform: False)
    out = cli(["mesh", "--target", "gpu-h200:8"])
    assert out.exit_code == 2 and "needs XLA's GPU compiler: pip install 'shardcli[gpu]'" in out.stderr


def test_matmul_cases_compile_for_a_target(cli):
    doc = json_of(
        cli,
        "matmul",
        "--case",
        "allreduce,illegal",
        "--impl",
        "all",
        "--dims",
        "4096,8192,4096",
        "--dtype",
        "bfloat16",
        "--target",
        "tpu-v5e:4x4",
        "--axes",
        "data,model",
    )
    assert doc["config"]["compile_target"] == "tpu-v5e:4x4" and doc["mesh"]["shape"] == [4, 4]
    runs = {r["case"]: {i["impl"]: i for i in r["impls"]} for r in doc["runs"]}
    for impl in runs["allreduce"].values():
        assert impl["status"] == "compiled" and impl["timing"] is None and impl["fit"]["fits"]
        assert [h["op"] for h in impl["hlo_collectives"]] == ["all-reduce"]
    assert (
        runs["illegal"]["explicit"]["status"] == "refused" and runs["illegal"]["explicit"]["expected_refusal"]
    )
    out = cli(["matmul", "--case", "allreduce", "--target", "tpu-v5e:4x4", "--mesh", "2x4"])
    assert (
        out.exit_code == 2 and "--mesh 2x4 has 8 devices but --target tpu-v5e:4x4 has 16 chips" in out.stderr
    )


# --- a GPU target's compile options, its compiler and its hosts on the screen (issue 54) -----------
# GPU targets compile with xla_gpu_enable_triton_gemm=false (every dot a cuBLAS call, as the real
# H200 ran); a hand AOT compile with JAX's defaults makes other temporaries. Before, only the code
# said so.

ADD = """
import jax.numpy as jnp


def step(x, w):
    return jnp.tanh(x @ w)
"""


def _add_program(tmp_path) -> list[str]:
    path = tmp_path / "add.py"
    path.write_text(ADD)
    return ["inspect", f"{path}:step", "--arg", "f32[64,128]", "--arg", "f32[128,64]"]


def test_a_gpu_inspect_says_its_compile_options_and_why(cli, cuda_plugin, tmp_path):
    out = cli([*_add_program(tmp_path), "--target", "gpu-h100:1", "--no-color"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    options = next(line for line in lines if line.startswith("options"))
    assert options.split(None, 1)[1].rstrip() == (
        "xla_gpu_enable_triton_gemm=false (every dot a cuBLAS call, as XLA's autotuning chose on a real "
        "H200; no GPU here to autotune)"
    )
    doc = json_of(cli, *_add_program(tmp_path), "--target", "gpu-h100:1")
    assert doc["compile_options"] == {"xla_gpu_enable_triton_gemm": False}
    plugin = next(p for p in doc["runtime"]["compiler"] if p.startswith("jax-cuda"))
    assert doc["runtime"]["note"].startswith(
        f"compile-only: {plugin} {doc['runtime']['compiler'][plugin]} describes 1 H100 GPU;"
    )


def test_a_tpu_inspect_has_jax_s_own_compile_options(cli, tmp_path):
    pytest.importorskip("libtpu")
    out = cli([*_add_program(tmp_path), "--target", "tpu-v5e:1x1", "--no-color"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert not any(line.startswith("options") for line in out.stdout.splitlines())
    assert json_of(cli, *_add_program(tmp_path), "--target", "tpu-v5e:1x1")["compile_options"] == {}


def test_gpu_hosts_are_hosts_and_nvlink_not_a_torus(cli, cuda_plugin):
    out = cli(["mesh", "--target", "gpu-h200:2x8", "--no-color"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    note = " ".join(out.stdout.split("note", 1)[1].split())
    assert "16 H200 GPUs, 2 hosts of 8, NVLink within a host and the network between hosts" in note
    assert "the mesh takes them host by host (jax.experimental.topologies.make_mesh)" in note
    assert "torus" not in out.stdout
