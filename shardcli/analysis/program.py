"""What the compiler made of a program: the one reading of compiled programs every command shares.

`analyze_compiled(compiled, mesh)` returns a frozen `ProgramAnalysis`: every collective the
compiler put in (its kind, the mesh axes its replica groups run over, its result shape and bytes
per device, how many times it runs, the JAX operation and source line it came from), the
per-device memory from `compiled.memory_analysis()`, and FLOPs and bytes accessed from
`compiled.cost_analysis()` with every loop counted per trip. What JAX returns is taken as it is;
only what JAX does not give (collectives, their groups, loop trip counts, source positions) is read
from the HLO text, by the modules beside this one and nowhere else: `hlo` (the structure of the
text, with `hlo.trips`, `hlo.arrays`, `hlo.sources` and `hlo.header` beside it), `collectives`
(collectives), `kernels` (a GPU's library calls), `loops` (loops counted per trip). Their public
names are re-exported here.

Loops: XLA's `cost_analysis()` counts a while body once, however many times it runs (a scan over 8
layers reports one layer's FLOPs), while the collectives inside run every trip. So `flops` and
`bytes_accessed` are XLA's figures plus, for every loop, (trips - 1) times XLA's own count of its
body; a loop of unknown trip count is counted once and named in `ProgramAnalysis.unknown_trips`.

Partial answers: where XLA's text cannot be had (libtpu's `as_text()` has failed on big programs
with a RET_CHECK about async updates), memory and cost are still returned and `missing` says in one
line what is missing and why; `reanalyze_from_dump` then tries the text XLA dumps
(`--xla_dump_to`).

No JAX import: the functions take the compiled object and a mesh (or plain shapes), so the text
parsing is tested on strings.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from shardcli.analysis.collectives import (
    HLO_COLLECTIVE_OPS,
    USER_OP_NAMES,
    CollectiveOp,
    HloCollective,
    find_collectives,
    parse_collectives,
    summarize_by_kind,
    user_op_name,
)
from shardcli.analysis.dcn import SliceView, dcn_collectives, slice_view
from shardcli.analysis.exposed import read_overlaps
from shardcli.analysis.hlo.arrays import INTEGER_TYPES, array_types, dot_dtype, shape_bytes
from shardcli.analysis.hlo.module import HloModuleText, parse_instruction, parse_module
from shardcli.analysis.hlo.ops import DotOp, slice_overcharge, xla_dots
from shardcli.analysis.kernels import (
    TPU_KERNEL_TARGET,
    KernelCall,
    KernelCalls,
    Launches,
    kernel_calls,
    launches_of,
)
from shardcli.analysis.loops import (
    BodyCost,
    LoopCount,
    TripCounts,
    count_trips,
    runs_per_computation,
    xla_cost_of_text,
)
from shardcli.analysis.splash import SPLASH_NAME_RE
from shardcli.hardware.costmodel import CommCost, CostEstimate, Hardware, estimate

__all__ = [
    "HLO_COLLECTIVE_OPS",
    "USER_OP_NAMES",
    "BodyCost",
    "CollectiveOp",
    "HloCollective",
    "KernelCall",
    "KernelCalls",
    "LoopCount",
    "MemoryUse",
    "ProgramAnalysis",
    "TripCounts",
    "analyze_compiled",
    "analyze_text",
    "count_trips",
    "dump_hlo_text",
    "find_collectives",
    "parse_collectives",
    "program_cost",
    "read_cost",
    "read_cost_figures",
    "read_hlo_text",
    "read_memory",
    "reanalyze_from_dump",
    "runs_per_computation",
    "shape_bytes",
    "summarize_by_kind",
    "user_op_name",
    "xla_cost_of_text",
]


@dataclass(frozen=True)
class MemoryUse:
    """Per-device memory of the compiled program, from `compiled.memory_analysis()`."""

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int
    code_bytes: int
    # in the host's memory (memory kind pinned_host): remat's offloaded activations (temporaries),
    # arguments and outputs placed there
    host_temp_bytes: int = 0
    host_argument_bytes: int = 0
    host_output_bytes: int = 0
    host_alias_bytes: int = 0  # host outputs that are host arguments (donated)

    @property
    def total_bytes(self) -> int:
        """Arguments + outputs + temporaries + code, less the outputs that alias arguments."""
        return self.argument_bytes + self.output_bytes + self.temp_bytes + self.code_bytes - self.alias_bytes

    @property
    def host_bytes(self) -> int:
        """What the program keeps in the host's memory: temporaries, arguments and outputs, less the
        outputs that alias arguments."""
        return (
            self.host_temp_bytes + self.host_argument_bytes + self.host_output_bytes - self.host_alias_bytes
        )

    @property
    def host_transfer_bytes(self) -> int:
        """Bytes moved between the device and the host in one run: each host temporary (an offloaded
        activation) written once and read back once, each host argument read and each output written."""
        return 2 * self.host_temp_bytes + self.host_argument_bytes + self.host_output_bytes


@dataclass(frozen=True)
class ProgramAnalysis:
    """The facts every command reports about one compiled program, per device.

    `flops` and `bytes_accessed` count every loop body once per trip (where its trip count is
    known); `xla_flops` and `xla_bytes_accessed` are `cost_analysis()` as XLA gives them, each
    loop body counted once. `missing` holds one line per part of the analysis that could not be
    had and why (empty when complete).
    """

    collectives: tuple[CollectiveOp, ...]
    memory: MemoryUse | None
    flops: float | None
    bytes_accessed: float | None
    xla_flops: float | None = None
    xla_bytes_accessed: float | None = None
    loops: tuple[LoopCount, ...] = ()
    compiler_seconds: float | None = None  # the TPU compiler's optimal_seconds, where positive
    missing: tuple[str, ...] = ()
    cost_source: str = "cost_analysis()"  # where xla_flops and xla_bytes_accessed came from
    text_source: str | None = "as_text()"  # where the HLO text came from; None: it could not be had
    dot_dtype: str | None = None  # the dtype most of its dots and convolutions run in (NumPy's name)
    kernels: KernelCalls = KernelCalls((), ())  # library kernels (cuBLAS, cuDNN): in flops and bytes
    launches: Launches | None = None  # on a GPU: kernels launched, loop trips, buffers per run
    host_transfer_bytes: float = 0.0  # between the device and the host per run (`MemoryUse`)
    dots: tuple[DotOp, ...] = ()  # XLA's own dots and convolutions (every dot on a CPU), each's FLOPs

    def by_kind(self) -> tuple[HloCollective, ...]:
        """Per kind of collective: how many ops the program holds and their result bytes."""
        return summarize_by_kind(self.collectives)

    @property
    def sent_bytes(self) -> int:
        """Bytes each device sends in one execution, over every collective and its runs."""
        return sum(c.sent_bytes * c.runs for c in self.collectives)

    @property
    def unknown_trips(self) -> tuple[LoopCount, ...]:
        """The loops whose trip count is unknown: their bodies are counted once."""
        return tuple(loop for loop in self.loops if loop.trips is None)

    @property
    def trips_known(self) -> bool:
        """Whether every figure counts every trip (no loop of unknown trip count)."""
        return not self.unknown_trips and all(c.runs_known for c in self.collectives)


def program_cost(analysis: ProgramAnalysis, hardware: Hardware, fallback_flops: float = 0.0) -> CostEstimate:
    """The cost model of a compiled program: T_math from its FLOPs per device (XLA's count, else
    `fallback_flops`), T_comm from what each collective sends per run times its runs."""
    comm = tuple(
        CommCost(
            op=c.kind, axis=c.axes_text, group_size=c.group_size or 1, bytes_per_device=c.sent_bytes * c.runs
        )
        for c in analysis.collectives
    )
    flops = analysis.flops if analysis.flops is not None else fallback_flops
    return estimate(int(flops), comm, hardware)


def analyze_compiled(
    compiled: Any,
    mesh: Any = None,
    *,
    hlo_text: str | None = None,
    text_source: str = "given",
    user_files: tuple[str, ...] = (),
) -> ProgramAnalysis:
    """Everything `ProgramAnalysis` holds, for a `jax.stages.Compiled`.

    Args:
        compiled: `jax.jit(f).lower(...).compile()`.
        mesh: the `jax.sharding.Mesh` the program was compiled for; its device order is the
            program's logical device ids, which names the mesh axes of each collective.
        hlo_text: the optimized HLO, where the caller has it (`dump_hlo_text`); else it is asked
            of `compiled`.
        text_source: where `hlo_text` came from, for `ProgramAnalysis.text_source`.
        user_files: the user's files or package folders: a collective's source is the innermost
            frame in them (else the innermost outside installed packages).

    Never raises for a part that cannot be had: that part is None or empty and `missing` says why.
    """
    platform = _platform(mesh)
    shape = tuple(mesh.devices.shape) if mesh is not None else None
    names = tuple(str(a) for a in mesh.axis_names) if mesh is not None else None
    slices = slice_view(mesh) if mesh is not None else None  # several TPU slices (`analysis.dcn`)
    cost = read_cost_figures(compiled)
    xla_flops, xla_bytes = _known(cost.get("flops")), _known(cost.get("bytes accessed"))
    optimal = cost.get("optimal_seconds")
    missing: list[str] = []
    memory = read_memory(compiled)
    if memory is None:
        missing.append("memory: the backend gives no memory_analysis()")
    text, how = (hlo_text, text_source) if hlo_text is not None else read_hlo_text(compiled)
    if text is None:
        missing.append(f"collectives and loop trip counts: XLA's text of the program failed ({how})")
        return ProgramAnalysis(
            collectives=(),
            memory=memory,
            flops=xla_flops,
            bytes_accessed=xla_bytes,
            xla_flops=xla_flops,
            xla_bytes_accessed=xla_bytes,
            compiler_seconds=float(optimal) if optimal is not None and float(optimal) > 0 else None,
            missing=tuple(missing),
            text_source=None,
        )
    return analyze_text(
        text,
        shape,
        names,
        cost=cost,
        memory=memory,
        missing=tuple(missing),
        text_source=how,
        user_files=user_files,
        constants=read_elided_constants(compiled, text),
        slices=slices,
        platform=platform,
    )


def _platform(mesh: Any) -> str | None:
    """The platform of a mesh's devices ("cpu", "tpu", "gpu"); None without a mesh."""
    devices = getattr(getattr(mesh, "devices", None), "flat", None)
    first = next(iter(devices), None) if devices is not None else None
    platform = getattr(first, "platform", None)
    return str(platform) if platform else None


def analyze_text(
    text: str,
    mesh_shape: tuple[int, ...] | None,
    axis_names: tuple[str, ...] | None,
    *,
    cost: dict[str, float] | None = None,
    memory: MemoryUse | None = None,
    missing: tuple[str, ...] = (),
    text_source: str = "given",
    user_files: tuple[str, ...] = (),
    constants: Mapping[str, str] | None = None,
    slices: SliceView | None = None,
    platform: str | None = None,
) -> ProgramAnalysis:
    """The analysis of a compiled program's optimized HLO text (`compiled.as_text()`, or a module
    XLA dumped on a real cluster), with what only a compile knows where the caller has it.

    Args:
        cost: `cost_analysis()` as `read_cost_figures` gives it; None or empty: XLA's own cost
            analysis of the text.
        memory: `memory_analysis()`; None where there was no compile.
        missing: lines the caller already knows are missing.
        constants: literals the text elides, by name (`read_elided_constants`).
        slices: a mesh over several TPU slices (`analysis.dcn`): the replica groups number one
            slice's devices, and the transfers across slices are Megascale host sends.

    FLOPs and bytes are XLA's with every loop counted per trip, plus the library kernels XLA counts
    as nothing (cuBLAS GEMMs, cuDNN attention and convolutions: `hlo_kernels`), each per run.
    """
    cost = cost or {}
    lines = list(missing)
    xla_flops, xla_bytes = _known(cost.get("flops")), _known(cost.get("bytes accessed"))
    optimal = cost.get("optimal_seconds")
    module = parse_module(text)
    cost_source = "cost_analysis()"
    runs = runs_per_computation(module)
    kernels = kernel_calls(module, runs, constants)
    lines.extend(kernels.missing)
    # A GPU target's compiler gives no cost_analysis() at all, and a GPU's gives no figure for a
    # program whose work is all library calls (an einsum alone: no "flops"): then XLA's analysis of
    # its text, for what it lacks. A cost_analysis() without a FLOPs figure elsewhere (XLA on CPU for
    # tanh) leaves FLOPs unknown, never 0.
    if not cost or (kernels.calls and (xla_flops is None or xla_bytes is None)):
        lacked = [n for n, v in (("FLOPs", xla_flops), ("bytes", xla_bytes)) if v is None or not cost]
        gives = "no cost_analysis()" if not cost else f"a cost_analysis() without {' or '.join(lacked)}"
        try:
            text_flops, text_bytes = xla_cost_of_text(text)
        except Exception as error:  # noqa: BLE001 - then there are no FLOPs, and that is said
            lines.append(f"{' and '.join(lacked)}: {gives} and XLA could not analyse the text ({error})")
        else:
            cost_source = (
                f"XLA's HloCostAnalysis of the compiled HLO for {' and '.join(lacked)} (the backend gives "
                f"{gives})"
            )
            xla_flops = text_flops if xla_flops is None or not cost else xla_flops
            xla_bytes = text_bytes if xla_bytes is None or not cost else xla_bytes
    counted = count_trips(module, xla_flops, xla_bytes)
    lines.extend(counted.missing)
    within = slices.ici_shape if slices is not None else mesh_shape
    collectives = parse_collectives(text, within, axis_names, module=module, user_files=user_files)
    if slices is not None:
        collectives += dcn_collectives(module, slices)
    # bytes XLA's cost analysis charges fusions for parameters they only slice through a bitcast,
    # taken off `bytes_accessed` on a CPU (the rule measured there; other backends' are not corrected)
    sliced = slice_overcharge(module, runs) if platform == "cpu" and counted.bytes_accessed else 0.0
    return ProgramAnalysis(
        collectives=read_overlaps(module, collectives, kernels.calls),
        memory=memory,
        flops=counted.flops + kernels.flops if counted.flops is not None else None,
        bytes_accessed=(
            max(0.0, counted.bytes_accessed - sliced) + kernels.bytes_accessed
            if counted.bytes_accessed is not None
            else None
        ),
        xla_flops=xla_flops,
        xla_bytes_accessed=xla_bytes,
        loops=counted.loops,
        compiler_seconds=float(optimal) if optimal is not None and float(optimal) > 0 else None,
        missing=tuple(lines),
        cost_source=cost_source,
        text_source=text_source,
        dot_dtype=_dot_dtype(module, kernels),
        kernels=kernels,
        launches=launches_of(module, runs, text),
        host_transfer_bytes=float(memory.host_transfer_bytes) if memory is not None else 0.0,
        dots=xla_dots(module, runs),
    )


def _dot_dtype(module: HloModuleText, kernels: KernelCalls) -> str | None:
    """The dtype most of the maths runs in: the GEMM kernels' by FLOPs where the program has them,
    else its dots' and convolutions' (`hlo_text.dot_dtype`)."""
    weights: dict[str, float] = {}
    for call in kernels.calls:
        if call.dtype is not None:
            weights[call.dtype] = weights.get(call.dtype, 0.0) + call.flops * call.runs
    if weights:
        return max(weights, key=lambda k: weights[k])
    return dot_dtype(module)


def reanalyze_from_dump(
    first: ProgramAnalysis,
    compiled: Any,
    mesh: Any,
    dump: Callable[[], tuple[str | None, str]],
    user_files: tuple[str, ...] = (),
) -> ProgramAnalysis:
    """`first` again with XLA's dumped text, where `first` had none (`compiled.as_text()` failed).

    Args:
        dump: lowers the program again as it was lowered and returns `dump_hlo_text` of it (the
            caller's context: its mesh, libtpu kept quiet).

    Returns:
        The full analysis, or `first` with the dump's failure added to its missing line.
    """
    if first.text_source is not None:
        return first
    try:
        text, how = dump()
    except Exception as error:  # noqa: BLE001 - lowering again failed: keep the first answer
        text, how = None, f"lowering again for --xla_dump_to: {type(error).__name__}"
    if text is None:
        missing = tuple(
            line[:-1] + f"; {how})" if line.startswith("collectives and loop trip counts") else line
            for line in first.missing
        )
        return dataclasses.replace(first, missing=missing)
    return analyze_compiled(compiled, mesh, hlo_text=text, text_source=how, user_files=user_files)


# --- what JAX returns -----------------------------------------------------------------------------


def read_memory(compiled: Any) -> MemoryUse | None:
    """`compiled.memory_analysis()` as plain numbers; None where the backend gives none."""
    try:
        stats = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - not every backend provides it
        return None
    if stats is None:
        return None
    return MemoryUse(
        argument_bytes=int(getattr(stats, "argument_size_in_bytes", 0) or 0),
        output_bytes=int(getattr(stats, "output_size_in_bytes", 0) or 0),
        temp_bytes=int(getattr(stats, "temp_size_in_bytes", 0) or 0),
        alias_bytes=int(getattr(stats, "alias_size_in_bytes", 0) or 0),
        code_bytes=int(getattr(stats, "generated_code_size_in_bytes", 0) or 0),
        host_temp_bytes=int(getattr(stats, "host_temp_size_in_bytes", 0) or 0),
        host_argument_bytes=int(getattr(stats, "host_argument_size_in_bytes", 0) or 0),
        host_output_bytes=int(getattr(stats, "host_output_size_in_bytes", 0) or 0),
        host_alias_bytes=int(getattr(stats, "host_alias_size_in_bytes", 0) or 0),
    )


def read_cost(compiled: Any) -> tuple[float | None, float | None]:
    """Per-device FLOPs and bytes accessed from `compiled.cost_analysis()`, as XLA counts them
    (each loop body once)."""
    cost = read_cost_figures(compiled)
    return _known(cost.get("flops")), _known(cost.get("bytes accessed"))


def read_cost_figures(compiled: Any) -> dict[str, float]:
    """`compiled.cost_analysis()` as a plain dict; empty where the backend gives none."""
    try:
        cost = compiled.cost_analysis()
    except Exception:  # noqa: BLE001 - not every backend provides it
        return {}
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    if not isinstance(cost, dict):
        return {}
    return {str(k): float(v) for k, v in cost.items() if isinstance(v, (int, float))}


def read_hlo_text(compiled: Any) -> tuple[str | None, str]:
    """(the optimized HLO text, which way gave it), or (None, why not in one line).

    `compiled.as_text()` first; where it raises (libtpu's RET_CHECK on async updates of big
    programs), the executable's own HLO modules.
    """
    reasons = []
    for how, read in (
        ("as_text()", lambda: compiled.as_text()),
        ("hlo_modules()", lambda: compiled.runtime_executable().hlo_modules()[0].to_string()),
    ):
        try:
            text = read()
        except Exception as error:  # noqa: BLE001 - the next way, or the reason
            lines = str(error).strip().splitlines()
            reasons.append(f"{how}: {type(error).__name__}: {lines[0][:160] if lines else ''}".rstrip(": "))
            continue
        if text:
            return str(text), how
        reasons.append(f"{how} gave no text")
    return None, "; ".join(reasons)


def read_elided_constants(compiled: Any, text: str) -> dict[str, str]:
    """The literals of the integer constants `as_text()` elides (`constant({...})`), by name, where
    the program calls a kernel whose cost needs one (splash attention's block masks); empty for any
    other program, or where the executable's module cannot be printed again."""
    if TPU_KERNEL_TARGET not in text or "constant({...})" not in text or not SPLASH_NAME_RE.search(text):
        return {}
    try:
        module = compiled.runtime_executable().hlo_modules()[0]
        # the printer's options live beside the module's class (jaxlib._hlo in jax 0.10 and 0.12)
        options = sys.modules[type(module).__module__].HloPrintOptions.short_parsable()
        options.print_large_constants = True
        full = module.to_string(options)
    except Exception:  # noqa: BLE001 - then the kernels are named as of unknown cost
        return {}
    found = {}
    for line in full.splitlines():
        if " constant({" not in line:
            continue
        inst = parse_instruction(line)
        arrays = array_types(inst.shape) if inst is not None else []
        if inst is not None and inst.opcode == "constant" and arrays and arrays[0][0] in INTEGER_TYPES:
            found[inst.name] = inst.literal
    return found


def dump_hlo_text(lowered: Any) -> tuple[str | None, str]:
    """The optimized HLO of `lowered` as XLA dumps it (`--xla_dump_to`), compiling it once more.

    For a program whose `as_text()` fails: the dump's `*.after_optimizations.txt` is the same text.
    Returns (text, "--xla_dump_to") or (None, why not in one line).
    """
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="shardcli-hlo-") as folder:
        try:
            lowered.compile(compiler_options={"xla_dump_to": folder})
        except Exception as error:  # noqa: BLE001 - the reason, as one line
            lines = str(error).strip().splitlines()
            return None, f"--xla_dump_to: {type(error).__name__}: {lines[0][:160] if lines else ''}"
        dumped = sorted(Path(folder).glob("*after_optimizations.txt"))  # the CPU's: cpu_after_...
        if not dumped:
            return None, "--xla_dump_to wrote no optimized HLO"
        return max(dumped, key=lambda p: p.stat().st_size).read_text(), "--xla_dump_to"


def _known(figure: Any) -> float | None:
    """A cost-analysis figure, or None where the backend has none: missing, or negative (XLA on a
    GPU gives -1 for a dot it hands to cuBLAS)."""
    if figure is None or not float(figure) >= 0:
        return None
    return float(figure)
