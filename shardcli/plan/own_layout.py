"""A user program that lays itself out, in `shardcli plan`: its inputs called on each candidate mesh.

Such a program (`logical_axes.lays_itself_out`: a step jitted with its own in_shardings, as
MaxText's and flax lm1b's are, or inputs that take `rules` or whose file defines LOGICAL_AXIS_RULES)
is not laid out by its names: plan calls its `inputs(mesh)` once per candidate mesh, a mesh that
names every axis plan varies (OWN_AXES; 1 where a layout does not use it) and every other axis the
program's shardings name (always 1), and reads each argument's bytes per chip from the shardings
the program gave it. Where plan can reach the program's rules it hands over its own rule sets too,
each followed by the program's rules for the names they do not map (`own_rule_sets`). A step whose
own shardings are on a mesh of its own is refused in one line naming the argument (`check_own_layout`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from shardcli.errors import ShardcliError
from shardcli.plan.analytic import HEADROOM
from shardcli.plan.candidates import MESH_AXES, RULE_SETS, MeshChoice
from shardcli.plan.program_rows import LoadedProgram, ProgramPlanRequest, ProgramRow
from shardcli.specs.decoder import Rules, rules_text

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
