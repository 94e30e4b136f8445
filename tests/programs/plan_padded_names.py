"""A Flax linen block whose kernels carry fewer logical axis names than dimensions, as flax
`examples/lm1b` writes them, for `shardcli plan FILE.py:FN`.

The query kernel is (embed, heads, head_dim) but named ('embed', 'kv'): Flax builds its partition
spec as `PartitionSpec('embed', 'kv')`, which leaves the last dimension whole, and plan pads the
names with None at the end the same way. The batch is named by the LOGICAL_AXES table.
"""

import jax
import jax.numpy as jnp
from flax import linen as nn

D, HEADS, HEAD_DIM, BATCH = 256, 4, 64, 64


class Block(nn.Module):
    @nn.compact
    def __call__(self, x):
        init = nn.initializers.xavier_uniform()
        query = nn.DenseGeneral(
            (HEADS, HEAD_DIM),
            kernel_init=nn.with_logical_partitioning(init, ("embed", "kv")),
            use_bias=False,
            name="query",
        )(x)
        out = nn.DenseGeneral(
            D,
            axis=(-2, -1),
            kernel_init=nn.with_logical_partitioning(init, ("kv", None, "embed")),
            use_bias=False,
            name="out",
        )
        return out(jax.nn.relu(query))


MODEL = Block()
LOGICAL_AXES = {"batch": ("batch", None)}


def train_step(params, batch):
    def loss(p):
        return jnp.mean((MODEL.apply(p, batch) - batch) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), value


def inputs():
    params = jax.eval_shape(MODEL.init, jax.random.key(0), jnp.zeros((8, D)))
    return params, jax.ShapeDtypeStruct((BATCH, D), jnp.float32)
