"""What each collective is for in the program: its role.

A compiled train step holds dozens of collectives, and almost all of them are the layout's own
design: FSDP gathers each weight before its layer uses it (inside the layer scan and again in the
rematerialised backward) and reduce-scatters its gradient; data parallelism all-reduces gradients;
tensor parallelism sums partial matmul results; an argmax or a softmax over a sharded dimension
combines the shards' candidates. Only a reshard, a layout change between two operations that
neither needs, is something a user changes. `assign_roles` names the role of every collective from
what the compiled program shows:

- the argument a collective moves (followed back through copies, casts, the scan's slicing of
  stacked weights, loop tuples and async collective fusions: `collectives._argument_fed`);
- the JAX operation it was inserted for (`dot_general`, `argmax`, `reduce_max`, ...) and whether
  it runs in the backward pass (`transpose(...)` in its op_name, the rematerialised forward
  included);
- the batch axes: the mesh axes that shard the data the step consumes (its arguments that do not
  come back as results, where several do, as a train step's state does; else its integer
  arguments: token ids and labels; else none: a plain function's argument gathers are weight
  gathers, not FSDP's). A train step whose data come in replicated (laid out inside the step) shows
  no batch axes: there a weight of its state gathered for use is taken for FSDP's.

No JAX import; tested on the collectives of small programs.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from shardcli.analysis.arguments import ArrayFact, moved_argument
from shardcli.analysis.collectives import CollectiveOp


@dataclass(frozen=True)
class Role:
    """One role a collective can play: its name in JSON, its words on the screen, and whether a
    user would change the program for it (only those become warnings)."""

    name: str
    label: str  # as the tables show it
    meaning: str  # one sentence for the docs and --help
    actionable: bool = False


ROLES: dict[str, Role] = {
    r.name: r
    for r in (
        Role(
            "fsdp-gather",
            "FSDP gather",
            "a weight sharded over the batch axes, gathered before its layer uses it (in or out of a loop; "
            "a TPU may gather it in steps: its blocks permuted, then gathered over another axis)",
        ),
        Role(
            "weight-gather",
            "weight gather",
            "an argument sharded over axes that do not shard the batch, gathered before use",
        ),
        Role(
            "gradient-reduce-scatter",
            "FSDP grad reduce-scatter",
            "a gradient summed over the batch axes and left sharded, as FSDP keeps its weights",
        ),
        Role(
            "gradient-reduction",
            "grad reduction",
            "a gradient summed over the batch axes (data parallelism)",
        ),
        Role(
            "partial-sum",
            "partial sum",
            "a matmul's partial results summed over the axes its contracting dimension is sharded over "
            "(tensor parallelism)",
        ),
        Role(
            "matmul-operand",
            "matmul operand",
            "an activation moved into the layout a sharded matmul is computed in (tensor or sequence "
            "parallelism)",
        ),
        Role(
            "cross-shard-reduction",
            "cross-shard reduce",
            "the shards' partial answers of a reduction over a sharded dimension combined (argmax, top-k, "
            "sort, cumsum, a max or sum such as a softmax's normaliser)",
        ),
        Role(
            "table-lookup",
            "table lookup",
            "a lookup into a sharded table (an embedding, take_along_axis): sharded on its rows, each "
            "shard's rows summed (the others masked); on another dimension, the ids gathered and the rows "
            "exchanged into the batch's layout; and the gradient's scatter-add back",
        ),
        Role(
            "pipeline-transfer",
            "pipeline transfer",
            "activations handed to the next pipeline stage (a ppermute over a stage axis in shard_map)",
        ),
        Role("program", "shard_map's own", "a collective the program itself asks for inside shard_map"),
        Role(
            "reshard",
            "reshard",
            "a layout change between two operations that neither needs: the compiler met two layouts "
            "that do not agree",
            actionable=True,
        ),
    )
}

# The JAX operations that reduce over a dimension: where that dimension is sharded, the shards'
# partial answers are combined by a collective (variadic `reduce` is how argmax and argmin lower).
REDUCING_OPS = frozenset(
    {
        "reduce",
        "argmax",
        "argmin",
        "reduce_max",
        "reduce_min",
        "reduce_sum",
        "reduce_prod",
        "reduce_and",
        "reduce_or",
        "reduce_xor",
        "top_k",
        "approx_top_k",
        "sort",
        "argsort",
        "cumsum",
        "cumprod",
        "cummax",
        "cummin",
        "cumlogsumexp",
        "logsumexp",
        "softmax",
        "log_softmax",
    }
)
MATMUL_OPS = frozenset({"dot_general", "conv_general_dilated", "einsum", "dot", "matmul"})
# The operations of a lookup into a sharded table (`jnp.take`, `x[ids]`, `.at[ids].get()`, and their
# gradient's scatter-add): the last part of the op name.
LOOKUP_OPS = frozenset({"gather", "scatter-add", "scatter_add", "scatter", "take", "take_along_axis"})
# A lookup's ids, broadcast to index vectors and bounds-checked before the gather (`s32[8,128,1]`).
_INDEX_OPS = frozenset({"broadcast_in_dim", "reduce_and", "clamp", "lt", "ge", "select_n"})
# Mesh axes that name pipeline stages, as MaxText, praxis and the JAX pipelining examples name them.
STAGE_AXES = re.compile(r"^(stage|stages|pipeline|pipe|pp)$")


def is_backward(c: CollectiveOp) -> bool:
    """Whether JAX traced it in the backward pass (`transpose(jvp(...))`), the rematerialised
    forward included."""
    return bool(c.op_name) and "transpose(" in (c.op_name or "")


# A train step returns at least its weights and two optimizer moments: fewer arguments that come back
# as results (`f(x, w) -> (x @ w, ...)` whose results happen to be shaped as two of them) are no state.
MIN_STATE = 3


@dataclass(frozen=True)
class Batch:
    """The data a program consumes (argument names) and the mesh axes that shard its leading
    (batch) dimension."""

    data: frozenset[str]
    axes: frozenset[str]
    state: frozenset[str] = frozenset()  # the arguments a train step returns (its weights, moments)


def find_batch(arguments: Sequence[ArrayFact], results: Sequence[ArrayFact]) -> Batch:
    """The data are the arguments that do not come back as results (of the same type and layout),
    where at least MIN_STATE do (a train step returns its weights and moments: a result or two
    shaped like arguments is no sign of a state); else the integer arguments (token ids, labels);
    else none, and no gather is taken for FSDP's. The batch axes are every mesh axis that shards
    the data (a microbatched step's batch is its second dimension)."""
    returned = Counter((r.dtype, r.shape, r.entries) for r in results)
    state = set()
    for a in arguments:  # each result stands for one argument
        key = (a.dtype, a.shape, a.entries)
        if returned[key] > 0:
            returned[key] -= 1
            state.add(a.name)
    data = [a for a in arguments if a.shape and a.name not in state] if len(state) >= MIN_STATE else []
    if not data:
        data = [a for a in arguments if a.shape and a.dtype.startswith(("int", "uint"))]
    return Batch(
        data=frozenset(a.name for a in data),
        axes=frozenset(axis for a in data if a.entries for entry in a.entries for axis in entry),
        state=frozenset(state) if len(state) >= MIN_STATE else frozenset(),
    )


def role_of(c: CollectiveOp, moved: ArrayFact | None, batch: Batch) -> str:
    """The role (a key of ROLES) of one collective, given the argument it moves and the batch."""
    axes = set(c.mesh_axes or ())
    op = c.op
    if c.op_name and "shard_map" in c.op_name:
        stage = any(STAGE_AXES.match(a) for a in axes)
        return "pipeline-transfer" if c.kind == "collective-permute" and stage else "program"
    over_batch = bool(axes) and axes <= batch.axes
    if c.kind in ("all-gather", "collective-permute") and moved is not None and moved.name not in batch.data:
        # A weight moved for use: FSDP's where it is sharded over the batch axes (a TPU gathers one
        # in steps: its blocks permuted over data+model, then gathered over model), or where the
        # data come in replicated (laid out inside the step, so no batch axis shows) and it is part
        # of a train step's state.
        own = {axis for entry in moved.entries or () for axis in entry}
        unseen = not batch.axes and moved.name in batch.state
        return "fsdp-gather" if over_batch or own & batch.axes or unseen else "weight-gather"
    if c.kind == "all-gather" and moved is None and c.operand_parameter is not None and not batch.axes:
        return "weight-gather"  # an entry parameter gathered, where nothing says what the batch is
    if c.kind == "reduce-scatter":
        return "gradient-reduce-scatter" if over_batch and is_backward(c) else "partial-sum"
    if c.kind == "all-reduce":
        return _all_reduce_role(c, op, over_batch)
    if _is_lookup(c, op):
        return "table-lookup"
    if op in REDUCING_OPS and c.kind == "all-gather":
        return "cross-shard-reduction"
    if op in MATMUL_OPS and c.kind == "all-gather":
        return "matmul-operand"
    # a collective-permute for a matmul moves blocks between devices in the same shape: the operand
    # arrived on other devices than the matmul is partitioned over (lm1b's fsdp<->tensor swaps)
    return "reshard"


def _all_reduce_role(c: CollectiveOp, op: str | None, over_batch: bool) -> str:
    """An all-reduce sums: a gradient over the batch, a matmul's partial results, a reduction's
    partial answers, or a lookup into a table sharded on its rows (each shard's rows, the others
    masked). One that XLA combined from parts of different shapes carries one part's op name (a
    loss scalar's beside the logits' partial sums): judged by where it runs and over which axes, not
    by that op; parts all of one shape under a reduction's name (a norm's mean and variance, metric
    scalars) are that reduction."""
    parts = re.findall(r"[a-z0-9]+\[[0-9,]*\]", c.shape)
    combined, mixed = len(parts) > 1, len(set(parts)) > 1
    backward = is_backward(c)
    if not mixed and not backward and _is_lookup(c, op):
        return "table-lookup"
    if op in REDUCING_OPS and not backward and not mixed:
        return "cross-shard-reduction"
    # a gradient's sum over the batch: in the backward, inserted with no operation of its own, or
    # combined with others (weights' gradients under a forward or a norm's op name)
    if over_batch and (backward or op is None or combined):
        return "gradient-reduction"
    return "cross-shard-reduction" if op in REDUCING_OPS and not mixed else "partial-sum"


def _is_lookup(c: CollectiveOp, op: str | None) -> bool:
    """A collective of a lookup into a sharded table: inserted for a gather or scatter (`jit(_take)`
    included), or an integer or boolean array of ids moved for one."""
    name = c.op_name or ""
    if name.rsplit("/", 1)[-1] in LOOKUP_OPS or "jit(_take)" in name or "take_along_axis" in name:
        return True
    return op in _INDEX_OPS and c.shape.startswith(("s32", "s64", "u32", "pred"))


def assign_roles(
    collectives: Sequence[CollectiveOp],
    arguments: Sequence[ArrayFact] = (),
    results: Sequence[ArrayFact] = (),
    *,
    batch: Batch | None = None,
) -> tuple[CollectiveOp, ...]:
    """The collectives, each with its `role` set (`batch`: found from the arguments and results
    where not given)."""
    batch = batch if batch is not None else find_batch(arguments, results)
    return tuple(replace(c, role=role_of(c, moved_argument(c, arguments), batch)) for c in collectives)
