"""The classic sharding mistakes in an inspected program.

`program.inspect` describes every argument and result leaf as an `ArrayFact` (`arguments`) and reads
the compiled program through `program_analysis`; `find_mistakes` names what looks wrong in them, one
finding per distinct cause (with how many arguments or collectives share it), each naming the pytree
paths and the user's line. Collectives are judged by their role (`roles`): FSDP's gathers, gradient
reductions, partial sums and cross-shard reductions are the layout's design; a reshard is a
mistake. A collective is tied to an argument by identity, never by a shape that happens to match.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from shardcli.analysis.arguments import HLO_DTYPE, ArrayFact, moved_argument, shown_path
from shardcli.analysis.fixes import Fix
from shardcli.analysis.program import CollectiveOp, ProgramAnalysis
from shardcli.analysis.roles import assign_roles
from shardcli.specs.meshes import ShardingSpec
from shardcli.specs.values import format_bytes

# Fully replicated arguments are named when together they hold at least this much per device and
# this share of the device's memory: a few small ones (biases, scales, step counters) are
# replicated on purpose, but many leaves each just under a per-leaf bar add up.
LARGE_REPLICATED_BYTES = 1 << 20
LARGE_REPLICATED_SHARE = 0.05
# How many paths a finding's message names; the finding (and JSON) holds them all.
NAMED_PATHS = 3


@dataclass(frozen=True)
class Finding:
    """One cause of a classic mistake, naming the arguments or collectives it covers.

    `count` is how many arguments (replicated, gathered-whole), collectives (reshard) or results
    (result-sharding) share it; `paths` names the arguments or results (pytree paths) it concerns,
    the largest first; `source` is the user's line it comes from, where there is one.
    """

    kind: str  # "replicated", "gathered-whole", "reshard", "result-sharding"
    message: str  # what is wrong (`text` adds the advice where no fix gives the change)
    count: int = 1
    paths: tuple[str, ...] = ()
    source: str | None = None
    axes: tuple[str, ...] = ()  # the mesh axes its collectives run over (gathered-whole, reshard)
    advice: str | None = None  # what to do in words, where no fix says it with a spec
    fix: Fix | None = None  # the change that helps, checked by a compile (`program.fix_check`)
    no_fix: str | None = None  # why no fix is offered, where this kind can have one

    @property
    def text(self) -> str:
        """The message, with its advice in words where no checked fix names the change."""
        return f"{self.message}; {self.advice}" if self.advice and self.fix is None else self.message


def finding_text(f: Finding) -> str:
    """The message, with its advice in words where no checked fix names the change."""
    return f.text


def _hlo_type(fact: ArrayFact) -> str:
    return f"{HLO_DTYPE.get(fact.dtype, fact.dtype)}[{','.join(map(str, fact.shape))}]"


def _where(*group: CollectiveOp) -> str:
    """`dot_general (file.py:12)`: the JAX operations of collectives from one line, and the line."""
    op = ", ".join(dict.fromkeys(c.op or "the partitioner" for c in group))
    return f"{op} ({shown_source(group[0].source)})" if group[0].source else op


def shown_source(source: str) -> str:
    """A source line as a message shows it: relative to the working folder where it lies inside."""
    import os

    path, _, line = source.rpartition(":")
    relative = os.path.relpath(path) if os.path.isabs(path) else path
    return f"{relative}:{line}" if not relative.startswith("..") else source


def _named(paths: Sequence[str]) -> str:
    """`a, b, c and 4 more`: the first few of many paths, as screens show them."""
    shown = ", ".join(shown_path(p) for p in paths[:NAMED_PATHS])
    return f"{shown} and {len(paths) - NAMED_PATHS} more" if len(paths) > NAMED_PATHS else shown


def find_mistakes(
    arguments: tuple[ArrayFact, ...],
    results: tuple[ArrayFact, ...],
    analysis: ProgramAnalysis | None,
    asked: tuple[ShardingSpec, ...],
    devices: int,
) -> tuple[Finding, ...]:
    """The classic sharding mistakes, one finding per distinct cause. Collectives are judged by
    their role (`roles.assign_roles`, assigned here where the analysis has none yet): only a
    reshard, or a weight gathered whole that the layout did not mean to gather, is a mistake."""
    collectives = analysis.collectives if analysis is not None else ()
    if any(c.role is None for c in collectives):
        collectives = assign_roles(collectives, arguments, results)
    memory = analysis.memory.total_bytes if analysis is not None and analysis.memory is not None else None
    return (
        *_replicated(arguments, devices, memory),
        *_gathered_whole(arguments, collectives),
        *_reshards(arguments, collectives),
        *_result_shardings(results, asked),
    )


def _replicated(arguments: Sequence[ArrayFact], devices: int, memory: int | None) -> list[Finding]:
    """Fully replicated arguments judged together: their sum against the memory per device."""
    leaves = sorted((a for a in arguments if a.replicated), key=lambda a: -a.bytes_per_device)
    held = sum(a.bytes_per_device for a in leaves)
    per_device = memory or sum(a.bytes_per_device for a in arguments) or 1
    if devices <= 1 or held < LARGE_REPLICATED_BYTES or held < LARGE_REPLICATED_SHARE * per_device:
        return []
    if len(leaves) == 1:
        (a,) = leaves
        message = (
            f"argument {shown_path(a.name)} ({_hlo_type(a)}, {format_bytes(a.bytes_global)}) is fully "
            f"replicated: each of the {devices} devices holds all of it"
        )
        advice = "shard one of its dims over a mesh axis"
    else:
        biggest = [
            f"{shown_path(a.name)} ({_hlo_type(a)}, {format_bytes(a.bytes_per_device)})" for a in leaves
        ]
        message = (
            f"{len(leaves)} fully replicated arguments hold {format_bytes(held)} per device "
            f"({held / per_device:.0%} of the {format_bytes(per_device)} each device needs): each of the "
            f"{devices} devices holds all of them; the largest: {_named(biggest)}"
        )
        advice = "shard the largest over a mesh axis"
    return [Finding("replicated", message, len(leaves), tuple(a.name for a in leaves), advice=advice)]


def _gathered_whole(arguments: Sequence[ArrayFact], collectives: Sequence[CollectiveOp]) -> list[Finding]:
    """Arguments all-gathered whole, by (mesh axes, line). Left out: FSDP's gathers (a weight
    sharded over the batch axes, gathered for its layer: the layout's design) and a slice of one
    gathered (a stacked layer's weight inside the layer loop)."""
    causes: dict[tuple[str, str | None], tuple[CollectiveOp, dict[str, ArrayFact]]] = {}
    for c in collectives:
        a = moved_argument(c, arguments) if c.kind == "all-gather" else None
        if a is None or a.replicated or c.role == "fsdp-gather" or _elements(c.shape) != math.prod(a.shape):
            continue
        causes.setdefault((c.axes_text, c.source), (c, {}))[1][a.name] = a
    found = []
    for c, gathered in causes.values():
        names = sorted(gathered, key=lambda n: -gathered[n].bytes_global)
        if len(names) == 1:
            message = (
                f"{shown_path(names[0])} ({c.shape}) is all-gathered whole over {c.axes_text} at "
                f"{_where(c)}: every device holds all of it while it is used"
            )
        else:
            held = sum(a.bytes_global for a in gathered.values())
            message = (
                f"{len(names)} arguments ({format_bytes(held)}) are all-gathered whole over {c.axes_text} "
                f"at {_where(c)}: {_named(names)}; every device holds all of each while it is used"
            )
        found.append(
            Finding("gathered-whole", message, len(names), tuple(names), c.source, axes=c.mesh_axes or ())
        )
    return found


def _elements(shape: str) -> int | None:
    """The element count of an HLO array type (`f32[4,8]`); None for a tuple."""
    if shape.startswith("(") or "[" not in shape:
        return None
    dims = shape[shape.index("[") + 1 : shape.index("]")]
    return math.prod(int(d) for d in dims.split(",") if d)


def _reshards(arguments: Sequence[ArrayFact], collectives: Sequence[CollectiveOp]) -> list[Finding]:
    """Collectives whose role is a reshard (a layout change between two operations that neither
    needs), one finding per cause: the user's line (whatever operations, kinds and axes the
    compiler chose there; the JAX operation where no line is known), the most bytes sent first.
    An argument gathered whole is named above, not here."""
    causes: dict[tuple[str | None, str | None], list[CollectiveOp]] = {}
    for c in collectives:
        if c.role != "reshard":
            continue
        gathered = moved_argument(c, arguments) if c.kind == "all-gather" else None
        if gathered is not None and _elements(c.shape) == math.prod(gathered.shape):
            continue
        causes.setdefault((c.source, None if c.source else c.op), []).append(c)
    found = []
    for (source, _), group in causes.items():
        c = group[0]
        sent = sum(g.sent_bytes * g.runs for g in group)
        runs = sum(g.runs for g in group)
        moved = tuple(dict.fromkeys(a.name for g in group if (a := moved_argument(g, arguments)) is not None))
        if len(group) == 1:
            article = "an" if c.kind[0] == "a" else "a"
            one = f"{c.shape}, {format_bytes(c.sent_bytes)} sent per device"
            what = f"{article} {c.kind} over {c.axes_text} ({one}"
        else:
            kinds = Counter((g.kind, g.axes_text) for g in group)
            listed = [f"{n} {kind}{'s' if n > 1 else ''} over {axes}" for (kind, axes), n in kinds.items()]
            what = f"{' and '.join(listed)} ({format_bytes(sent)} sent per device in all"
        message = (
            f"the compiler added {what}{f', {runs} runs' if runs > 1 else ''}) to reshard between "
            f"operations{f' (moving {_named(moved)})' if moved else ''}, at {_where(*group)}"
        )
        axes = tuple(dict.fromkeys(a for g in group for a in g.mesh_axes or ()))
        found.append((sent, Finding("reshard", message, len(group), moved, source, axes=axes)))
    return [f for _, f in sorted(found, key=lambda pair: -pair[0])]


def _result_shardings(results: Sequence[ArrayFact], asked: Sequence[ShardingSpec]) -> list[Finding]:
    """Results that came out otherwise than --out asked, by (what came out, what was asked)."""
    causes: dict[tuple[str, str], list[str]] = {}
    for result, spec in zip(results, asked, strict=False):
        want = spec.entries + ((),) * (len(result.shape) - len(spec.entries))
        if result.entries is not None and tuple(result.entries) != want:
            asked_text = ShardingSpec(spec.entries).describe() or "P()"
            causes.setdefault((result.spec, asked_text), []).append(result.name)
    found = []
    for (came, wanted), names in causes.items():
        subject = (
            f"result {shown_path(names[0])} came"
            if len(names) == 1
            else f"{len(names)} results ({_named(names)}) came"
        )
        message = f"{subject} out {came} but --out asked for {wanted}: moving it there is one more reshard"
        found.append(Finding("result-sharding", message, len(names), tuple(names)))
    return found
