"""One implementation of one matmul case: the program built one of three ways (shard_map with
explicit collectives, jit with in/out shardings on an Auto mesh, or jnp.matmul with out_sharding on
an Explicit mesh), compiled, read for its collectives and cost, timed and verified; or, for
--target, compiled only.

A refusal by JAX is a result, not a crash: the illegal case's direct form is the lesson.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from shardcli.analysis.program import HloCollective, analyze_compiled
from shardcli.analysis.target import FitVerdict, compile_for_target, judge_fit
from shardcli.errors import refusal_text
from shardcli.hardware.targets import TargetSpec
from shardcli.playground.matmul.cases import Axes, MatmulCase, operand_entries, operand_shape
from shardcli.playground.matmul.request import DEFAULT_DIMS, Entries, MatmulRequest
from shardcli.playground.shard import resolve_show_values
from shardcli.runtime.arrays import ShownValues, place_array, shown_values
from shardcli.runtime.mesh import entries_of, partition_spec
from shardcli.runtime.program_run import check_blocks, time_compiled
from shardcli.runtime.session import Session
from shardcli.runtime.timing import Timing, compile_timed


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


def _refused(case: MatmulCase, impl: str) -> ImplRun:
    """An implementation that did not run: nothing compiled, timed or checked (status "refused",
    until the caller says more)."""
    return ImplRun(impl, "refused", None, case.illegal, None, (), None, None, None, None, 0.0, 0, ())


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
        return replace(_refused(case, impl), message=refusal_text(error))
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
    try:
        program, args, trace_mesh = _build(
            case, impl, session, explicit_mesh, axes, None, dims, request.dtype.name
        )
        mesh = trace_mesh if trace_mesh is not None else session.mesh
        compiled, verdict = compile_for_target(program, args, mesh, target)
    except Exception as error:  # noqa: BLE001 - JAX's refusal is what the user came to see
        return replace(_refused(case, impl), message=refusal_text(error))
    if compiled is None:
        assert verdict is not None
        return replace(_refused(case, impl), status="does not fit", message=verdict.text, fit=verdict)
    analysis = analyze_compiled(compiled, mesh)
    out = compiled.output_shardings
    out = out[0] if isinstance(out, (tuple, list)) else out
    return replace(
        _refused(case, impl),
        status="compiled",
        out_entries=entries_of(out, 2),
        hlo=analysis.by_kind(),
        xla_flops=analysis.flops,
        xla_bytes=analysis.bytes_accessed,
        fit=judge_fit(analysis.memory, target),
    )
