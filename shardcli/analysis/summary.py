"""inspect's first screen, computed: collectives grouped by cause and arguments ranked by size.

A real model compiles to hundreds of collectives and thousands of argument leaves. The default view
shows the few that matter: collectives grouped by (kind, mesh axes, the user's source line) with
their count and the bytes each device sends in one step, largest first; and the largest arguments
by pytree path with a line for the rest. The render layer draws these; JSON holds every group.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from shardcli.analysis.arguments import ArrayFact
from shardcli.analysis.exposed import Exposure
from shardcli.analysis.program import CollectiveOp


@dataclass(frozen=True)
class CollectiveGroup:
    """The collectives of one (kind, mesh axes, source line, role): how many, how often, what they
    send."""

    kind: str
    mesh_axes: tuple[str, ...] | None  # None: groups that follow no mesh axes
    axes_text: str  # as the tables print them: "data+model", "-" (none), "?" (unknown)
    source: str | None  # the user's line ("file.py:LINE"), where JAX recorded one
    op: str | None  # the JAX operation most of them come from (`dot_general`)
    count: int  # collective ops in the compiled program
    runs: int  # how often they run in one execution (loop trips counted)
    runs_known: bool  # False where a loop's trip count is unknown (then one trip is counted)
    sent_bytes: int  # what each device sends in one execution, over all of them and their runs
    result_bytes: int  # their results' bytes per device, one run of each
    role: str | None = None  # what they are for (a key of `roles.ROLES`); None where not assigned
    # seconds per step the compiled schedule leaves exposed and hides behind the ops beside them
    # (`analysis.exposed`); None where the step estimate or an axis's bandwidth is unknown
    exposed_s: float | None = None
    hidden_s: float | None = None


@dataclass(frozen=True)
class ArgumentRanking:
    """The largest arguments per device, and what the rest add up to."""

    largest: tuple[ArrayFact, ...]
    rest: int  # how many arguments are not in `largest`
    rest_bytes_per_device: int
    total: int
    total_bytes_per_device: int


def group_collectives(
    collectives: Sequence[CollectiveOp], exposure: Sequence[Exposure] = ()
) -> tuple[CollectiveGroup, ...]:
    """Collectives grouped by (kind, mesh axes, source line, role), the most bytes sent first (then
    the most ops, then program order); with the step estimate's `exposure`, each group's exposed and
    hidden seconds."""
    timed = {e.collective: e for e in exposure}
    groups: dict[tuple[str, str, str | None, str | None], list[CollectiveOp]] = {}
    for c in collectives:
        groups.setdefault((c.kind, c.axes_text, c.source, c.role), []).append(c)
    out = []
    for (kind, axes, source, role), members in groups.items():
        ops = Counter(c.op for c in members if c.op is not None)
        found = [timed.get(c) for c in members]
        known = [e for e in found if e is not None and e.exposed_s is not None]
        whole = bool(timed) and len(known) == len(members)
        out.append(
            CollectiveGroup(
                kind=kind,
                mesh_axes=members[0].mesh_axes,
                axes_text=axes,
                source=source,
                op=ops.most_common(1)[0][0] if ops else None,
                count=len(members),
                runs=sum(c.runs for c in members),
                runs_known=all(c.runs_known for c in members),
                sent_bytes=sum(c.sent_bytes * c.runs for c in members),
                result_bytes=sum(c.result_bytes for c in members),
                role=role,
                exposed_s=sum(e.exposed_s or 0.0 for e in known) if whole else None,
                hidden_s=sum(e.hidden_s or 0.0 for e in known) if whole else None,
            )
        )
    order = {id(g): i for i, g in enumerate(out)}
    return tuple(sorted(out, key=lambda g: (-g.sent_bytes, -g.count, order[id(g)])))


def rank_arguments(arguments: Sequence[ArrayFact], top: int | None) -> ArgumentRanking:
    """The `top` largest arguments by bytes per device (ties: in argument order); None: all."""
    ranked = sorted(arguments, key=lambda a: -a.bytes_per_device)
    largest = tuple(ranked if top is None else ranked[:top])
    rest = ranked[len(largest) :]
    return ArgumentRanking(
        largest=largest,
        rest=len(rest),
        rest_bytes_per_device=sum(a.bytes_per_device for a in rest),
        total=len(ranked),
        total_bytes_per_device=sum(a.bytes_per_device for a in ranked),
    )
