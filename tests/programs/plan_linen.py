"""A Flax linen MLP whose weights carry logical axis names, for `shardcli plan FILE.py:FN`.

`nn.with_partitioning` boxes each weight with its names ("embed", "mlp"); the batch is named by the
LOGICAL_AXES table. plan lays it out by mapping the names to mesh axes (fsdp, tensor, data).
"""

import jax
import jax.numpy as jnp
from flax import linen as nn

D, F, BATCH = 512, 2048, 64


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        init = nn.initializers.lecun_normal()
        w1 = self.param("w1", nn.with_partitioning(init, ("embed", "mlp")), (D, F))
        w2 = self.param("w2", nn.with_partitioning(init, ("mlp", "embed")), (F, D))
        return jax.nn.relu(x @ w1) @ w2


MODEL = MLP()
LOGICAL_AXES = {"batch": ("batch", None)}


def train_step(params, batch):
    def loss(p):
        return jnp.mean((MODEL.apply(p, batch) - batch) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), value


def inputs():
    params = jax.eval_shape(MODEL.init, jax.random.key(0), jnp.zeros((8, D)))
    return params, jax.ShapeDtypeStruct((BATCH, D), jnp.float32)
