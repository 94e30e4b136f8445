"""A two-layer MLP and its SGD train step, for `shardcli inspect` and the notebook.

    shardcli inspect examples/mlp.py:train_step --mesh 2x4 --axes data,model \
        --arg 'f32[256,1024]@data,None' --arg 'f32[1024,4096]@None,model' --arg 'f32[4096,1024]@model,None'

The arguments are the batch x and the two weights: the first layer's output dim and the second's
input dim are sharded over `model` (Megatron-style), the batch over `data`.
"""

import jax
import jax.numpy as jnp

LEARNING_RATE = 1e-3


def loss(w1, w2, x):
    h = jax.nn.relu(x @ w1)
    y = h @ w2
    return jnp.mean((y - x) ** 2)


@jax.jit
def train_step(x, w1, w2):
    """One SGD step on an autoencoding loss; returns the new weights and the loss."""
    value, (g1, g2) = jax.value_and_grad(loss, argnums=(0, 1))(w1, w2, x)
    return w1 - LEARNING_RATE * g1, w2 - LEARNING_RATE * g2, value
