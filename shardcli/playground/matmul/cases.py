"""The sharded-matmul case registry: name -> operand specs, shard_map body, FLOP and byte model.

Every case computes C = A . B (plus a bias for `mac`) over dims I (rows of A), J (the contracting
dim) and K (columns of B). Specs name mesh axes by role: X is the first mesh axis, Y the second.
On a 1-D mesh a case's Y entries are dropped (those dims stay whole) unless the case needs Y.

JAX is imported inside the bodies: `--help` lists this registry and must stay fast.
Adding a case is adding an entry to MATMUL_CASES; `--help`, validation and the tests pick it up.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardcli.errors import ShardcliError

DIM_NAMES = ("I", "J", "K")
IMPLS = ("manual", "auto", "explicit")
X, Y = "X", "Y"


@dataclass(frozen=True)
class Operand:
    """One array of a case: which of I, J, K its dims are, and which role (X, Y) splits each."""

    name: str
    dims: tuple[int, ...]  # indices into (I, J, K)
    roles: tuple[str | None, ...]  # per dim: X, Y or None


@dataclass(frozen=True)
class Comm:
    """One collective the manual form performs, for the cost model.

    `array` names the full array the collective moves (its bytes are V); each device sends
    (n-1)/n V on a ring for all-gather, reduce-scatter and a ring of ppermutes, 2(n-1)/n V for an
    all-reduce.
    """

    op: str  # HLO name: all-gather, all-reduce, reduce-scatter, collective-permute
    array: Operand  # the array moved, with the dims it has when moved
    over: str  # role the collective runs over


@dataclass(frozen=True)
class Axes:
    """The real mesh axes a case runs with, and their sizes."""

    x: str
    nx: int
    y: str | None  # None on a 1-D mesh
    ny: int = 1

    def name(self, role: str | None) -> str | None:
        return {X: self.x, Y: self.y, None: None}[role]

    def size(self, role: str | None) -> int:
        return {X: self.nx, Y: self.ny, None: 1}[role]


@dataclass(frozen=True)
class MatmulCase:
    """One sharded-matmul case."""

    name: str
    summary: str
    operands: tuple[Operand, ...]
    result: Operand
    # The roles that split I, J and K in each device's local matmul (the FLOP model).
    compute: tuple[str | None, str | None, str | None]
    comm: tuple[Comm, ...]
    manual: Callable[[Axes], Callable[..., Any]] | None  # axes -> shard_map body
    letters: tuple[str, str, str] = DIM_NAMES
    needs_y: bool = False
    illegal: bool = False  # the direct form is meant to be refused
    default_impl: str = "manual"
    bias: bool = False

    def notation(self) -> str:
        """Scaling-book notation, e.g. `A[I,J_X] . B[J_X,K] -> C[I,K]`."""

        def one(op: Operand) -> str:
            dims = ",".join(
                self.letters[d] + (f"_{r}" if r else "") for d, r in zip(op.dims, op.roles, strict=True)
            )
            return f"{op.name}[{dims}]"

        lhs = f"{one(self.operands[0])} . {one(self.operands[1])}"
        if self.bias:
            lhs += f" + {one(self.operands[2])}"
        return f"{lhs} -> {one(self.result)}"


def operand_roles(op: Operand, axes: Axes) -> tuple[str | None, ...]:
    """The roles that exist on this mesh (Y dropped on a 1-D mesh)."""
    return tuple(r if r != Y or axes.y is not None else None for r in op.roles)


def operand_entries(op: Operand, axes: Axes) -> tuple[tuple[str, ...], ...]:
    """The operand's PartitionSpec as plain data, with real axis names."""
    out = []
    for role in operand_roles(op, axes):
        name = axes.name(role)
        out.append((name,) if name else ())
    return tuple(out)


def operand_shape(op: Operand, dims: tuple[int, int, int]) -> tuple[int, ...]:
    return tuple(dims[d] for d in op.dims)


def local_shape(op: Operand, dims: tuple[int, int, int], axes: Axes) -> tuple[int, ...]:
    return tuple(dims[d] // axes.size(r) for d, r in zip(op.dims, operand_roles(op, axes), strict=True))


def flops_per_device(case: MatmulCase, dims: tuple[int, int, int], axes: Axes) -> int:
    """2 I J K over the dims each device's local matmul really has (plus one add per bias element)."""
    i, j, k = (d // axes.size(r) for d, r in zip(dims, case.compute, strict=True))
    return 2 * i * j * k + (i * k if case.bias else 0)


def comm_bytes_per_device(comm: Comm, dims: tuple[int, int, int], axes: Axes, itemsize: int) -> int:
    """Bytes each device sends for one modelled collective (ring algorithms)."""
    n = axes.size(comm.over)
    # The moved array's size on one group: its dims split by the roles other than `over`.
    size = math.prod(
        dims[d] // (axes.size(r) if r != comm.over else 1)
        for d, r in zip(comm.array.dims, operand_roles(comm.array, axes), strict=True)
    )
    volume = size * itemsize
    factor = 2 * (n - 1) / n if comm.op == "all-reduce" else (n - 1) / n
    return int(round(factor * volume))


def partial_count(case: MatmulCase, axes: Axes) -> int:
    """The most device partial sums any strategy adds into one output element.

    That is the number of blocks the contracting dim J is split into in the inputs: a manual form
    may gather J first, but the compiler may as well multiply the blocks where they are and
    all-reduce (it does, for weight-gather on CPU).
    """
    roles = {
        r for op in case.operands for d, r in zip(op.dims, operand_roles(op, axes), strict=True) if d == 1
    }
    return math.prod(axes.size(r) for r in roles if r is not None)


# --- shard_map bodies (manual impl) ---------------------------------------------------------------


def _local(axes: Axes) -> Callable[..., Any]:
    return lambda a, b: a @ b


def _allgather(axes: Axes) -> Callable[..., Any]:
    from jax import lax

    # The gathered A is the same on every device of X: say so, so out_specs may drop X.
    return lambda a, b: lax.all_gather(a, axes.x, axis=1, tiled=True, to="invarying") @ b


def _allreduce(axes: Axes) -> Callable[..., Any]:
    from jax import lax

    return lambda a, b: lax.psum(a @ b, axes.x)


def _reducescatter(axes: Axes) -> Callable[..., Any]:
    from jax import lax

    return lambda a, b: lax.psum_scatter(a @ b, axes.x, scatter_dimension=1, tiled=True)


def _gather_a(axes: Axes) -> Callable[..., Any]:
    from jax import lax

    return lambda a, b: lax.all_gather(a, axes.x, axis=0, tiled=True, to="invarying") @ b


def _gather_b(axes: Axes) -> Callable[..., Any]:
    from jax import lax

    return lambda a, b: a @ lax.all_gather(b, axes.x, axis=1, tiled=True, to="invarying")


def _illegal(axes: Axes) -> Callable[..., Any]:
    return lambda a, b: a @ b  # shard_map refuses out_specs P(X, X) before this runs


def _mac(axes: Axes) -> Callable[..., Any]:
    return lambda x, w, b: x @ w + b


def _weight_gather(axes: Axes) -> Callable[..., Any]:
    from jax import lax

    return lambda x, w: x @ lax.all_gather(w, axes.x, axis=0, tiled=True, to="invarying")


def _collective(axes: Axes) -> Callable[..., Any]:
    """Collective matmul: A's J blocks travel the ring while each device multiplies the one it holds.

    Device d starts with block d of A's columns; after s shifts it holds block (d + s) mod n and
    multiplies it by the matching rows of its B[J, K_d]. n - 1 ppermutes replace the all-gather,
    and each one can overlap with the matmul of the block in hand.
    """
    import jax.numpy as jnp
    from jax import lax

    n, name = axes.nx, axes.x
    ring = [(i, (i - 1) % n) for i in range(n)]  # receive from the next device

    def body(a: Any, b: Any) -> Any:
        d = lax.axis_index(name)
        width = a.shape[1]

        def block_product(s: Any, a_block: Any) -> Any:
            j = (d + s) % n
            return a_block @ lax.dynamic_slice_in_dim(b, j * width, width, axis=0)

        def step(s: Any, carry: tuple[Any, Any]) -> tuple[Any, Any]:
            acc, a_block = carry
            nxt = lax.ppermute(a_block, name, ring)  # independent of the matmul: they can overlap
            return acc + block_product(s, a_block), nxt

        # The accumulator starts as zeros, which are the same everywhere; the loop carry must be
        # typed as varying over X like the values added into it.
        acc = lax.pcast(jnp.zeros((a.shape[0], b.shape[1]), a.dtype), name, to="varying")
        acc, last = lax.fori_loop(0, n - 1, step, (acc, a))
        return acc + block_product(n - 1, last)

    return body


def _row_parallel(axes: Axes) -> Callable[..., Any]:
    from jax import lax

    return lambda x, w: lax.psum(x @ w, axes.y)


A_, B_ = (0, 1), (1, 2)  # A[I, J], B[J, K]
C_ = (0, 2)

MATMUL_CASES: dict[str, MatmulCase] = {
    c.name: c
    for c in (
        MatmulCase(
            name="local",
            summary="no sharded contracting dim: each device multiplies its own blocks, no communication",
            operands=(Operand("A", A_, (X, None)), Operand("B", B_, (None, Y))),
            result=Operand("C", C_, (X, Y)),
            compute=(X, None, Y),
            comm=(),
            manual=_local,
        ),
        MatmulCase(
            name="allgather",
            summary="contracting dim sharded on A only: all-gather A's J, then multiply",
            operands=(Operand("A", A_, (None, X)), Operand("B", B_, (None, None))),
            result=Operand("C", C_, (None, None)),
            compute=(None, None, None),
            comm=(Comm("all-gather", Operand("A", A_, (None, X)), X),),
            manual=_allgather,
        ),
        MatmulCase(
            name="allreduce",
            summary="contracting dim sharded on both: local partial products, then psum (all-reduce)",
            operands=(Operand("A", A_, (None, X)), Operand("B", B_, (X, None))),
            result=Operand("C", C_, (None, None)),
            compute=(None, X, None),
            comm=(Comm("all-reduce", Operand("C", C_, (None, None)), X),),
            manual=_allreduce,
        ),
        MatmulCase(
            name="reducescatter",
            summary="as allreduce, but psum_scatter keeps the output sharded over K",
            operands=(Operand("A", A_, (None, X)), Operand("B", B_, (X, None))),
            result=Operand("C", C_, (None, X)),
            compute=(None, X, None),
            comm=(Comm("reduce-scatter", Operand("C", C_, (None, None)), X),),
            manual=_reducescatter,
        ),
        MatmulCase(
            name="gather-a",
            summary="X on both non-contracting dims is illegal: all-gather A's rows first",
            operands=(Operand("A", A_, (X, None)), Operand("B", B_, (None, X))),
            result=Operand("C", C_, (None, X)),
            compute=(None, None, X),
            comm=(Comm("all-gather", Operand("A", A_, (X, None)), X),),
            manual=_gather_a,
        ),
        MatmulCase(
            name="gather-b",
            summary="X on both non-contracting dims is illegal: all-gather B's columns first",
            operands=(Operand("A", A_, (X, None)), Operand("B", B_, (None, X))),
            result=Operand("C", C_, (X, None)),
            compute=(X, None, None),
            comm=(Comm("all-gather", Operand("B", B_, (None, X)), X),),
            manual=_gather_b,
        ),
        MatmulCase(
            name="illegal",
            summary="the direct form of gather-a/gather-b: JAX refuses it (a lesson; exit 0)",
            operands=(Operand("A", A_, (X, None)), Operand("B", B_, (None, X))),
            result=Operand("C", C_, (X, X)),
            compute=(X, None, X),
            comm=(),
            manual=_illegal,
            illegal=True,
            default_impl="explicit",
        ),
        MatmulCase(
            name="mac",
            summary="y = x . W + b with the bias sharded like W's output dim; no communication",
            operands=(Operand("x", A_, (X, None)), Operand("W", B_, (None, Y)), Operand("b", (2,), (Y,))),
            result=Operand("y", C_, (X, Y)),
            compute=(X, None, Y),
            comm=(),
            manual=_mac,
            letters=("B", "D", "F"),
            bias=True,
        ),
        MatmulCase(
            name="weight-gather",
            summary="FSDP: W is stored sharded over X and all-gathered inside the mapped function",
            operands=(Operand("x", A_, (X, None)), Operand("W", B_, (X, None))),
            result=Operand("y", C_, (X, None)),
            compute=(X, None, None),
            comm=(Comm("all-gather", Operand("W", B_, (X, None)), X),),
            manual=_weight_gather,
            letters=("B", "D", "F"),
        ),
        MatmulCase(
            name="collective",
            summary="collective matmul: allgather's gather of A's J as a ring of ppermutes "
            "overlapped with compute; B's K sharded so each device makes its own columns",
            operands=(Operand("A", A_, (None, X)), Operand("B", B_, (None, X))),
            result=Operand("C", C_, (None, X)),
            compute=(None, None, X),
            comm=(Comm("collective-permute", Operand("A", A_, (None, X)), X),),
            manual=_collective,
        ),
        MatmulCase(
            name="row-parallel",
            summary="2-D: data parallel over X, Megatron row-parallel W over Y: partial sums, psum over Y",
            operands=(Operand("x", A_, (X, Y)), Operand("W", B_, (Y, None))),
            result=Operand("y", C_, (X, None)),
            compute=(X, Y, None),
            comm=(Comm("all-reduce", Operand("y", C_, (X, None)), Y),),
            manual=_row_parallel,
            letters=("B", "D", "F"),
            needs_y=True,
        ),
    )
}


def get_case(name: str) -> MatmulCase:
    """Look up a case by name.

    Raises:
        ShardcliError: unknown name (the message lists the cases).
    """
    if name not in MATMUL_CASES:
        raise ShardcliError(
            f"--case {name!r} is not a matmul case; choose one of {', '.join(MATMUL_CASES)} or all"
        )
    return MATMUL_CASES[name]
