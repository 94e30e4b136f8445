"""Pallas splash attention on TPUs (`jax.experimental.pallas.ops.tpu.splash_attention`, MaxText's
TPU attention): the FLOPs of its kernels, which XLA's cost analysis counts as nothing.

Each kernel is a `tpu_custom_call` named after it (`splash_mha_fwd_residuals`,
`splash_mha_dq_no_residuals`, `splash_mqa_dkv_segmented_no_residuals`...). Its operands are the mask's
block tables (data_next, block_mask, and mask_next where the mask is no function), then Q, K and V.
The kernel computes one tile of scores for every block its block mask marks non-empty (1: partial,
2: full) and skips the empty ones (0), so its FLOPs are the dense count times the block mask's
non-empty share, read from that constant. Per query-key pair and head, with D the query/key width
and Dv the value's:

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
BLOCK_MASK_OPERAND = 1  # data_next, block_mask, ...: splash's scalar-prefetch operands
_FLOATS = ("bf16", "f16", "f32", "f64", "f8e4m3fn", "f8e5m2")


def splash_phase(instruction: str) -> str | None:
    """ "fwd", "dq" or "dkv" for a splash kernel's instruction name; None for any other."""
    match = SPLASH_RE.match(instruction)
    return match.group("phase") if match else None


def visible_share(block_mask: Sequence[int]) -> float | None:
    """The share of score blocks the kernel computes: the block mask's non-empty entries."""
    if not block_mask:
        return None
    return sum(1 for v in block_mask if v != 0) / len(block_mask)


def splash_flops(
    phase: str, operands: Sequence[Array], results: Sequence[Array], share: float
) -> float | None:
    """FLOPs of one call of a splash kernel (see the module's note), or None where its operands are
    not Q, K, V with the head width last."""
    floats = [a for a in operands if a[0] in _FLOATS and len(a[1]) >= 2]
    if len(floats) < 3 or len(floats[0][1]) < 3:
        return None
    q, k, v = (a[1] for a in floats[:3])
    depth, depth_v, sq, sk = q[-1], v[-1], q[-2], k[-2]
    if k[-1] != depth or v[-2] != sk:
        return None
    pairs = math.prod(q[:-2]) * sq * sk  # (batch x heads) x Sq x Sk
    per_pair = {
        "fwd": 2 * depth + 2 * depth_v,
        "dq": 4 * depth + 2 * depth_v,
        "dkv": 4 * depth + 4 * depth_v + (2 * depth if _holds_dq(q, results) else 0),
    }.get(phase)
    if per_pair is None:
        return None
    return float(pairs * per_pair * share)


def _holds_dq(q: tuple[int, ...], results: Sequence[Array]) -> bool:
    """Whether a dkv kernel also writes dQ: a result of Q's shape with one more leading dimension."""
    return any(len(r[1]) == len(q) + 1 and tuple(r[1][1:]) == tuple(q) for r in results)
