"""What to change for a finding, and how to tell whether the change helped.

A finding names a mistake; its fix names the change: new specs for some arguments, as `--spec
PATH=SPEC` (or `--arg`) text and the `jax.sharding` line a user writes. `proposals` gives a
finding's candidate changes, the likeliest first; `program.fix_check` compiles the program again
with each (the compiler, not a guess, says what it costs) and keeps the first that `helps`. A change
that does not help is not offered.

Which kinds have fixes, and why:
- `replicated`: shard the replicated arguments over the batch axes (FSDP's layout: each device
  keeps 1/n of them and gathers a weight when its layer runs), else over the largest mesh axis;
  it helps when the memory per device falls.
- `gathered-whole` (a weight gathered whole over axes that do not shard the batch): shard it over
  those axes on another dimension, the one the compiler's partitioning of its user can keep; it
  helps when fewer bytes are sent and the memory does not grow.
- `reshard` of an argument (it arrives in a layout its first user does not take): its spec with the
  axes it was resharded over moved to another dimension, else without them; it helps when fewer
  bytes are resharded and no more are sent.
- A reshard of a computed value has no fix here: the change is a `with_sharding_constraint` inside
  the program, which no flag can make. `result-sharding` has none either: the layout asked for is
  the user's requirement, and the finding already says what came out.

No JAX import.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shardcli.analysis.arguments import ArrayFact, Entries, shown_path

# A replicated finding's change covers its largest arguments, up to this share of their bytes and
# this many of them: the few that hold the memory, not every bias and step counter.
REPLICATED_SHARE = 0.99
MAX_CHANGED = 24


@dataclass(frozen=True)
class Change:
    """New specs for some arguments: (argument name, mesh axes per dimension) each."""

    specs: tuple[tuple[str, Entries], ...]
    what: str  # in words: "shard 12 replicated arguments over fsdp"

    def spec_flags(self) -> tuple[str, ...]:
        """`--spec 'NAME=SPEC'`'s values."""
        return tuple(f"{shown_path(name)}={spec_text(entries)}" for name, entries in self.specs)

    def jax_lines(self) -> tuple[str, ...]:
        """The `jax.sharding` line per argument: `NAME: NamedSharding(mesh, P('fsdp', None))`."""
        return tuple(
            f"{shown_path(name)}: NamedSharding(mesh, {partition_spec_text(e)})" for name, e in self.specs
        )


@dataclass(frozen=True)
class Figures:
    """What a compile of the program says, for a fix's before -> after."""

    total_bytes: int | None  # memory per device
    argument_bytes: int | None
    temp_bytes: int | None
    collectives: int  # collective ops in the program
    sent_bytes: int  # per device, one execution, every run counted
    reshard_bytes: int  # of which by collectives whose role is a reshard
    step_s: float | None  # the step-time estimate, where the hardware has figures
    fits: bool = True  # False: the target's compiler refused it as too big (`total_bytes`: its need)


@dataclass(frozen=True)
class Fix:
    """A finding's change, checked: the figures before and after compiling it."""

    change: Change
    before: Figures
    checked: Figures
    command: str | None = None  # the shardcli command line that applies it
    flags: tuple[str, ...] = ()  # its flags that carry the change (`--arg '...'`, `--spec '...'`)


def spec_text(entries: Entries) -> str:
    """`None,fsdp,data+tensor`: a spec as --arg, --out and --spec take it; `` for a scalar."""
    return ",".join("+".join(e) if e else "None" for e in entries) if entries else ""


def partition_spec_text(entries: Entries) -> str:
    """`P('fsdp', None, ('data', 'tensor'))`."""

    def one(e: tuple[str, ...]) -> str:
        return "None" if not e else repr(e[0]) if len(e) == 1 else "(" + ", ".join(map(repr, e)) + ")"

    return f"P({', '.join(one(e) for e in entries)})"


def proposals(
    kind: str,
    paths: Sequence[str],
    axes: Sequence[str],
    arguments: Sequence[ArrayFact],
    sizes: Mapping[str, int],
    batch: Sequence[str],
) -> list[Change]:
    """A finding's candidate changes, the likeliest first; none where this kind has no fix.

    Args:
        kind, paths, axes: the finding's kind, the arguments it names and the mesh axes of its
            collectives.
        sizes: the mesh's axis sizes.
        batch: the mesh axes that shard the batch (`roles.find_batch`), in mesh order.
    """
    named = {a.name: a for a in arguments}
    facts = [named[p] for p in paths if p in named and named[p].entries is not None]
    if kind == "replicated":
        return _shard_replicated(facts, sizes, batch)
    if kind in ("gathered-whole", "reshard"):
        return _move_axes(facts, axes, sizes, drop=kind == "reshard")
    return []


def helps(kind: str, before: Figures, after: Figures) -> bool:
    """Whether a change helped the finding it was made for (see the module's docstring)."""
    if not before.fits:  # whatever else: a change after which it fits the target helps
        return after.fits
    if kind == "replicated":
        return (
            before.total_bytes is not None
            and after.total_bytes is not None
            and (after.total_bytes < before.total_bytes)
        )
    memory_kept = before.total_bytes is None or (
        after.total_bytes is not None and after.total_bytes <= before.total_bytes
    )
    if kind == "gathered-whole":
        return after.sent_bytes < before.sent_bytes and memory_kept
    if kind == "reshard":
        return after.reshard_bytes < before.reshard_bytes and after.sent_bytes <= before.sent_bytes
    return False


def _shard_replicated(facts: list[ArrayFact], sizes: Mapping[str, int], batch: Sequence[str]) -> list[Change]:
    """Over the batch axes together, then over the largest other mesh axis."""
    leaves = sorted((a for a in facts if a.shape), key=lambda a: -a.bytes_global)
    total = sum(a.bytes_global for a in leaves)
    chosen: list[ArrayFact] = []
    held = 0
    for a in leaves:
        if held >= REPLICATED_SHARE * total or len(chosen) >= MAX_CHANGED:
            break
        chosen.append(a)
        held += a.bytes_global
    choices: list[tuple[str, ...]] = []
    over_batch = tuple(a for a in sizes if a in batch and sizes[a] > 1)
    if over_batch:
        choices.append(over_batch)
    for axis in sorted((a for a in sizes if sizes[a] > 1), key=lambda a: -sizes[a]):
        if (axis,) not in choices:
            choices.append((axis,))
            break
    changes = []
    for axes in choices:
        n = math.prod(sizes[a] for a in axes)
        specs = []
        for a in chosen:
            dim = _widest_divisible(a.shape, n)
            if dim is not None:
                specs.append((a.name, tuple(axes if d == dim else () for d in range(len(a.shape)))))
        if specs:
            words = shown_path(specs[0][0]) if len(specs) == 1 else f"{len(specs)} arguments"
            changes.append(Change(tuple(specs), f"shard {words} over {'+'.join(axes)}"))
    return changes


def _move_axes(
    facts: list[ArrayFact], axes: Sequence[str], sizes: Mapping[str, int], *, drop: bool
) -> list[Change]:
    """Each argument's spec with `axes` moved to another dimension (each that divides), or, for a
    reshard, at last without them."""
    moved = [a for a in axes if a in sizes]
    if not moved or not facts:
        return []
    n = math.prod(sizes[a] for a in moved)
    per_fact: list[list[Entries]] = []
    for a in facts:
        assert a.entries is not None
        kept = tuple(tuple(x for x in e if x not in moved) for e in a.entries)
        options: list[Entries] = []
        for d, size in enumerate(a.shape):
            if kept[d] or size % n or a.entries[d] and set(a.entries[d]) >= set(moved):
                continue
            options.append(tuple(tuple(moved) if i == d else e for i, e in enumerate(kept)))
        if drop and kept != a.entries:  # last: it keeps the whole argument on every device of `axes`
            options.append(kept)
        per_fact.append(options)
    changes = []
    for k in range(max((len(o) for o in per_fact), default=0)):
        specs = tuple((a.name, o[k]) for a, o in zip(facts, per_fact, strict=True) if k < len(o))
        if specs:
            first = specs[0][1]
            words = (
                f"lay {specs[0][0]} out as {spec_text(first)}" if any(first) else f"replicate {specs[0][0]}"
            )
            if len(specs) > 1:
                words += f" (and {len(specs) - 1} more alike)"
            changes.append(Change(specs, words))
    return changes


def _widest_divisible(shape: tuple[int, ...], n: int) -> int | None:
    """The largest dimension that n divides (the later one on a tie: a stacked weight's layer
    dimension comes first); None where none does."""
    best = None
    for d, size in enumerate(shape):
        if size % n == 0 and size >= n and (best is None or size >= shape[best]):
            best = d
    return best
