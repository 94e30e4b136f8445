"""`shardcli plan FILE.py:FN --inputs FILE.py:NAME`: layouts for the user's own program.

The user's arguments carry logical axis names (`program.logical_axes`: linen's `nn.with_partitioning`,
NNX's `nnx.with_partitioning`, or a `LOGICAL_AXES` table in the inputs' file).

A layout is a mesh over the target's chips and a rule set mapping those names to mesh axes (the
decoder's rule sets, or `--rules`). The model here is the arguments' bytes per chip (the program's
FLOPs are the compiler's to say): layouts whose arguments fit are compiled, the fewest bytes per
chip first, each as `inspect --rules` compiles it, and ranked by the step-time estimate. Each
compile's figures are cached on disk (`plan.compile_cache`), keyed by the two files' bytes, the
names, the layout, the target and the compiler's versions. The winner comes with the `shardcli
inspect` command that compiles it again.

A program that lays itself out (a step jitted with its own in_shardings, as MaxText's and flax
lm1b's are, or inputs that take `rules`) is called on each candidate mesh instead (`plan.own_layout`).
The request, rows and result are `plan.program_rows`'.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import time
from collections.abc import Callable
from typing import Any

from shardcli.analysis.step_time import StepEstimate
from shardcli.errors import ShardcliError
from shardcli.plan.analytic import HEADROOM, chip_figures
from shardcli.plan.candidates import MESH_AXES, RULE_SETS, MeshChoice, gpu_mesh_choices, mesh_choices
from shardcli.plan.compiled_figures import CompiledFigures
from shardcli.plan.compiles import figures_of
from shardcli.plan.own_layout import handed_rules, own_rows
from shardcli.plan.program_rows import LoadedProgram, ProgramPlanRequest, ProgramPlanResult, ProgramRow
from shardcli.specs.decoder import Rules, rules_text
from shardcli.specs.files import own_folder


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
    from shardcli.plan.compile_cache import file_digest

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
    (`compile_cache.keyed`: JAX's and libtpu's versions, the cost compiles' flags)."""
    from shardcli.plan.compile_cache import keyed

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
