"""`shardcli inspect` and `shardcli.inspect`: what the compiler did with the user's own program.

The function is lowered and compiled from abstract shapes (`jax.ShapeDtypeStruct` with shardings):
nothing of the arguments' size is allocated, so a program with hundreds of GiB per device is
inspected on a laptop. The compiled program is read through `program_analysis` (collectives with
mesh axes and source, memory, FLOPs), every argument and result is described with its sharding,
and the classic mistakes are named. `--run` also runs it on generated inputs and times it.
"""

from __future__ import annotations

import contextlib
import inspect as pyinspect
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from shardcli.analysis.arguments import ArrayFact, Entries
from shardcli.analysis.findings import Finding, find_mistakes
from shardcli.analysis.program import (
    ProgramAnalysis,
    analyze_compiled,
    program_cost,
    reanalyze_from_dump,
)
from shardcli.analysis.step_time import StepEstimate, step_time_of
from shardcli.analysis.target import FitVerdict, judge_fit
from shardcli.errors import ShardcliError
from shardcli.hardware.costmodel import CostEstimate, Hardware, table_hardware
from shardcli.hardware.targets import TargetSpec
from shardcli.program.argument_facts import check_input_leaves, checked_on, fact_of, laid_out_fact, leaf_names
from shardcli.program.inputs import abstract_args, as_abstract
from shardcli.program.jit import Compiled, DoesNotFit, compile_program, input_shardings_of, result_structs_of
from shardcli.program.step_run import Donation, time_step
from shardcli.runtime.session import Session
from shardcli.runtime.timing import Timing
from shardcli.specs.arguments import AbstractArg
from shardcli.specs.decoder import Rules
from shardcli.specs.meshes import MeshSpec, ShardingSpec, parse_mesh
from shardcli.specs.runs import RunOptions, check_timing


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
    mode_given: bool = False  # --mode typed: it overrides the axis types of the inputs' own mesh
    rules: Rules | None = None  # --rules: the --inputs laid out by their logical axis names
    specs: tuple[tuple[str, Entries], ...] = ()  # --spec PATH=SPEC: those arguments laid out anew
    fixes: bool = True  # compile each finding's proposed fix to check it (--no-fixes: not)

    @property
    def module_path(self) -> str | None:
        """The compiled module's text to read (`inspect PATH.hlo.txt`), or None for a program."""
        return self.target if is_module_path(self.target) else None


# A compiled module's text, as `compiled.as_text()` or XLA_FLAGS=--xla_dump_to write it (gzipped or not).
MODULE_SUFFIXES = (".hlo", ".txt", ".hlo.gz", ".txt.gz")


def is_module_path(target: str) -> bool:
    """Whether inspect's argument names a compiled module's text rather than FILE.py:FUNCTION."""
    return target.lower().endswith(MODULE_SUFFIXES)


@dataclass(frozen=True)
class ModuleFacts:
    """What a compiled module's text (`inspect PATH.hlo.txt`) says of itself, beside its analysis."""

    path: str
    platform: str | None  # the compiler that wrote it ("cuda", "tpu", "cpu"), None where it has no mark
    partitions: int  # num_partitions: the devices it was compiled for
    argument_count: int  # the entry computation's parameters
    argument_bytes: int  # their bytes per device


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
    donation: Donation | None = None  # --run: how the donated arguments were given to each call
    fit: FitVerdict | None = None  # --target: the program's memory per chip against its HBM
    step: StepEstimate | None = None  # the step-time estimate, on a device kind the hardware table knows
    module: ModuleFacts | None = None  # inspect PATH.hlo.txt: read from a compiled module's text

    @property
    def does_not_fit(self) -> bool:
        return self.fit is not None and not self.fit.fits


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


# --- compiling (program/jit.py), and reading what was compiled ----------------------------------


def inspect_program(
    session: Session,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    kwargs: dict[str, Any] | None = None,
    roots: tuple[str, ...] = (),
    outs: tuple[ShardingSpec, ...] = (),
    peak_tflops: float | None = None,
    link_gbps: float | None = None,
    run: bool = False,
    warmup: int = 2,
    iters: int = 5,
    process_timing: str = "max",
    target: TargetSpec | None = None,
    mode: str | None = None,
    mesh_given: bool = True,
    fixes: bool = False,
) -> InspectResult:
    """Lower and compile `fn` on abstract `args` and read what the compiler made of it.

    Args:
        fixes: compile the program again with each finding's proposed change (`fix_check`) and keep
            the changes that help.
        mode: "auto" or "explicit" axes for the mesh (--mode typed); None: as the arguments' mesh
            has them.
        mesh_given: the session's mesh was asked for (--mesh, --axes); else arguments on an abstract
            mesh bring its shape and names.

    Raises:
        ShardcliError: JAX could not compile it (one line).
        UserCodeError: the user's code raised while JAX traced it.
    """
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    from shardcli.program.inputs import on_program_mesh

    session, (args, kwargs) = on_program_mesh(
        session,
        (tuple(as_abstract(a) for a in args), as_abstract(dict(kwargs or {}))),
        mode,
        f"the arguments of {name}",
        mesh_given=mesh_given,
    )
    if run:
        _check_call(fn, args, kwargs, name)
    named = leaf_names(getattr(fn, "__wrapped__", fn), args, kwargs)
    unplaced = NamedSharding(session.mesh, PartitionSpec())  # until the compiler says otherwise
    arguments = tuple(laid_out_fact(name, n, leaf, unplaced) for n, leaf in named)
    biggest = max(arguments, key=lambda a: a.bytes_per_device, default=None)
    hardware = hardware_for(session, biggest.dtype if biggest else "float32", peak_tflops, link_gbps)
    recompile = _Recompile(fn, args, kwargs, roots, name, session, target, peak_tflops, link_gbps)
    try:
        built = compile_program(fn, args, roots, name, session.mesh, target, kwargs)
    except DoesNotFit as refused:
        findings = find_mistakes(arguments, (), None, outs, session.mesh.size)
        if fixes:  # the fix that makes it fit
            from shardcli.analysis.roles import find_batch
            from shardcli.program.fix_check import checked_findings, refused_figures

            batch = find_batch(arguments, ())
            dtype = biggest.dtype if biggest else "float32"
            findings = checked_findings(
                findings,
                refused_figures(refused.verdict.needed_bytes),
                arguments,
                batch,
                _axis_sizes(session),
                lambda change: recompile.figures(change, dtype, batch),
            )
        return InspectResult(
            session=session,
            target=name,
            arguments=arguments,
            results=(),
            analysis=None,
            model=None,
            hardware=hardware,
            findings=findings,
            lower_s=refused.lower_s,
            compile_s=0.0,
            fit=refused.verdict,
        )
    compiled = built.compiled
    if built.context_mesh:
        session = _noted(session, "traced under jax.set_mesh(mesh), as JAX asked for this program")
    placed = input_shardings_of(compiled, len(named))
    if placed is not None:
        arguments = tuple(
            fact_of(n, leaf, unplaced, sharding=sh) for (n, leaf), sh in zip(named, placed, strict=True)
        )
    out_structs = result_structs_of(compiled)
    out_shardings = jax.tree_util.tree_leaves(compiled.output_shardings)
    results = tuple(
        fact_of(f"result[{i}]" if len(out_structs) > 1 else "result", s, sh)
        for i, (s, sh) in enumerate(zip(out_structs, out_shardings, strict=False))
    )
    analysis = analyze_compiled(compiled, session.mesh, user_files=roots)
    if analysis.text_source is None:  # XLA could not print it: once more, dumped (--xla_dump_to)
        analysis = reanalyze_from_dump(
            analysis,
            compiled,
            session.mesh,
            lambda: _dump_again(built, session.mesh, target),
            user_files=roots,
        )
    analysis = with_roles(analysis, arguments, results)
    timing, donation = None, None
    if run:
        timing, donation = time_step(
            built, name, warmup=warmup, iters=iters, process_timing=process_timing, compile_s=built.compile_s
        )
    dtype = analysis.dot_dtype or (biggest.dtype if biggest else "float32")
    step = step_time_for(analysis, session, dtype, peak_tflops, link_gbps, target)
    findings = find_mistakes(arguments, results, analysis, outs, session.mesh.size)
    if fixes:
        from shardcli.analysis.roles import find_batch
        from shardcli.program.fix_check import checked_findings, figures_of

        batch = find_batch(arguments, results)
        findings = checked_findings(
            findings,
            figures_of(analysis, step.estimate_s if step is not None else None),
            arguments,
            batch,
            _axis_sizes(session),
            lambda change: recompile.figures(change, dtype, batch),
        )
    return InspectResult(
        session=session,
        target=name,
        arguments=arguments,
        results=results,
        analysis=analysis,
        model=program_cost(analysis, hardware),
        hardware=hardware,
        findings=findings,
        lower_s=built.lower_s,
        compile_s=built.compile_s,
        timing=timing,
        donation=donation,
        fit=judge_fit(analysis.memory, target) if target is not None else None,
        step=step,
    )


@dataclass(frozen=True)
class _Recompile:
    """The program as `inspect_program` compiles it, to compile again with a fix's change."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    roots: tuple[str, ...]
    name: str
    session: Session
    target: TargetSpec | None
    peak_tflops: float | None
    link_gbps: float | None

    def figures(self, change: Any, dtype: str, batch: Any) -> Any:
        """The figures (`fix_check.Figures`) of the program compiled with `change`; its collectives'
        roles judged with the program's own batch (`roles.Batch`).

        Raises:
            ShardcliError: the change cannot be compiled, or does not fit the target.
        """
        from shardcli.analysis.roles import assign_roles
        from shardcli.program.fix_check import figures_of, relaid

        args, kwargs = relaid(self.fn, self.args, self.kwargs, dict(change.specs), self.session.mesh)
        try:
            built = compile_program(
                self.fn, args, self.roots, self.name, self.session.mesh, self.target, kwargs
            )
        except DoesNotFit as refused:
            raise ShardcliError(f"it does not fit either ({refused.verdict.text})") from None
        analysis = analyze_compiled(built.compiled, self.session.mesh, user_files=self.roots)
        analysis = replace(analysis, collectives=assign_roles(analysis.collectives, batch=batch))
        step = step_time_for(analysis, self.session, dtype, self.peak_tflops, self.link_gbps, self.target)
        return figures_of(analysis, step.estimate_s if step is not None else None)


def _axis_sizes(session: Session) -> dict[str, int]:
    return {str(axis): int(size) for axis, size in session.mesh.shape.items()}


def with_roles(
    analysis: ProgramAnalysis, arguments: tuple[ArrayFact, ...], results: tuple[ArrayFact, ...]
) -> ProgramAnalysis:
    """The analysis with each collective's role (`analysis.roles`) named."""
    from shardcli.analysis.roles import assign_roles

    return replace(analysis, collectives=assign_roles(analysis.collectives, arguments, results))


def _check_call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> None:
    """--run: a call the function cannot take is refused before anything is compiled.

    Raises:
        ShardcliError: the arguments do not bind to its parameters (a keyword-only one without a
            default that nothing gives, say).
    """
    try:
        signature = pyinspect.signature(fn)
    except (TypeError, ValueError):  # no signature to read (a builtin): JAX will say
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as error:
        missing = [
            p.name
            for p in signature.parameters.values()
            if p.kind == p.KEYWORD_ONLY and p.default is p.empty and p.name not in kwargs
        ]
        if not missing:
            raise ShardcliError(f"--run cannot call {name} with the arguments given: {error}") from None
        words = ("argument", "has") if len(missing) == 1 else ("arguments", "have")
        given = ", ".join(f"{m!r}: ..." for m in missing)
        raise ShardcliError(
            f"--run cannot call {name}: its keyword-only {words[0]} {', '.join(map(repr, missing))} "
            f'{words[1]} no default and no value; return {{"args": (...), "kwargs": {{{given}}}}} from '
            "--inputs FILE.py:NAME"
        ) from None


def _dump_again(built: Compiled, mesh: Any, target: TargetSpec | None) -> tuple[str | None, str]:
    """The program lowered as `compile_program` lowered it, compiled once more with its optimized
    HLO dumped (`program_analysis.dump_hlo_text`)."""
    import jax

    from shardcli.analysis.program import dump_hlo_text
    from shardcli.analysis.target import quiet_native_logs

    quiet: contextlib.AbstractContextManager[list[str]] = (
        quiet_native_logs() if target is not None else contextlib.nullcontext([])
    )
    context: contextlib.AbstractContextManager[Any] = (
        jax.set_mesh(mesh) if built.context_mesh else contextlib.nullcontext()
    )
    with quiet, context:
        return dump_hlo_text(built.jitted.lower(*built.args, **built.kwargs))


def step_time_for(
    analysis: ProgramAnalysis,
    session: Session,
    dtype_name: str,
    peak_tflops: float | None,
    link_gbps: float | None,
    target: TargetSpec | None = None,
) -> StepEstimate | None:
    """The step-time estimate, with --peak-tflops/--link-gbps in place of the table's figures and a
    GPU target's network between hosts (its host type's, or --network)."""
    from shardcli.hardware.chips import Figure

    return step_time_of(
        analysis,
        session.mesh,
        session.runtime.device_kind,
        dtype_name,
        peak=Figure(peak_tflops * 1e12, "FLOP/s", "--peak-tflops") if peak_tflops is not None else None,
        link=Figure(link_gbps * 1e9, "B/s", "--link-gbps") if link_gbps is not None else None,
        network=target.network if target is not None else None,
    )


def _noted(session: Session, note: str) -> Session:
    from dataclasses import replace

    runtime = session.runtime
    return replace(
        session, runtime=replace(runtime, note=f"{runtime.note}; {note}" if runtime.note else note)
    )


def run_inspect(request: InspectRequest) -> InspectResult:
    """`shardcli inspect`: open the mesh (the devices exist before the user's file is imported), load
    the user's function (and inputs), inspect.

    Raises:
        ShardcliError: bad input (one line).
        UserCodeError: the user's code raised.
    """
    from shardcli.program.inputs import call_inputs, call_inputs_on_their_axes
    from shardcli.program.logical_axes import call_inputs_with_rules, lays_itself_out, names_only
    from shardcli.program.user_code import load
    from shardcli.runtime.devices import import_jax_quietly
    from shardcli.runtime.session import open_session

    check_timing(request.iters, request.warmup)
    if request.args and request.inputs:
        raise ShardcliError("give the arguments with --arg or with --inputs, not both")
    import_jax_quietly()  # before the user's file imports it
    x64 = any(a.dtype.needs_x64 for a in request.args)
    if request.compile_target is not None:
        from shardcli.analysis.target import open_target_session, target_meshes

        if request.run:
            raise ShardcliError(
                f"--run needs devices to run on; --target {request.compile_target.name} only compiles"
            )
        session = open_target_session(
            request.compile_target, request.mesh_text, request.axes_text, request.options, x64=x64
        )
        import_meshes: contextlib.AbstractContextManager[None] = target_meshes(session)
    else:
        session = open_session(request.mesh or parse_mesh("2x4", None), request.options, x64=x64)
        import_meshes = contextlib.nullcontext()
    # --rules: NNX variables keep their logical names as they are made (placed by the rules after)
    naming = names_only() if request.rules is not None else contextlib.nullcontext()
    with import_meshes, naming:  # a mesh the user's file builds at import is one of the target's chips
        # Under a target a file is imported anew: what it built at import (a mesh) is the target's.
        fresh = request.compile_target is not None
        function = load(request.target, fresh=fresh)
        if not callable(function.value):
            raise ShardcliError(
                f"inspect {request.target!r} names a {type(function.value).__name__}, not a function"
            )
        roots = function.roots
        fn, kwargs = function.value, {}
        if request.inputs is not None:
            other_file = request.inputs.rpartition(":")[0] != request.target.rpartition(":")[0]
            maker = load(request.inputs, flag="--inputs", what="NAME", fresh=fresh and other_file)
            roots = tuple(dict.fromkeys(roots + maker.roots))
            # --rules for a program that lays itself out (its own in_shardings, inputs(mesh, rules=)):
            # handed to its inputs, as `plan` hands each rule set, not laid out by logical names
            own = request.rules is not None and lays_itself_out(function.value, maker.value)
            if own:
                given = call_inputs_with_rules(maker, request.inputs, session.mesh, request.rules)
            elif request.rules is not None:
                given = call_inputs_on_their_axes(maker, request.inputs, session.mesh)
            else:
                given = call_inputs(maker, request.inputs, session.mesh)
            fn, args, kwargs = given.fn or fn, given.args, given.kwargs
            check_input_leaves(args, request.inputs)
            if request.rules is not None and not own:
                args, kwargs = _laid_out_by_rules(request, maker.value, fn, args, kwargs, session)
        else:
            args = abstract_args(checked_on(request.args, session.spec), session.mesh)
        if request.specs:
            from shardcli.program.fix_check import relaid

            args, kwargs = relaid(fn, args, kwargs, dict(request.specs), session.mesh)
    result = inspect_program(
        session,
        request.target,
        fn,
        args,
        kwargs=kwargs,
        roots=roots,
        outs=request.outs,
        peak_tflops=request.peak_tflops,
        link_gbps=request.link_gbps,
        run=request.run,
        warmup=request.warmup,
        iters=request.iters,
        process_timing=request.options.process_timing,
        target=request.compile_target,
        mode=str(request.options.mode) if request.mode_given or request.inputs is None else None,
        mesh_given=request.mesh_text is not None or request.axes_text is not None,
        fixes=request.fixes,
    )
    from shardcli.program.fix_commands import with_fix_commands

    return with_fix_commands(result, request, fn, args, kwargs)


def _laid_out_by_rules(
    request: InspectRequest,
    maker: Any,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    session: Session,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """--rules: the arguments laid out on the session's mesh by their logical axis names, as `plan`
    lays out each of its candidates.

    Raises:
        ShardcliError: no argument carries logical names; a rule names a mesh axis not in the mesh.
    """
    from shardcli.program import logical_axes as logical
    from shardcli.specs.decoder import rules_text

    assert request.rules is not None
    table = logical.table_of(maker)
    leaves = logical.named_leaves(fn, args, table, kwargs)
    logical.check_named(leaves, f"{request.target} (--rules)")
    logical.check_rule_names(request.rules, leaves)
    axes = tuple(map(str, session.mesh.axis_names))
    unknown = logical.unknown_mesh_axes(request.rules, axes)
    if unknown:
        raise ShardcliError(
            f"--rules {rules_text(request.rules)} names mesh axis {', '.join(map(repr, unknown))}, which "
            f"is not in the mesh ({', '.join(axes)}); add it to --axes or leave it out of --rules"
        )
    return logical.lay_out(args, fn, table, request.rules, session.mesh, kwargs)
