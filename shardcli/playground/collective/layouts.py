"""Where a collective's result lies: the out_specs entries and per-device shape of each collective
of the registry, and the checks of the dims and positions its flags name.

No NumPy or JAX: `--help` lists the registry and must stay fast.
"""

from __future__ import annotations

from shardcli.errors import ShardcliError
from shardcli.playground.collective.entries import CollectiveParams, Entries

# --- layouts -------------------------------------------------------------------------------------


def _without(entries: Entries, axes: tuple[str, ...]) -> list[tuple[str, ...]]:
    return [tuple(a for a in e if a not in axes) for e in entries]


def _pad(entries: Entries, rank: int) -> list[tuple[str, ...]]:
    return list(entries) + [()] * (rank - len(entries))


def invariant_entries(entries: Entries, p: CollectiveParams, rank: int) -> Entries:
    """The result is the same on every device of a group: drop the group's axes."""
    return tuple(_without(tuple(_pad(entries, rank)), p.axes))


def same_entries(entries: Entries, p: CollectiveParams, rank: int) -> Entries:
    return tuple(_pad(entries, rank))


def gather_entries(entries: Entries, p: CollectiveParams, rank: int) -> Entries:
    out = _without(tuple(_pad(entries, rank)), p.axes)
    if not p.tiled:
        out.insert(p.gather_dim, ())
    return tuple(out)


def scatter_entries(entries: Entries, p: CollectiveParams, rank: int) -> Entries:
    """Drop the group's axes everywhere, then shard the scatter dim over them (minor to what is
    there: a device's slice lies inside the block it already held)."""
    out = _without(tuple(_pad(entries, rank)), p.axes)
    out[p.scatter_dim] = out[p.scatter_dim] + p.axes
    return tuple(out)


def all_to_all_entries(entries: Entries, p: CollectiveParams, rank: int) -> Entries:
    padded = _pad(entries, rank)
    concat = padded[p.concat_dim]
    if len(concat) >= len(p.axes) and concat[len(concat) - len(p.axes) :] == p.axes:
        # the usual resharding: the concat dim was split over the group; now the split dim is
        out = [tuple(e) for e in padded]
        out[p.concat_dim] = concat[: len(concat) - len(p.axes)]
        out[p.split_dim] = out[p.split_dim] + p.axes
        return tuple(out)
    return tuple(padded)


def index_entries(entries: Entries, p: CollectiveParams, rank: int) -> Entries:
    return (p.axes,)


# --- local shapes --------------------------------------------------------------------------------


def same_shape(shape: tuple[int, ...], p: CollectiveParams, n: int) -> tuple[int, ...]:
    return shape


def gather_shape(shape: tuple[int, ...], p: CollectiveParams, n: int) -> tuple[int, ...]:
    out = list(shape)
    if p.tiled:
        out[p.gather_dim] *= n
    else:
        out.insert(p.gather_dim, n)
    return tuple(out)


def scatter_shape(shape: tuple[int, ...], p: CollectiveParams, n: int) -> tuple[int, ...]:
    out = list(shape)
    out[p.scatter_dim] //= n
    return tuple(out)


def all_to_all_shape(shape: tuple[int, ...], p: CollectiveParams, n: int) -> tuple[int, ...]:
    out = list(shape)
    out[p.split_dim] //= n
    out[p.concat_dim] *= n
    return tuple(out)


def index_shape(shape: tuple[int, ...], p: CollectiveParams, n: int) -> tuple[int, ...]:
    return (1,)


# --- validation ----------------------------------------------------------------------------------


def _check_dim(flag: str, dim: int, rank: int, extra: int = 0) -> None:
    if not 0 <= dim < rank + extra:
        raise ShardcliError(
            f"{flag} {dim} is out of range for a rank-{rank} input; give 0 to {rank + extra - 1}"
        )


def _divisible(flag: str, dim: int, shape: tuple[int, ...], n: int) -> None:
    if shape[dim] % n:
        raise ShardcliError(
            f"{flag} {dim}: each device's block has {shape[dim]} elements along dim {dim}, not "
            f"divisible by the group size {n}; use a shape (or --size) whose per-device block is a "
            f"multiple of {n} along dim {dim}"
        )


def validate_gather(shape: tuple[int, ...], p: CollectiveParams, n: int) -> None:
    _check_dim("--gather-dim", p.gather_dim, len(shape), extra=0 if p.tiled else 1)


def validate_scatter(shape: tuple[int, ...], p: CollectiveParams, n: int) -> None:
    _check_dim("--scatter-dim", p.scatter_dim, len(shape))
    _divisible("--scatter-dim", p.scatter_dim, shape, n)


def validate_all_to_all(shape: tuple[int, ...], p: CollectiveParams, n: int) -> None:
    _check_dim("--split-dim", p.split_dim, len(shape))
    _check_dim("--concat-dim", p.concat_dim, len(shape))
    _divisible("--split-dim", p.split_dim, shape, n)


def validate_permute(shape: tuple[int, ...], p: CollectiveParams, n: int) -> None:
    pairs = p.pairs(n)
    axis = "+".join(p.axes)
    for src, dst in pairs:
        if not (0 <= src < n and 0 <= dst < n):
            raise ShardcliError(
                f"--perm pair {src}:{dst} is outside axis {axis!r} of size {n}; positions run 0 to {n - 1}"
            )
    sources = [s for s, _ in pairs]
    dests = [d for _, d in pairs]
    if len(set(sources)) != len(sources) or len(set(dests)) != len(dests):
        raise ShardcliError(
            f"--perm {','.join(f'{s}:{d}' for s, d in pairs)} is not a permutation of axis {axis!r}: "
            f"each position may send once and receive once"
        )


def validate_broadcast(shape: tuple[int, ...], p: CollectiveParams, n: int) -> None:
    if not 0 <= p.root < n:
        raise ShardcliError(
            f"--root {p.root} is outside the group of size {n}; give a position from 0 to {n - 1}"
        )
