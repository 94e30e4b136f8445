"""The per-op roofline: the sum over a compiled program's ops of each op's own roofline.

On a GPU one global max(T_math, T_hbm) cannot fit both a pure GEMM (60-70% of the peak) and a
training step (27%): the step estimate (`analysis.step_time`) there is the sum over the program's
ops of each op's own roofline (`OpRoofline`): each library kernel (cuBLAS GEMM, cuDNN attention or
convolution) max(FLOPs / (peak for its dtype x dot efficiency), bytes / (HBM x HBM efficiency)),
plus the same for every other op together from XLA's FLOPs and bytes (its dots each at the GEMM
curve at their own FLOPs), and the least its launches take. With a CPU profile nothing overlaps: the
maths, the bytes and the launches add up, and a collective's own bytes (its operand and result,
which XLA counts among the bytes accessed) are charged once, at its measured bus bandwidth, not
again at the stream (`collective_bytes`).

Pure Python over a `ProgramAnalysis` and the hardware table's figures.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardcli.analysis.collectives import operand_bytes
from shardcli.analysis.kernels import Launches
from shardcli.analysis.program import ProgramAnalysis
from shardcli.hardware.builtin_profiles import GPU_LAUNCH
from shardcli.hardware.calibration import LaunchCosts, OpEfficiency
from shardcli.hardware.chips import Chip, Figure


@dataclass(frozen=True)
class OpRoofline:
    """The sum over the program's ops of each op's own roofline, each divided by its efficiency.

    `kernels_math_s`/`kernels_hbm_s`: the library kernels bound by their maths or by HBM; `other_s`:
    every other op together, max(FLOPs / peak, bytes / HBM), `other_bound` saying which.
    """

    kernels: int  # library kernel calls per step (each call times its runs)
    kernels_math_s: float
    kernels_hbm_s: float
    other_flops: float
    other_bytes: float
    other_s: float
    other_bound: str  # "math" or "hbm"
    efficiency: OpEfficiency
    # The least the step takes however little its kernels do: its launches (`GPU_LAUNCH`); 0 unknown
    launch_s: float = 0.0
    launches: Launches | None = None
    launch_source: str = ""
    # The device runs ahead of the host (a GPU): launches hide behind kernels, transfers behind the
    # ops. False (a CPU, whose devices share the host's cores): launches, ops and transfers add up
    launch_overlaps: bool = True
    # A call's own cost (its dispatch and the wait for its result), part of `launch_s`
    call_s: float = 0.0

    @property
    def roofline_s(self) -> float:
        return self.kernels_math_s + self.kernels_hbm_s + self.other_s

    @property
    def launch_bound(self) -> bool:
        """Whether its launches (beyond the call both pay) take longer than its ops' rooflines (a step
        of many small kernels)."""
        return self.launch_s - self.call_s > self.roofline_s

    @property
    def seconds(self) -> float:
        """The call, then the ops' rooflines or the launches beyond the call where those take longer:
        the host launches kernels ahead of the GPU, so a kernel that runs longer than a launch hides
        the next one's, but a step waited for still pays its dispatch and its wait (calibrate's
        GEMMs and stream are timed beyond a call). On a CPU, where nothing runs ahead, all add."""
        if not self.launch_overlaps:
            return self.roofline_s + self.launch_s
        return self.call_s + max(self.roofline_s, self.launch_s - self.call_s)

    @property
    def math_s(self) -> float:
        """The part of the step whose ops are bound by their maths."""
        return self.kernels_math_s + (self.other_s if self.other_bound == "math" else 0.0)

    @property
    def hbm_s(self) -> float:
        """The part of the step whose ops are bound by HBM."""
        return self.kernels_hbm_s + (self.other_s if self.other_bound == "hbm" else 0.0)


def op_roofline(
    analysis: ProgramAnalysis,
    chip: Chip | None,
    peak: Figure,
    hbm: Figure,
    eff: OpEfficiency,
    per_chip: int = 1,
    launch: LaunchCosts = GPU_LAUNCH,
) -> OpRoofline | None:
    """Each library kernel's roofline at the peak of its own dtype (`chip`'s; None: `peak` for all),
    plus every other op's together at `peak`; and the least its launches take (`launch`).

    Returns None without FLOPs or bytes (nothing to add up)."""
    if analysis.flops is None or analysis.bytes_accessed is None:
        return None
    hbm_rate = hbm.value / per_chip * eff.hbm
    math_s = hbm_s = 0.0
    count = 0
    for call in analysis.kernels.calls:
        kernel_peak = chip.peak_flops(call.dtype or "float32") if chip is not None else None
        rate = (kernel_peak or peak).value / per_chip * eff.dot_at(call.dtype, call.flops)
        t_math, t_hbm = call.flops / rate, call.bytes_accessed / hbm_rate
        if t_math >= t_hbm:
            math_s += t_math * call.runs
        else:
            hbm_s += t_hbm * call.runs
        count += call.runs
    other_flops = max(0.0, analysis.flops - analysis.kernels.flops)
    other_bytes = max(0.0, analysis.bytes_accessed - analysis.kernels.bytes_accessed)
    if not launch.overlaps:
        # On a CPU a collective is a copy through the same memory: its measured bus bandwidth (a
        # profile's, writing a fresh output) already moves the bytes XLA counts for it, and nothing
        # overlaps, so charging them again at the stream rate would count them twice.
        other_bytes = max(0.0, other_bytes - collective_bytes(analysis))
    other_math = _xla_maths_s(analysis, other_flops, peak.value / per_chip, eff)
    other_hbm = other_bytes / hbm_rate
    found = analysis.launches
    return OpRoofline(
        kernels=count,
        kernels_math_s=math_s,
        kernels_hbm_s=hbm_s,
        other_flops=other_flops,
        other_bytes=other_bytes,
        # XLA's own ops are not told apart here: on a GPU the longer of their maths and their bytes,
        # on a CPU (nothing overlaps) both, as its dots (maths) and its other ops (bytes) run in turn
        other_s=max(other_math, other_hbm) if launch.overlaps else other_math + other_hbm,
        other_bound="math" if other_math > other_hbm else "hbm",
        efficiency=eff,
        launch_s=launch_seconds(found, launch) if found is not None else 0.0,
        launches=found,
        launch_source=launch.source if found is not None else "",
        launch_overlaps=launch.overlaps,
        call_s=launch.call_s if found is not None else 0.0,
    )


def _xla_maths_s(analysis: ProgramAnalysis, flops: float, peak: float, eff: OpEfficiency) -> float:
    """XLA's own FLOPs (every dot on a CPU) at the GEMM curve: each dot or convolution at its own
    FLOPs; the rest (elementwise maths) shared among the program's launches, a GEMM of that size each."""
    dot_flops = sum(d.flops * d.runs for d in analysis.dots)
    share = min(1.0, flops / dot_flops) if dot_flops else 0.0  # never more than XLA counts
    dots_s = sum(
        share * d.flops * d.runs / (peak * eff.dot_at(d.dtype or analysis.dot_dtype, d.flops))
        for d in analysis.dots
        if d.flops > 0
    )
    rest = max(0.0, flops - dot_flops)
    per_op = rest / max(1, analysis.launches.kernels) if analysis.launches else rest
    return dots_s + rest / (peak * eff.dot_at(analysis.dot_dtype, per_op))


def collective_bytes(analysis: ProgramAnalysis) -> float:
    """Bytes the program's collectives read and write per device per run (operand and result, loops
    per trip): an all-gather's operand is 1/n of its result, a reduce-scatter's n times it."""
    total = 0.0
    for c in analysis.collectives:
        total += (operand_bytes(c.kind, c.result_bytes, c.group_size or 1) + c.result_bytes) * c.runs
    return total


def launch_seconds(launches: Launches, costs: LaunchCosts) -> float:
    """The least time one call takes for what it launches, however little each kernel does."""
    return (
        costs.call_s
        + launches.kernels * costs.kernel_s
        + launches.loop_trips * costs.trip_s
        + launches.buffers * costs.buffer_s
    )
