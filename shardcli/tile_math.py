"""Sharding layout math, apart from drawing.

Given which index block of a global array each device holds, compute the distinct tiles, which
devices hold each (replication), and the 2-D grids a picture draws. Pure Python: the functions take
plain mappings, so they are tested without devices.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Range = tuple[int, int]  # [start, stop)
Index = tuple[Range, ...]


@dataclass(frozen=True)
class Tile:
    """One distinct block of the global array and the devices that hold a copy of it."""

    index: Index
    device_ids: tuple[int, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(stop - start for start, stop in self.index)


@dataclass(frozen=True)
class ShardingLayout:
    """All tiles of an array's sharding."""

    shape: tuple[int, ...]
    tiles: tuple[Tile, ...]

    @property
    def replication(self) -> int:
        """How many devices hold each tile (a NamedSharding replicates every tile equally)."""
        return max(len(t.device_ids) for t in self.tiles)

    @property
    def local_shape(self) -> tuple[int, ...]:
        return self.tiles[0].shape


@dataclass(frozen=True)
class GridView:
    """A 2-D picture of the tiles: rows along `row_dim`, columns along `col_dim`.

    `fixed` names, for the other dims, the index range this grid shows. A 1-D array has
    `row_dim=None` and a single row.
    """

    row_dim: int | None
    col_dim: int
    fixed: tuple[tuple[int, Range], ...]
    row_ranges: tuple[Range, ...]
    col_ranges: tuple[Range, ...]
    cells: tuple[tuple[Tile, ...], ...]  # cells[row][col]


def normalize_index(index: Sequence[slice], shape: Sequence[int]) -> Index:
    """Turn a tuple of slices (as JAX gives them) into explicit [start, stop) ranges."""
    out = []
    for dim, size in enumerate(shape):
        s = index[dim] if dim < len(index) else slice(None)
        start, stop, step = s.indices(size)
        if step != 1:
            raise ValueError(f"strided shard index {s} is not supported")
        out.append((start, stop))
    return tuple(out)


def group_tiles(shape: Sequence[int], device_index: Mapping[int, Index]) -> ShardingLayout:
    """Group devices by the block they hold.

    Args:
        shape: the global shape.
        device_index: device id -> its block as [start, stop) ranges.

    Returns:
        Tiles in row-major order of their start indices; device ids sorted within each tile.
    """
    holders: dict[Index, list[int]] = {}
    for device_id, index in device_index.items():
        holders.setdefault(tuple(index), []).append(device_id)
    tiles = tuple(
        Tile(index=index, device_ids=tuple(sorted(ids)))
        for index, ids in sorted(holders.items(), key=lambda kv: tuple(r[0] for r in kv[0]))
    )
    covered = sum(math.prod(t.shape) for t in tiles)
    if covered != math.prod(shape):
        raise ValueError(f"tiles cover {covered} elements of {math.prod(shape)}")
    return ShardingLayout(shape=tuple(shape), tiles=tiles)


def default_view_dims(rank: int) -> tuple[int | None, int]:
    """The dims a picture draws by default: the last two (or the only one)."""
    if rank == 1:
        return None, 0
    return rank - 2, rank - 1


def grid_views(layout: ShardingLayout, view_dims: tuple[int, int] | None = None) -> list[GridView]:
    """Split the tiles into 2-D grids, one per distinct block of the dims not drawn."""
    rank = len(layout.shape)
    row_dim, col_dim = view_dims if view_dims is not None else default_view_dims(rank)
    drawn = {col_dim} if row_dim is None else {row_dim, col_dim}
    other = [d for d in range(rank) if d not in drawn]
    groups: dict[tuple[Range, ...], list[Tile]] = {}
    for tile in layout.tiles:
        groups.setdefault(tuple(tile.index[d] for d in other), []).append(tile)
    views = []
    for key in sorted(groups):
        tiles = groups[key]
        rows = sorted({t.index[row_dim] for t in tiles}) if row_dim is not None else [(0, 1)]
        cols = sorted({t.index[col_dim] for t in tiles})
        by_pos = {((t.index[row_dim] if row_dim is not None else (0, 1)), t.index[col_dim]): t for t in tiles}
        cells = tuple(tuple(by_pos[(r, c)] for c in cols) for r in rows)
        views.append(
            GridView(
                row_dim=row_dim,
                col_dim=col_dim,
                fixed=tuple(zip(other, key, strict=True)),
                row_ranges=tuple(rows),
                col_ranges=tuple(cols),
                cells=cells,
            )
        )
    return views


def format_index(index: Index) -> str:
    """`[0:4, 0:2]`."""
    return "[" + ", ".join(f"{a}:{b}" for a, b in index) + "]"


def block_index(
    entries: Sequence[Sequence[str]],
    axis_sizes: Mapping[str, int],
    coords: Mapping[str, int],
    shape: Sequence[int],
) -> tuple[slice, ...]:
    """The block of a `shape` array that the device at `coords` holds under a PartitionSpec.

    `entries` gives, per array dim, the mesh axes it is split over (major to minor); dims past the
    end of `entries` are whole. Computed from the spec alone, not from JAX.
    """
    index = []
    for dim, size in enumerate(shape):
        entry = entries[dim] if dim < len(entries) else ()
        parts = math.prod(axis_sizes[a] for a in entry)
        block = 0
        for a in entry:
            block = block * axis_sizes[a] + coords[a]
        length = size // parts
        index.append(slice(block * length, (block + 1) * length))
    return tuple(index)


def spec_layout(
    shape: Sequence[int],
    entries: Sequence[Sequence[str]],
    axis_sizes: Mapping[str, int],
    device_coords: Mapping[int, Mapping[str, int]],
) -> ShardingLayout:
    """The tiles of a `shape` array laid out by `entries`, for devices given by their mesh coords."""
    index = {
        dev: tuple((s.start, s.stop) for s in block_index(entries, axis_sizes, coords, shape))
        for dev, coords in device_coords.items()
    }
    return group_tiles(shape, index)
