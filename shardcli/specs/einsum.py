"""Einsum subscripts as plain data: which letter names which dim of which operand, and its size.

Pure Python and NumPy (no JAX): the subscripts and shapes are checked against NumPy's own einsum
rules (`np.einsum_path` on zero-stride views, so nothing of the operands' size is allocated), and
its reasons become one-line errors before any device starts.
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass

from shardcli.errors import ShardcliError

MAX_OPERANDS = 4


@dataclass(frozen=True)
class EinsumNotation:
    """`bsd,df->bsf` with each letter's size: operands' and result's letters, explicit output."""

    text: str  # as the user gave it (spaces removed)
    inputs: tuple[str, ...]  # one string of letters per operand ('...' expanded)
    output: str
    sizes: tuple[tuple[str, int], ...]  # letter -> size, in first-seen order

    @property
    def size_of(self) -> dict[str, int]:
        return dict(self.sizes)

    @property
    def summed(self) -> str:
        """Letters that do not reach the result: contracted, or summed away."""
        return "".join(letter for letter, _ in self.sizes if letter not in self.output)

    @property
    def canonical(self) -> str:
        """The explicit form JAX and NumPy are given: `bsd,df->bsf`."""
        return ",".join(self.inputs) + "->" + self.output

    def operand_shape(self, i: int) -> tuple[int, ...]:
        sizes = self.size_of
        return tuple(sizes[letter] for letter in self.inputs[i])

    @property
    def output_shape(self) -> tuple[int, ...]:
        sizes = self.size_of
        return tuple(sizes[letter] for letter in self.output)

    def scaled(self, shapes: tuple[tuple[int, ...], ...]) -> EinsumNotation:
        """The same subscripts over other shapes (a --sizes step)."""
        return parse_einsum(self.text, shapes)

    def model_flops(self) -> int:
        """FLOPs of the whole contraction along NumPy's greedy pairwise path.

        Each pairwise step costs 2 x the product of the sizes of every letter it touches when it
        sums a letter (a multiply and an add), the product alone when it only multiplies; a
        one-operand sum costs one add per input element.
        """
        import numpy as np

        sizes = self.size_of
        operands = list(self.inputs)
        if len(operands) == 1:
            return math.prod(sizes[c] for c in set(operands[0])) if self.summed else 0
        path, _ = np.einsum_path(self.canonical, *_views(self), optimize="greedy")
        total = 0
        for step in path[1:]:
            picked = [operands[i] for i in step]
            for i in sorted(step, reverse=True):
                operands.pop(i)
            letters = set("".join(picked))
            rest = set("".join(operands)) | set(self.output)
            kept = "".join(sorted(letters & rest))
            work = math.prod(sizes[c] for c in letters)
            total += (2 if letters - rest else 1) * work if len(picked) > 1 else work
            operands.append(kept)
        return total


def _views(notation: EinsumNotation) -> list:
    import numpy as np

    return [
        np.broadcast_to(np.zeros((), np.float32), notation.operand_shape(i))
        for i in range(len(notation.inputs))
    ]


def _shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def parse_einsum(text: str, shapes: tuple[tuple[int, ...], ...]) -> EinsumNotation:
    """Check einsum subscripts against the operands' shapes.

    Args:
        text: subscripts as `jnp.einsum` takes them: `bsd,df->bsf`, implicit `ij,jk`, `...`.
        shapes: one shape per operand (`--shape`, in order).

    Raises:
        ShardcliError: anything `jnp.einsum` would reject, and why.
    """
    import numpy as np

    subscripts = text.replace(" ", "")
    shown = f"einsum {subscripts!r}"
    lhs, arrow, rhs = subscripts.partition("->")
    operands = lhs.split(",")
    if not subscripts or not lhs:
        raise ShardcliError(f"{shown} has no operands; write it as jnp.einsum takes it, e.g. 'bsd,df->bsf'")
    if len(operands) > MAX_OPERANDS:
        raise ShardcliError(
            f"{shown} has {len(operands)} operands; shardcli einsum takes 1 to {MAX_OPERANDS}"
        )
    if len(shapes) != len(operands):
        raise ShardcliError(
            f"{shown} has {len(operands)} operand(s) but --shape was given {len(shapes)} time(s); "
            f"give one --shape per operand, in order"
        )
    bad = sorted({c for c in subscripts.replace("->", "") if c not in string.ascii_letters + ",."})
    if bad:
        raise ShardcliError(
            f"{shown} has {', '.join(repr(c) for c in bad)}; subscripts are letters a-z and A-Z, "
            f"',' between operands, '->' before the result and '...' for leading dims"
        )
    for i, (letters, shape) in enumerate(zip(operands, shapes, strict=True)):
        if "..." not in letters and len(letters) != len(shape):
            raise ShardcliError(
                f"{shown}: operand {i} has subscripts {letters!r} ({len(letters)} dims) but --shape "
                f"{_shape_text(shape)} has {len(shape)}; give a shape with one size per subscript"
            )
    views = [np.broadcast_to(np.zeros((), np.float32), shape) for shape in shapes]
    try:
        np.einsum_path(subscripts, *views, optimize=False)
    except (ValueError, TypeError) as error:
        reason = (
            str(error).strip().splitlines()[0].rstrip(".") if str(error).strip() else type(error).__name__
        )
        raise ShardcliError(
            f"{shown} with --shape {' --shape '.join(_shape_text(s) for s in shapes)}: {reason}"
        ) from None
    inputs, output = _expand(operands, rhs if arrow else None, shapes)
    sizes: dict[str, int] = {}
    for letters, shape in zip(inputs, shapes, strict=True):
        for letter, size in zip(letters, shape, strict=True):
            if sizes.setdefault(letter, size) != size:
                raise ShardcliError(
                    f"{shown}: dim {letter!r} is {sizes[letter]} in one operand and {size} in another; "
                    f"shardcli einsum needs one size per dim (no size-1 broadcasting)"
                )
    return EinsumNotation(text=subscripts, inputs=inputs, output=output, sizes=tuple(sizes.items()))


def _expand(
    operands: list[str], rhs: str | None, shapes: tuple[tuple[int, ...], ...]
) -> tuple[tuple[str, ...], str]:
    """Letters per operand with '...' spelled out in unused letters, and the explicit output."""
    used = set("".join(operands) + (rhs or ""))
    fresh = [c for c in string.ascii_uppercase + string.ascii_lowercase if c not in used]
    pairs = list(zip(operands, shapes, strict=True))
    extra = [len(shape) - len(ops.replace("...", "")) for ops, shape in pairs if "..." in ops]
    longest = max(extra, default=0)
    ellipsis = "".join(fresh[:longest])
    inputs = []
    for ops, shape in pairs:
        if "..." in ops:
            k = len(shape) - len(ops.replace("...", ""))
            ops = ops.replace("...", ellipsis[longest - k :] if k else "")
        inputs.append(ops)
    if rhs is None:  # implicit: the letters seen once, in alphabetical order, after the '...' dims
        counts = {c: "".join(operands).count(c) for c in set("".join(operands).replace(".", ""))}
        output = ellipsis + "".join(sorted(c for c, n in counts.items() if n == 1))
    else:
        output = rhs.replace("...", ellipsis)
    return tuple(inputs), output
