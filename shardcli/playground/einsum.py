"""`shardcli einsum`: the user's own einsum and layout, run the ways that make sense, verified.

For every (scale, way): build the operands from NumPy, compile `jnp.einsum` either under `jit` with
in/out shardings on an Auto mesh (the compiler's automatic sharding) or with `out_sharding=` on an
Explicit mesh, read the compiled program through `program_analysis`, time it, and compare every
device's block of the result with a float64 NumPy einsum. A layout the explicit mode refuses is
JAX's lesson, shown with its reason, not a failure.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from shardcli.analysis.program import ProgramAnalysis, analyze_compiled, program_cost
from shardcli.analysis.target import FitVerdict, compile_for_target, judge_fit
from shardcli.errors import ShardcliError, refusal_text
from shardcli.hardware.costmodel import CostEstimate, Hardware
from shardcli.hardware.targets import TargetSpec
from shardcli.playground.fit import LatencyBandwidthFit, fit_each
from shardcli.playground.shard import resolve_show_values
from shardcli.runtime.arrays import ShownValues, make_host_array, place_array, shown_values
from shardcli.runtime.memory import check_fits_in_memory
from shardcli.runtime.mesh import entries_of, partition_spec
from shardcli.runtime.program_run import check_blocks, time_compiled
from shardcli.runtime.session import Session, open_session
from shardcli.runtime.timing import Timing, compile_timed
from shardcli.runtime.verify import dot_input_roundoff, float_eps
from shardcli.specs.einsum import EinsumNotation, parse_einsum
from shardcli.specs.meshes import MeshSpec, ShardingSpec, check_sharding_fits
from shardcli.specs.runs import Mode, RunOptions
from shardcli.specs.values import ArraySpec, DType

WAYS = ("auto", "explicit")
WAY_TEXT = {
    "auto": "jit with in/out shardings (the compiler's automatic sharding)",
    "explicit": "explicit axes: jnp.einsum(..., out_sharding=...) on an Explicit mesh",
}
FLOAT_DTYPES = ("float32", "bfloat16", "float16", "float64")

Entries = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class EinsumRequest:
    """Everything `shardcli einsum` needs, parsed and checked before JAX starts."""

    notation: EinsumNotation
    in_specs: tuple[ShardingSpec, ...]  # one per operand
    out_spec: ShardingSpec | None  # None: the compiler (or JAX's explicit rules) choose
    mesh: MeshSpec
    dtype: DType
    ways: tuple[str, ...] = WAYS
    init: str = "random"
    show_values: bool | None = None  # None: the result is shown where it has up to 256 elements
    scales: tuple[float, ...] | None = None  # --sizes: the dims times each scale
    warmup: int = 5
    iters: int = 20
    peak_tflops: float | None = None
    link_gbps: float | None = None
    options: RunOptions = field(default_factory=RunOptions)
    compile_target: TargetSpec | None = None  # --target: compile for a TPU topology, run nothing
    mesh_text: str | None = None  # --mesh as typed: with a target, a reshape of its chips
    axes_text: str | None = None


@dataclass(frozen=True)
class EinsumArray:
    """One operand or the result: its subscripts, global and per-device shape and its spec."""

    name: str
    letters: str
    shape: tuple[int, ...]
    entries: Entries | None  # None: the result with no --out, before the compiler chose


@dataclass(frozen=True)
class WayRun:
    """One way of running the einsum at one size."""

    way: str
    status: str  # "ok" or "refused"
    message: str | None  # JAX's reason for refusing
    out_entries: Entries | None  # the result's sharding as JAX reports it
    analysis: ProgramAnalysis | None
    model: CostEstimate | None
    timing: Timing | None
    achieved_flops: float | None
    max_rel_err: float
    wrong: int
    wrong_devices: tuple[int, ...]
    fit: FitVerdict | None = None  # --target: this way's memory per chip against the chip's HBM
    values: ShownValues | None = None  # the result, globally and per device, where small enough


@dataclass(frozen=True)
class EinsumSize:
    """Every way at one size."""

    scale: float
    notation: EinsumNotation
    operands: tuple[EinsumArray, ...]
    result: EinsumArray
    model_flops: int
    tolerance_text: str
    ways: tuple[WayRun, ...]

    @property
    def wrong(self) -> int:
        return sum(w.wrong for w in self.ways)


@dataclass(frozen=True)
class EinsumResult:
    session: Session
    request: EinsumRequest
    hardware: Hardware
    sizes: tuple[EinsumSize, ...]
    fits: dict[str, LatencyBandwidthFit | None] = field(default_factory=dict)

    @property
    def wrong(self) -> int:
        return sum(s.wrong for s in self.sizes)

    @property
    def does_not_fit(self) -> bool:
        return any(w.fit is not None and not w.fit.fits for s in self.sizes for w in s.ways)


# --- parsing and validation (no devices) ----------------------------------------------------------


def build_einsum_request(
    subscripts: str,
    shapes: tuple[tuple[int, ...], ...],
    in_specs: tuple[ShardingSpec, ...],
    out_spec: ShardingSpec | None,
    mesh: MeshSpec,
    dtype: DType,
    **settings: Any,
) -> EinsumRequest:
    """Check everything that needs no devices and return the request.

    Raises:
        ShardcliError: the subscripts, shapes, specs, dtype or settings cannot be used as given.
    """
    notation = parse_einsum(subscripts, shapes)
    if len(in_specs) > len(shapes):
        raise ShardcliError(
            f"--in was given {len(in_specs)} times but einsum {notation.text!r} has {len(shapes)} "
            f"operand(s); give at most one --in per operand (a left-out one is replicated)"
        )
    specs = tuple(in_specs) + (ShardingSpec(entries=()),) * (len(shapes) - len(in_specs))
    request = EinsumRequest(
        notation=notation, in_specs=specs, out_spec=out_spec, mesh=mesh, dtype=dtype, **settings
    )
    validate_einsum_request(request)
    return request


def validate_einsum_request(request: EinsumRequest) -> None:
    """Every check that needs no devices (at each --sizes scale).

    Raises:
        ShardcliError: anything the run cannot do as asked.
    """
    from shardcli.playground.run_settings import check_run_settings

    check_run_settings(request, "einsum")
    bad = [w for w in request.ways if w not in WAYS]
    if bad or not request.ways:
        raise ShardcliError(f"--way {','.join(request.ways)!r} is not valid; choose auto, explicit or both")
    if request.show_values and request.scales is not None:
        raise ShardcliError("--show-values is for a single run; --sizes runs several sizes")
    if request.show_values:
        resolve_show_values(True, math.prod(request.notation.output_shape))
    for notation in notations(request):
        for i, spec in enumerate(request.in_specs):
            check_sharding_fits(spec, request.mesh, notation.operand_shape(i), flag=f"--in (operand {i})")
        if request.out_spec is not None:
            check_sharding_fits(request.out_spec, request.mesh, notation.output_shape, flag="--out")


def notations(request: EinsumRequest) -> tuple[EinsumNotation, ...]:
    """The einsum at every size of the sweep (one without --sizes)."""
    from shardcli.specs.values import scale_shape

    if request.scales is None:
        return (request.notation,)
    base = request.notation
    out = []
    for scale in request.scales:
        shapes = tuple(
            scale_shape(base.operand_shape(i), scale, letters) for i, letters in enumerate(base.inputs)
        )
        out.append(base.scaled(shapes))
    return tuple(out)


# --- numerics -------------------------------------------------------------------------------------


def tolerance_for(notation: EinsumNotation, request: EinsumRequest, platform: str) -> tuple[float, str]:
    """Per-element bound on |C - C_ref| / (einsum of |operands|), for any summation order.

    Each pairwise step sums at most K terms (K: the product of the summed dims) in the accumulation
    type, and rounds its result once; the inputs may be rounded first (TF32 on a GPU); and every
    partial sum the sharding splits the contraction into is one more rounding to the output type.
    """
    from shardcli.runtime.arrays import numpy_dtype

    dtype = request.dtype
    u_out = float_eps(numpy_dtype(dtype)) / 2
    u_acc = float_eps(np.dtype(np.float64 if dtype.name == "float64" else np.float32)) / 2
    u_in, in_text = dot_input_roundoff(platform, dtype.name)
    sizes = notation.size_of
    k = math.prod(sizes[c] for c in notation.summed) if notation.summed else 1
    steps = max(1, len(notation.inputs) - 1)
    axis_sizes = request.mesh.axis_sizes
    split = {
        a
        for spec, letters in zip(request.in_specs, notation.inputs, strict=True)
        for entry, letter in zip(spec.entries, letters, strict=False)
        if letter in notation.summed
        for a in entry
    }
    partials = math.prod(axis_sizes[a] for a in split) if split else 1
    roundings = partials + steps
    tol = steps * (k + 1) * u_acc + 2 * len(notation.inputs) * u_in + roundings * u_out
    text = (
        f"|err| <= {tol:.2e} x (einsum of |operands|) per element: steps (K+1) u_acc + 2 n u_in + r u_out "
        f"with K={k}, steps={steps}, r={roundings} rounding(s) to {dtype.name}, {in_text}"
    )
    return tol, text


# --- running --------------------------------------------------------------------------------------


def _program(notation: EinsumNotation, out_spec: Any | None) -> Callable[..., Any]:
    import jax.numpy as jnp

    subscripts = notation.canonical

    def einsum(*ops: Any) -> Any:
        if out_spec is None:
            return jnp.einsum(subscripts, *ops)
        return jnp.einsum(subscripts, *ops, out_sharding=out_spec)

    return einsum


def _build(
    way: str,
    session: Session,
    explicit_mesh: Any,
    request: EinsumRequest,
    notation: EinsumNotation,
    hosts: list[np.ndarray] | None,
) -> tuple[Any, tuple[Any, ...], Any]:
    """(jitted program, placed operands, the mesh to trace under or None); hosts None: abstract."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding

    out = request.out_spec

    def operands(mesh: Any) -> tuple[Any, ...]:
        """Placed host arrays, or (compile-only) ShapeDtypeStructs: nothing allocated."""
        shardings = [NamedSharding(mesh, partition_spec(s.entries)) for s in request.in_specs]
        if hosts is None:
            dtype = jnp.dtype(request.dtype.name)
            return tuple(
                jax.ShapeDtypeStruct(notation.operand_shape(i), dtype, sharding=s)
                for i, s in enumerate(shardings)
            )
        return tuple(place_array(h, s) for h, s in zip(hosts, shardings, strict=True))

    if way == "explicit":
        program = _program(notation, partition_spec(out.entries) if out is not None else None)
        return jax.jit(program), operands(explicit_mesh), explicit_mesh
    mesh = session.mesh
    shardings = tuple(NamedSharding(mesh, partition_spec(s.entries)) for s in request.in_specs)
    args = operands(mesh)
    out_sharding = NamedSharding(mesh, partition_spec(out.entries)) if out is not None else None
    return jax.jit(_program(notation, None), in_shardings=shardings, out_shardings=out_sharding), args, None


def run_way(
    way: str,
    session: Session,
    explicit_mesh: Any,
    request: EinsumRequest,
    notation: EinsumNotation,
    hosts: list[np.ndarray],
    reference: tuple[np.ndarray, np.ndarray, np.ndarray],
    model_flops: int,
    hardware: Hardware,
) -> WayRun:
    """Compile, time and verify one way; JAX refusing the layout is a result, not a crash."""
    import jax

    try:
        program, args, trace_mesh = _build(way, session, explicit_mesh, request, notation, hosts)
        with jax.set_mesh(trace_mesh) if trace_mesh is not None else contextlib.nullcontext():
            compiled, compile_s, cached = compile_timed(program, *args)
    except Exception as error:  # noqa: BLE001 - JAX's refusal is the lesson the user came to see
        return WayRun(way, "refused", refusal_text(error), None, None, None, None, None, 0.0, 0, ())
    analysis = analyze_compiled(compiled, trace_mesh if trace_mesh is not None else session.mesh)
    timing, y = time_compiled(
        compiled,
        args,
        compile_s=compile_s,
        cached=cached,
        warmup=request.warmup,
        iters=request.iters,
        process_timing=request.options.process_timing,
    )
    ref, bound, scale = reference
    order = [cell.device_id for cell in session.layout.cells]
    check = check_blocks(y, ref, bound, scale, order)
    shows = resolve_show_values(request.show_values, math.prod(y.shape)) and request.scales is None
    return WayRun(
        way=way,
        status="ok",
        message=None,
        out_entries=entries_of(y.sharding, y.ndim),
        analysis=analysis,
        model=program_cost(analysis, hardware, model_flops / request.mesh.size),
        timing=timing,
        achieved_flops=model_flops / timing.stats.p50 if timing.stats.p50 > 0 else None,
        max_rel_err=check.max_rel_err,
        wrong=check.wrong,
        wrong_devices=check.wrong_devices,
        values=shown_values(y, order) if shows else None,
    )


def compile_way(
    way: str,
    session: Session,
    explicit_mesh: Any,
    request: EinsumRequest,
    notation: EinsumNotation,
    model_flops: int,
    hardware: Hardware,
    target: TargetSpec,
) -> WayRun:
    """Compile one way for the target from abstract operands: nothing runs or is verified."""
    try:
        program, args, trace_mesh = _build(way, session, explicit_mesh, request, notation, None)
        mesh = trace_mesh if trace_mesh is not None else session.mesh
        compiled, verdict = compile_for_target(program, args, mesh, target)
    except Exception as error:  # noqa: BLE001 - JAX's refusal is the lesson the user came to see
        return WayRun(way, "refused", refusal_text(error), None, None, None, None, None, 0.0, 0, ())
    if compiled is None:
        assert verdict is not None
        return WayRun(
            way, "does not fit", verdict.text, None, None, None, None, None, 0.0, 0, (), fit=verdict
        )
    analysis = analyze_compiled(compiled, mesh)
    (out,) = (
        compiled.output_shardings
        if isinstance(compiled.output_shardings, (tuple, list))
        else (compiled.output_shardings,)
    )
    return WayRun(
        way=way,
        status="compiled",
        message=None,
        out_entries=entries_of(out, len(notation.output)),
        analysis=analysis,
        model=program_cost(analysis, hardware, model_flops / session.spec.size),
        timing=None,
        achieved_flops=None,
        max_rel_err=0.0,
        wrong=0,
        wrong_devices=(),
        fit=judge_fit(analysis.memory, target),
    )


def _arrays(notation: EinsumNotation, request: EinsumRequest) -> tuple[tuple[EinsumArray, ...], EinsumArray]:
    names = "ABCD"
    operands = tuple(
        EinsumArray(names[i], letters, notation.operand_shape(i), request.in_specs[i].entries)
        for i, letters in enumerate(notation.inputs)
    )
    out = request.out_spec.entries if request.out_spec is not None else None
    return operands, EinsumArray("C", notation.output, notation.output_shape, out)


def run_size(
    scale: float,
    notation: EinsumNotation,
    session: Session,
    explicit_mesh: Any,
    hardware: Hardware,
    request: EinsumRequest,
) -> EinsumSize:
    """Every requested way at one size, against one float64 NumPy reference (compile-only for a target)."""
    operands, result = _arrays(notation, request)
    model_flops = notation.model_flops()  # NumPy's contraction path: once per size
    if request.compile_target is not None:
        target = request.compile_target
        ways = tuple(
            compile_way(way, session, explicit_mesh, request, notation, model_flops, hardware, target)
            for way in request.ways
        )
        text = f"not verified: compile-only for {target.name}, nothing ran"
        return EinsumSize(scale, notation, operands, result, model_flops, text, ways)
    hosts = []
    start = 0  # arange numbers the operands in one sequence, as matmul's A and B
    for i in range(len(notation.inputs)):
        spec = ArraySpec(shape=notation.operand_shape(i), dtype=request.dtype, init=request.init)
        hosts.append(make_host_array(spec, seed=i, start=start))
        start += spec.size
    wide = [h.astype(np.float64) for h in hosts]
    ref = np.asarray(np.einsum(notation.canonical, *wide), dtype=np.float64)
    scale_of = np.asarray(np.einsum(notation.canonical, *(np.abs(w) for w in wide)), dtype=np.float64)
    tol, tol_text = tolerance_for(notation, request, session.runtime.platform)
    ways = tuple(
        run_way(
            way,
            session,
            explicit_mesh,
            request,
            notation,
            hosts,
            (ref, tol * scale_of, scale_of),
            model_flops,
            hardware,
        )
        for way in request.ways
    )
    return EinsumSize(
        scale=scale,
        notation=notation,
        operands=operands,
        result=result,
        model_flops=model_flops,
        tolerance_text=tol_text,
        ways=ways,
    )


def memory_estimate(request: EinsumRequest) -> tuple[int, int, str]:
    """Bytes per device and in all, at the largest size: every device's blocks of the operands and
    the result (whole where left to the compiler), the host operands, and the float64 reference,
    error scale and bound."""
    item = request.dtype.itemsize
    sizes = request.mesh.axis_sizes
    worst = (0, 0, "")

    def local(shape: tuple[int, ...], entries: Entries) -> int:
        parts = [math.prod(sizes[a] for a in e) for e in entries] + [1] * (len(shape) - len(entries))
        return math.prod(d // p for d, p in zip(shape, parts, strict=False))

    for notation in notations(request):
        shapes = [notation.operand_shape(i) for i in range(len(notation.inputs))]
        out = notation.output_shape
        out_entries = request.out_spec.entries if request.out_spec is not None else ()
        per_device = (
            sum(local(s, spec.entries) for s, spec in zip(shapes, request.in_specs, strict=True))
            + local(out, out_entries)
        ) * item
        host = sum(math.prod(s) for s in shapes) * (item + 8)
        total = request.mesh.size * per_device * len(request.ways) + host + 3 * math.prod(out) * 8
        if total > worst[1]:
            shown = ", ".join("x".join(map(str, s)) for s in shapes)
            worst = (per_device, total, f"einsum {notation.text!r} at {shown}")
    return worst


def run_einsum(
    request: EinsumRequest, progress: Callable[[int, int, str], None] | None = None
) -> EinsumResult:
    """Run every (size, way) of the request.

    The request is checked once, where it is built (`build_einsum_request`); a request built by hand
    must pass `validate_einsum_request` first: it is not checked again here.

    Raises:
        ShardcliError: what only the devices tell (too little memory, a target's mesh), before allocating.
    """
    if request.compile_target is not None:
        session, explicit_mesh, hardware = _target_session(request, request.compile_target)
    else:
        per_device, total, what = memory_estimate(request)
        session = open_session(
            request.mesh, replace(request.options, mode=Mode.AUTO), x64=request.dtype.needs_x64
        )
        check_fits_in_memory(
            session.runtime, list(session.devices), per_device=per_device, total=total, what=what
        )
        explicit_mesh = None
        if "explicit" in request.ways:
            from shardcli.runtime.mesh import build_mesh

            explicit_mesh = build_mesh(request.mesh, list(session.devices), mode="explicit")
        from shardcli.playground.run_settings import resolve_hardware

        hardware = resolve_hardware(session, request)
    scales = request.scales if request.scales is not None else (1.0,)
    sizes = []
    for n, (scale, notation) in enumerate(zip(scales, notations(request), strict=True)):
        if progress is not None:
            progress(n, len(scales), f"{notation.text} x{scale:g}")
        sizes.append(run_size(scale, notation, session, explicit_mesh, hardware, request))
    if progress is not None:
        progress(len(scales), len(scales), "done")
    return EinsumResult(
        session=session,
        request=request,
        hardware=hardware,
        sizes=tuple(sizes),
        fits=flop_fits(tuple(sizes)) if len(sizes) > 1 else {},
    )


def _target_session(request: EinsumRequest, target: TargetSpec) -> tuple[Session, Any, Hardware]:
    """The target's session, its mesh with Explicit axes for the explicit way, and the chip's figures."""
    from shardcli.analysis.target import open_target_session
    from shardcli.program.inspect import hardware_for
    from shardcli.runtime.mesh import explicit_twin

    session = open_target_session(
        target,
        request.mesh_text,
        request.axes_text,
        replace(request.options, mode=Mode.AUTO),
        x64=request.dtype.needs_x64,
    )
    for i, spec in enumerate(request.in_specs):  # the mesh as built from the chips
        check_sharding_fits(spec, session.spec, request.notation.operand_shape(i), flag=f"--in (operand {i})")
    hardware = hardware_for(session, request.dtype.name, request.peak_tflops, request.link_gbps)
    return session, explicit_twin(session.mesh), hardware


def flop_fits(sizes: tuple[EinsumSize, ...]) -> dict[str, LatencyBandwidthFit | None]:
    """Per way that ran at every size: t(F) = alpha + F / rate over the sweep."""
    points: dict[str, list[tuple[float, float]]] = {}
    for size in sizes:
        for run in size.ways:
            if run.timing is not None:
                points.setdefault(run.way, []).append((size.model_flops, run.timing.stats.p50))
    return fit_each(points)
