"""`shardcli inspect` and `shardcli.inspect`: what the compiler did with the user's own program.

The function is lowered and compiled from abstract shapes (`jax.ShapeDtypeStruct` with shardings):
nothing of the arguments' size is allocated, so a program with hundreds of GiB per device is
inspected on a laptop. The compiled program is read through `program_analysis` (collectives with
mesh axes and source, memory, FLOPs), every argument and result is described with its sharding,
and the classic mistakes are named. `--run` also runs it on generated inputs and times it.
"""

from __future__ import annotations

import inspect as pyinspect
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardcli.core.inspect_findings import ArrayFact, Entries, Finding, find_mistakes
from shardcli.core.program_analysis import ProgramAnalysis, analyze_compiled, program_cost
from shardcli.core.session import Session
from shardcli.core.target import FitVerdict, judge_fit, oom_verdict
from shardcli.core.timing import Timing
from shardcli.costmodel import CostEstimate, Hardware, table_hardware
from shardcli.errors import ShardcliError
from shardcli.specs import AbstractArg, MeshSpec, RunOptions, ShardingSpec, check_timing, parse_mesh
from shardcli.targets import TargetSpec
from shardcli.tile_math import ShardingLayout, group_tiles, normalize_index


@dataclass(frozen=True)
class InspectRequest:
    """`shardcli inspect`'s flags, parsed before JAX starts."""

    target: str  # FILE.py:FUNCTION or package.module:FUNCTION
    args: tuple[AbstractArg, ...]
    inputs: str | None  # FILE.py:NAME, a function of the mesh returning the arguments
    outs: tuple[ShardingSpec, ...]  # the result shardings asked for: checked, not imposed
    mesh: MeshSpec | None  # None: the --target topology's shape (or 2x4 without a target)
    run: bool = False
    warmup: int = 2
    iters: int = 5
    peak_tflops: float | None = None
    link_gbps: float | None = None
    options: RunOptions = field(default_factory=RunOptions)
    compile_target: TargetSpec | None = None  # --target: compile for a TPU topology, run nothing
    mesh_text: str | None = None  # --mesh as typed, for a target's mesh (a reshape of its chips)
    axes_text: str | None = None


@dataclass(frozen=True)
class InspectResult:
    """The report `shardcli inspect` renders and `shardcli.inspect` returns."""

    session: Session
    target: str
    arguments: tuple[ArrayFact, ...]
    results: tuple[ArrayFact, ...]
    analysis: ProgramAnalysis | None  # None: the TPU compiler refused it as too big for the chip
    model: CostEstimate | None
    hardware: Hardware
    findings: tuple[Finding, ...]
    lower_s: float
    compile_s: float
    timing: Timing | None = None
    fit: FitVerdict | None = None  # --target: the program's memory per chip against its HBM

    @property
    def does_not_fit(self) -> bool:
        return self.fit is not None and not self.fit.fits


# --- arguments ------------------------------------------------------------------------------------


def abstract_args(args: tuple[AbstractArg, ...], mesh: Any) -> tuple[Any, ...]:
    """`jax.ShapeDtypeStruct`s with NamedShardings on the mesh: nothing allocated."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding

    from shardcli.mesh import partition_spec

    return tuple(
        jax.ShapeDtypeStruct(
            a.shape, jnp.dtype(a.dtype.name), sharding=NamedSharding(mesh, partition_spec(a.sharding.entries))
        )
        for a in args
    )


def as_abstract(tree: Any) -> Any:
    """Arrays in a pytree become ShapeDtypeStructs with their shardings (nothing is copied)."""
    import jax

    def leaf(x: Any) -> Any:
        if isinstance(x, jax.ShapeDtypeStruct):
            return x
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None))
        return x

    return jax.tree_util.tree_map(leaf, tree)


def layout_of(sharding: Any, shape: tuple[int, ...]) -> ShardingLayout:
    """The tiles a sharding cuts an array of `shape` into, from JAX's own index map."""
    index = sharding.devices_indices_map(tuple(shape))
    return group_tiles(shape, {d.id: normalize_index(idx, shape) for d, idx in index.items()})


def _spec_text(entries: Entries | None, sharding: Any) -> str:
    if entries is None:
        return type(sharding).__name__
    if not any(entries):
        return "P() (replicated)"
    return ShardingSpec(entries).describe()


def fact_of(name: str, struct: Any, default_sharding: Any = None) -> ArrayFact:
    """An ArrayFact for one leaf (a ShapeDtypeStruct or array with a sharding)."""
    import numpy as np

    from shardcli.mesh import entries_of

    shape = tuple(int(d) for d in struct.shape)
    sharding = getattr(struct, "sharding", None) or default_sharding
    if sharding is None:
        raise ShardcliError(f"argument {name} ({struct.dtype}{list(shape)}) has no sharding; give it one")
    itemsize = np.dtype(struct.dtype).itemsize
    entries = entries_of(sharding, len(shape))
    layout = layout_of(sharding, shape)
    return ArrayFact(
        name=name,
        dtype=str(np.dtype(struct.dtype)),
        shape=shape,
        entries=entries,
        spec=_spec_text(entries, sharding),
        layout=layout,
        bytes_global=math.prod(shape) * itemsize,
        bytes_per_device=math.prod(layout.local_shape) * itemsize if shape else itemsize,
    )


def _leaf_names(fn: Callable[..., Any], args: tuple[Any, ...]) -> list[tuple[str, Any]]:
    """(`params['w1']`, leaf) for every leaf; positional arguments named by the function's parameters."""
    import jax

    try:
        names = list(pyinspect.signature(fn).parameters)
    except (TypeError, ValueError):
        names = []
    out = []
    for i, arg in enumerate(args):
        base = names[i] if i < len(names) and not names[i].startswith("*") else f"arg{i}"
        for path, leaf in jax.tree_util.tree_flatten_with_path(arg)[0]:
            out.append((base + jax.tree_util.keystr(path), leaf))
    return out


# --- the cost model -------------------------------------------------------------------------------


def hardware_for(
    session: Session, dtype_name: str, peak_tflops: float | None, link_gbps: float | None
) -> Hardware:
    """--peak-tflops/--link-gbps, else the device table; nothing is measured (nothing may run)."""
    table = table_hardware(session.runtime.device_kind, dtype_name)
    unknown = f"unknown for device kind {session.runtime.device_kind!r}; give --peak-tflops / --link-gbps"
    peak = peak_tflops * 1e12 if peak_tflops is not None else (table.peak_flops if table else None)
    link = link_gbps * 1e9 if link_gbps is not None else (table.link_bytes_per_s if table else None)
    return Hardware(
        peak_flops=peak,
        link_bytes_per_s=link,
        peak_source="--peak-tflops" if peak_tflops is not None else (table.peak_source if table else unknown),
        link_source="--link-gbps" if link_gbps is not None else (table.link_source if table else unknown),
    )


# --- compiling ------------------------------------------------------------------------------------


class DoesNotFit(Exception):
    """The TPU compiler refused the program as too big for the chip: a verdict, not an error."""

    def __init__(self, verdict: FitVerdict, lower_s: float) -> None:
        super().__init__(verdict.text)
        self.verdict = verdict
        self.lower_s = lower_s


def compile_program(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    roots: tuple[str, ...],
    what: str,
    mesh: Any,
    target: TargetSpec | None = None,
) -> tuple[Any, Any, float, float]:
    """(jitted, compiled, lower seconds, compile seconds); an error in the user's code is theirs.

    Raises:
        DoesNotFit: compiling for `target`, the TPU compiler ran out of the chip's HBM.
    """
    import contextlib

    import jax
    from jax._src import config as jax_config

    from shardcli.core.target import quiet_native_logs
    from shardcli.user_code import raised_in, user_error

    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    lower_s = 0.0
    quiet: contextlib.AbstractContextManager[list[str]] = (
        quiet_native_logs() if target is not None else contextlib.nullcontext([])
    )
    try:
        # The mesh is the context, as under `with jax.set_mesh(mesh)` in the user's own script:
        # with_sharding_constraint(x, P(...)) and explicit-axes code find it there.
        # Not from the persistent compile cache: a program compiled before from another copy of the
        # same file would bring that copy's source lines (the cache key leaves locations out).
        with quiet, jax.set_mesh(mesh), jax_config.enable_compilation_cache(False):
            start = time.perf_counter()
            lowered = jitted.lower(*args)
            lower_s = time.perf_counter() - start
            start = time.perf_counter()
            compiled = lowered.compile()
            compile_s = time.perf_counter() - start
    except ShardcliError:
        raise
    except Exception as error:  # noqa: BLE001 - sorted into the user's error or JAX's refusal
        if raised_in(error, roots):
            raise user_error(error, roots, f"{what} raised while JAX traced it:") from None
        verdict = oom_verdict(error, target) if target is not None else None
        if verdict is not None:
            raise DoesNotFit(verdict, lower_s) from None
        lines = str(error).strip().splitlines()
        reason = f"{type(error).__name__}: {lines[0] if lines else ''}"
        raise ShardcliError(f"JAX could not compile {what}: {reason}") from None
    return jitted, compiled, lower_s, compile_s


def inspect_program(
    session: Session,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    roots: tuple[str, ...] = (),
    outs: tuple[ShardingSpec, ...] = (),
    peak_tflops: float | None = None,
    link_gbps: float | None = None,
    run: bool = False,
    warmup: int = 2,
    iters: int = 5,
    process_timing: str = "max",
    target: TargetSpec | None = None,
) -> InspectResult:
    """Lower and compile `fn` on abstract `args` and read what the compiler made of it.

    Raises:
        ShardcliError: JAX could not compile it (one line).
        UserCodeError: the user's code raised while JAX traced it.
    """
    import jax

    args = tuple(as_abstract(a) for a in args)
    try:
        arguments = tuple(fact_of(n, leaf) for n, leaf in _leaf_names(getattr(fn, "__wrapped__", fn), args))
    except ShardcliError:
        raise
    except Exception as error:  # noqa: BLE001 - a sharding that does not divide its array, say
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ShardcliError(f"the arguments of {name} cannot be laid out on this mesh: {reason}") from None
    biggest = max(arguments, key=lambda a: a.bytes_per_device, default=None)
    hardware = hardware_for(session, biggest.dtype if biggest else "float32", peak_tflops, link_gbps)
    try:
        jitted, compiled, lower_s, compile_s = compile_program(fn, args, roots, name, session.mesh, target)
    except DoesNotFit as refused:
        return InspectResult(
            session=session,
            target=name,
            arguments=arguments,
            results=(),
            analysis=None,
            model=None,
            hardware=hardware,
            findings=find_mistakes(arguments, (), None, outs, session.mesh.size),
            lower_s=refused.lower_s,
            compile_s=0.0,
            fit=refused.verdict,
        )
    out_structs = jax.tree_util.tree_leaves(compiled.out_info) if hasattr(compiled, "out_info") else []
    out_shardings = jax.tree_util.tree_leaves(compiled.output_shardings)
    results = tuple(
        fact_of(f"result[{i}]" if len(out_structs) > 1 else "result", s, sh)
        for i, (s, sh) in enumerate(zip(out_structs, out_shardings, strict=False))
    )
    analysis = analyze_compiled(compiled, session.mesh, user_files=roots)
    timing = _run(compiled, args, warmup, iters, process_timing, compile_s) if run else None
    return InspectResult(
        session=session,
        target=name,
        arguments=arguments,
        results=results,
        analysis=analysis,
        model=program_cost(analysis, hardware),
        hardware=hardware,
        findings=find_mistakes(arguments, results, analysis, outs, session.mesh.size),
        lower_s=lower_s,
        compile_s=compile_s,
        timing=timing,
        fit=judge_fit(analysis.memory, target) if target is not None else None,
    )


def _run(compiled: Any, args: tuple[Any, ...], warmup: int, iters: int, how: str, compile_s: float) -> Timing:
    """Generate inputs on their devices (random normal floats, zeros otherwise) and time the program."""
    import jax

    from shardcli.core.program_run import time_compiled

    leaves, tree = jax.tree_util.tree_flatten(args)
    key = jax.random.key(0)
    made = []
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, jax.ShapeDtypeStruct):
            made.append(leaf)
            continue
        made.append(jax.jit(_generator(leaf, jax.random.fold_in(key, i)), out_shardings=leaf.sharding)())
    placed = jax.tree_util.tree_unflatten(tree, made)
    timing, _ = time_compiled(
        compiled,
        tuple(placed),
        compile_s=compile_s,
        cached=None,
        warmup=warmup,
        iters=iters,
        process_timing=how,
    )
    return timing


def _generator(leaf: Any, key: Any) -> Callable[[], Any]:
    """A jitted-able function making one input: random normal floats, zeros otherwise."""
    import jax
    import jax.numpy as jnp

    if jnp.issubdtype(leaf.dtype, jnp.floating):
        return lambda: jax.random.normal(key, leaf.shape, leaf.dtype)
    return lambda: jnp.zeros(leaf.shape, leaf.dtype)


def run_inspect(request: InspectRequest) -> InspectResult:
    """`shardcli inspect`: load the user's function (and inputs), open the mesh, inspect.

    Raises:
        ShardcliError: bad input (one line).
        UserCodeError: the user's code raised.
    """
    from shardcli.core.session import open_session
    from shardcli.user_code import call_user, load

    check_timing(request.iters, request.warmup)
    if request.args and request.inputs:
        raise ShardcliError("give the arguments with --arg or with --inputs, not both")
    from shardcli.runtime import import_jax_quietly

    import_jax_quietly()  # before the user's file imports it
    function = load(request.target)
    if not callable(function.value):
        raise ShardcliError(
            f"inspect {request.target!r} names a {type(function.value).__name__}, not a function"
        )
    x64 = any(a.dtype.needs_x64 for a in request.args)
    if request.compile_target is not None:
        from shardcli.core.target import open_target_session

        if request.run:
            raise ShardcliError(
                f"--run needs devices to run on; --target {request.compile_target.name} only compiles"
            )
        session = open_target_session(
            request.compile_target, request.mesh_text, request.axes_text, request.options, x64=x64
        )
    else:
        session = open_session(request.mesh or parse_mesh("2x4", None), request.options, x64=x64)
    roots = function.roots
    if request.inputs is not None:
        maker = load(request.inputs, flag="--inputs", what="NAME")
        roots = tuple(dict.fromkeys(roots + maker.roots))
        args = call_user(maker.value, maker.roots, f"--inputs {request.inputs} raised", session.mesh)
        if not isinstance(args, (tuple, list)):
            raise ShardcliError(
                f"--inputs {request.inputs} returned a {type(args).__name__}; return the tuple of the "
                f"function's positional arguments (pytrees of jax.ShapeDtypeStruct with shardings, or arrays)"
            )
        args = tuple(args)
    else:
        args = abstract_args(_checked_on(request.args, session.spec), session.mesh)
    return inspect_program(
        session,
        request.target,
        function.value,
        args,
        roots=roots,
        outs=request.outs,
        peak_tflops=request.peak_tflops,
        link_gbps=request.link_gbps,
        run=request.run,
        warmup=request.warmup,
        iters=request.iters,
        process_timing=request.options.process_timing,
        target=request.compile_target,
    )


def _checked_on(args: tuple[AbstractArg, ...], mesh: MeshSpec) -> tuple[AbstractArg, ...]:
    """The --arg specs, checked against the mesh they meet (a target's mesh is known only now)."""
    from shardcli.specs import check_sharding_fits

    for i, a in enumerate(args):
        for axis in a.sharding.axes_used():
            if axis not in mesh.axes:
                raise ShardcliError(
                    f"--arg {a.describe()!r} names mesh axis {axis!r}, which is not in the mesh; the mesh "
                    f"axes are {', '.join(mesh.axes)}"
                )
        check_sharding_fits(a.sharding, mesh, a.shape, flag="its spec", what=f"--arg {i} ({a.describe()})")
    return args
