"""What a run reports besides its numbers: sharding pictures, tables, lines of text, and checks.

`recipe`, `model` and `pipeline` describe what they did in these plain frozen types, and the render
layer draws them the same way for every command. Nothing here imports NumPy or JAX at import time:
the recipe registry (listed by `--help`) reaches this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from shardcli.analysis.program import HloCollective
    from shardcli.tile_math import ShardingLayout


@dataclass(frozen=True)
class Picture:
    """An array's sharding: its tiles, and its spec as JAX reports it."""

    title: str
    layout: ShardingLayout
    spec: str


@dataclass(frozen=True)
class TableSection:
    """Rows of plain values under named columns."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class TextSection:
    """Lines of text (what the compiler chose, the collectives it inserted, ...)."""

    title: str
    lines: tuple[str, ...]


Section = Picture | TableSection | TextSection


@dataclass(frozen=True)
class Check:
    """One property a run asserts, with what was measured."""

    what: str
    ok: bool
    detail: str


def picture_of(title: str, array: Any) -> Picture:
    """The sharding picture of a JAX array: its tiles and the devices holding each."""
    from shardcli.tile_math import group_tiles, normalize_index

    shape = tuple(array.shape)
    index_map = {
        d.id: normalize_index(idx, shape) for d, idx in array.sharding.devices_indices_map(shape).items()
    }
    return Picture(title=title, layout=group_tiles(shape, index_map), spec=spec_of(array))


def spec_of(array: Any) -> str:
    """`P('data', None)` as JAX reports the array's sharding."""
    spec = getattr(array.sharding, "spec", None)
    return str(spec) if spec is not None else type(array.sharding).__name__


def collectives_text(ops: tuple[HloCollective, ...]) -> str:
    """`all-reduce x2, all-gather x1`, or `none`."""
    if not ops:
        return "none"
    return ", ".join(f"{h.op} x{h.count}" for h in ops)


def close_check(what: str, array: Any, expected: np.ndarray, bound: np.ndarray | float, how: str) -> Check:
    """A check that every element of `array` is within `bound` of the float64 NumPy `expected`.

    Args:
        what: the property, as the report states it.
        array: a JAX array; only this process's blocks are compared.
        expected: the whole array in float64.
        bound: the largest |error| allowed, per element or for all.
        how: the bound in words, for the detail.

    Returns:
        The check, its detail naming the largest error and how many elements are off.
    """
    from shardcli.runtime.verify import compare_blocks

    found = compare_blocks(array, expected, bound)
    worst = found.max_abs_err
    detail = (
        f"max |err| {worst:.2e}; {how}"
        if found.wrong == 0
        else f"{found.wrong} element(s) off; max |err| {worst:.2e}; {how}"
    )
    return Check(what=what, ok=found.wrong == 0, detail=detail)
