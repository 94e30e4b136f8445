"""The collective registry: name -> shard_map body, NumPy reference, layouts and byte counts.

No NumPy or JAX at module level, here or where the entries' parts live: `--help` lists this registry
and must stay fast.

Adding a collective is adding an entry to COLLECTIVES; `--help`, validation and the tests pick it
up. An entry's parts live by kind: its types in `collective.entries`, its out_specs, local shapes and
flag checks in `collective.layouts`, its NumPy reference and error bounds in `collective.references`
(one group's blocks at a time, never JAX), its shard_map body in `collective.bodies`; its byte
counts are here.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from shardcli.errors import ShardcliError
from shardcli.playground.collective.bodies import (
    body_all_to_all,
    body_broadcast,
    body_gather,
    body_index,
    body_permute,
    body_pmax,
    body_pmean,
    body_pmin,
    body_psum,
    body_scatter,
)
from shardcli.playground.collective.entries import Collective, CollectiveParams, MinBytesRule
from shardcli.playground.collective.layouts import (
    all_to_all_entries,
    all_to_all_shape,
    gather_entries,
    gather_shape,
    index_entries,
    index_shape,
    invariant_entries,
    same_entries,
    same_shape,
    scatter_entries,
    scatter_shape,
    validate_all_to_all,
    validate_broadcast,
    validate_gather,
    validate_permute,
    validate_scatter,
)
from shardcli.playground.collective.references import (
    bounds_everywhere,
    bounds_scattered,
    ref_all_to_all,
    ref_broadcast,
    ref_gather,
    ref_index,
    ref_max,
    ref_mean,
    ref_min,
    ref_permute,
    ref_scatter,
    ref_sum,
)

if TYPE_CHECKING:
    from shardcli.specs.values import DType


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


# --- minimum bytes in one process (shardcli.playground.roofline) --------------------------------------------
# b: bytes per device of the input, n: group size, s: devices that send. Per group.

# all-reduce: every device's block is read once; every device gets its own copy of the result
_MIN_ALL_REDUCE = MinBytesRule(lambda b, n, s: (n * b, n * b), "read n inputs, write n outputs")


def _ppermute_senders(p: CollectiveParams, n: int) -> int:
    return len(p.pairs(n))


_REDUCE: dict[str, Any] = dict(
    hlo_op="all-reduce",
    out_local_shape=same_shape,
    out_entries=invariant_entries,
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
            body=body_psum,
            reference=ref_sum,
            exact=False,
            bound_blocks=bounds_everywhere,
            **_REDUCE,
        ),
        Collective(
            "pmean",
            "all-reduce mean over the axes (integers give floats)",
            body=body_pmean,
            reference=ref_mean,
            exact=False,
            mean=True,
            bound_blocks=bounds_everywhere,
            **_REDUCE,
        ),
        Collective(
            "pmax", "all-reduce max over the axes", body=body_pmax, reference=ref_max, exact=True, **_REDUCE
        ),
        Collective(
            "pmin", "all-reduce min over the axes", body=body_pmin, reference=ref_min, exact=True, **_REDUCE
        ),
        Collective(
            "all_gather",
            "every device gets all blocks, concatenated (--tiled) or stacked",
            hlo_op="all-gather",
            body=body_gather,
            reference=ref_gather,
            out_local_shape=gather_shape,
            out_entries=gather_entries,
            bus_factor=_ring,
            algbw_bytes=_bytes_gathered,
            exact=True,
            options=frozenset({"tiled", "gather_dim"}),
            validate=validate_gather,
            # read n blocks, write n gathered copies of n blocks each
            min_bytes=MinBytesRule(
                lambda b, n, s: (n * b, n * n * b), "read n inputs, write n outputs of n blocks"
            ),
        ),
        Collective(
            "psum_scatter",
            "reduce-scatter: sum, then each device keeps its slice",
            hlo_op="reduce-scatter",
            body=body_scatter,
            reference=ref_scatter,
            out_local_shape=scatter_shape,
            out_entries=scatter_entries,
            bus_factor=_ring,
            algbw_bytes=_bytes_per_device,
            exact=False,
            options=frozenset({"scatter_dim"}),
            numeric_only=True,
            validate=validate_scatter,
            # read n blocks, write n slices of 1/n each
            min_bytes=MinBytesRule(lambda b, n, s: (n * b, b), "read n inputs, write n outputs of 1/n block"),
            splits_block=True,
            bound_blocks=bounds_scattered,
        ),
        Collective(
            "ppermute",
            "point-to-point: send each block along a ring (--shift) or --perm",
            hlo_op="collective-permute",
            body=body_permute,
            reference=ref_permute,
            out_local_shape=same_shape,
            out_entries=same_entries,
            bus_factor=_one,
            algbw_bytes=_bytes_per_device,
            exact=True,
            options=frozenset({"shift", "perm"}),
            validate=validate_permute,
            # read what is sent, write every output (a device no one sends to gets zeros)
            min_bytes=MinBytesRule(lambda b, n, s: (s * b, n * b), "read the sent blocks, write n outputs"),
            senders=_ppermute_senders,
        ),
        Collective(
            "all_to_all",
            "block transpose: split --split-dim, exchange, concat --concat-dim",
            hlo_op="all-to-all",
            body=body_all_to_all,
            reference=ref_all_to_all,
            out_local_shape=all_to_all_shape,
            out_entries=all_to_all_entries,
            bus_factor=_ring,
            algbw_bytes=_bytes_per_device,
            exact=True,
            options=frozenset({"split_dim", "concat_dim"}),
            validate=validate_all_to_all,
            min_bytes=MinBytesRule(lambda b, n, s: (n * b, n * b), "read n inputs, write n outputs"),
            splits_block=True,
        ),
        Collective(
            "broadcast",
            "every device gets the --root device's block (psum of a masked block)",
            hlo_op="all-reduce",
            body=body_broadcast,
            reference=ref_broadcast,
            out_local_shape=same_shape,
            out_entries=invariant_entries,
            bus_factor=_one,
            algbw_bytes=_bytes_per_device,
            exact=True,
            options=frozenset({"root"}),
            numeric_only=True,
            validate=validate_broadcast,
            # only the root's block matters
            min_bytes=MinBytesRule(lambda b, n, s: (b, n * b), "read the root's block, write n outputs"),
        ),
        Collective(
            "axis_index",
            "each device's position along the axes (no communication)",
            hlo_op=None,
            body=body_index,
            reference=ref_index,
            out_local_shape=index_shape,
            out_entries=index_entries,
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
