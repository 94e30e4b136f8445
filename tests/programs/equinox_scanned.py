"""An equinox transformer-style stack trained as equinox's docs scan one: the blocks made at once by
`eqx.filter_vmap` (each weight stacked along a leading layer axis), run by `jax.lax.scan` over
`eqx.partition`ed arrays with each block under `jax.checkpoint`, and the step under
`eqx.filter_jit(donate="all")`, which donates every array argument (here more arrays than the step
has parameters).

    shardcli inspect tests/programs/equinox_scanned.py:train_step \\
        --inputs tests/programs/equinox_scanned.py:inputs --mesh 2x4 --axes data,model
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

WIDTH, HIDDEN, LAYERS, BATCH = 64, 256, 4, 32
OPTIMIZER = optax.adamw(1e-3)


class Block(eqx.Module):
    norm: eqx.nn.LayerNorm
    up: eqx.nn.Linear
    down: eqx.nn.Linear

    def __init__(self, key: jax.Array) -> None:
        k_up, k_down = jax.random.split(key)
        self.norm = eqx.nn.LayerNorm(WIDTH)
        self.up = eqx.nn.Linear(WIDTH, HIDDEN, key=k_up)
        self.down = eqx.nn.Linear(HIDDEN, WIDTH, key=k_down)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.down(jax.nn.gelu(self.up(self.norm(x))))


class Stack(eqx.Module):
    blocks: Block  # every weight with a leading axis of LAYERS

    def __init__(self, key: jax.Array) -> None:
        self.blocks = eqx.filter_vmap(Block)(jax.random.split(key, LAYERS))

    def __call__(self, x: jax.Array) -> jax.Array:
        arrays, static = eqx.partition(self.blocks, eqx.is_array)

        @jax.checkpoint
        def layer(h: jax.Array, block_arrays: Any) -> tuple[jax.Array, None]:
            return eqx.combine(block_arrays, static)(h), None

        out, _ = jax.lax.scan(layer, x, arrays)
        return out


def loss_fn(model: Stack, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((jax.vmap(model)(x) - y) ** 2)


@eqx.filter_jit(donate="all")
def train_step(model: Stack, opt_state: Any, x: jax.Array, y: jax.Array) -> tuple[Stack, Any, jax.Array]:
    loss, grads = eqx.filter_value_and_grad(loss_fn)(model, x, y)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), opt_state, loss


def spec_of(leaf: jax.ShapeDtypeStruct) -> P:
    """Stacked weights [layer, out, in]: the hidden dim over `model`; the rest replicated."""
    if len(leaf.shape) == 3:
        return P(None, "model", None) if leaf.shape[1] == HIDDEN else P(None, None, "model")
    if len(leaf.shape) == 2 and leaf.shape[1] == HIDDEN:
        return P(None, "model")
    return P()


def inputs(mesh: Any) -> tuple[Any, ...]:
    """(model, opt_state, x, y) as shapes (`eqx.filter_eval_shape`), every array on `mesh`."""

    def start() -> tuple[Any, ...]:
        model = Stack(jax.random.key(0))
        return model, OPTIMIZER.init(eqx.filter(model, eqx.is_array))

    model, opt_state = eqx.filter_eval_shape(start)

    def placed(leaf: Any) -> Any:
        if not isinstance(leaf, jax.ShapeDtypeStruct):
            return leaf
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, spec_of(leaf)))

    batch = NamedSharding(mesh, P("data", None))
    x = jax.ShapeDtypeStruct((BATCH, WIDTH), jnp.float32, sharding=batch)
    return jax.tree.map(placed, (model, opt_state)) + (x, x)
