"""The collective registry's types: `Collective` (one entry), the `CollectiveParams` its flags set,
its `MinBytesRule`, and `Entries` (a PartitionSpec as plain data).

No NumPy or JAX: `--help` lists the registry and must stay fast.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

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
