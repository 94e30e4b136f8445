"""An equinox model trained as equinox's examples train one: an `eqx.Module` (its activation a
function, not an array), `eqx.filter_jit` and `eqx.filter_value_and_grad`, optax's Adam. The
arrays are sharded with `eqx.filter_shard`'s layout: the hidden layers over `model`, the batch
over `data`.

    shardcli inspect tests/programs/equinox_mlp.py:train_step \\
        --inputs tests/programs/equinox_mlp.py:inputs --mesh 2x4 --axes data,model
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

IN, WIDTH, OUT, DEPTH, BATCH = 64, 256, 16, 3, 32
OPTIMIZER = optax.adam(1e-3)


class Model(eqx.Module):
    mlp: eqx.nn.MLP
    norm: eqx.nn.LayerNorm

    def __init__(self, key: jax.Array) -> None:
        self.mlp = eqx.nn.MLP(IN, OUT, WIDTH, DEPTH, activation=jax.nn.gelu, key=key)
        self.norm = eqx.nn.LayerNorm(IN)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.mlp(self.norm(x))


def loss_fn(model: Model, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((jax.vmap(model)(x) - y) ** 2)


@eqx.filter_jit
def train_step(model: Model, opt_state: Any, x: jax.Array, y: jax.Array) -> tuple[Model, Any, jax.Array]:
    loss, grads = eqx.filter_value_and_grad(loss_fn)(model, x, y)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), opt_state, loss


def spec_of(leaf: jax.ShapeDtypeStruct) -> P:
    """Weights [out, in]: the wider dim over `model`; vectors replicated."""
    if len(leaf.shape) == 2:
        return P("model", None) if leaf.shape[0] >= leaf.shape[1] else P(None, "model")
    return P()


def inputs(mesh: Any) -> tuple[Any, ...]:
    """(model, opt_state, x, y): the model abstract (`eqx.filter_eval_shape`), every array on `mesh`."""

    def placed(leaf: Any) -> Any:
        if not isinstance(leaf, jax.ShapeDtypeStruct):
            return leaf
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, spec_of(leaf)))

    model = jax.tree.map(placed, eqx.filter_eval_shape(Model, jax.random.key(0)))
    arrays = eqx.filter(model, lambda leaf: isinstance(leaf, jax.ShapeDtypeStruct))
    opt_state = jax.tree.map(placed, jax.eval_shape(OPTIMIZER.init, arrays))
    batch = NamedSharding(mesh, P("data", None))
    x = jax.ShapeDtypeStruct((BATCH, IN), jnp.float32, sharding=batch)
    y = jax.ShapeDtypeStruct((BATCH, OUT), jnp.float32, sharding=batch)
    return model, opt_state, x, y
