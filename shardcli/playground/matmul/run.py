"""`shardcli matmul`: sharded-matmul cases, three ways each, verified, timed and costed.

For every (scale, case, impl): build the operands from NumPy, run each implementation
(`matmul.impl`), and compare every device's block of the result with a float64 NumPy product,
within a bound that holds for any summation order; the cost model gives each case's time. The
request and its checks are `matmul.request`; the figures the cost model uses, `run_settings`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from shardcli.errors import ShardcliError
from shardcli.hardware.costmodel import CommCost, CostEstimate, Hardware, estimate
from shardcli.hardware.targets import TargetSpec
from shardcli.playground.fit import LatencyBandwidthFit, fit_each
from shardcli.playground.matmul.cases import (
    Axes,
    MatmulCase,
    Operand,
    comm_bytes_per_device,
    flops_per_device,
    local_shape,
    operand_entries,
    operand_shape,
    partial_count,
)
from shardcli.playground.matmul.impl import ImplRun, compile_impl, run_impl
from shardcli.playground.matmul.request import Entries, MatmulRequest, Plan, validate_request
from shardcli.playground.run_settings import resolve_hardware
from shardcli.runtime.arrays import make_host_array
from shardcli.runtime.memory import check_fits_in_memory
from shardcli.runtime.session import Session, open_session
from shardcli.runtime.verify import dot_input_roundoff, float_eps
from shardcli.specs.runs import Mode
from shardcli.specs.values import ArraySpec, DType


@dataclass(frozen=True)
class ArrayLayout:
    """One operand or the result: global and per-device shape and its PartitionSpec."""

    name: str
    shape: tuple[int, ...]
    entries: Entries
    local_shape: tuple[int, ...]


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
