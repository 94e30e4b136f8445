"""GPU host types: each host's NICs give its GPUs their share of the network, an axis across hosts
moves over as many rails as it has GPUs on each host, and --network stands in for the table."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from shardcli.analysis.program import CollectiveOp, ProgramAnalysis
from shardcli.analysis.step_time import axis_links, step_time_of
from shardcli.errors import ShardcliError
from shardcli.hardware.chips import CHIPS, network_figure
from shardcli.hardware.hosts import HOSTS
from shardcli.hardware.targets import parse_target

MLP = str(Path(__file__).resolve().parent.parent / "examples" / "mlp.py")
H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    ("target", "label", "nics", "gbps", "per_gpu"),
    [
        pytest.param("gpu-h100", "NVIDIA DGX H100", 8, 400, 50e9, id="dgx-h100"),
        pytest.param("gpu-h200", "NVIDIA DGX H200", 8, 400, 50e9, id="dgx-h200"),
        pytest.param("gpu-h100-a3", "GCP A3 High, a3-highgpu-8g", 4, 200, 12.5e9, id="a3-high"),
        pytest.param("gpu-h100-a3mega", "GCP A3 Mega, a3-megagpu-8g", 8, 200, 25e9, id="a3-mega"),
        pytest.param("gpu-h200-a3ultra", "GCP A3 Ultra, a3-ultragpu-8g", 8, 400, 50e9, id="a3-ultra"),
    ],
)
def test_each_host_gives_its_gpus_the_nic_total_over_its_gpus(target, label, nics, gbps, per_gpu):
    host = HOSTS[target]
    assert (host.label, host.gpus, host.nics, host.nic_gbps) == (label, 8, nics, gbps)
    assert host.per_gpu_bytes_per_s == per_gpu == nics * gbps / 8 * 1e9 / host.gpus
    spec = parse_target(f"{target}:2x8")
    assert spec.name == f"{target}:2x8" and spec.generation.name == host.chip
    assert spec.network is not None and spec.network.value == per_gpu
    assert label in spec.network.source and host.source.split(" (")[0] in spec.network.source


def test_the_plain_target_is_the_dgx_and_every_host_has_a_source():
    for name in ("gpu-h100", "gpu-h200"):
        assert CHIPS[name].network_bytes_per_s == network_figure(HOSTS[name])
    assert all("." in h.source for h in HOSTS.values())  # an address to read it at
    assert "not stated" in HOSTS["gpu-h100-a3"].source_words  # the per-NIC rate no page states


# --- the bandwidth of an axis across hosts --------------------------------------------------------


@dataclass(frozen=True)
class _Device:
    id: int
    process_index: int


class _Mesh:
    def __init__(self, devices: list[_Device], shape: tuple[int, ...], names: tuple[str, ...]) -> None:
        import numpy as np

        self.devices = np.array(devices, dtype=object).reshape(shape)
        self.axis_names = names


def _two_hosts(shape: tuple[int, ...], names: tuple[str, ...]) -> _Mesh:
    """16 H100s, 2 hosts of 8, laid host by host as JAX's topology mesh lays them."""
    return _Mesh([_Device(i, i // 8) for i in range(16)], shape, names)


def _gather(axes: tuple[str, ...], nbytes: int = 1 << 30) -> ProgramAnalysis:
    op = CollectiveOp("all-gather", "bf16[1]", nbytes, axes, 16, 1, True, None, None, False)
    return ProgramAnalysis(collectives=(op,), memory=None, flops=1e9, bytes_accessed=1e6)


ONE_NIC = replace(HOSTS["gpu-h100"], target="one-nic", nics=1)  # one 400 Gb/s NIC for 8 GPUs


@pytest.mark.parametrize(
    ("host", "shape", "names", "axis", "rate"),
    [
        pytest.param(HOSTS["gpu-h100"], (16,), ("fsdp",), "fsdp", 400e9, id="dgx-fsdp16-8-rails"),
        pytest.param(ONE_NIC, (16,), ("fsdp",), "fsdp", 50e9, id="one-nic-fsdp16"),
        pytest.param(HOSTS["gpu-h100-a3mega"], (16,), ("fsdp",), "fsdp", 200e9, id="a3mega-fsdp16"),
        pytest.param(HOSTS["gpu-h100"], (2, 8), ("data", "fsdp"), "data", 50e9, id="dgx-data2-1-rail"),
        pytest.param(HOSTS["gpu-h100"], (2, 8), ("data", "fsdp"), "fsdp", 450e9, id="dgx-fsdp8-nvlink"),
        pytest.param(HOSTS["gpu-h100"], (4, 4), ("fsdp", "tensor"), "fsdp", 100e9, id="dgx-fsdp4-2-rails"),
    ],
)
def test_an_axis_across_hosts_moves_over_its_gpus_rails(host, shape, names, axis, rate):
    places = [(d.process_index, d.id) for d in _two_hosts(shape, names).devices.flat]
    links = axis_links(CHIPS[host.chip], shape, names, places, network_figure(host))
    assert links[axis].bytes_per_s == rate


def test_fsdp_across_two_hosts_is_faster_on_a_dgx_than_with_one_nic_a_host():
    mesh, program = _two_hosts((16,), ("fsdp",)), _gather(("fsdp",))
    dgx = step_time_of(program, mesh, H100, "bfloat16", network=network_figure(HOSTS["gpu-h100"]))
    one = step_time_of(program, mesh, H100, "bfloat16", network=network_figure(ONE_NIC))
    assert dgx is not None and one is not None
    (fast,), (slow,) = dgx.comm, one.comm
    assert fast.seconds == pytest.approx(program.collectives[0].sent_bytes / 400e9)
    assert slow.seconds == pytest.approx(8 * fast.seconds)
    assert "8 x 400 Gb/s" in fast.source and "x 8 GPUs a host = 400 GB/s" in fast.source


def test_network_given_stands_in_for_the_host_type():
    spec = parse_target("gpu-h100-a3mega:2x8", network="50")  # one 400 Gb/s NIC shared by 8 GPUs
    assert spec.network is not None and spec.network.value == 6.25e9
    assert "--network 50 Gb/s per GPU" in spec.network.source
    assert "--network 50 Gb/s per GPU" in (spec.network_words() or "")
    mesh, program = _two_hosts((16,), ("fsdp",)), _gather(("fsdp",))
    step = step_time_of(program, mesh, H100, "bfloat16", network=spec.network)
    assert step is not None and step.comm[0].rate == 50e9  # 8 rails of 6.25 GB/s


def test_plan_models_the_axes_as_the_estimate_does():
    from shardcli.plan.analytic import chip_figures

    dgx = chip_figures("gpu-h100", (2, 8))
    mega = chip_figures("gpu-h100", (2, 8), network=parse_target("gpu-h100-a3mega:2x8").network)
    assert dgx.axis_bytes_per_s(16, 1) == 400e9  # fsdp over both hosts: 8 rails
    assert dgx.axis_bytes_per_s(2, 8) == 50e9  # data over the hosts after 8 GPUs: 1 rail
    assert dgx.axis_bytes_per_s(8, 1) == 450e9  # within a host: NVLink
    assert mega.axis_bytes_per_s(16, 1) == 200e9 and mega.axis_bytes_per_s(2, 8) == 25e9


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "network", "message"),
    [
        (
            "gpu-h100-a9:2x8",
            None,
            "names host type 'a9', which is not in the table for the H100 SXM; known: ",
        ),
        ("gpu-h100:2x8", "0", "--network '0' is no bandwidth; give one GPU's share of the network in Gb/s"),
        ("gpu-h100:2x8", "fast", "--network 'fast' is no bandwidth"),
        ("gpu-h100:2x8", "-100", "a number above 0"),
        ("gpu-h100:2x8", "inf", "a number above 0"),
        ("tpu-v5e:4x4", "100", "--network 100 is the network between GPU hosts, but --target tpu-v5e:4x4"),
    ],
)
def test_bad_hosts_and_networks_are_one_line(text, network, message):
    with pytest.raises(ShardcliError) as error:
        parse_target(text, network=network)
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["inspect", f"{MLP}:train_step", "--target", "gpu-h100-dgx:2x8"],
            "known: gpu-h100 (NVIDIA DGX H100), gpu-h100-a3 (GCP A3 High, a3-highgpu-8g), gpu-h100-a3mega",
        ),
        (["inspect", f"{MLP}:train_step", "--target", "gpu-h100:2x8", "--network", "0"], "a number above 0"),
        (["inspect", f"{MLP}:train_step", "--network", "100"], "but no --target is given; give a GPU target"),
        (["plan", "--preset", "tiny", "--target", "gpu-h100:2x8", "--network", "x"], "--network 'x' is no"),
        (["plan", "--preset", "tiny", "--target", "tpu-v5e:4x4", "--network", "100"], "has ICI throughout"),
    ],
)
def test_bad_input_exits_2_with_one_line(cli, args, message):
    out = cli(args)
    assert out.exit_code == 2 and message in out.stderr, out.output
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


# --- the report -----------------------------------------------------------------------------------


def test_the_header_names_the_host_and_its_network(cli):
    from shardcli.hardware.compilers import compiler_installed

    if not compiler_installed("cuda"):
        pytest.skip("the gpu extra: pip install -e '.[gpu]' (CI installs it)")
    out = cli(["mesh", "--target", "gpu-h100-a3mega:2x8", "--no-color", "--format", "json"])
    assert out.exit_code == 0, out.output
    import json

    note = json.loads(out.stdout)["runtime"]["note"]
    assert (
        "2 hosts of 8, NVLink within a host and the network between hosts (GCP A3 Mega, a3-megagpu-8g: "
        in note
    )
    assert "8 x 200 Gb/s GPUDirect-TCPXO NICs for 8 GPUs, 25 GB/s per GPU)" in note
    assert math.isclose(HOSTS["gpu-h100-a3mega"].per_gpu_bytes_per_s, 25e9)


def test_the_docs_table_holds_each_hosts_nics():
    page = (Path(__file__).resolve().parent.parent / "docs" / "explanation" / "cost-model.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line for line in page.splitlines() if line.startswith("| `gpu-")}
    assert set(rows) == set(HOSTS)
    for name, host in HOSTS.items():
        row = rows[name]
        assert host.label in row and f"| {host.gpus} |" in row
        assert f"{host.nics} x {host.nic_gbps:g} Gb/s" in row
        assert f"| {host.per_gpu_bytes_per_s / 1e9:g} GB/s |" in row
