"""Layout math on hand-built index maps: no devices, no JAX."""

from __future__ import annotations

import pytest

from shardcli.tile_math import (
    GridView,
    ShardingLayout,
    Tile,
    default_view_dims,
    format_index,
    grid_views,
    group_tiles,
    normalize_index,
)


def blocks_2x4(shape=(8, 8)):
    """A 2x4 mesh sharding an 8x8 array P('data', 'model'): device d = 4*row + col."""
    rows, cols = shape[0] // 2, shape[1] // 4
    return {
        4 * r + c: ((r * rows, (r + 1) * rows), (c * cols, (c + 1) * cols))
        for r in range(2)
        for c in range(4)
    }


# normalize_index ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "shape", "expected"),
    [
        pytest.param((slice(0, 4), slice(2, 4)), (8, 8), ((0, 4), (2, 4)), id="explicit"),
        pytest.param((slice(None), slice(None)), (8, 6), ((0, 8), (0, 6)), id="full"),
        pytest.param((slice(4, None), slice(None, 2)), (8, 6), ((4, 8), (0, 2)), id="open-ends"),
        pytest.param((), (4, 2), ((0, 4), (0, 2)), id="empty-tuple-replicated"),
        pytest.param((slice(2, 4),), (8, 3, 5), ((2, 4), (0, 3), (0, 5)), id="short-index"),
        pytest.param((slice(0, 100),), (16,), ((0, 16),), id="clipped"),
        pytest.param((slice(-4, None),), (16,), ((12, 16),), id="negative-start"),
    ],
)
def test_normalize_index(index, shape, expected):
    assert normalize_index(index, shape) == expected


def test_normalize_index_rejects_strides():
    with pytest.raises(ValueError, match="strided shard index"):
        normalize_index((slice(0, 8, 2),), (8,))


# group_tiles ----------------------------------------------------------------------------------


def test_group_tiles_one_device_per_tile_row_major():
    # Insert in a scrambled order: tiles come out in row-major order of their starts.
    index_map = dict(sorted(blocks_2x4().items(), key=lambda kv: -kv[0]))
    layout = group_tiles((8, 8), index_map)
    assert layout.shape == (8, 8)
    assert [t.device_ids for t in layout.tiles] == [(d,) for d in range(8)]
    assert [t.index for t in layout.tiles] == [blocks_2x4()[d] for d in range(8)]
    assert layout.replication == 1
    assert layout.local_shape == (4, 2)


def test_group_tiles_partial_replication():
    # P(None, 'model') on a 2x4 mesh: devices c and 4+c hold column block c.
    index_map = {d: ((0, 8), ((d % 4) * 2, (d % 4) * 2 + 2)) for d in (7, 3, 0, 4, 5, 1, 6, 2)}
    layout = group_tiles((8, 8), index_map)
    assert layout.tiles == (
        Tile(index=((0, 8), (0, 2)), device_ids=(0, 4)),
        Tile(index=((0, 8), (2, 4)), device_ids=(1, 5)),
        Tile(index=((0, 8), (4, 6)), device_ids=(2, 6)),
        Tile(index=((0, 8), (6, 8)), device_ids=(3, 7)),
    )
    assert layout.replication == 2
    assert layout.local_shape == (8, 2)


def test_group_tiles_fully_replicated():
    layout = group_tiles((4, 4), {d: ((0, 4), (0, 4)) for d in (3, 1, 2, 0)})
    assert layout.tiles == (Tile(index=((0, 4), (0, 4)), device_ids=(0, 1, 2, 3)),)
    assert layout.replication == 4
    assert layout.local_shape == (4, 4)


def test_group_tiles_1d():
    layout = group_tiles((8,), {1: ((4, 8),), 0: ((0, 4),)})
    assert layout.tiles == (Tile(((0, 4),), (0,)), Tile(((4, 8),), (1,)))
    assert layout.tiles[1].shape == (4,)


@pytest.mark.parametrize(
    ("shape", "index_map", "message"),
    [
        pytest.param((8, 8), {0: ((0, 4), (0, 8))}, "tiles cover 32 elements of 64", id="half-missing"),
        pytest.param(
            (8,), {0: ((0, 4),), 1: ((2, 8),)}, "tiles cover 10 elements of 8", id="overlap-counts-twice"
        ),
        pytest.param((4,), {}, "tiles cover 0 elements of 4", id="no-devices"),
    ],
)
def test_group_tiles_coverage_error(shape, index_map, message):
    with pytest.raises(ValueError, match=message):
        group_tiles(shape, index_map)


# grid_views -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rank", "expected"),
    [pytest.param(1, (None, 0), id="1d"), pytest.param(2, (0, 1), id="2d"), pytest.param(4, (2, 3), id="4d")],
)
def test_default_view_dims(rank, expected):
    assert default_view_dims(rank) == expected


def test_grid_views_1d_single_row():
    layout = group_tiles((8,), {d: ((2 * d, 2 * d + 2),) for d in range(4)})
    (view,) = grid_views(layout)
    assert view.row_dim is None
    assert view.col_dim == 0
    assert view.fixed == ()
    assert view.row_ranges == ((0, 1),)
    assert view.col_ranges == ((0, 2), (2, 4), (4, 6), (6, 8))
    assert [[t.device_ids for t in row] for row in view.cells] == [[(0,), (1,), (2,), (3,)]]


def test_grid_views_2d():
    layout = group_tiles((8, 8), blocks_2x4())
    (view,) = grid_views(layout)
    assert isinstance(view, GridView)
    assert (view.row_dim, view.col_dim, view.fixed) == (0, 1, ())
    assert view.row_ranges == ((0, 4), (4, 8))
    assert view.col_ranges == ((0, 2), (2, 4), (4, 6), (6, 8))
    assert [[t.device_ids[0] for t in row] for row in view.cells] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    for row, (r0, r1) in zip(view.cells, view.row_ranges, strict=True):
        for tile, (c0, c1) in zip(row, view.col_ranges, strict=True):
            assert tile.index == ((r0, r1), (c0, c1))


def test_grid_views_2d_transposed():
    layout = group_tiles((8, 8), blocks_2x4())
    (view,) = grid_views(layout, view_dims=(1, 0))
    assert (view.row_dim, view.col_dim) == (1, 0)
    assert [[t.device_ids[0] for t in row] for row in view.cells] == [[0, 4], [1, 5], [2, 6], [3, 7]]


def _blocks_3d():
    """A 4x4x8 array on a 2x2x2 mesh, P('x', 'y', 'z'): device = 4*i + 2*j + k."""
    return {
        4 * i + 2 * j + k: ((2 * i, 2 * i + 2), (2 * j, 2 * j + 2), (4 * k, 4 * k + 4))
        for i in range(2)
        for j in range(2)
        for k in range(2)
    }


def test_grid_views_3d_one_grid_per_block_of_the_extra_dim():
    layout = group_tiles((4, 4, 8), _blocks_3d())
    views = grid_views(layout)
    assert [v.fixed for v in views] == [((0, (0, 2)),), ((0, (2, 4)),)]
    for i, view in enumerate(views):
        assert (view.row_dim, view.col_dim) == (1, 2)
        assert view.row_ranges == ((0, 2), (2, 4))
        assert view.col_ranges == ((0, 4), (4, 8))
        assert [[t.device_ids[0] for t in row] for row in view.cells] == [
            [4 * i + 0, 4 * i + 1],
            [4 * i + 2, 4 * i + 3],
        ]


def test_grid_views_3d_chosen_view_dims():
    layout = group_tiles((4, 4, 8), _blocks_3d())
    views = grid_views(layout, view_dims=(0, 2))
    assert [v.fixed for v in views] == [((1, (0, 2)),), ((1, (2, 4)),)]
    for j, view in enumerate(views):
        assert (view.row_dim, view.col_dim) == (0, 2)
        assert [[t.device_ids[0] for t in row] for row in view.cells] == [
            [2 * j + 0, 2 * j + 1],
            [4 + 2 * j + 0, 4 + 2 * j + 1],
        ]


def test_grid_views_3d_unsharded_extra_dim_gives_one_grid():
    # P(None, 'x', 'y') on a 2x2 mesh: dim 0 is whole on every device.
    index_map = {
        2 * a + b: ((0, 3), (2 * a, 2 * a + 2), (2 * b, 2 * b + 2)) for a in range(2) for b in range(2)
    }
    (view,) = grid_views(group_tiles((3, 4, 4), index_map))
    assert view.fixed == ((0, (0, 3)),)
    assert [[t.device_ids[0] for t in row] for row in view.cells] == [[0, 1], [2, 3]]


def test_grid_views_replicated_tile_lists_all_devices():
    layout = group_tiles((4, 4), {d: ((0, 4), (0, 4)) for d in range(4)})
    (view,) = grid_views(layout)
    assert view.cells == ((Tile(((0, 4), (0, 4)), (0, 1, 2, 3)),),)


def test_sharding_layout_is_frozen():
    layout = ShardingLayout(shape=(2,), tiles=(Tile(((0, 2),), (0,)),))
    with pytest.raises(AttributeError):
        layout.shape = (3,)


# format_index ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "text"),
    [
        pytest.param(((0, 4), (0, 2)), "[0:4, 0:2]", id="2d"),
        pytest.param(((10, 12),), "[10:12]", id="1d"),
        pytest.param(((0, 2), (2, 4), (4, 8)), "[0:2, 2:4, 4:8]", id="3d"),
        pytest.param((), "[]", id="scalar"),
    ],
)
def test_format_index(index, text):
    assert format_index(index) == text
