"""GPU host types: the GPUs of one host and the NICs that join it to the others, each with its source.

Pure Python, no JAX. A GPU target names its host type (`gpu-h100:2x8` a DGX H100,
`gpu-h100-a3mega:32x8` Google Cloud's a3-megagpu-8g); the table gives each its GPUs and the NICs
that carry traffic between hosts (count x Gb/s), and where those figures come from.

NCCL lays its rings and trees over every NIC of a host, one channel per rail (each GPU next to its
own NIC), so a host moves NIC count x NIC rate to the others; one GPU's share is that total over the
host's GPUs. A mesh axis whose group has g GPUs on each host runs g channels out of each host at
once, beside the host's other groups (GPUs per host / g of them), so it moves g shares per GPU:
one share where the axis has one GPU per host (data across hosts), the host's whole NIC total where
it spans whole hosts (fsdp over every GPU), never more than NVLink within the host carries
(`axis_network_bytes_per_s`).

Sources (checked in 2026):
- NVIDIA DGX BasePOD reference architecture, "Core Components" (DGX H200 and H100 systems): "Four
  OSFP ports serving eight single-port NVIDIA ConnectX-7 VPI, ... up to 400 Gb/s InfiniBand/Ethernet"
  for the compute fabric; the DGX H100 user guide's network-module table puts one port beside each GPU.
- Google Cloud, "Networking and GPU machines" (compute/docs/gpus/gpu-network-bandwidth): A3 Ultra "eight
  NVIDIA ConnectX-7 (CX7) network interface cards (NICs) ... The eight CX7 NICs deliver a total network
  bandwidth of 3,200 Gbps", dedicated to GPU-to-GPU traffic, each aligned with one H200 (GPUDirect RDMA,
  RoCE); the overview table: A3 Mega 1,800 Gbps in all (GPUDirect-TCPXO), A3 High 1,000 Gbps in all
  (GPUDirect-TCPX).
- Google Cloud, "Configure compute resources" for Vertex AI training: a3-megagpu-8g has "8 secondary
  NICs each supporting up to 200 Gbps for GPU data transfer" beside a primary NIC of up to 200 Gbps.
- NVIDIA AI Cluster Runtime, "GKE TCPXO Networking Prerequisites": A3 High (a3-highgpu-8g) "uses
  GPUDirect-TCPX with four GPU NICs". No page found states each of those NICs' rate: 200 Gb/s is
  taken (4 x 200 = 800 of the 1,000 Gbps, the rest the VM's primary NIC, as on A3 Mega) and said so.
"""

from __future__ import annotations

from dataclasses import dataclass

_BASEPOD = (
    "NVIDIA DGX BasePOD reference architecture, Core Components "
    "(docs.nvidia.com/dgx-basepod/reference-architecture-infrastructure-foundation-enterprise-ai/latest/"
    "core-components.html): eight single-port ConnectX-7, up to 400 Gb/s, for the compute fabric"
)
_GCP_NET = (
    "Google Cloud, Networking and GPU machines (cloud.google.com/compute/docs/gpus/gpu-network-bandwidth)"
)
_VERTEX = (
    "Google Cloud, Vertex AI Configure compute resources (docs.cloud.google.com/gemini-enterprise-agent-"
    "platform/machine-learning/training/configure-compute)"
)
_AICR = (
    "NVIDIA AI Cluster Runtime, GKE TCPXO Networking Prerequisites "
    "(docs.nvidia.com/aicr/latest/integrator-guide/gke-tcpxo-networking.md)"
)


@dataclass(frozen=True)
class HostType:
    """One kind of GPU host: its GPUs and the NICs that carry traffic to other hosts."""

    target: str  # the --target name: "gpu-h100", "gpu-h100-a3mega"
    chip: str  # the hardware table's GPU: "gpu-h100"
    label: str  # "NVIDIA DGX H100", "GCP A3 Mega, a3-megagpu-8g"
    gpus: int  # GPUs a host
    nics: int  # NICs for GPU-to-GPU traffic between hosts
    nic_gbps: float  # each NIC, Gb/s one way
    nic_kind: str  # "ConnectX-7 InfiniBand", "GPUDirect-TCPXO"
    source: str
    unconfirmed: str = ""  # a figure no page found states, and what was taken

    @property
    def nic_total_gbps(self) -> float:
        return self.nics * self.nic_gbps

    @property
    def per_gpu_bytes_per_s(self) -> float:
        """One GPU's share of the host's NICs, one way: NIC total / GPUs, in bytes/s."""
        return self.nic_total_gbps / 8 * 1e9 / self.gpus

    @property
    def words(self) -> str:
        """`NVIDIA DGX H100: 8 x 400 Gb/s ConnectX-7 InfiniBand NICs, 50 GB/s per GPU`."""
        share = self.per_gpu_bytes_per_s / 1e9
        return (
            f"{self.label}: {self.nics} x {self.nic_gbps:g} Gb/s {self.nic_kind} NICs for {self.gpus} GPUs, "
            f"{share:g} GB/s per GPU"
        )

    @property
    def source_words(self) -> str:
        """Where the figures come from, and which one no source states."""
        return f"{self.source}; {self.unconfirmed}" if self.unconfirmed else self.source


def _host(
    target: str, chip: str, label: str, nics: int, gbps: float, kind: str, source: str, **kw: str
) -> HostType:
    return HostType(target, chip, label, 8, nics, gbps, kind, source, **kw)


HOSTS: dict[str, HostType] = {
    h.target: h
    for h in (
        _host("gpu-h100", "gpu-h100", "NVIDIA DGX H100", 8, 400, "ConnectX-7 InfiniBand", _BASEPOD),
        _host(
            "gpu-h100-a3",
            "gpu-h100",
            "GCP A3 High, a3-highgpu-8g",
            4,
            200,
            "GPUDirect-TCPX",
            f"{_GCP_NET}: A3 High 1,000 Gbps in all, GPUDirect-TCPX; {_AICR}: four GPU NICs",
            unconfirmed="200 Gb/s per NIC is not stated on the pages found: taken as 4 x 200 = 800 of the "
            "1,000 Gbps, the rest the VM's primary NIC, as on A3 Mega",
        ),
        _host(
            "gpu-h100-a3mega",
            "gpu-h100",
            "GCP A3 Mega, a3-megagpu-8g",
            8,
            200,
            "GPUDirect-TCPXO",
            f"{_VERTEX}: 8 secondary NICs each up to 200 Gbps for GPU data transfer; {_GCP_NET}: A3 Mega "
            "1,800 Gbps in all with the primary NIC",
        ),
        _host("gpu-h200", "gpu-h200", "NVIDIA DGX H200", 8, 400, "ConnectX-7 InfiniBand", _BASEPOD),
        _host(
            "gpu-h200-a3ultra",
            "gpu-h200",
            "GCP A3 Ultra, a3-ultragpu-8g",
            8,
            400,
            "ConnectX-7 RoCE",
            f"{_GCP_NET}: eight ConnectX-7 NICs, 3,200 Gbps in all, for GPU-to-GPU traffic only, one "
            "aligned with each H200 (GPUDirect RDMA over RoCE)",
        ),
    )
}


def default_host(chip: str) -> HostType | None:
    """The host a GPU generation's plain target names (`gpu-h100`: the DGX H100); None on a TPU."""
    return HOSTS.get(chip)


def hosts_of(chip: str) -> list[HostType]:
    """Every host type of one GPU generation, its default first."""
    return [h for h in HOSTS.values() if h.chip == chip]


def axis_network_bytes_per_s(per_gpu: float, gpus_per_host: int, nvlink: float) -> float:
    """What one GPU of a mesh axis that crosses hosts moves to the others, one way: its share of the
    host's NICs times the axis's GPUs on each host (NCCL's channels over that many rails at once),
    at most its NVLink (the ring's hops within the host)."""
    return min(nvlink, per_gpu * max(1, gpus_per_host))
