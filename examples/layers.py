"""A stack of layers under `lax.scan`, trained one step, for `shardcli inspect`'s step-time estimate.

    shardcli inspect examples/layers.py:train_step --inputs examples/layers.py:inputs \
        --target tpu-v5e:4x4 --axes data,model

XLA's own cost analysis counts a scanned layer once; shardcli counts it once per layer (`LAYERS`
trips forward, `LAYERS` backward). `inputs(mesh)` gives the arguments as abstract shapes: nothing
is allocated. The layout is Megatron's MLP: the hidden dim over `model`, the batch over `data`.
"""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

LAYERS, BATCH, SEQ, D_MODEL, D_FF = 8, 32, 512, 1024, 4096
DTYPE = jnp.bfloat16


def layer(x, w):
    """A pre-norm MLP block with a residual connection, rematerialised in the backward pass."""
    y = x * jax.lax.rsqrt(jnp.mean(jnp.square(x.astype(jnp.float32)), -1, keepdims=True) + 1e-6)
    return x + jax.nn.gelu(y.astype(x.dtype) @ w["up"]) @ w["down"]


def loss(params, x):
    step = jax.checkpoint(layer)
    y, _ = jax.lax.scan(lambda h, w: (step(h, w), None), x, params)
    return jnp.mean(jnp.square(y.astype(jnp.float32)))


def train_step(params, x):
    """One SGD step: the loss's gradient through every layer, and the update."""
    grads = jax.grad(loss)(params, x)
    return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)


def inputs(mesh):
    """(params, x) as ShapeDtypeStructs on `mesh` (axes data and model), each weight stacked over layers."""

    def arg(shape, *spec):
        return jax.ShapeDtypeStruct(shape, DTYPE, sharding=NamedSharding(mesh, P(*spec)))

    params = {
        "up": arg((LAYERS, D_MODEL, D_FF), None, None, "model"),
        "down": arg((LAYERS, D_FF, D_MODEL), None, "model", None),
    }
    return params, arg((BATCH, SEQ, D_MODEL), "data", None, None)
