"""`shardcli matmul`: sharded-matmul cases, three ways each, verified, timed and costed.

For every (scale, case, impl): build the operands from NumPy, compile the program (shard_map with
explicit collectives, jit with in/out shardings on an Auto mesh, or jnp.matmul with out_sharding
on an Explicit mesh), read the collectives and cost analysis from the compiled executable, time
it, and compare every device's block of the result with a float64 NumPy product.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from shardcli.analysis.program import HloCollective, analyze_compiled
from shardcli.analysis.target import FitVerdict, compile_for_target, judge_fit
from shardcli.errors import ShardcliError, refusal_text
from shardcli.hardware.costmodel import CommCost, CostEstimate, Hardware, estimate, table_hardware
from shardcli.hardware.targets import TargetSpec
from shardcli.playground.fit import LatencyBandwidthFit, fit_each
from shardcli.playground.matmul_cases import (
    MATMUL_CASES,
    Axes,
    MatmulCase,
    Operand,
    comm_bytes_per_device,
    flops_per_device,
    get_case,
    local_shape,
    operand_entries,
    operand_roles,
    operand_shape,
    partial_count,
)
from shardcli.playground.shard import resolve_show_values
from shardcli.runtime.arrays import ShownValues, make_host_array, place_array, shown_values
from shardcli.runtime.memory import check_fits_in_memory
from shardcli.runtime.mesh import entries_of, partition_spec
from shardcli.runtime.program_run import check_blocks, time_compiled
from shardcli.runtime.session import Session, open_session
from shardcli.runtime.timing import Timing, compile_timed
from shardcli.runtime.verify import dot_input_roundoff, float_eps
from shardcli.specs.meshes import MeshSpec
from shardcli.specs.runs import Mode, RunOptions, check_cost_figures, check_timing
from shardcli.specs.values import ArraySpec, DType, scale_dims

DEFAULT_DIMS = (256, 512, 256)
FLOAT_DTYPES = ("float32", "bfloat16", "float16", "float64")

Entries = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class MatmulRequest:
    """Everything `shardcli matmul` needs, parsed before JAX starts."""

    cases: tuple[str, ...]  # case names, or ("all",)
    mesh: MeshSpec
    dtype: DType
    impls: tuple[str, ...] | None = None  # None: each case's default
    dims: tuple[int, int, int] = DEFAULT_DIMS
    init: str = "random"
    scales: tuple[float, ...] | None = None  # --sizes: a sweep over dims x scale
    show_values: bool | None = None  # None: C is shown where it has up to 256 elements
    warmup: int = 5
    iters: int = 20
    peak_tflops: float | None = None
    link_gbps: float | None = None
    options: RunOptions = field(default_factory=RunOptions)
    compile_target: TargetSpec | None = None  # --target: compile every case for a TPU or GPU topology
    mesh_text: str | None = None  # --mesh as typed: with a target, a reshape of its chips
    axes_text: str | None = None

    @property
    def sweep(self) -> bool:
        return self.scales is not None


@dataclass(frozen=True)
class ArrayLayout:
    """One operand or the result: global and per-device shape and its PartitionSpec."""

    name: str
    shape: tuple[int, ...]
    entries: Entries
    local_shape: tuple[int, ...]


@dataclass(frozen=True)
class ImplRun:
    """One implementation of one case."""

    impl: str
    status: str  # "ok" or "refused"
    message: str | None  # why JAX refused it
    expected_refusal: bool
    out_entries: Entries | None  # the result's sharding as JAX reports it
    hlo: tuple[HloCollective, ...]
    xla_flops: float | None  # compiled.cost_analysis(), per device
    xla_bytes: float | None
    timing: Timing | None
    achieved_flops: float | None  # model FLOPs of the whole product / p50, FLOP/s
    max_rel_err: float
    wrong: int
    wrong_devices: tuple[int, ...]
    fit: FitVerdict | None = None  # --target: memory per chip against its HBM
    values: ShownValues | None = None  # C, globally and per device, where it is small enough to show


@dataclass(frozen=True)
class CaseRun:
    """One case at one size: its layouts, cost model and every implementation's run."""

    case: MatmulCase
    scale: float
    dims: tuple[int, int, int]
    operands: tuple[ArrayLayout, ...]
    result: ArrayLayout
    model: CostEstimate | None
    model_flops: int  # the whole product: 2 I J K (+ I K for a bias)
    tolerance: float  # max |err| / (|A| |B|) per element
    tolerance_text: str
    impls: tuple[ImplRun, ...]
    skipped: str | None = None  # why the case did not run on this mesh

    @property
    def wrong(self) -> int:
        return sum(r.wrong for r in self.impls)


@dataclass(frozen=True)
class MatmulResult:
    session: Session
    request: MatmulRequest
    axes: Axes
    hardware: Hardware
    impls: dict[str, tuple[str, ...]]  # case name -> the impls it ran, in order
    runs: tuple[CaseRun, ...]  # every size, and within a size every case
    # --sizes sweeps: per "case/impl", t(F) = alpha + F / rate over the sizes (F: model FLOPs)
    fits: dict[str, LatencyBandwidthFit | None] = field(default_factory=dict)

    @property
    def wrong(self) -> int:
        return sum(r.wrong for r in self.runs)

    @property
    def does_not_fit(self) -> bool:
        return any(i.fit is not None and not i.fit.fits for r in self.runs for i in r.impls)


@dataclass(frozen=True)
class Plan:
    """What will run: cases (with why any is skipped), impls per case, and the dims of each size."""

    cases: tuple[tuple[MatmulCase, str | None], ...]
    impls: dict[str, tuple[str, ...]]
    sizes: tuple[tuple[float, tuple[int, int, int]], ...]
    axes: Axes


# --- validation (no devices) ----------------------------------------------------------------------


def mesh_axes(mesh: MeshSpec) -> Axes:
    """X is the first mesh axis, Y the second (if any)."""
    sizes = mesh.axis_sizes
    x = mesh.axes[0]
    y = mesh.axes[1] if len(mesh.axes) > 1 else None
    return Axes(x=x, nx=sizes[x], y=y, ny=sizes[y] if y else 1)


def _check_divisible(case: MatmulCase, dims: tuple[int, int, int], axes: Axes, flag: str) -> None:
    for op in (*case.operands, case.result):
        for d, role in zip(op.dims, operand_roles(op, axes), strict=True):
            parts = axes.size(role)
            if role is not None and dims[d] % parts:
                letter = case.letters[d]
                raise ShardcliError(
                    f"{flag}: {letter}={dims[d]} is not divisible by the {parts} devices of mesh axis "
                    f"{axes.name(role)}, which case {case.name} shards {letter} over; "
                    f"use a multiple of {parts}"
                )


def check_run_settings(request: RunSettings, command: str) -> None:
    """The settings matmul and einsum share: a float dtype, timing counts, the cost model's figures.

    Raises:
        ShardcliError: one of them cannot be used.
    """
    if request.dtype.name not in FLOAT_DTYPES:
        raise ShardcliError(
            f"--dtype {request.dtype.name} is not supported by {command}; "
            f"choose one of {', '.join(FLOAT_DTYPES)}"
        )
    check_timing(request.iters, request.warmup)
    check_cost_figures(request.peak_tflops, request.link_gbps)


def validate_request(request: MatmulRequest) -> Plan:
    """Every check that needs no devices.

    Raises:
        ShardcliError: anything the run cannot do as asked.
    """
    check_run_settings(request, "matmul")
    every = request.cases == ("all",)
    names = tuple(MATMUL_CASES) if every else request.cases
    cases = [get_case(name) for name in names]
    axes = mesh_axes(request.mesh)
    impls = {}
    for case in cases:
        impls[case.name] = request.impls if request.impls is not None else (case.default_impl,)
    scales = request.scales if request.scales is not None else (1.0,)
    sizes = []
    for scale in scales:
        sizes.append((scale, scale_dims(request.dims, scale)))
    if request.show_values and request.sweep:
        raise ShardcliError("--show-values is for a single run; --sizes runs several sizes")
    if request.show_values:
        resolve_show_values(True, sizes[0][1][0] * sizes[0][1][2])  # C is I x K
    planned: list[tuple[MatmulCase, str | None]] = []
    for case in cases:
        if case.needs_y and axes.y is None:
            why = f"case {case.name} needs a 2-D mesh (it shards over X and Y); this mesh has one axis"
            if not every:
                raise ShardcliError(f"{why}; use a mesh such as --mesh 2x4")
            planned.append((case, why))
            continue
        for scale, dims in sizes:
            flag = f"--dims {','.join(map(str, dims))}" + (f" (scale {scale:g})" if request.scales else "")
            _check_divisible(case, dims, axes, flag)
        planned.append((case, None))
    return Plan(cases=tuple(planned), impls=impls, sizes=tuple(sizes), axes=axes)


# --- numerics -------------------------------------------------------------------------------------


def tolerance_for(
    case: MatmulCase, dims: tuple[int, int, int], axes: Axes, dtype: DType, platform: str
) -> tuple[float, str]:
    """Per-element bound on |C - C_ref| / (|A| . |B|) for any summation order.

    (J + 1) u_acc for the dot's own products and sums (accumulating in float32, float64 for
    float64), 2 u_in when the inputs are rounded first, and r u_out for the r roundings to the
    output dtype: one per partial sum added in it (p), one for the result, one for a bias add.
    """
    from shardcli.runtime.arrays import numpy_dtype

    out = numpy_dtype(dtype)
    u_out = float_eps(out) / 2
    u_acc = (
        float_eps(np.dtype(np.float64)) / 2
        if dtype.name == "float64"
        else float_eps(np.dtype(np.float32)) / 2
    )
    u_in, in_text = dot_input_roundoff(platform, dtype.name)
    p = partial_count(case, axes)
    j = dims[1]
    roundings = p + 1 + (1 if case.bias else 0)
    tol = (j + 1) * u_acc + 2 * u_in + roundings * u_out
    text = (
        f"|err| <= {tol:.2e} x (|A|.|B|) per element: (J+1) u_acc + 2 u_in + r u_out with J={j}, "
        f"r={roundings} rounding(s) to {dtype.name}, {in_text}"
    )
    return tol, text


def _host_operands(case: MatmulCase, dims: tuple[int, int, int], request: MatmulRequest) -> list[np.ndarray]:
    """A, B (and the bias); `arange` numbers their elements in one sequence (A from 0, B after A),
    as the tutorials' `arange(16)` and `arange(16, 32)` do."""
    hosts = []
    start = 0
    for i, op in enumerate(case.operands):
        spec = ArraySpec(shape=operand_shape(op, dims), dtype=request.dtype, init=request.init)
        hosts.append(make_host_array(spec, seed=i, start=start))
        start += spec.size
    return hosts


def _reference(case: MatmulCase, hosts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """C in float64, and |A| . |B| (+ |bias|): the scale each element's error is measured against."""
    a, b = (h.astype(np.float64) for h in hosts[:2])
    ref = a @ b
    scale = np.abs(a) @ np.abs(b)
    if case.bias:
        bias = hosts[2].astype(np.float64)
        ref = ref + bias
        scale = scale + np.abs(bias)
    return ref, scale


# --- building the three implementations -----------------------------------------------------------


def _matmul_fn(case: MatmulCase, out_spec: Any | None) -> Callable[..., Any]:
    import jax.numpy as jnp

    def fn(*ops: Any) -> Any:
        if out_spec is None:
            c = jnp.matmul(ops[0], ops[1])
        else:
            c = jnp.matmul(ops[0], ops[1], out_sharding=out_spec)
        return c + ops[2] if case.bias else c

    return fn


def _build(
    case: MatmulCase,
    impl: str,
    session: Session,
    explicit_mesh: Any,
    axes: Axes,
    hosts: list[np.ndarray] | None,
    dims: tuple[int, int, int] = DEFAULT_DIMS,
    dtype: str = "float32",
) -> tuple[Any, tuple[Any, ...], Any]:
    """(jitted program, placed operands, mesh to trace under or None); hosts None: abstract operands
    of `dims` and `dtype` (a compile-only target)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding

    in_entries = [operand_entries(op, axes) for op in case.operands]
    out_entries = operand_entries(case.result, axes)

    def place(i: int, sharding: Any) -> Any:
        if hosts is None:
            return jax.ShapeDtypeStruct(
                operand_shape(case.operands[i], dims), jnp.dtype(dtype), sharding=sharding
            )
        return place_array(hosts[i], sharding)

    if impl == "explicit":
        mesh = explicit_mesh
        args = tuple(place(i, NamedSharding(mesh, partition_spec(e))) for i, e in enumerate(in_entries))
        # The direct form of the illegal case has no out_sharding to give: that is the lesson.
        return jax.jit(_matmul_fn(case, None if case.illegal else partition_spec(out_entries))), args, mesh
    mesh = session.mesh
    shardings = [NamedSharding(mesh, partition_spec(e)) for e in in_entries]
    args = tuple(place(i, s) for i, s in enumerate(shardings))
    if impl == "auto":
        # For the illegal case leave the output to the compiler: it resolves the conflict itself.
        out = None if case.illegal else NamedSharding(mesh, partition_spec(out_entries))
        return jax.jit(_matmul_fn(case, None), in_shardings=tuple(shardings), out_shardings=out), args, None
    assert case.manual is not None
    mapped = jax.shard_map(
        case.manual(axes),
        mesh=mesh,
        in_specs=tuple(partition_spec(e) for e in in_entries),
        out_specs=partition_spec(out_entries),
    )
    return jax.jit(mapped), args, None


def run_impl(
    case: MatmulCase,
    impl: str,
    session: Session,
    explicit_mesh: Any,
    axes: Axes,
    hosts: list[np.ndarray],
    ref: np.ndarray,
    bound: np.ndarray,
    scale: np.ndarray,
    model_flops: int,
    request: MatmulRequest,
) -> ImplRun:
    """Compile, time and verify one implementation; a refusal by JAX is a result, not a crash."""
    import contextlib

    import jax

    try:
        program, args, trace_mesh = _build(case, impl, session, explicit_mesh, axes, hosts)
        with jax.set_mesh(trace_mesh) if trace_mesh is not None else contextlib.nullcontext():
            compiled, compile_s, cached = compile_timed(program, *args)
    except Exception as error:  # noqa: BLE001 - JAX's refusal is what the user came to see
        return ImplRun(
            impl=impl,
            status="refused",
            message=refusal_text(error),
            expected_refusal=case.illegal,
            out_entries=None,
            hlo=(),
            xla_flops=None,
            xla_bytes=None,
            timing=None,
            achieved_flops=None,
            max_rel_err=0.0,
            wrong=0,
            wrong_devices=(),
        )
    analysis = analyze_compiled(compiled, session.mesh if trace_mesh is None else trace_mesh)
    timing, y = time_compiled(
        compiled,
        args,
        compile_s=compile_s,
        cached=cached,
        warmup=request.warmup,
        iters=request.iters,
        process_timing=request.options.process_timing,
    )
    order = [cell.device_id for cell in session.layout.cells]
    check = check_blocks(y, ref, bound, scale, order)
    shows = resolve_show_values(request.show_values, int(np.prod(y.shape))) and not request.sweep
    return ImplRun(
        impl=impl,
        status="ok",
        message=None,
        expected_refusal=case.illegal,
        out_entries=entries_of(y.sharding, y.ndim),
        hlo=analysis.by_kind(),
        xla_flops=analysis.flops,
        xla_bytes=analysis.bytes_accessed,
        timing=timing,
        achieved_flops=model_flops / timing.stats.p50,
        max_rel_err=check.max_rel_err,
        wrong=check.wrong,
        wrong_devices=check.wrong_devices,
        values=shown_values(y, order) if shows else None,
    )


def _layout(op: Operand, dims: tuple[int, int, int], axes: Axes) -> ArrayLayout:
    return ArrayLayout(
        name=op.name,
        shape=operand_shape(op, dims),
        entries=operand_entries(op, axes),
        local_shape=local_shape(op, dims, axes),
    )


def cost_of(
    case: MatmulCase, dims: tuple[int, int, int], axes: Axes, itemsize: int, hw: Hardware
) -> CostEstimate:
    comm = tuple(
        CommCost(
            op=c.op,
            axis=axes.name(c.over) or "",
            group_size=axes.size(c.over),
            bytes_per_device=comm_bytes_per_device(c, dims, axes, itemsize),
        )
        for c in case.comm
    )
    return estimate(flops_per_device(case, dims, axes), comm, hw)


def compile_impl(
    case: MatmulCase,
    impl: str,
    session: Session,
    explicit_mesh: Any,
    axes: Axes,
    dims: tuple[int, int, int],
    request: MatmulRequest,
    target: TargetSpec,
) -> ImplRun:
    """Compile one implementation for the target from abstract operands: nothing runs or is verified."""
    refused = ImplRun(impl, "refused", None, case.illegal, None, (), None, None, None, None, 0.0, 0, ())
    try:
        program, args, trace_mesh = _build(
            case, impl, session, explicit_mesh, axes, None, dims, request.dtype.name
        )
        mesh = trace_mesh if trace_mesh is not None else session.mesh
        compiled, verdict = compile_for_target(program, args, mesh, target)
    except Exception as error:  # noqa: BLE001 - JAX's refusal is what the user came to see
        return replace(refused, message=refusal_text(error))
    if compiled is None:
        assert verdict is not None
        return replace(refused, status="does not fit", message=verdict.text, fit=verdict)
    analysis = analyze_compiled(compiled, mesh)
    out = compiled.output_shardings
    out = out[0] if isinstance(out, (tuple, list)) else out
    return replace(
        refused,
        status="compiled",
        out_entries=entries_of(out, 2),
        hlo=analysis.by_kind(),
        xla_flops=analysis.flops,
        xla_bytes=analysis.bytes_accessed,
        fit=judge_fit(analysis.memory, target),
    )


def run_case(
    case: MatmulCase,
    impls: tuple[str, ...],
    scale_factor: float,
    dims: tuple[int, int, int],
    session: Session,
    explicit_mesh: Any,
    axes: Axes,
    hardware: Hardware,
    request: MatmulRequest,
) -> CaseRun:
    """Every requested implementation of one case at one size."""
    i, j, k = dims
    model_flops = 2 * i * j * k + (i * k if case.bias else 0)
    tol, tol_text = tolerance_for(case, dims, axes, request.dtype, session.runtime.platform)
    if request.compile_target is not None:
        tol_text = f"not verified: compile-only for {request.compile_target.name}, nothing ran"
        runs = tuple(
            compile_impl(case, impl, session, explicit_mesh, axes, dims, request, request.compile_target)
            for impl in impls
        )
    else:
        runs = _run_impls(case, impls, dims, session, explicit_mesh, axes, tol, model_flops, request)
    return CaseRun(
        case=case,
        scale=scale_factor,
        dims=dims,
        operands=tuple(_layout(op, dims, axes) for op in case.operands),
        result=_layout(case.result, dims, axes),
        # The illegal case's direct form has no program to model.
        model=None if case.illegal else cost_of(case, dims, axes, request.dtype.itemsize, hardware),
        model_flops=model_flops,
        tolerance=tol,
        tolerance_text=tol_text,
        impls=runs,
    )


def _run_impls(
    case: MatmulCase,
    impls: tuple[str, ...],
    dims: tuple[int, int, int],
    session: Session,
    explicit_mesh: Any,
    axes: Axes,
    tol: float,
    model_flops: int,
    request: MatmulRequest,
) -> tuple[ImplRun, ...]:
    """Each implementation run, timed and checked against one float64 NumPy product."""
    hosts = _host_operands(case, dims, request)
    ref, scale = _reference(case, hosts)
    bound = tol * scale
    return tuple(
        run_impl(case, impl, session, explicit_mesh, axes, hosts, ref, bound, scale, model_flops, request)
        for impl in impls
    )


def skipped_case(case: MatmulCase, why: str, dims: tuple[int, int, int], scale: float) -> CaseRun:
    return CaseRun(
        case=case,
        scale=scale,
        dims=dims,
        operands=(),
        result=ArrayLayout(case.result.name, operand_shape(case.result, dims), (), ()),
        model=None,
        model_flops=0,
        tolerance=0.0,
        tolerance_text="",
        impls=(),
        skipped=why,
    )


class HardwareFlags(Protocol):
    """What resolve_hardware reads of a request (a matmul's or an einsum's)."""

    @property
    def dtype(self) -> DType: ...
    @property
    def peak_tflops(self) -> float | None: ...
    @property
    def link_gbps(self) -> float | None: ...


class RunSettings(HardwareFlags, Protocol):
    """What check_run_settings reads: the hardware flags and the timing counts."""

    @property
    def iters(self) -> int: ...
    @property
    def warmup(self) -> int: ...


def resolve_hardware(session: Session, request: HardwareFlags) -> Hardware:
    """--peak-tflops/--link-gbps, else the device table, else (CPU) a measured calibration."""
    rt = session.runtime
    table = table_hardware(rt.device_kind, request.dtype.name)
    peak = request.peak_tflops * 1e12 if request.peak_tflops is not None else None
    link = request.link_gbps * 1e9 if request.link_gbps is not None else None
    peak_src = "--peak-tflops" if peak is not None else ""
    link_src = "--link-gbps" if link is not None else ""
    if table is not None:
        if peak is None and table.peak_flops is not None:
            peak, peak_src = table.peak_flops, table.peak_source
        if link is None:
            link, link_src = table.link_bytes_per_s, table.link_source
    if (peak is None or link is None) and rt.platform == "cpu":
        from shardcli.runtime.calibrate import calibrate

        flops, copy, flops_src, copy_src = calibrate(session.devices, request.dtype.name)
        if peak is None:
            peak, peak_src = flops, flops_src
        if link is None:
            link, link_src = copy, copy_src
    unknown = f"unknown for device kind {rt.device_kind!r}; give --peak-tflops / --link-gbps"
    if table is not None and not peak_src:  # the device is in the table, the dtype is not
        peak_src = table.peak_source
    return Hardware(
        peak_flops=peak,
        link_bytes_per_s=link,
        peak_source=peak_src or unknown,
        link_source=link_src or unknown,
    )


def _memory_estimate(plan: Plan, request: MatmulRequest) -> tuple[int, int, str]:
    """Bytes per device and in all, for the largest size of the largest case."""
    item = request.dtype.itemsize
    worst = (0, 0, "")
    for case, skipped in plan.cases:
        if skipped:
            continue
        for _, dims in plan.sizes:
            axes = plan.axes
            local = sum(math.prod(local_shape(op, dims, axes)) for op in (*case.operands, case.result))
            moved = sum(math.prod(operand_shape(c.array, dims)) for c in case.comm)
            per_device = (local + moved) * item
            host = sum(math.prod(operand_shape(op, dims)) for op in case.operands) * item
            # the float64 reference, error scale and bound, and a float64 copy of one block at a time
            total = request.mesh.size * per_device + host + 4 * dims[0] * dims[2] * 8
            if total > worst[1]:
                worst = (per_device, total, f"matmul {case.name} with dims {','.join(map(str, dims))}")
    return worst


def run_matmul(
    request: MatmulRequest, progress: Callable[[int, int, str], None] | None = None
) -> MatmulResult:
    """Run every (size, case, impl) of the request.

    Args:
        request: the parsed request.
        progress: called as (done, total, label) before each case run.

    Raises:
        ShardcliError: bad input, found before allocating.
    """
    plan = validate_request(request)
    if request.compile_target is not None:
        session, explicit_mesh, hardware = _target_session(request, request.compile_target)
    else:
        per_device, total, what = _memory_estimate(plan, request)
        session = open_session(
            request.mesh, replace(request.options, mode=Mode.AUTO), x64=request.dtype.needs_x64
        )
        check_fits_in_memory(
            session.runtime, list(session.devices), per_device=per_device, total=total, what=what
        )
        explicit_mesh = None
        if any("explicit" in impls for impls in plan.impls.values()):
            from shardcli.runtime.mesh import build_mesh

            explicit_mesh = build_mesh(request.mesh, list(session.devices), mode="explicit")
        hardware = resolve_hardware(session, request)
    runs = []
    jobs = [(scale, dims, case, skipped) for scale, dims in plan.sizes for case, skipped in plan.cases]
    for n, (scale, dims, case, skipped) in enumerate(jobs):
        if progress is not None:
            progress(n, len(jobs), f"{case.name} {','.join(map(str, dims))}")
        if skipped:
            runs.append(skipped_case(case, skipped, dims, scale))
            continue
        runs.append(
            run_case(
                case, plan.impls[case.name], scale, dims, session, explicit_mesh, plan.axes, hardware, request
            )
        )
    if progress is not None:
        progress(len(jobs), len(jobs), "done")
    return MatmulResult(
        session=session,
        request=request,
        axes=plan.axes,
        hardware=hardware,
        impls=plan.impls,
        runs=tuple(runs),
        fits=flop_fits(tuple(runs)) if len(plan.sizes) > 1 else {},
    )


def _target_session(request: MatmulRequest, target: TargetSpec) -> tuple[Session, Any, Hardware]:
    """The target's session (its mesh must be the one the cases were checked on), the same chips with
    Explicit axes for the explicit impl, and the chip's figures from the device table."""
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
    if session.spec != request.mesh:
        raise ShardcliError(
            f"--target {target.name} has {session.spec.size} devices, not the {request.mesh.size} of mesh "
            f"{request.mesh.describe()}; give --mesh as a reshape of its chips"
        )
    hardware = hardware_for(session, request.dtype.name, request.peak_tflops, request.link_gbps)
    return session, explicit_twin(session.mesh), hardware


def flop_fits(runs: tuple[CaseRun, ...]) -> dict[str, LatencyBandwidthFit | None]:
    """Per case and impl that ran at every size: t(F) = alpha + F / rate over the sweep."""
    points: dict[str, list[tuple[float, float]]] = {}
    for run in runs:
        for impl in run.impls:
            if impl.timing is not None:
                points.setdefault(f"{run.case.name}/{impl.impl}", []).append(
                    (run.model_flops, impl.timing.stats.p50)
                )
    return fit_each(points)
