"""A finding's fix, checked by the compiler: the program compiled again with the change.

`analysis.fixes` proposes the changes (new specs for some arguments); here each is applied to the
program's abstract arguments (`relaid`), compiled as the program itself was, read through the same
analysis, and kept where it helps (`fixes.helps`). At most `MAX_FIX_COMPILES` compiles are spent in
one inspect: a real model's compile can take a minute.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from shardcli.analysis.arguments import ArrayFact, Entries, shown_path
from shardcli.analysis.findings import Finding
from shardcli.analysis.fixes import Change, Figures, Fix, helps, proposals, spec_text
from shardcli.analysis.program import ProgramAnalysis
from shardcli.analysis.roles import Batch
from shardcli.errors import ShardcliError

MAX_FIX_COMPILES = 3


def figures_of(analysis: ProgramAnalysis, step_s: float | None) -> Figures:
    """A compiled program's figures for a fix's before -> after."""
    memory = analysis.memory
    return Figures(
        total_bytes=memory.total_bytes if memory is not None else None,
        argument_bytes=memory.argument_bytes if memory is not None else None,
        temp_bytes=memory.temp_bytes if memory is not None else None,
        collectives=len(analysis.collectives),
        sent_bytes=analysis.sent_bytes,
        reshard_bytes=sum(c.sent_bytes * c.runs for c in analysis.collectives if c.role == "reshard"),
        step_s=step_s,
    )


def refused_figures(needed_bytes: int | None) -> Figures:
    """The figures of a program the target's compiler refused as too big: what it said it needs."""
    return Figures(
        total_bytes=needed_bytes,
        argument_bytes=None,
        temp_bytes=None,
        collectives=0,
        sent_bytes=0,
        reshard_bytes=0,
        step_s=None,
        fits=False,
    )


def checked_findings(
    findings: Sequence[Finding],
    before: Figures,
    arguments: Sequence[ArrayFact],
    batch: Batch,
    sizes: Mapping[str, int],
    compile_with: Callable[[Change], Figures],
) -> tuple[Finding, ...]:
    """The findings, each with the first proposed change that helps (or why none is offered).

    Args:
        before: the figures of the program as it is.
        batch: the program's batch (`roles.find_batch`): a replicated weight is sharded over its axes.
        sizes: the mesh's axis sizes, in mesh order.
        compile_with: compiles the program with a change and returns its figures; raises
            ShardcliError where the change cannot be compiled (a step whose own in_shardings fix
            that argument's layout) or does not fit the target.
    """
    batch_axes = [a for a in sizes if a in batch.axes]
    budget = MAX_FIX_COMPILES
    out = []
    for finding in findings:
        candidates = proposals(finding.kind, finding.paths, finding.axes, arguments, sizes, batch_axes)
        if not candidates:
            out.append(finding)
            continue
        fix, why = None, "no change tried helped"
        for change in candidates:
            if budget <= 0:
                why = f"not checked: {MAX_FIX_COMPILES} compiles spent on the findings above"
                break
            budget -= 1
            try:
                after = compile_with(change)
            except ShardcliError as refused:
                why = f"{change.what} does not compile: {refused}"
                continue
            if helps(finding.kind, before, after):
                fix = Fix(change, before, after)
                break
        out.append(replace(finding, fix=fix, no_fix=None if fix else why))
    return tuple(out)


def relaid(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    specs: Mapping[str, Entries],
    mesh: Any,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The abstract arguments with the leaves `specs` names (by pytree path, as inspect names them)
    laid out anew on `mesh`.

    Raises:
        ShardcliError: a name that is no argument of the program (one line, with the closest ones), or
            a spec that names an axis not in the mesh or does not divide its dimension.
    """
    import difflib

    import jax

    from shardcli.program.inputs import argument_trees, is_array_leaf, path_text

    wanted = {shown_path(name): entries for name, entries in specs.items()}  # either notation
    trees = argument_trees(getattr(fn, "__wrapped__", fn), args, kwargs)
    known: list[str] = []
    rebuilt = []
    for base, tree in trees:
        leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
        new = []
        for path, leaf in leaves:
            name = shown_path(base + path_text(path)) if is_array_leaf(leaf) else None
            if name is not None:
                known.append(name)
            new.append(_placed(name, leaf, wanted[name], mesh) if name in wanted else leaf)
        rebuilt.append(jax.tree_util.tree_unflatten(treedef, new))
    for name in map(shown_path, specs):
        if name not in known:
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.5) or known[:3]
            raise ShardcliError(
                f"--spec names {name!r}, which is no argument of the program; its arguments are named like "
                f"{', '.join(close)}"
            )
    positional = tuple(rebuilt[: len(args)])
    return positional, dict(zip(kwargs, rebuilt[len(args) :], strict=True))


def _placed(name: str, leaf: Any, entries: Entries, mesh: Any) -> Any:
    """One leaf as an abstract array laid out by `entries` on `mesh`.

    Raises:
        ShardcliError: more dims than the leaf has, an axis not in the mesh, a size it does not divide.
    """
    import math

    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    sizes = dict(zip(map(str, mesh.axis_names), mesh.devices.shape, strict=True))
    what = f"--spec {name}={spec_text(entries)}"
    if len(entries) > len(leaf.shape):
        raise ShardcliError(f"{what}: {len(entries)} dims given but {name} is {leaf.dtype}{list(leaf.shape)}")
    for dim, (size, axes) in enumerate(zip(leaf.shape, entries, strict=False)):
        unknown = [a for a in axes if a not in sizes]
        if unknown:
            raise ShardcliError(f"{what}: mesh axis {unknown[0]!r} is not in the mesh ({', '.join(sizes)})")
        parts = math.prod(sizes[a] for a in axes)
        if size % parts:
            raise ShardcliError(
                f"{what}: dim {dim} of {name} ({leaf.dtype}{list(leaf.shape)}) is {size}, which "
                f"{'+'.join(axes)} ({parts} devices) does not divide"
            )
    spec = PartitionSpec(*(None if not e else e[0] if len(e) == 1 else tuple(e) for e in entries))
    return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, spec))
