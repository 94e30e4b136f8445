"""The collective registry: name -> shard_map body, NumPy reference, layouts and byte counts.

NumPy and JAX are imported inside the functions: `--help` lists this registry and must stay fast.

Adding a collective is adding an entry to COLLECTIVES; `--help`, validation and the tests pick it
up. The NumPy references work on one group's blocks at a time and never call JAX.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shardcli.errors import ShardcliError

if TYPE_CHECKING:
    import numpy as np

    from shardcli.specs.values import DType

Entries = tuple[tuple[str, ...], ...]  # a PartitionSpec as plain data: mesh axes per array dim


@dataclass(frozen=True)
class CollectiveParams:
    """The collective's own knobs. Only the ones a collective lists in `options` may be set."""

    axes: tuple[str, ...]
    tiled: bool = True
    gather_dim: int = 0
    scatter_dim: int = 0
    shift: int = 1
    perm: tuple[tuple[int, int], ...] | None = None
    split_dim: int = 0
    concat_dim: int = 0
    root: int = 0

    def pairs(self, n: int) -> tuple[tuple[int, int], ...]:
        """ppermute's (source, destination) pairs: --perm, or a ring shift by --shift."""
        if self.perm is not None:
            return self.perm
        return tuple((i, (i + self.shift) % n) for i in range(n))

    def describe(self, collective: Collective, n: int) -> dict[str, object]:
        """The parameters that matter for this collective, for headers and JSON."""
        out: dict[str, object] = {"axes": list(self.axes)}
        for name in sorted(collective.options):
            if name == "perm":
                out["perm"] = [list(p) for p in self.pairs(n)]
            elif name != "shift":
                out[name] = getattr(self, name)
        return out


@dataclass(frozen=True)
class MinBytesRule:
    """The fewest bytes one group must read and write with all its devices in one process.

    What the result needs, not what a given algorithm moves (`shardcli.playground.roofline`).
    """

    count: Callable[[int, int, int], tuple[int, int]]  # (bytes per device b, group size n, senders s)
    words: str  # the formula in words, for headers and the benchmark's table


@dataclass(frozen=True)
class Collective:
    """One collective: how to run it, what it should produce, and how to count its bytes."""

    name: str
    summary: str
    hlo_op: str | None  # the op the compiled HLO should contain
    body: Callable  # (x, params, n) -> y, traced inside shard_map
    reference: Callable  # (blocks: list[np.ndarray], params, n) -> list[np.ndarray]
    out_local_shape: Callable  # (local_shape, params, n) -> tuple
    out_entries: Callable  # (in_entries, params, rank) -> Entries for the natural out_specs
    bus_factor: Callable[[int], float] | None  # nccl-tests busbw factor for group size n
    algbw_bytes: Callable[[int, int], int] | None  # (per-device input bytes, n) -> S
    exact: bool  # moves data only: results must match bit for bit
    options: frozenset[str] = field(default_factory=frozenset)
    numeric_only: bool = False
    validate: Callable | None = None  # (local_shape, params, n) -> None, raises ShardcliError
    min_bytes: MinBytesRule | None = None  # None: it moves no data
    # (params, n) -> devices of a group that send, where not all n do (ppermute's pairs)
    senders: Callable[[CollectiveParams, int], int] | None = None
    # The default block (no --size or --shape) is split into n along a dim: make it a multiple of n.
    splits_block: bool = False
    mean: bool = False  # the sum scaled by 1/n: floats even from integer inputs
    # Inexact only: (error bound of the whole sum, params, n) -> each group position's bound.
    bound_blocks: Callable | None = None
    # The result's dtype where it is not the input's: it can never be written into the input.
    result_dtype: str | None = None


# --- layouts -------------------------------------------------------------------------------------


def _without(entries: Entries, axes: tuple[str, ...]) -> list[tuple[str, ...]]:
    return [tuple(a for a in e if a not in axes) for e in entries]


def _pad(entries: Entries, rank: int) -> list[tuple[str, ...]]:
    return list(entries) + [()] * (rank - len(entries))


def _invariant_entries(entries: Entries, p: CollectiveParams, rank: int) -> Entries:
    """The result is the same on every device of a group: drop the group's axes."""
    return tuple(_without(tuple(_pad(entries, rank)), p.axes))


def _same_entries(entries: Entries, p: CollectiveParams, rank: int) -> Entries:
    return tuple(_pad(entries, rank))


def _gather_entries(entries: Entries, p: CollectiveParams, rank: int) -> Entries:
    out = _without(tuple(_pad(entries, rank)), p.axes)
    if not p.tiled:
        out.insert(p.gather_dim, ())
    return tuple(out)


def _scatter_entries(entries: Entries, p: CollectiveParams, rank: int) -> Entries:
    """Drop the group's axes everywhere, then shard the scatter dim over them (minor to what is
    there: a device's slice lies inside the block it already held)."""
    out = _without(tuple(_pad(entries, rank)), p.axes)
    out[p.scatter_dim] = out[p.scatter_dim] + p.axes
    return tuple(out)


def _all_to_all_entries(entries: Entries, p: CollectiveParams, rank: int) -> Entries:
    padded = _pad(entries, rank)
    concat = padded[p.concat_dim]
    if len(concat) >= len(p.axes) and concat[len(concat) - len(p.axes) :] == p.axes:
        # the usual resharding: the concat dim was split over the group; now the split dim is
        out = [tuple(e) for e in padded]
        out[p.concat_dim] = concat[: len(concat) - len(p.axes)]
        out[p.split_dim] = out[p.split_dim] + p.axes
        return tuple(out)
    return tuple(padded)


def _index_entries(entries: Entries, p: CollectiveParams, rank: int) -> Entries:
    return (p.axes,)


# --- local shapes --------------------------------------------------------------------------------


def _same_shape(shape: tuple[int, ...], p: CollectiveParams, n: int) -> tuple[int, ...]:
    return shape


def _gather_shape(shape: tuple[int, ...], p: CollectiveParams, n: int) -> tuple[int, ...]:
    out = list(shape)
    if p.tiled:
        out[p.gather_dim] *= n
    else:
        out.insert(p.gather_dim, n)
    return tuple(out)


def _scatter_shape(shape: tuple[int, ...], p: CollectiveParams, n: int) -> tuple[int, ...]:
    out = list(shape)
    out[p.scatter_dim] //= n
    return tuple(out)


def _all_to_all_shape(shape: tuple[int, ...], p: CollectiveParams, n: int) -> tuple[int, ...]:
    out = list(shape)
    out[p.split_dim] //= n
    out[p.concat_dim] *= n
    return tuple(out)


def _index_shape(shape: tuple[int, ...], p: CollectiveParams, n: int) -> tuple[int, ...]:
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


def _validate_gather(shape: tuple[int, ...], p: CollectiveParams, n: int) -> None:
    _check_dim("--gather-dim", p.gather_dim, len(shape), extra=0 if p.tiled else 1)


def _validate_scatter(shape: tuple[int, ...], p: CollectiveParams, n: int) -> None:
    _check_dim("--scatter-dim", p.scatter_dim, len(shape))
    _divisible("--scatter-dim", p.scatter_dim, shape, n)


def _validate_all_to_all(shape: tuple[int, ...], p: CollectiveParams, n: int) -> None:
    _check_dim("--split-dim", p.split_dim, len(shape))
    _check_dim("--concat-dim", p.concat_dim, len(shape))
    _divisible("--split-dim", p.split_dim, shape, n)


def _validate_permute(shape: tuple[int, ...], p: CollectiveParams, n: int) -> None:
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


def _validate_broadcast(shape: tuple[int, ...], p: CollectiveParams, n: int) -> None:
    if not 0 <= p.root < n:
        raise ShardcliError(
            f"--root {p.root} is outside the group of size {n}; give a position from 0 to {n - 1}"
        )


# --- NumPy references (one group at a time, blocks in group order) -------------------------------


def _ref_sum(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    stack = np.stack(blocks)
    if stack.dtype.kind in "iu":  # wraps like the hardware does
        total = np.sum(stack, axis=0, dtype=stack.dtype)
    else:
        total = np.sum(stack.astype(np.float64), axis=0)
    return [total] * n


def _ref_mean(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    total = _ref_sum(blocks, p, n)[0]
    return [total.astype(np.float64) / n] * n


def _ref_max(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    return [np.max(np.stack(blocks), axis=0)] * n


def _ref_min(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    return [np.min(np.stack(blocks), axis=0)] * n


def _ref_gather(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    out = np.concatenate(blocks, axis=p.gather_dim) if p.tiled else np.stack(blocks, axis=p.gather_dim)
    return [out] * n


def _ref_scatter(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    total = _ref_sum(blocks, p, n)[0]
    return list(np.split(total, n, axis=p.scatter_dim))


def _ref_permute(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    out = [np.zeros_like(b) for b in blocks]
    for src, dst in p.pairs(n):
        out[dst] = blocks[src]
    return out


def _ref_all_to_all(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    chunks = [np.split(b, n, axis=p.split_dim) for b in blocks]
    return [np.concatenate([chunks[i][j] for i in range(n)], axis=p.concat_dim) for j in range(n)]


def _ref_broadcast(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:

    return [blocks[p.root]] * n


def _ref_index(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    return [np.array([i], dtype=np.int32) for i in range(n)]


# --- shard_map bodies (traced; JAX imported lazily) ----------------------------------------------


def _body_psum(x, p: CollectiveParams, n: int):
    from jax import lax

    return lax.psum(x, p.axes)


def _body_pmean(x, p: CollectiveParams, n: int):
    from jax import lax

    return lax.pmean(x, p.axes)


def _body_pmax(x, p: CollectiveParams, n: int):
    from jax import lax

    return lax.pmax(x, p.axes)


def _body_pmin(x, p: CollectiveParams, n: int):
    from jax import lax

    return lax.pmin(x, p.axes)


def _body_gather(x, p: CollectiveParams, n: int):
    from jax import lax

    # The gathered value is the same on every device of the group; say so, so that out_specs
    # may drop the group's axes.
    return lax.all_gather(x, p.axes, axis=p.gather_dim, tiled=p.tiled, to="invarying")


def _body_scatter(x, p: CollectiveParams, n: int):
    from jax import lax

    return lax.psum_scatter(x, p.axes, scatter_dimension=p.scatter_dim, tiled=True)


def _body_permute(x, p: CollectiveParams, n: int):
    from jax import lax

    return lax.ppermute(x, p.axes, perm=list(p.pairs(n)))


def _body_all_to_all(x, p: CollectiveParams, n: int):
    from jax import lax

    return lax.all_to_all(x, p.axes, p.split_dim, p.concat_dim, tiled=True)


def _body_broadcast(x, p: CollectiveParams, n: int):
    import jax.numpy as jnp
    from jax import lax

    # lax.pbroadcast has no CPU lowering: keep the root's block, zero the rest, and sum.
    mine = jnp.where(lax.axis_index(p.axes) == p.root, x, jnp.zeros_like(x))
    return lax.psum(mine, p.axes)


def _body_index(x, p: CollectiveParams, n: int):
    import jax.numpy as jnp
    from jax import lax

    return jnp.full((1,), lax.axis_index(p.axes), dtype=jnp.int32)


# --- byte counts (nccl-tests, doc/PERFORMANCE.md) ------------------------------------------------


def _ring_allreduce(n: int) -> float:
    return 2 * (n - 1) / n


def _ring(n: int) -> float:
    return (n - 1) / n


def _one(n: int) -> float:
    return 1.0


def _bytes_per_device(local_bytes: int, n: int) -> int:
    return local_bytes


def _bytes_gathered(local_bytes: int, n: int) -> int:
    return local_bytes * n  # S is the full, gathered size


# --- error bounds of inexact collectives (the bound of the whole sum, placed like the result) -----


def _bounds_everywhere(bound: np.ndarray, p: CollectiveParams, n: int) -> list[np.ndarray]:
    return [bound] * n


def _bounds_scattered(bound: np.ndarray, p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    return list(np.split(bound, n, axis=p.scatter_dim))


# --- minimum bytes in one process (shardcli.playground.roofline) --------------------------------------------
# b: bytes per device of the input, n: group size, s: devices that send. Per group.

# all-reduce: every device's block is read once; every device gets its own copy of the result
_MIN_ALL_REDUCE = MinBytesRule(lambda b, n, s: (n * b, n * b), "read n inputs, write n outputs")


def _ppermute_senders(p: CollectiveParams, n: int) -> int:
    return len(p.pairs(n))


_REDUCE: dict[str, Any] = dict(
    hlo_op="all-reduce",
    out_local_shape=_same_shape,
    out_entries=_invariant_entries,
    bus_factor=_ring_allreduce,
    algbw_bytes=_bytes_per_device,
    numeric_only=True,
    min_bytes=_MIN_ALL_REDUCE,
)

COLLECTIVES: dict[str, Collective] = {
    c.name: c
    for c in (
        Collective(
            "psum",
            "all-reduce sum over the axes; every device gets the total",
            body=_body_psum,
            reference=_ref_sum,
            exact=False,
            bound_blocks=_bounds_everywhere,
            **_REDUCE,
        ),
        Collective(
            "pmean",
            "all-reduce mean over the axes (integers give floats)",
            body=_body_pmean,
            reference=_ref_mean,
            exact=False,
            mean=True,
            bound_blocks=_bounds_everywhere,
            **_REDUCE,
        ),
        Collective(
            "pmax", "all-reduce max over the axes", body=_body_pmax, reference=_ref_max, exact=True, **_REDUCE
        ),
        Collective(
            "pmin", "all-reduce min over the axes", body=_body_pmin, reference=_ref_min, exact=True, **_REDUCE
        ),
        Collective(
            "all_gather",
            "every device gets all blocks, concatenated (--tiled) or stacked",
            hlo_op="all-gather",
            body=_body_gather,
            reference=_ref_gather,
            out_local_shape=_gather_shape,
            out_entries=_gather_entries,
            bus_factor=_ring,
            algbw_bytes=_bytes_gathered,
            exact=True,
            options=frozenset({"tiled", "gather_dim"}),
            validate=_validate_gather,
            # read n blocks, write n gathered copies of n blocks each
            min_bytes=MinBytesRule(
                lambda b, n, s: (n * b, n * n * b), "read n inputs, write n outputs of n blocks"
            ),
        ),
        Collective(
            "psum_scatter",
            "reduce-scatter: sum, then each device keeps its slice",
            hlo_op="reduce-scatter",
            body=_body_scatter,
            reference=_ref_scatter,
            out_local_shape=_scatter_shape,
            out_entries=_scatter_entries,
            bus_factor=_ring,
            algbw_bytes=_bytes_per_device,
            exact=False,
            options=frozenset({"scatter_dim"}),
            numeric_only=True,
            validate=_validate_scatter,
            # read n blocks, write n slices of 1/n each
            min_bytes=MinBytesRule(lambda b, n, s: (n * b, b), "read n inputs, write n outputs of 1/n block"),
            splits_block=True,
            bound_blocks=_bounds_scattered,
        ),
        Collective(
            "ppermute",
            "point-to-point: send each block along a ring (--shift) or --perm",
            hlo_op="collective-permute",
            body=_body_permute,
            reference=_ref_permute,
            out_local_shape=_same_shape,
            out_entries=_same_entries,
            bus_factor=_one,
            algbw_bytes=_bytes_per_device,
            exact=True,
            options=frozenset({"shift", "perm"}),
            validate=_validate_permute,
            # read what is sent, write every output (a device no one sends to gets zeros)
            min_bytes=MinBytesRule(lambda b, n, s: (s * b, n * b), "read the sent blocks, write n outputs"),
            senders=_ppermute_senders,
        ),
        Collective(
            "all_to_all",
            "block transpose: split --split-dim, exchange, concat --concat-dim",
            hlo_op="all-to-all",
            body=_body_all_to_all,
            reference=_ref_all_to_all,
            out_local_shape=_all_to_all_shape,
            out_entries=_all_to_all_entries,
            bus_factor=_ring,
            algbw_bytes=_bytes_per_device,
            exact=True,
            options=frozenset({"split_dim", "concat_dim"}),
            validate=_validate_all_to_all,
            min_bytes=MinBytesRule(lambda b, n, s: (n * b, n * b), "read n inputs, write n outputs"),
            splits_block=True,
        ),
        Collective(
            "broadcast",
            "every device gets the --root device's block (psum of a masked block)",
            hlo_op="all-reduce",
            body=_body_broadcast,
            reference=_ref_broadcast,
            out_local_shape=_same_shape,
            out_entries=_invariant_entries,
            bus_factor=_one,
            algbw_bytes=_bytes_per_device,
            exact=True,
            options=frozenset({"root"}),
            numeric_only=True,
            validate=_validate_broadcast,
            # only the root's block matters
            min_bytes=MinBytesRule(lambda b, n, s: (b, n * b), "read the root's block, write n outputs"),
        ),
        Collective(
            "axis_index",
            "each device's position along the axes (no communication)",
            hlo_op=None,
            body=_body_index,
            reference=_ref_index,
            out_local_shape=_index_shape,
            out_entries=_index_entries,
            bus_factor=None,
            algbw_bytes=None,
            exact=True,
            result_dtype="int32",
        ),
    )
}

# Flags that belong to one collective or another: using one with the wrong collective is an error.
PARAM_FLAGS = {
    "tiled": "--tiled/--no-tiled",
    "gather_dim": "--gather-dim",
    "scatter_dim": "--scatter-dim",
    "shift": "--shift",
    "perm": "--perm",
    "split_dim": "--split-dim",
    "concat_dim": "--concat-dim",
    "root": "--root",
}


def get_collective(name: str) -> Collective:
    """Look up a collective by name.

    Raises:
        ShardcliError: unknown name, listing the valid ones.
    """
    try:
        return COLLECTIVES[name]
    except KeyError:
        raise ShardcliError(f"unknown collective {name!r}; choose one of {', '.join(COLLECTIVES)}") from None


def busbw_factor(collective: Collective, n: int) -> float | None:
    return collective.bus_factor(n) if collective.bus_factor is not None else None


def result_dtype_of(collective: Collective, dtype: DType) -> str:
    """The dtype of the collective's result for an input of `dtype`, as JAX gives it.

    A mean divides (true division), so integers give the default float: float64 from a 64-bit
    integer (the run enables x64 for it), else float32.
    """
    if collective.result_dtype is not None:
        return collective.result_dtype
    if collective.mean and dtype.kind in ("int", "uint"):
        return "float64" if dtype.itemsize == 8 else "float32"
    return dtype.name


def in_place_refusal(
    collective: Collective, local_shape: tuple[int, ...], p: CollectiveParams, n: int, dtype: DType
) -> str | None:
    """Why the result cannot be written into the input's buffer, or None where it can.

    In place needs the same per-device shape and dtype: a result of another shape "does not fit
    its input buffer"; one of another dtype cannot overwrite it either.
    """
    if collective.out_local_shape(local_shape, p, n) != local_shape:
        return f"{collective.name}'s result does not fit its input buffer"
    if collective.result_dtype is not None:
        return (
            f"{collective.name} gives {collective.result_dtype} whatever the input, so the result "
            "cannot overwrite the input"
        )
    result = result_dtype_of(collective, dtype)
    if result != dtype.name:
        return f"{collective.name} of {dtype.name} gives {result}, so the result cannot overwrite the input"
    return None


def group_size(axes: tuple[str, ...], axis_sizes: dict[str, int]) -> int:
    return math.prod(axis_sizes[a] for a in axes)
