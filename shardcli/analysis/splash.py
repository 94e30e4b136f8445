"""Pallas splash attention on TPUs (`jax.experimental.pallas.ops.tpu.splash_attention`, MaxText's
TPU attention): the FLOPs of its kernels, which XLA's cost analysis counts as nothing.

Each kernel is a `tpu_custom_call` named after it (`splash_mha_fwd_residuals`,
`splash_mha_dq_no_residuals`, `splash_mqa_dkv_segmented_no_residuals`...). Its operands are the mask's
block tables (data_next, block_mask, and mask_next where the mask is no function), then Q, K and V.
The kernel computes one tile of scores for every block its block mask marks non-empty (1: partial,
2: full) and skips the empty ones (0), so its FLOPs are the dense count times the share of blocks
computed: the block mask's non-empty entries (read from that constant) over the whole grid of
blocks (the sequences over the block sizes splash writes into the kernel's metadata). Per query-key
pair and head, with D the query/key width and Dv the value's:

- fwd: S = Q K^T (2 D) and O = P V (2 Dv);
- dq: S again (2 D), dP = dO V^T (2 Dv), dQ = dS K (2 D);
- dkv: S again (2 D), dV = P^T dO (2 Dv), dP (2 Dv), dK = dS^T Q (2 D), and dQ (2 D) where the
  kernel is fused with dq (its results hold `dq_unreduced`, one Q per key block).

Q is [..., H, Sq, D] and K, V [..., KV, Sk, D] (or [..., Sk, D] for one shared head): the head
width last, splash's default layout; the leading dimensions are the batch a `vmap` adds. No JAX
import: tested on strings.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from shardcli.analysis.hlo.arrays import Array

SPLASH_RE = re.compile(r"^splash_(?P<heads>mha|mqa)_(?P<phase>fwd|dq|dkv)(?P<rest>[\w]*?)(\.[\w.\-]*)?$")
SPLASH_NAME_RE = re.compile(r"%splash_(?:mha|mqa)_(?:fwd|dq|dkv)")  # a kernel's call in the text
BLOCK_MASK_OPERAND = 1  # data_next, block_mask, ...: splash's scalar-prefetch operands
_FLOATS = ("bf16", "f16", "f32", "f64", "f8e4m3fn", "f8e5m2")


def splash_phase(instruction: str) -> str | None:
    """ "fwd", "dq" or "dkv" for a splash kernel's instruction name; None for any other."""
    match = SPLASH_RE.match(instruction)
    return match.group("phase") if match else None


_BLOCK_KEYS = {
    "fwd": ("block_q", "block_kv"),
    "dq": ("block_q_dq", "block_kv_dq"),
    "dkv": ("block_q_dkv", "block_kv_dkv"),
}


def block_sizes(phase: str, attributes: str) -> tuple[int, int] | None:
    """The kernel's query and key block sizes, from the `xprof_metadata` splash writes into its
    `kernel_metadata` (`{"block_q": 512, "block_kv": 512, ...}`); None where they are not there."""
    text = attributes.replace('\\"', '"')
    found = []
    for key in _BLOCK_KEYS.get(phase, ()):
        match = re.search(rf'"{key}":\s*(\d{{1,9}})(?!\d)', text)  # a block of more digits is none
        if match is None or int(match.group(1)) <= 0:
            return None
        found.append(int(match.group(1)))
    return (found[0], found[1]) if len(found) == 2 else None


def splash_flops(
    phase: str,
    operands: Sequence[Array],
    results: Sequence[Array],
    mask: Sequence[int],
    mask_heads: int,
    blocks: tuple[int, int],
) -> float | str:
    """FLOPs of one call of a splash kernel (see the module's note), or why they cannot be counted.

    Args:
        mask: the block mask's values (0: a block skipped), `mask_heads` heads of them (1: one mask
            for every head). Splash drops the columns (rows for dkv) no row uses, so the share of
            blocks computed is the non-empty entries over the whole grid of blocks, not over the mask.
        blocks: the kernel's query and key block sizes (`block_sizes`).
    """
    floats = [a for a in operands if a[0] in _FLOATS and len(a[1]) >= 2]
    if len(floats) < 3 or len(floats[0][1]) < 3:
        return "its operands are not Q, K and V"
    q, k, v = (a[1] for a in floats[:3])
    depth, depth_v, sq, sk = q[-1], v[-1], q[-2], k[-2]
    if k[-1] != depth or v[-2] != sk:
        return "its Q, K and V are not [..., sequence, head width]"
    bq, bkv = blocks
    if sq % bq or sk % bkv or mask_heads < 1:
        return f"its blocks ({bq} x {bkv}) do not divide its sequences ({sq} x {sk})"
    grid = mask_heads * (sq // bq) * (sk // bkv)
    computed = sum(1 for value in mask if value != 0)
    if computed > grid:
        return "its block mask has more blocks than its sequences"
    pairs = math.prod(q[:-2]) * sq * sk  # (batch x heads) x Sq x Sk
    per_pair = {
        "fwd": 2 * depth + 2 * depth_v,
        "dq": 4 * depth + 2 * depth_v,
        "dkv": 4 * depth + 4 * depth_v + (2 * depth if _holds_dq(q, results) else 0),
    }[phase]
    return float(pairs * per_pair * computed / grid)


def _holds_dq(q: tuple[int, ...], results: Sequence[Array]) -> bool:
    """Whether a dkv kernel also writes dQ (`dq_unreduced`, one Q per key block): a result of Q's
    shape with one more dimension just before the heads (after any batch a `vmap` added first)."""
    return any(len(r[1]) == len(q) + 1 and r[1][:-4] + r[1][-3:] == tuple(q) for r in results)
