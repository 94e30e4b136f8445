"""The NumPy references of the collective registry: what each collective should give one group's
blocks (in group order), and where an inexact one's error bound falls.

The references never call JAX; NumPy is imported inside the functions: `--help` lists the registry
and must stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardcli.playground.collective.entries import CollectiveParams

if TYPE_CHECKING:
    import numpy as np


# --- NumPy references (one group at a time, blocks in group order) -------------------------------


def ref_sum(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    stack = np.stack(blocks)
    if stack.dtype.kind in "iu":  # wraps like the hardware does
        total = np.sum(stack, axis=0, dtype=stack.dtype)
    else:
        total = np.sum(stack.astype(np.float64), axis=0)
    return [total] * n


def ref_mean(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    total = ref_sum(blocks, p, n)[0]
    return [total.astype(np.float64) / n] * n


def ref_max(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    return [np.max(np.stack(blocks), axis=0)] * n


def ref_min(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    return [np.min(np.stack(blocks), axis=0)] * n


def ref_gather(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    out = np.concatenate(blocks, axis=p.gather_dim) if p.tiled else np.stack(blocks, axis=p.gather_dim)
    return [out] * n


def ref_scatter(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    total = ref_sum(blocks, p, n)[0]
    return list(np.split(total, n, axis=p.scatter_dim))


def ref_permute(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    out = [np.zeros_like(b) for b in blocks]
    for src, dst in p.pairs(n):
        out[dst] = blocks[src]
    return out


def ref_all_to_all(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    chunks = [np.split(b, n, axis=p.split_dim) for b in blocks]
    return [np.concatenate([chunks[i][j] for i in range(n)], axis=p.concat_dim) for j in range(n)]


def ref_broadcast(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:

    return [blocks[p.root]] * n


def ref_index(blocks: list[np.ndarray], p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    return [np.array([i], dtype=np.int32) for i in range(n)]


# --- error bounds of inexact collectives (the bound of the whole sum, placed like the result) -----


def bounds_everywhere(bound: np.ndarray, p: CollectiveParams, n: int) -> list[np.ndarray]:
    return [bound] * n


def bounds_scattered(bound: np.ndarray, p: CollectiveParams, n: int) -> list[np.ndarray]:
    import numpy as np

    return list(np.split(bound, n, axis=p.scatter_dim))
