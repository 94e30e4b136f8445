"""A scanned FSDP decoder as MaxText and lm1b write one: layers stacked for `lax.scan` under
`jax.checkpoint` (remat), weights stored in float32 with their embed dimension over `fsdp` and cast
to bfloat16 inside the layer, the vocabulary over `tensor`, an argmax over the vocab-sharded logits
for the accuracy metric, and Adam moments (mu, nu) beside the parameters.

Every collective the compiler puts in has a role a user should not be warned about: FSDP's weight
gathers in the scan and its rematerialised backward, the gradients' reduce-scatters and
all-reduces, the tensor-parallel partial sums, and the argmax's cross-shard reduction.

    shardcli inspect tests/programs/fsdp_scanned.py:train_step \\
        --inputs tests/programs/fsdp_scanned.py:inputs --mesh 2x2x2 --axes data,fsdp,tensor

`replicated_inputs` gives the same step with every weight replicated (the finding with a fix).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

VOCAB, EMBED, MLP, LAYERS, SEQ, BATCH = 1024, 128, 256, 3, 16, 8
LEARNING_RATE, B1, B2, EPS = 1e-3, 0.9, 0.95, 1e-8


class Params(NamedTuple):
    embed: Any  # [VOCAB, EMBED]
    w_in: Any  # [LAYERS, EMBED, MLP]
    w_out: Any  # [LAYERS, MLP, EMBED]
    unembed: Any  # [EMBED, VOCAB]


class State(NamedTuple):
    params: Params
    mu: Params
    nu: Params
    count: Any


# The activations' layout, as MaxText's logical constraints pin it: the batch over data and fsdp,
# the MLP's hidden dimension over tensor.
ACTIVATIONS, HIDDEN = P(("data", "fsdp"), None, None), P(("data", "fsdp"), None, "tensor")


def _layer(x: jax.Array, w: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, None]:
    w_in, w_out = w
    h = jax.nn.gelu(jnp.einsum("bse,em->bsm", x, w_in.astype(jnp.bfloat16)))
    h = jax.lax.with_sharding_constraint(h, HIDDEN)
    x = x + jnp.einsum("bsm,me->bse", h, w_out.astype(jnp.bfloat16))
    return jax.lax.with_sharding_constraint(x, ACTIVATIONS), None


def loss_fn(params: Params, tokens: jax.Array, targets: jax.Array) -> tuple[jax.Array, jax.Array]:
    x = params.embed.astype(jnp.bfloat16)[tokens]
    x, _ = jax.lax.scan(jax.checkpoint(_layer), x, (params.w_in, params.w_out))
    logits = jnp.einsum("bse,ev->bsv", x, params.unembed.astype(jnp.bfloat16)).astype(jnp.float32)
    log_probs = jax.nn.log_softmax(logits)
    loss = -jnp.mean(jnp.take_along_axis(log_probs, targets[..., None], axis=-1))
    accuracy = jnp.mean(jnp.argmax(logits, axis=-1) == targets)
    return loss, accuracy


@jax.jit
def train_step(state: State, tokens: jax.Array, targets: jax.Array) -> tuple[State, jax.Array, jax.Array]:
    (loss, accuracy), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, tokens, targets)
    count = state.count + 1
    mu = jax.tree.map(lambda m, g: B1 * m + (1 - B1) * g, state.mu, grads)
    nu = jax.tree.map(lambda v, g: B2 * v + (1 - B2) * g * g, state.nu, grads)

    def update(p: jax.Array, m: jax.Array, v: jax.Array) -> jax.Array:
        m_hat, v_hat = m / (1 - B1**count), v / (1 - B2**count)
        return p - LEARNING_RATE * m_hat / (jnp.sqrt(v_hat) + EPS)

    params = jax.tree.map(update, state.params, mu, nu)
    return State(params, mu, nu, count), loss, accuracy


SPECS = Params(
    embed=P("tensor", "fsdp"),
    w_in=P(None, "fsdp", "tensor"),
    w_out=P(None, "tensor", "fsdp"),
    unembed=P("fsdp", "tensor"),
)
SHAPES = Params(
    embed=(VOCAB, EMBED), w_in=(LAYERS, EMBED, MLP), w_out=(LAYERS, MLP, EMBED), unembed=(EMBED, VOCAB)
)


def _state(mesh: Any, specs: Params) -> State:
    def leaf(shape: tuple[int, ...], spec: P) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))

    params = Params(*(leaf(s, p) for s, p in zip(SHAPES, specs, strict=True)))
    count = jax.ShapeDtypeStruct((), jnp.int32, sharding=NamedSharding(mesh, P()))
    return State(params, params, params, count)


def _batch(mesh: Any) -> tuple[jax.ShapeDtypeStruct, jax.ShapeDtypeStruct]:
    tokens = jax.ShapeDtypeStruct((BATCH, SEQ), jnp.int32, sharding=NamedSharding(mesh, P(("data", "fsdp"))))
    return tokens, tokens


def inputs(mesh: Any) -> tuple[Any, ...]:
    """The state laid out for FSDP and tensor parallelism, the batch over data and fsdp."""
    return (_state(mesh, SPECS), *_batch(mesh))


def replicated_inputs(mesh: Any) -> tuple[Any, ...]:
    """The same step with every weight and moment replicated: each device holds all of them."""
    return (_state(mesh, Params(P(), P(), P(), P())), *_batch(mesh))
