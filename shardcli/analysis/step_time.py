"""The one step-time estimate of a compiled program: a roofline per device, every figure sourced.

From a `ProgramAnalysis` (FLOPs and bytes accessed with loops counted per trip, collectives with
their mesh axes, bytes sent and runs), the chip's entry in the hardware table and how each mesh
axis lies on the hardware:

- T_math = FLOPs / peak FLOP/s (the peak for the dtype the program's dots run in, per device); on
  a TPU plus the padding its matrix unit adds to library kernels whose matmuls have a dimension
  narrower than the MXU (splash attention's head dim of 128 fills half of v6e's 256-wide MXU): a
  kernel's FLOPs times (width / dimension - 1);
- T_hbm  = bytes accessed / HBM bandwidth;
- T_comm = for each mesh axis (or set of axes) collectives run over, the bytes each device sends
  over it / that axis's bandwidth; summed over the axes (one collective after another);
- T_host = bytes moved between the device and the host's memory (remat's offloaded activations:
  written in the forward pass and read back in the backward, `MemoryUse.host_transfer_bytes`) / the
  chip's PCIe link, one way; absent where nothing is offloaded;
- T_exposed = the communication the compiled schedule does not hide (`analysis.exposed`): per
  collective, max(0, its transfer - the rooflines of the ops the scheduler placed between its start
  and its done), a synchronous collective whole, loops per trip;
- bound  = max(max(T_math, T_hbm) + T_exposed, T_comm + T_host): the ops, then what of the
  communication they do not hide; never less than the transfers one after another (the collectives
  of different axes, and the host's, whose DMA engines move them from and to the same HBM);
  no-overlap sum = max(T_math, T_hbm) + T_comm + T_host (the memory roofline overlaps the maths
  within each op, transfers overlap nothing);
- the estimate = bound / efficiency, where `efficiency` (default 1.0) is the one calibration
  figure, named with its source where it is not 1 (a TPU: `shardcli.hardware.calibration.CALIBRATION`).

On a GPU, and on a CPU with a calibrated profile, T_math and T_hbm are the per-op roofline instead
(`analysis.op_roofline`): each op's own roofline, summed; on a CPU nothing overlaps (the maths, the
bytes, the collectives and the call add up). The efficiencies are
`shardcli.hardware.builtin_profiles.GPU_OPS`, measured, or a profile's.

The bandwidth of a mesh axis (`AxisLink`, in `analysis.axis_links`):
- TPU: ICI per link, one way (hardware table), times the torus dimensions the axis runs along,
  times 2 for each such dimension the axis covers whole where that dimension wraps around (a ring
  sends both ways; a line, or part of a dimension, one way); a collective over several mesh axes
  adds their bandwidths. Devices of one chip (v4's two TensorCores) share its HBM, so an axis that stays
  on the chip moves at HBM bandwidth, and each device gets its share of the chip's peak and HBM.
- GPU: NVLink per GPU one way within a host; the network share per GPU where the axis crosses hosts.
  A collective over several mesh axes moves at the slowest of them, not their sum: a GPU has one
  NVLink share whatever the axes, and a ring through GPUs of several hosts is as fast as the network.

Pure Python over plain data (`axis_links`, `estimate_step`); `places_of_mesh` reads a JAX mesh's
devices by their attributes (coords, core_on_chip, process_index) without importing JAX, and
`step_time_of` puts the two together for a compiled program and its mesh.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardcli.analysis.axis_links import AxisLink as AxisLink
from shardcli.analysis.axis_links import axis_links as axis_links
from shardcli.analysis.axis_links import devices_per_chip as devices_per_chip
from shardcli.analysis.axis_links import places_of_mesh as places_of_mesh
from shardcli.analysis.axis_links import profiled_links, slices_of_mesh
from shardcli.analysis.exposed import Exposure, exposed_by_axes, exposures, op_seconds
from shardcli.analysis.op_roofline import OpRoofline, op_roofline
from shardcli.analysis.program import CollectiveOp, ProgramAnalysis
from shardcli.hardware.builtin_profiles import GPU_LAUNCH, GPU_OPS
from shardcli.hardware.calibration import CALIBRATION, LaunchCosts, OpEfficiency
from shardcli.hardware.chips import Chip, Figure, chip_for_kind
from shardcli.hardware.profile import HardwareProfile, profile_for

UNCALIBRATED = "none: the roofline as it is (1.0)"


@dataclass(frozen=True)
class Term:
    """One term of the roofline: an amount per device, a rate, and their quotient."""

    name: str  # "math", "hbm", or the mesh axes of a communication term ("data", "data+model")
    amount: float | None  # FLOPs or bytes, per device
    rate: float | None  # FLOP/s or B/s
    seconds: float | None
    source: str


@dataclass(frozen=True)
class StepEstimate:
    """The estimated time of one run of the program, per device."""

    chip: str  # the hardware table's label, or what the figures came from
    math: Term
    hbm: Term
    comm: tuple[Term, ...]  # one per mesh axis (or set of axes) collectives run over
    efficiency: float = 1.0
    efficiency_source: str = UNCALIBRATED
    compiler_seconds: float | None = None  # the TPU compiler's optimal_seconds, where positive
    compiler_note: str = "not given"
    notes: tuple[str, ...] = ()  # what the figures leave out (loops of unknown trips, ...)
    ops: OpRoofline | None = None  # a GPU: the estimate is the per-op roofline (max with T_comm + T_host)
    host: Term | None = None  # transfers to and from the host's memory; None where there are none
    exposure: tuple[Exposure, ...] = ()  # each collective's transfer and what the schedule leaves exposed

    @property
    def method(self) -> str:
        """How the estimate is made: "per-op roofline" or "roofline / efficiency"."""
        return "per-op roofline" if self.ops is not None else "roofline / efficiency"

    @property
    def t_comm_s(self) -> float | None:
        if any(t.seconds is None for t in self.comm):
            return None
        return sum(t.seconds or 0.0 for t in self.comm)

    @property
    def t_transfers_s(self) -> float:
        """T_comm + T_host: the transfers, one after another (an axis of unknown bandwidth adds 0)."""
        return (self.t_comm_s or 0.0) + self.t_host_s

    @property
    def t_exposed_s(self) -> float:
        """T_exposed: the communication the compiled schedule does not hide behind the ops, summed over
        the collectives (one of unknown bandwidth adds 0)."""
        return sum(e.exposed_s or 0.0 for e in self.exposure)

    def _compute(self) -> tuple[str, float]:
        """The ops' part and what bounds it: a GPU's per-op roofline ("math", "hbm" or "launch"), else
        the larger of T_math and T_hbm."""
        if self.ops is not None:
            parts = [("math", self.ops.math_s), ("hbm", self.ops.hbm_s), ("launch", self.ops.launch_s)]
            return max(parts, key=lambda t: t[1])[0], self.ops.seconds
        hbm = self.hbm.seconds or 0.0
        math_s = self.math.seconds or 0.0
        return ("math", math_s) if math_s >= hbm else ("hbm", hbm)

    @property
    def t_host_s(self) -> float:
        return (self.host.seconds or 0.0) if self.host is not None else 0.0

    @property
    def bound_s(self) -> float | None:
        """max(max(T_math, T_hbm) + T_exposed, T_comm + T_host) over the terms known; None without
        T_math."""
        if self.math.seconds is None:
            return None
        return max(max(self.math.seconds, self.hbm.seconds or 0.0) + self.t_exposed_s, self.t_transfers_s)

    @property
    def sum_s(self) -> float | None:
        """max(T_math, T_hbm) + T_comm + T_host: no communication hidden behind compute."""
        if self.math.seconds is None or self.t_comm_s is None:
            return None
        return max(self.math.seconds, self.hbm.seconds or 0.0) + self.t_comm_s + self.t_host_s

    @property
    def dominant(self) -> str | None:
        """The term that sets the estimate: "math", "hbm" ("launch" on a GPU); where the exposed
        communication takes longer than the ops, the mesh axes that expose most; where the transfers
        one after another take longer than both, the largest of them ("host", or mesh axes)."""
        if self.bound_s is None:
            return None
        name, compute = self._compute()
        if self.t_transfers_s > compute + self.t_exposed_s:
            return self._largest_transfer()
        if self.t_exposed_s > compute:
            return self.most_exposed or name
        return name

    @property
    def most_exposed(self) -> str | None:
        """The mesh axes whose collectives expose most time (`data+model`); None where none does."""
        by = exposed_by_axes(self.exposure)
        return max(by, key=lambda axes: by[axes]) if by else None

    def _largest_transfer(self) -> str:
        """ "host", or the mesh axes of the largest communication term (T_comm unknown: only T_host
        is counted, so "host")."""
        largest = max(self.comm, key=lambda t: t.seconds or 0.0, default=None)
        if self.t_comm_s is None or largest is None or self.t_host_s >= (largest.seconds or 0.0):
            return "host"
        return largest.name

    @property
    def estimate_s(self) -> float | None:
        """The bound divided by the calibrated efficiency; on a GPU the per-op roofline plus the exposed
        communication, or the transfers (communication, then the host's) where they take longer."""
        if self.bound_s is None:
            return None
        if self.ops is not None and not self.ops.launch_overlaps:  # a CPU: one after another
            return self.ops.seconds + self.t_transfers_s
        if self.ops is not None:
            return max(self.ops.seconds + self.t_exposed_s, self.t_transfers_s)
        return self.bound_s / self.efficiency


# --- the estimate ---------------------------------------------------------------------------------


def estimate_step(
    analysis: ProgramAnalysis,
    chip: Chip | None,
    links: dict[str, AxisLink],
    dtype_name: str,
    *,
    per_chip: int = 1,
    peak: Figure | None = None,
    hbm: Figure | None = None,
    efficiency: float = 1.0,
    efficiency_source: str = UNCALIBRATED,
    op_efficiency: OpEfficiency | None = None,
    launch: LaunchCosts = GPU_LAUNCH,
    host: Figure | None = None,
    label: str | None = None,
    comm_scale: Callable[[str, int | None], float] | None = None,
) -> StepEstimate:
    """The roofline of one run of the program, per device.

    Args:
        analysis: the compiled program (FLOPs, bytes and collectives, loops counted per trip).
        chip: the hardware table's entry; None where only `peak` (and `links`) are known.
        links: each mesh axis's bandwidth (`axis_links`, or one figure per axis the user gave).
        dtype_name: the dtype whose peak T_math divides by.
        per_chip: devices sharing one chip (each gets 1/per_chip of its peak and HBM bandwidth).
        peak, hbm: figures that replace the table's (--peak-tflops).
        efficiency: the calibrated share of the roofline a real step reaches (0 < e <= 1).
        op_efficiency: the per-op roofline's efficiencies (a GPU, or a measured profile): then the
            estimate is the sum of each op's roofline and `efficiency` is not used.
        launch, host: a measured profile's launch costs and host link (default the H200's and the
            chip's).
        label: what the figures are named by (a profile's label; default the chip's).
        comm_scale: a measured profile's cost of a byte of each collective kind in bytes of an
            all-reduce, whose bus bandwidth the links are (`HardwareProfile.comm_scale`).
    """
    if not 0 < efficiency <= 1:
        raise ValueError(f"efficiency {efficiency} is not in (0, 1]")
    peak_given = peak is not None
    peak = peak or (chip.peak_flops(dtype_name) if chip else None)
    hbm = hbm or (chip.hbm_bytes_per_s if chip else None)
    share = f", shared by the {per_chip} devices of a chip" if per_chip > 1 else ""
    math_term = _term("math", analysis.flops, peak, per_chip, share, f"no {dtype_name} peak for this device")
    if op_efficiency is None and not peak_given:
        math_term = _padded(math_term, analysis, chip)
    hbm_term = _term("hbm", analysis.bytes_accessed, hbm, per_chip, share, "no HBM bandwidth for this device")
    notes = list(analysis.missing)
    if analysis.unknown_trips:
        notes.append(
            f"{len(analysis.unknown_trips)} loop(s) of unknown trip count counted once: FLOPs, bytes and "
            "times are at least these"
        )
    ops = None
    if op_efficiency is not None and peak is not None and hbm is not None:
        ops = op_roofline(analysis, None if peak_given else chip, peak, hbm, op_efficiency, per_chip, launch)
        efficiency, efficiency_source = (
            1.0,
            "per op: " + "; ".join((op_efficiency.dot_source, op_efficiency.hbm_source)),
        )
    gpu = chip is not None and chip.platform == "cuda"
    op_s = op_seconds(None if peak_given else chip, peak, hbm, per_chip, op_efficiency)
    return StepEstimate(
        chip=label or (chip.label if chip else "figures given"),
        math=math_term,
        hbm=hbm_term,
        comm=_comm_terms(analysis, links, gpu=gpu, scale=comm_scale),
        efficiency=efficiency,
        efficiency_source=efficiency_source,
        compiler_seconds=analysis.compiler_seconds,
        compiler_note=_compiler_note(analysis, chip),
        notes=tuple(notes),
        ops=ops,
        host=_host_term(analysis, chip, per_chip, host),
        exposure=exposures(analysis.collectives, _transfer_seconds(links, gpu, comm_scale), op_s),
    )


def _transfer_seconds(
    links: dict[str, AxisLink], gpu: bool, scale: Callable[[str, int | None], float] | None
) -> Callable[[CollectiveOp], float | None]:
    """One run of a collective: its bytes sent (as all-reduce bytes, with a profile's `scale`) over
    its axes' bandwidth, as `_comm_terms` reckons it; 0 for a group of one device."""

    def seconds(c: CollectiveOp) -> float | None:
        if c.mesh_axes == ():
            return 0.0
        rate, _ = _axes_rate(c.mesh_axes, links, gpu)
        weight = scale(c.kind, c.group_size) if scale is not None else 1
        return c.sent_bytes * weight / rate if rate else None

    return seconds


def _padded(term: Term, analysis: ProgramAnalysis, chip: Chip | None) -> Term:
    """T_math with the MXU padding of library kernels whose matmuls are narrower than a TPU's matrix
    unit: each such call's FLOPs x (width / its narrowest dimension - 1) more at the same peak."""
    width = chip.mxu_width if chip is not None else None
    if width is None or term.seconds is None or term.rate is None:
        return term
    padding: dict[int, float] = {}
    for call in analysis.kernels.calls:
        if call.narrowest is not None and 0 < call.narrowest < width.value:
            extra = call.flops * call.runs * (width.value / call.narrowest - 1)
            padding[call.narrowest] = padding.get(call.narrowest, 0.0) + extra
    if not padding:
        return term
    total = sum(padding.values())
    dims = ", ".join(str(d) for d in sorted(padding))
    source = (
        f"{term.source}; + {total:.3g} FLOPs of MXU padding (library kernels' matmul dimension {dims} on "
        f"{width.value:g}-wide matrix units: {width.source})"
    )
    return Term(term.name, term.amount, term.rate, term.seconds + total / term.rate, source)


def _host_term(
    analysis: ProgramAnalysis, chip: Chip | None, per_chip: int, given: Figure | None = None
) -> Term | None:
    """T_host: the bytes moved to and from the host's memory over the chip's PCIe link (shared by
    the devices of a chip); None where the program moves none."""
    moved = analysis.host_transfer_bytes
    if not moved:
        return None
    rate = given or (chip.host_bytes_per_s if chip is not None else None)
    share = f", shared by the {per_chip} devices of a chip" if per_chip > 1 else ""
    return _term("host", moved, rate, per_chip, share, "no host link figure for this device")


def _term(
    name: str, amount: float | None, rate: Figure | None, per_chip: int, share: str, unknown: str
) -> Term:
    if rate is None:
        return Term(name, amount, None, None, unknown)
    per_device = rate.value / per_chip
    seconds = amount / per_device if amount is not None else None
    return Term(name, amount, per_device, seconds, rate.source + share)


def _comm_terms(
    analysis: ProgramAnalysis,
    links: dict[str, AxisLink],
    gpu: bool = False,
    scale: Callable[[str, int | None], float] | None = None,
) -> tuple[Term, ...]:
    """One term per set of mesh axes the collectives run over: bytes sent, over the axes' bandwidth
    (their sum on a torus; on GPUs the slowest of them); with a profile's `scale`, each kind's bytes
    as the all-reduce bytes they cost."""
    sent: dict[tuple[str, ...] | None, float] = {}
    for c in analysis.collectives:
        weight = scale(c.kind, c.group_size) if scale is not None else 1
        sent[c.mesh_axes] = sent.get(c.mesh_axes, 0) + c.sent_bytes * c.runs * weight
    terms = []
    for axes, amount in sorted(sent.items(), key=lambda kv: -kv[1]):
        if axes == ():
            continue  # a group of one device: nothing moves
        rate, source = _axes_rate(axes, links, gpu)
        name = "+".join(axes) if axes is not None else "?"
        terms.append(Term(name, amount, rate, amount / rate if rate else None, source))
    return tuple(terms)


def _axes_rate(
    axes: tuple[str, ...] | None, links: dict[str, AxisLink], gpu: bool
) -> tuple[float | None, str]:
    """The bandwidth collectives over `axes` move at, and its source: the sum of the axes' links on a
    torus, the slowest of them on GPUs; groups along no mesh axes the slowest axis's."""
    if axes is None:
        known = [link for link in links.values() if link.bytes_per_s]
        slowest = min(known, key=lambda link: link.bytes_per_s or 0.0) if known else None
        if slowest is None:
            return None, "unknown"
        return slowest.bytes_per_s, f"groups along no mesh axis: the slowest axis's, {slowest.how}"
    parts = [links.get(a.split("[")[0]) for a in axes]  # a slice of an axis, data[::2], uses its links
    if any(p is None or p.bytes_per_s is None for p in parts):
        return None, "no bandwidth for this axis"
    rates = [p.bytes_per_s or 0.0 for p in parts if p is not None]
    source = ("the slowest of " if gpu and len(rates) > 1 else "") + "; ".join(
        f"{p.axis}: {p.how} ({p.source})" for p in parts if p is not None
    )
    return (min(rates) if gpu else sum(rates)), source


def _compiler_note(analysis: ProgramAnalysis, chip: Chip | None) -> str:
    if analysis.compiler_seconds is not None:
        return "the TPU compiler's cost_analysis()['optimal_seconds']: collectives counted as HBM traffic"
    if chip is not None and chip.platform == "tpu":
        return "not given: the TPU compiler's optimal_seconds is negative or absent for this program"
    return "not given by this compiler"


def step_time_of(
    analysis: ProgramAnalysis,
    mesh: Any,
    device_kind: str,
    dtype_name: str,
    *,
    peak: Figure | None = None,
    link: Figure | None = None,
    efficiency: float | None = None,
    efficiency_source: str = UNCALIBRATED,
    profile: HardwareProfile | None = None,
    network: Figure | None = None,
) -> StepEstimate | None:
    """`estimate_step` for a program compiled on `mesh` for devices of `device_kind`.

    `peak` and `link` replace the table's figures (--peak-tflops, --link-gbps: the link figure is
    then every mesh axis's bandwidth). None where the table does not know the kind and no peak is given.
    The calibration is the platform's (`shardcli.hardware.calibration`): a TPU's one efficiency, a GPU's
    per-op roofline, none elsewhere; `efficiency` given replaces it (1.0: the roofline as it is).
    A measured `profile` (default the run's, --hardware, checked to describe `device_kind`) gives
    the per-op roofline its figures on any device: its GEMM curve, stream, launch costs, host copies
    and each axis's bus bandwidth (axes across hosts keep the table's network). `network`: on GPUs
    one GPU's share of the network between hosts (a target's host type or --network).

    Raises:
        ShardcliError: the run's profile was measured on another kind of device.
    """
    chip = chip_for_kind(device_kind)
    names = tuple(str(a) for a in mesh.axis_names)
    shape = tuple(mesh.devices.shape)
    profile = profile or profile_for(device_kind)
    if chip is None and peak is None and profile is None:
        return None
    per_chip = 1
    links: dict[str, AxisLink] = {}
    if chip is not None:
        places = places_of_mesh(mesh, chip)
        slices = slices_of_mesh(mesh)
        links = axis_links(chip, shape, names, places, network, slices)
        per_chip = devices_per_chip(places, chip, slices)
    if profile is not None:
        links = profiled_links(profile, links, names, shape)
    if link is not None:
        links = {
            a: AxisLink(
                a, size, link.value if size > 1 else None, f"{link.value / 1e9:g} GB/s given", link.source
            )
            for a, size in zip(names, shape, strict=True)
        }
    if profile is not None and efficiency is None:
        return estimate_step(
            analysis,
            chip,
            links,
            dtype_name,
            peak=peak or profile.peak_figure(dtype_name),
            hbm=profile.stream_figure(),
            op_efficiency=profile.op_efficiency(dtype_name),
            launch=profile.launch_costs(),
            host=profile.host_figure(),
            label=profile.label,
            comm_scale=profile.comm_scale,
        )
    op_efficiency = None
    if efficiency is None:
        efficiency = 1.0
        if chip is not None and chip.platform == "tpu":
            efficiency, efficiency_source = CALIBRATION.efficiency, CALIBRATION.provenance
        elif chip is not None and chip.platform == "cuda":
            op_efficiency = GPU_OPS
    return estimate_step(
        analysis,
        chip,
        links,
        dtype_name,
        per_chip=per_chip,
        peak=peak,
        efficiency=efficiency,
        efficiency_source=efficiency_source,
        op_efficiency=op_efficiency,
    )
