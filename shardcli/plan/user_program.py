"""`shardcli plan FILE.py:FN --inputs FILE.py:NAME`: layouts for the user's own program.

The user's arguments carry logical axis names (`program.logical_axes`: linen's `nn.with_partitioning`,
NNX's `nnx.with_partitioning`, or a `LOGICAL_AXES` table in the inputs' file).

A layout is a mesh over the target's chips and a rule set mapping those names to mesh axes (the
decoder's rule sets, or `--rules`). The model here is the arguments' bytes per chip (the program's
FLOPs are the compiler's to say): layouts whose arguments fit are compiled, the fewest bytes per
chip first, each as `inspect --rules` compiles it, and ranked by the step-time estimate. Each
compile's figures are cached on disk (`plan_compile`'s cache), keyed by the two files' bytes, the
names, the layout, the target and the compiler's versions. The winner comes with the `shardcli
inspect` command that compiles it again.

A program that lays itself out (`logical_axes.lays_itself_out`: a step jitted with its own
in_shardings, as MaxText's and flax lm1b's are, or inputs that take `rules` or whose file defines
LOGICAL_AXIS_RULES) is not laid out by its names: plan calls its `inputs(mesh)` once per candidate
mesh, a mesh that names every axis plan varies (data, fsdp, tensor; 1 where a layout does not use
it) and every other axis the program's shardings name (always 1), so the program shards itself by
its own rules. Where plan can reach those rules (the `rules` keyword, LOGICAL_AXIS_RULES) it also
hands over its own rule sets, each followed by the program's rules for the names it does not map;
a rule set that gives the same layout on a mesh as an earlier one is left out. A step whose own
shardings are on a mesh of its own is refused in one line naming the argument.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardcli.analysis.step_time import StepEstimate
from shardcli.errors import ShardcliError
from shardcli.hardware.targets import TargetSpec
from shardcli.plan.analytic import HEADROOM, chip_figures
from shardcli.plan.candidates import MESH_AXES, RULE_SETS, MeshChoice, gpu_mesh_choices, mesh_choices
from shardcli.plan.compiles import CompiledFigures, figures_of
from shardcli.specs.decoder import Rules, rules_text
from shardcli.specs.files import own_folder
from shardcli.specs.runs import RunOptions


@dataclass(frozen=True)
class ProgramPlanRequest:
    """`shardcli plan FILE.py:FN --inputs FILE.py:NAME`'s flags."""

    program: str
    inputs: str
    target: TargetSpec
    rules: Rules | None = None  # --rules; None: the decoder's rule sets
    compile_n: int = 8
    use_cache: bool = True  # --no-cache: compile every layout again (the cache is still written)
    options: RunOptions = field(default_factory=RunOptions)


@dataclass(frozen=True)
class ProgramRow:
    """One layout of the user's program."""

    mesh: MeshChoice
    rule_set: str
    rules: Rules
    argument_bytes: int  # per chip, from the arguments' shapes and specs
    status: str  # "compiled", "cached", "modelled", "pruned", "interrupted"
    why: str = ""
    compiled: CompiledFigures | None = None
    estimate: StepEstimate | None = None
    # A program that lays itself out: the mesh its inputs(mesh) was handed, every axis (size 1 too)
    mesh_axes: tuple[tuple[str, int], ...] = ()

    @property
    def label(self) -> str:
        return f"{self.mesh.label} {self.rule_set}"


@dataclass(frozen=True)
class ProgramPlanResult:
    request: ProgramPlanRequest
    rows: tuple[ProgramRow, ...]
    named_leaves: int  # leaves with logical names
    leaves: int
    names_used: tuple[str, ...]  # the logical axis names the arguments carry
    peak_flops: float
    interrupted: bool
    compile_s: float
    cache_hits: int = 0
    warnings: tuple[str, ...] = ()  # one line each: names no rule maps, names taken as mesh axes
    own_layout: str = ""  # how the program lays itself out, where it does ("" : by its names)

    @property
    def winner(self) -> ProgramRow | None:
        fitting = [r for r in self.rows if r.compiled is not None and r.compiled.fits and r.estimate]
        return fitting[0] if fitting else None


@dataclass(frozen=True)
class LoadedProgram:
    """The user's function and its arguments, with the logical names each leaf carries."""

    fn: Callable[..., Any]
    given: Any  # program_inputs' answer: args, kwargs (and a function where --inputs gave one)
    roots: tuple[str, ...]
    table: dict[str, Any]
    leaves: list[Any]
    named: int
    maker: Any = None  # the loaded --inputs (UserObject)
    own_layout: str = ""  # why the program lays itself out (`own_layout`), or ""


def load_program(request: ProgramPlanRequest) -> LoadedProgram:
    """Import the program and call --inputs on the target's whole mesh, logical names only; a
    program that lays itself out (`lays_itself_out`) is called per layout instead (`own_rows`).

    Raises:
        ShardcliError: no leaf carries logical names, or --rules names one no leaf carries.
        UserCodeError: the user's code raised.
    """
    from shardcli.analysis.target import open_target_session, target_meshes
    from shardcli.plan.compiles import set_cost_flags
    from shardcli.program import logical_axes as logical
    from shardcli.program.inputs import call_inputs_on_their_axes
    from shardcli.program.user_code import load
    from shardcli.runtime.devices import import_jax_quietly

    import_jax_quietly()
    set_cost_flags()  # before libtpu starts: the cost compiles' flags
    # JAX on the CPU with the target described (quietly) before the user's file can start a backend
    whole = open_target_session(request.target, None, None, request.options)
    with target_meshes(whole), logical.names_only():
        function = load(request.program, flag="plan")
        maker = load(request.inputs, flag="--inputs", what="NAME")
        roots = tuple(dict.fromkeys(function.roots + maker.roots))
        why = logical.lays_itself_out(function.value, maker.value)
        if why:  # called per layout, on meshes of plan's axes (own_rows)
            return LoadedProgram(function.value, None, roots, {}, [], 0, maker, why)
        given = call_inputs_on_their_axes(maker, request.inputs, whole.mesh)
    fn = given.fn or function.value
    if not callable(fn):
        raise ShardcliError(f"plan {request.program!r} names a {type(fn).__name__}, not a function")
    if logical.own_shardings(fn):
        return LoadedProgram(fn, None, roots, {}, [], 0, maker, logical.lays_itself_out(fn, maker.value))
    table = logical.table_of(maker.value)
    leaves = logical.named_leaves(fn, given.args, table, given.kwargs)
    named = logical.check_named(leaves, request.program)
    if request.rules is not None:
        logical.check_rule_names(request.rules, leaves)
    return LoadedProgram(fn, given, roots, table, leaves, named, maker)


def run_program_plan(
    request: ProgramPlanRequest, progress: Callable[[int, int, str], None] | None = None
) -> ProgramPlanResult:
    """Load the program and its named arguments, rank the layouts, compile (or read) the best.

    Raises:
        ShardcliError: bad input (one line).
        UserCodeError: the user's code raised.
    """
    from shardcli.plan.compiles import figures_for, target_session
    from shardcli.plan.estimate import estimate_of
    from shardcli.program import logical_axes as logical
    from shardcli.program.inspect import inspect_program

    target = request.target
    chip = chip_figures(target.generation.name, target.topology, os.environ, target.network)
    gpu = target.generation.platform != "tpu"
    meshes = gpu_mesh_choices(*chip.torus) if gpu else mesh_choices(target.topology)
    if request.rules is not None:
        check_rule_axes(request.rules, meshes, target.name)
    program = load_program(request)
    fn, given, roots, table, leaves = program.fn, program.given, program.roots, program.table, program.leaves
    sources = _sources_digest(request)
    sessions: dict[tuple[Any, ...], Any] = {}
    if program.own_layout:
        own = own_rows(request, program, meshes, chip.usable_bytes, sessions)
        rows, warnings, calls = own.rows, own.warnings, own.calls
        counts, names_used = (own.named, own.leaves), own.names_used
    else:
        rule_sets = {"--rules": request.rules} if request.rules is not None else dict(RULE_SETS)
        axes = tuple(a for a in MESH_AXES if any(a in m.axes for m in meshes))
        names_used = logical.names_used(leaves)
        rule_sets, warnings = take_axis_names(rule_sets, names_used, axes, request.rules is None)
        rows = layout_rows(meshes, rule_sets, leaves, chip.usable_bytes)
        calls, counts = {}, (program.named, len(leaves))
    start = time.perf_counter()
    interrupted = False
    hits = 0
    done: list[ProgramRow] = []
    todo = [r for r in rows if r.status == "modelled"][: request.compile_n]
    for i, row in enumerate(todo):
        if progress is not None:
            progress(i, len(todo), row.label)
        try:
            if row.mesh_axes:  # the program laid itself out on this mesh (own_rows)
                session, own_given = calls[(row.mesh, row.rule_set)]
            else:
                session, own_given = target_session(sessions, target, row.mesh, request.options), None

            def compile_row(
                session: Any = session, row: ProgramRow = row, own_given: Any = own_given
            ) -> CompiledFigures:
                if own_given is not None:
                    step, args, kwargs = own_given.fn or fn, own_given.args, own_given.kwargs
                else:
                    step = fn
                    args, kwargs = logical.lay_out(
                        given.args, fn, table, row.rules, session.mesh, given.kwargs
                    )
                began = time.perf_counter()
                result = inspect_program(
                    session, request.program, step, args, kwargs=kwargs, roots=roots, target=target
                )
                return figures_of(result, target, "scan", time.perf_counter() - began)

            figures, cached = figures_for(
                program_cache_key(sources, request, row),
                request.use_cache,
                row.label,
                compile_row,
                user_sources,
            )
        except KeyboardInterrupt:
            interrupted = True
            break
        hits += cached
        status = "cached" if cached else "compiled"
        done.append(
            _replace(row, status, figures, estimate_of(figures, session.mesh, network=target.network))
        )
    if progress is not None:
        progress(len(done), len(todo), "")
    finished = {(r.mesh, r.rule_set) for r in done}
    stopped = {(r.mesh, r.rule_set) for r in todo} if interrupted else set()
    rest = [
        _stopped(r) if (r.mesh, r.rule_set) in stopped else r
        for r in rows
        if (r.mesh, r.rule_set) not in finished
    ]
    done.sort(
        key=lambda r: (
            not (r.compiled and r.compiled.fits),
            r.estimate is None,
            r.estimate.estimate_s if r.estimate and r.estimate.estimate_s else 0.0,
        )
    )
    return ProgramPlanResult(
        request=request,
        rows=tuple(done + rest),
        named_leaves=counts[0],
        leaves=counts[1],
        names_used=names_used,
        peak_flops=chip.peak_flops,
        interrupted=interrupted,
        compile_s=time.perf_counter() - start,
        cache_hits=hits,
        warnings=warnings,
        own_layout=program.own_layout,
    )


# The mesh axes plan varies for a program that lays itself out: every one is in each mesh it is
# handed (size 1 where a layout does not use it), as MaxText's meshes name every axis its rules do.
OWN_AXES = tuple(a for a in MESH_AXES if a != "sequence")
MAX_OTHER_AXES = 16  # more mesh axes of the program's own than MaxText's dozen: a loop, not a mesh
# JAX's words when a sharding names a mesh axis the mesh lacks (NamedSharding(mesh, P("model"))).
_MISSING_AXIS = re.compile(r"Resource axis: (?P<axis>[A-Za-z_][A-Za-z0-9_]*) of .* is not found in mesh")


@dataclass(frozen=True)
class OwnLayouts:
    """The layouts of a program that lays itself out, one call of its inputs each (`own_rows`)."""

    rows: list[ProgramRow]
    calls: dict[tuple[MeshChoice, str], tuple[Any, Any]]  # (session, GivenInputs) per row
    warnings: tuple[str, ...]
    named: int  # leaves in a box with logical names
    leaves: int
    names_used: tuple[str, ...]  # the names its boxes carry and its own rules map


def own_rule_sets(request: ProgramPlanRequest, maker: Any) -> tuple[dict[str, Rules | None], list[str]]:
    """The rule sets handed to a program that lays itself out (None: its own, as written): --rules,
    or its own and plan's (each followed by its own for the names plan's do not map) where plan can
    reach its rules; and a warning where it cannot.

    Raises:
        ShardcliError: --rules for a program whose rules plan cannot reach.
    """
    from shardcli.program import logical_axes as logical

    own = logical.own_rules(maker)
    reach = logical.rules_reach(maker)
    if reach is None:
        if request.rules is not None:
            raise ShardcliError(
                f"--rules {rules_text(request.rules)}: --inputs {request.inputs} lays the arguments out by "
                f"rules plan cannot reach; give it a {logical.RULES_KEYWORD}= keyword (def inputs(mesh, "
                f"{logical.RULES_KEYWORD}=RULES)) or define {logical.RULES_NAME} in its file, or leave "
                "--rules out"
            )
        return {"own": None}, [
            f"--inputs {request.inputs} lays the arguments out by rules plan cannot reach: only the mesh "
            f"varies; give it a {logical.RULES_KEYWORD}= keyword or define {logical.RULES_NAME} in its file "
            "to try plan's rule sets too"
        ]
    names = ["--rules"] if request.rules is not None else ["own", *RULE_SETS]
    if own is None and "own" in names:
        names.remove("own")  # a rules= keyword with no default has no "as written"
    return {n: None if n == "own" else logical.merged_rules(handed_rules(n, request), own) for n in names}, []


def handed_rules(rule_set: str, request: ProgramPlanRequest) -> Rules:
    """The rules plan hands a program that lays itself out for a rule set (before its own are
    added for the names they do not map): --rules, or plan's set on the axes plan varies."""
    if rule_set == "--rules":
        assert request.rules is not None
        return request.rules
    return tuple((n, tuple(a for a in axes if a in OWN_AXES)) for n, axes in RULE_SETS[rule_set])


def own_rows(
    request: ProgramPlanRequest,
    program: LoadedProgram,
    meshes: list[MeshChoice],
    hbm_bytes: int,
    sessions: dict[tuple[Any, ...], Any],
) -> OwnLayouts:
    """One row per mesh and rule set of a program that lays itself out: its inputs called on the
    mesh (with the rule set), its arguments' bytes per chip from the shardings it gave them (or its
    jit's in_shardings), a rule set whose layout an earlier one on the same mesh gave left out.

    Raises:
        ShardcliError: an argument sharded on a mesh of the program's own (`check_own_layout`).
        UserCodeError: the user's code raised.
    """
    from shardcli.program import logical_axes as logical
    from shardcli.program.user_code import UserCodeError

    sets, warnings = own_rule_sets(request, program.maker.value)
    own = logical.own_rules(program.maker.value) or ()
    other: list[str] = []  # mesh axes the program's shardings name beyond OWN_AXES (always 1)
    rows: list[ProgramRow] = []
    calls: dict[tuple[MeshChoice, str], tuple[Any, Any]] = {}
    named, leaves, carried = 0, 0, set()
    refused: list[UserCodeError] = []
    for mesh in meshes:
        seen: set[Any] = set()
        for name, rules in sets.items():
            try:
                session, given, full = _call_own_inputs(request, program, mesh, rules, other, sessions)
            except UserCodeError as error:  # the program refuses this layout (4 heads over tensor=8)
                refused.append(error)
                rules_shown = rules if rules is not None else own
                rows.append(
                    ProgramRow(mesh, name, rules_shown, 0, "pruned", f"the program refuses it: {error}")
                )
                continue
            fn = given.fn or program.fn
            check_own_layout(request, fn, given, session.mesh)
            layout, nbytes, problem = own_layout_of(fn, given)
            if layout in seen:
                continue  # the same layout as a rule set before it
            seen.add(layout)
            boxes = [b for b in _boxes(given) if logical.names_of(b) is not None]
            named, leaves = len(boxes), len(argument_leaves_of(given))
            carried |= {n for b in boxes for n in logical.names_of(b) or () if n is not None}
            fits = nbytes <= HEADROOM * hbm_bytes
            status, why = ("modelled", "") if fits else ("pruned", "arguments do not fit")
            if problem:
                status, why = "pruned", problem
            row_rules = rules if rules is not None else own
            rows.append(ProgramRow(mesh, name, row_rules, nbytes, status, why, mesh_axes=full))
            calls[(mesh, name)] = (session, given)
    if refused and not calls:
        raise refused[0]  # no layout at all: the program's error is the answer
    if other:
        warnings.append(
            f"the program's shardings name mesh axis {', '.join(map(repr, other))}, which plan does not "
            f"vary: it is 1 in every layout (plan varies {', '.join(OWN_AXES)})"
        )
    rows.sort(key=lambda r: (r.status != "modelled", r.argument_bytes, -r.mesh.size("fsdp")))
    names = tuple(sorted(carried | {n for n, _ in own}))
    return OwnLayouts(rows, calls, tuple(warnings), named, leaves, names)


def _call_own_inputs(
    request: ProgramPlanRequest,
    program: LoadedProgram,
    mesh: MeshChoice,
    rules: Rules | None,
    other: list[str],
    sessions: dict[tuple[Any, ...], Any],
) -> tuple[Any, Any, tuple[tuple[str, int], ...]]:
    """The program's inputs called on a mesh of the target's chips naming OWN_AXES (`mesh`'s sizes)
    and `other` (1 each), with `rules` (None: its own): (session, GivenInputs, the mesh's sizes).
    A mesh axis JAX says the mesh lacks is added to `other` and the call made again.

    Raises:
        ShardcliError: more than MAX_OTHER_AXES axes of the program's own.
        UserCodeError: the user's code raised otherwise.
    """
    from shardcli.analysis.target import target_meshes
    from shardcli.plan.compiles import set_cost_flags
    from shardcli.program import logical_axes as logical
    from shardcli.program.user_code import UserCodeError

    maker = program.maker
    while True:
        full = tuple((a, mesh.size(a)) for a in OWN_AXES) + tuple((a, 1) for a in other)
        key = ("own", request.target.name, full)
        if key not in sessions:
            from shardcli.analysis.target import open_target_session

            set_cost_flags()
            shape, axes = "x".join(str(s) for _, s in full), ",".join(a for a, _ in full)
            sessions[key] = open_target_session(request.target, shape, axes, request.options)
        session = sessions[key]
        try:
            # as `shardcli inspect --mesh --axes` calls it: jax.make_mesh over the target's chips
            with target_meshes(session):
                given = logical.call_inputs_with_rules(maker, request.inputs, session.mesh, rules)
        except UserCodeError as error:
            found = _MISSING_AXIS.search(str(error))
            axis = found.group("axis") if found else None
            if axis is None or axis in OWN_AXES or axis in other:
                raise
            if len(other) >= MAX_OTHER_AXES:
                raise ShardcliError(
                    f"--inputs {request.inputs} shards over more than {MAX_OTHER_AXES} mesh axes of its own "
                    f"({', '.join(other)}, ...); plan varies {', '.join(OWN_AXES)}"
                ) from None
            other.append(axis)
            continue
        return session, given, full


def _boxes(given: Any) -> list[Any]:
    import jax

    from shardcli.program import logical_axes as logical

    tree = (given.args, given.kwargs)
    return [x for x in jax.tree_util.tree_leaves(tree, is_leaf=logical.is_box) if logical.is_box(x)]


def argument_leaves_of(given: Any) -> list[Any]:
    """The array leaves of what --inputs gave (positional and keyword)."""
    import jax

    from shardcli.program.inputs import is_array_leaf

    return [x for x in jax.tree_util.tree_leaves((given.args, given.kwargs)) if is_array_leaf(x)]


def own_layout_of(fn: Any, given: Any) -> tuple[Any, int, str]:
    """What a program that lays itself out gave: its layout (each array's shape and spec, from the
    jit's in_shardings where it has them, else the array's own, and the jit's out_shardings), to tell
    rule sets apart; the arguments' bytes per chip; and why the layout cannot be (an argument its
    sharding does not divide), or ""."""
    import math

    import jax

    from shardcli.program import logical_axes as logical
    from shardcli.program.inputs import is_array_leaf

    placed = [
        (path, leaf, from_jit or getattr(leaf, "sharding", None))
        for (path, leaf), from_jit in zip(
            logical.argument_leaves(fn, given.args), logical.jit_in_shardings(fn, given.args), strict=True
        )
    ]
    placed += [
        (f"{name}{jax.tree_util.keystr(p)}", leaf, getattr(leaf, "sharding", None))
        for name, value in given.kwargs.items()
        for p, leaf in jax.tree_util.tree_flatten_with_path(value)[0]
    ]
    layout, nbytes, problem = [], 0, ""
    for path, leaf, sharding in placed:
        if not is_array_leaf(leaf):
            continue
        shape = tuple(leaf.shape)
        try:
            local = (
                shape
                if sharding is None or not hasattr(sharding, "shard_shape")
                else sharding.shard_shape(shape)
            )
        except ValueError:  # JAX's IndivisibleError: the program's rules split a dim it does not divide
            problem = problem or f"{path} {shape} does not split as {getattr(sharding, 'spec', sharding)}"
            local = shape
        nbytes += math.prod(local) * int(getattr(leaf.dtype, "itemsize", 4))
        layout.append((shape, _spec_key(sharding, len(shape))))
    info = getattr(fn, "_jit_info", None)
    outs = tuple(_spec_key(s, None) for s in getattr(info, "out_shardings_leaves", ()))
    return (tuple(layout), outs), nbytes, problem


def _spec_key(sharding: Any, rank: int | None) -> Any:
    """A sharding as the layout it gives: per dim the mesh axes of size > 1 it is split over (a spec
    naming an axis of size 1 lays nothing out), or its repr where it has no partition spec."""
    spec = getattr(sharding, "spec", None)
    if spec is None:
        return repr(sharding) if sharding is not None else None
    sizes = dict(getattr(sharding.mesh, "shape", {}))
    entries = tuple(
        tuple(a for a in ((e,) if isinstance(e, str) else tuple(e or ())) if sizes.get(a, 2) > 1)
        for e in spec
    )
    return entries + ((),) * (rank - len(entries)) if rank is not None else entries


def check_own_layout(request: ProgramPlanRequest, fn: Any, given: Any, mesh: Any) -> None:
    """Raises: ShardcliError (one line, naming the argument) where an argument's sharding (its own or
    the jit's in_shardings) is on a mesh that does not follow the one its inputs were handed (a jit
    built on a mesh of the program's own: no layout can move it), or the two disagree. A mesh of its
    own axis names over the handed mesh's devices and sizes (`follows_mesh`) follows it."""
    from jax.sharding import AbstractMesh, NamedSharding

    from shardcli.program import logical_axes as logical
    from shardcli.program.inputs import ProgramMesh, is_array_leaf

    handed = ProgramMesh(mesh, False).describe()
    pairs = zip(
        logical.argument_leaves(fn, given.args), logical.jit_in_shardings(fn, given.args), strict=True
    )
    for (path, leaf), from_jit in pairs:
        if not is_array_leaf(leaf):
            continue
        own = getattr(leaf, "sharding", None)
        for sharding, whose in ((from_jit, "the jit's in_shardings give"), (own, "--inputs gives")):
            its = getattr(sharding, "mesh", None)
            if its is None or isinstance(its, AbstractMesh) or logical.follows_mesh(its, mesh):
                continue
            raise ShardcliError(
                f"plan {request.program}: argument {path} carries its own sharding, on a mesh no layout can "
                f"change: {whose} it {sharding}, not on the mesh plan hands --inputs {request.inputs} "
                f"({handed}); build the jit inside inputs(mesh) from that mesh (in_shardings from "
                "nn.logical_to_mesh_sharding(specs, mesh, rules)), or hand over the step unjitted, its "
                "arguments boxed with logical names"
            )
        if (
            isinstance(own, NamedSharding)
            and isinstance(from_jit, NamedSharding)
            and not own.is_equivalent_to(from_jit, len(leaf.shape))
        ):
            raise ShardcliError(
                f"plan {request.program}: argument {path} is sharded {own.spec} by --inputs "
                f"{request.inputs} but {from_jit.spec} by the jit's own in_shardings (JAX refuses the call: "
                "Sharding passed to jit does not match the sharding on the respective arg); give it the "
                "jit's sharding"
            )


def take_axis_names(
    rule_sets: dict[str, Rules], carried: tuple[str, ...], axes: tuple[str, ...], take: bool
) -> tuple[dict[str, Rules], tuple[str, ...]]:
    """Rule sets that also map each carried name that is one of plan's mesh axes (`data`, as Flax's
    guide names a batch dim) to that axis, where `take` (no --rules: with them, the user's rules
    stand as given) and no rule maps it already; and one warning line per name no rule maps.

    Returns:
        (the rule sets, the warnings).
    """
    warnings = []
    taken = [n for n in carried if take and n in axes and not any(n in dict(r) for r in rule_sets.values())]
    if taken:
        rule_sets = {k: r + tuple((n, (n,)) for n in taken if n not in dict(r)) for k, r in rule_sets.items()}
        warnings.append(
            f"the arguments name {', '.join(map(repr, taken))}, a mesh axis of plan's: taken as that axis "
            f"({', '.join(f'{n}={n}' for n in taken)})"
        )
    for name in carried:
        if not any(name in dict(r) for r in rule_sets.values()):
            how = "give --rules with it" if not take else f"map it with --rules, such as {name}=tensor"
            warnings.append(
                f"no rule maps the arguments' logical axis {name!r} to a mesh axis: its dims stay whole on "
                f"every chip; {how} (plan's mesh axes: {', '.join(axes)})"
            )
    return rule_sets, tuple(warnings)


def layout_rows(
    meshes: list[MeshChoice], rule_sets: dict[str, Rules], leaves: list[Any], hbm_bytes: int
) -> list[ProgramRow]:
    """One row per layout (mesh x rule set) whose arguments differ from an earlier rule set's on the
    same mesh, with their bytes per chip; those that fit the chip first, the fewest bytes first."""
    from shardcli.program import logical_axes as logical

    rows: list[ProgramRow] = []
    for mesh in meshes:
        seen: set[int] = set()
        sizes = dict(mesh.sizes)
        for name, rules in rule_sets.items():
            specs = hash(tuple(logical.spec_entries(leaf, n, rules, sizes) for _, leaf, n in leaves))
            if specs in seen:
                continue  # the same arguments as a rule set before it
            seen.add(specs)
            nbytes = logical.argument_bytes(leaves, rules, sizes)
            fits = nbytes <= HEADROOM * hbm_bytes
            status, why = ("modelled", "") if fits else ("pruned", "arguments do not fit")
            rows.append(ProgramRow(mesh, name, rules, nbytes, status, why))
    rows.sort(key=lambda r: (r.status != "modelled", r.argument_bytes, -r.mesh.size("fsdp")))
    return rows


def check_rule_axes(rules: Rules, meshes: list[MeshChoice], target: str) -> None:
    """Raises: ShardcliError when --rules names a mesh axis that no layout's mesh has."""
    from shardcli.program.logical_axes import unknown_mesh_axes

    named = {a for m in meshes for a in m.axes}
    have = tuple(a for a in MESH_AXES if a in named)
    unknown = unknown_mesh_axes(rules, have)
    if unknown:
        names = ", ".join(repr(a) for a in unknown)
        raise ShardcliError(
            f"--rules {rules_text(rules)} names mesh axis {names}, which no layout on {target} has; "
            f"plan's meshes name {', '.join(have)}"
        )


def inspect_command(result: ProgramPlanResult, row: ProgramRow) -> str:
    """The `shardcli inspect` command that compiles this layout again (the rules that take effect
    on its mesh, for the names the arguments carry)."""
    from shardcli.program.logical_axes import effective_rules

    req = result.request
    words = ["shardcli", "inspect", req.program, "--inputs", req.inputs, "--target", req.target.name]
    if row.mesh_axes:  # the program lays itself out: its inputs called on this mesh
        words += ["--mesh", "x".join(str(s) for _, s in row.mesh_axes)]
        words += ["--axes", ",".join(a for a, _ in row.mesh_axes)]
        if row.rule_set != "own":  # inspect hands them over the same way, its own rules after them
            handed = handed_rules(row.rule_set, req)
            words += ["--rules", ",".join(f"{n}={'+'.join(a) or 'None'}" for n, a in handed)]
    else:
        rules = effective_rules(row.rules, result.names_used, row.mesh.axes)
        words += ["--mesh", "x".join(map(str, row.mesh.shape)), "--axes", ",".join(row.mesh.axes)]
        words += ["--rules", rules_text(rules)]
    return " ".join(shlex.quote(w) for w in words)


def user_source_files() -> list[str]:
    """The Python files of the user's this process has imported: the named files and every module
    loaded from outside Python's own library, the installed packages and shardcli itself."""
    import os
    import site
    import sys
    import sysconfig

    library = {sysconfig.get_path(n) for n in ("stdlib", "platstdlib", "purelib", "platlib")}
    library |= {*site.getsitepackages(), site.getusersitepackages(), sys.base_prefix, sys.base_exec_prefix}
    library |= {sys.prefix, sys.exec_prefix, own_folder()}
    folders = tuple(os.path.abspath(f) + os.sep for f in library if f)
    files = set()
    for module in list(sys.modules.values()):
        name = getattr(module, "__file__", None)
        if isinstance(name, str) and name.endswith(".py"):
            path = os.path.abspath(name)
            if not path.startswith(folders):
                files.add(path)
    return sorted(files)


def user_sources() -> dict[str, str]:
    """Each of the user's imported files (`user_source_files`) with the digest of its bytes."""
    from shardcli.plan.compiles import file_digest

    return {path: file_digest(path) or "unreadable" for path in user_source_files()}


def _sources_digest(request: ProgramPlanRequest) -> str:
    """A digest of the names given and of every file of the user's the program imported (not only
    the two named: a change to a module they import compiles again)."""
    digest = hashlib.sha256()
    for target in (request.program, request.inputs):
        digest.update(target.rpartition(":")[2].encode() + b"\0")
    for path, file_hash in user_sources().items():
        digest.update(f"{path}\0{file_hash}\0".encode())
    return digest.hexdigest()


def program_cache_key(sources: str, request: ProgramPlanRequest, row: ProgramRow) -> str:
    """A digest of everything that changes a layout's compile: the user's files and the names in
    them (`sources`), the layout (mesh and rules), the target, and what every compile's key holds
    (`plan_compile.keyed`: JAX's and libtpu's versions, the cost compiles' flags)."""
    from shardcli.plan.compiles import keyed

    what: dict[str, Any] = {
        "kind": "program",
        "sources": sources,
        "mesh": [list(s) for s in row.mesh.sizes],
        "rules": [[name, list(axes)] for name, axes in dict(row.rules).items()],
        "target": request.target.name,
    }
    if row.mesh_axes:  # laid out by the program itself: the mesh it was handed, its rules in order
        what["own"] = {
            "mesh": [list(s) for s in row.mesh_axes],
            "rules": None if row.rule_set == "own" else [[n, list(a)] for n, a in row.rules],
        }
    return keyed(what)


def _replace(
    row: ProgramRow, status: str, figures: CompiledFigures, estimate: StepEstimate | None
) -> ProgramRow:
    from dataclasses import replace

    return replace(row, status=status, compiled=figures, estimate=estimate)


def _stopped(row: ProgramRow) -> ProgramRow:
    from dataclasses import replace

    return replace(row, status="interrupted", why="Ctrl-C before it compiled")
