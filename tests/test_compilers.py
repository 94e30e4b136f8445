"""Which compiler a --target needs and finds (libtpu; JAX's CUDA 12 or CUDA 13 plugin), and the
versions a report names: installed modules and package versions faked, nothing imported."""

from __future__ import annotations

import importlib.util
import json
from importlib import metadata

import jax
import pytest

from shardcli.hardware.compilers import compiler_installed, compiler_versions, installed_compilers

CUDA12, CUDA13 = "jax_cuda12_plugin", "jax_cuda13_plugin"
VERSIONS = {"jax": "0.12.0.1", "jaxlib": "0.12.0.1", "libtpu": "0.0.52", "jax-cuda13-plugin": "0.12.0.2"}


@pytest.fixture
def installed(monkeypatch):
    """Make `find_spec` find exactly the given compiler modules (others as they are)."""
    real = importlib.util.find_spec

    def only(*modules: str) -> None:
        def find_spec(name: str, *args, **kwargs):
            if name in ("libtpu", CUDA12, CUDA13):
                return real("json") if name in modules else None  # any spec stands for "installed"
            return real(name, *args, **kwargs)

        monkeypatch.setattr(importlib.util, "find_spec", find_spec)

    return only


@pytest.mark.parametrize(
    ("modules", "found"),
    [
        pytest.param((CUDA12,), (CUDA12,), id="cuda12-the-gpu-extra"),
        pytest.param((CUDA13,), (CUDA13,), id="cuda13-the-gpu-cuda13-extra"),
        pytest.param((CUDA12, CUDA13), (CUDA12, CUDA13), id="both"),
        pytest.param((), (), id="neither"),
        pytest.param(("libtpu",), (), id="only-libtpu"),
    ],
)
def test_either_cuda_plugin_is_the_gpu_compiler(installed, modules, found):
    installed(*modules)
    assert installed_compilers("cuda") == found
    assert compiler_installed("cuda") == bool(found)
    assert compiler_installed("tpu") == ("libtpu" in modules)


@pytest.mark.parametrize(
    ("platform", "modules", "packages"),
    [
        pytest.param("cpu", ("libtpu", CUDA13), ["jax", "jaxlib"], id="cpu-no-plugin-named"),
        pytest.param("tpu", ("libtpu", CUDA13), ["jax", "jaxlib", "libtpu"], id="tpu-libtpu"),
        pytest.param("cuda", ("libtpu", CUDA13), ["jax", "jaxlib", "jax-cuda13-plugin"], id="target-cuda13"),
        pytest.param("gpu", (CUDA13,), ["jax", "jaxlib", "jax-cuda13-plugin"], id="real-gpu-cuda13"),
    ],
)
def test_the_compiler_named_is_jax_jaxlib_and_the_targets_plugin(
    installed, monkeypatch, platform, modules, packages
):
    installed(*modules)
    monkeypatch.setattr(metadata, "version", VERSIONS.__getitem__)
    assert compiler_versions(platform) == tuple((p, VERSIONS[p]) for p in packages)


def test_the_real_versions_are_jaxs_own():
    assert compiler_versions("cpu") == (("jax", jax.__version__), ("jaxlib", jax.lib.__version__))


def test_a_gpu_target_with_the_cuda13_plugin_alone_compiles(cli, installed):
    """Detection takes the CUDA 13 plugin's module; the compile (by whichever CUDA plugin this
    environment has) names it in the header and JSON."""
    if not compiler_installed("cuda"):
        pytest.skip("the gpu extra: pip install -e '.[gpu]' or '.[gpu-cuda13]' (CI installs gpu)")
    installed(CUDA13)
    out = cli(["mesh", "--target", "gpu-h200:8", "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["runtime"]["device_count"] == 8
    assert list(doc["runtime"]["compiler"]) == ["jax", "jaxlib", "jax-cuda13-plugin"]


def test_without_a_cuda_plugin_the_hint_says_which_extra_for_which_cuda(cli, installed):
    installed("libtpu")
    out = cli(["mesh", "--target", "gpu-h200:8"])
    assert out.exit_code == 2 and len(out.stderr.strip().splitlines()) == 1, out.output
    assert out.stderr.strip() == (
        "shardcli: error: --target gpu-h200:8 needs XLA's GPU compiler: pip install 'shardcli[gpu]' "
        "(JAX's CUDA 12 plugin, its GPU compiler: about 0.5 GB; no GPU needed), or 'shardcli[gpu-cuda13]' "
        "where this host's GPUs run CUDA 13"
    )


# --- a CUDA plugin of another version than jaxlib (issue 54) ----------------------------------------
# JAX warns that such a plugin "will not be used", yet a compile for a described GPU went through it:
# another compiler's figures (examples/mlp.py on gpu-h100:8: XLA's cost 7.47 vs 7.34 MFLOP).


def _versions(monkeypatch, **versions: str) -> None:
    table = {"jax": "0.10.2", "jaxlib": "0.10.2", "jax-cuda12-plugin": "0.10.2", "jax-cuda12-pjrt": "0.10.2"}
    table.update({k.replace("_", "-"): v for k, v in versions.items()})
    monkeypatch.setattr(metadata, "version", table.__getitem__)


def test_a_gpu_target_refuses_a_cuda_plugin_of_another_version_than_jaxlib(cli, installed, monkeypatch):
    installed(CUDA12)
    _versions(monkeypatch, jax_cuda12_plugin="0.12.0.1", jax_cuda12_pjrt="0.12.0.1")
    out = cli(["mesh", "--target", "gpu-h100:8"])
    assert out.exit_code == 2, out.output
    assert out.stderr.strip().splitlines() == [
        "shardcli: error: jax-cuda12-plugin 0.12.0.1 is installed beside jaxlib 0.10.2: JAX uses a CUDA "
        "plugin only of jaxlib's version, and a compile with this one gives another compiler's figures; "
        'match them with pip install "jax-cuda12-plugin==0.10.2"'
    ]


@pytest.mark.parametrize(
    ("versions", "refused"),
    [
        pytest.param({}, None, id="matched"),
        pytest.param({"jax_cuda12_pjrt": "0.11.2"}, "jax-cuda12-pjrt 0.11.2", id="pjrt-alone"),
        pytest.param(
            {"jaxlib": "0.12.0.1", "jax_cuda12_plugin": "0.12.0.1", "jax_cuda12_pjrt": "0.12.0.1"},
            None,
            id="matched-newest",
        ),
        pytest.param(
            {"jaxlib": "0.12.0.1", "jax_cuda12_plugin": "0.12.0", "jax_cuda12_pjrt": "0.12.0"},
            "jax-cuda12-plugin 0.12.0 ",
            id="a-post-release-apart",
        ),
    ],
)
def test_the_plugin_and_jaxlib_versions_compared_as_jaxlib_compares_them(
    installed, monkeypatch, versions, refused
):
    from shardcli.errors import ShardcliError
    from shardcli.hardware.compilers import check_cuda_plugin_environment

    installed(CUDA12)
    _versions(monkeypatch, **versions)
    check_cuda_plugin_environment(gpu=False)  # a TPU or CPU run does not compile with the plugin
    if refused is None:
        check_cuda_plugin_environment(gpu=True)
        return
    with pytest.raises(ShardcliError, match=refused) as caught:
        check_cuda_plugin_environment(gpu=True)
    assert f'pip install "jax-cuda12-plugin=={versions.get("jaxlib", "0.10.2")}"' in str(caught.value)


def test_a_gpu_run_refuses_a_cuda_plugin_of_another_version_before_jax_starts(cli, installed, monkeypatch):
    installed(CUDA12)
    _versions(monkeypatch, jax_cuda12_plugin="0.12.0.1", jax_cuda12_pjrt="0.12.0.1")
    out = cli(["mesh", "--mesh", "2", "--platform", "gpu"])
    assert out.exit_code == 2, out.output
    assert out.stderr.strip().splitlines() == [
        "shardcli: error: jax-cuda12-plugin 0.12.0.1 is installed beside jaxlib 0.10.2: JAX uses a CUDA "
        "plugin only of jaxlib's version, and a compile with this one gives another compiler's figures; "
        'match them with pip install "jax-cuda12-plugin==0.10.2"'
    ]
    cpu = cli(["mesh", "--mesh", "2", "--platform", "cpu"])  # the plugin compiles nothing there
    assert cpu.exit_code == 0, cpu.output
