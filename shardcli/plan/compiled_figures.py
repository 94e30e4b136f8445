"""What a candidate's compile is kept as (`CompiledFigures`): plain figures per chip and per step, with
the bytes each mesh axis carries (`AxisTraffic`) and a GPU's library kernels (`KernelCost`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

METHODS = ("scan", "layers")


@dataclass(frozen=True)
class AxisTraffic:
    """What one mesh axis (or group of axes) carries in one step, per chip."""

    axes: str  # "fsdp", "tensor", "fsdp+tensor", "?"
    sent_bytes: float
    collectives: int  # ops run per step
    top_kind: str  # the collective that sends most over it
    top_op: str  # and the JAX operation it comes from
    # of `sent_bytes`, what the compiled schedule leaves exposed on the target (`analysis.exposed`):
    # the rest moves while the ops between its collectives' starts and dones run
    exposed_bytes: float = 0.0


@dataclass(frozen=True)
class KernelCost:
    """Library kernel calls of one kind and cost per step (cuBLAS GEMMs, cuDNN attention on a GPU):
    what the GPU's per-op roofline (`analysis.op_roofline.op_roofline`) reads of them."""

    kind: str  # "gemm", "attention", "convolution"
    flops: float  # one call
    bytes_accessed: float  # one call
    dtype: str | None
    runs: int  # calls per step
    narrowest: int | None = None  # its matmuls' narrowest dimension (splash: the head dim)


@dataclass(frozen=True)
class CompiledFigures:
    """A candidate's figures from the compiler, per chip and per step."""

    fits: bool
    needed_bytes: int | None
    capacity_bytes: int
    argument_bytes: int | None
    temp_bytes: int | None
    flops: float | None
    bytes_accessed: float | None
    traffic: tuple[AxisTraffic, ...]
    method: str
    compile_s: float
    fit_text: str
    refused: str | None = None  # the compiler refused it for another reason than memory
    notes: tuple[str, ...] = field(default_factory=tuple)
    kernels: tuple[KernelCost, ...] = ()  # a GPU's library kernels (in flops and bytes_accessed)
    launches: tuple[int, int, int] | None = None  # on a GPU: kernels launched, loop trips, buffers
    host_bytes: int = 0  # kept in the host's memory (remat's offloaded activations)
    host_transfer_bytes: float = 0.0  # moved between the chip and the host per step

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> CompiledFigures:
        data = dict(data)
        data["traffic"] = tuple(AxisTraffic(**t) for t in data["traffic"])
        data["notes"] = tuple(data.get("notes", ()))
        data["kernels"] = tuple(KernelCost(**k) for k in data.get("kernels", ()))
        if data.get("launches") is not None:
            data["launches"] = tuple(data["launches"])
        return CompiledFigures(**data)
