"""A Flax NNX MLP whose kernels carry logical axis names, for `shardcli plan` and `inspect --rules`.

    shardcli plan examples/nnx_mlp.py:train_step --inputs examples/nnx_mlp.py:inputs --target tpu-v5e:2x2

`nnx.with_partitioning` names the kernels' dims (`embed`, `mlp`), as MaxText names its parameters;
the batch is named in LOGICAL_AXES (`batch`). No mesh appears here: plan maps the names to mesh
axes (`embed=fsdp,mlp=tensor,batch=data+fsdp`, ...), once per layout it tries, and prints the
`shardcli inspect ... --rules` command that compiles its winner again.

flax 0.12 shards a named variable as it is made, which needs a mesh with those axes; plan and
inspect --rules call `inputs` with that off, so the model is made there (once) and the step reuses
its structure.
"""

import functools

import jax
import jax.numpy as jnp
from flax import nnx

D_MODEL, D_MLP, BATCH = 4096, 16384, 256
LEARNING_RATE = 1e-3
LOGICAL_AXES = {"batch": ("batch", None)}  # the step's `batch` argument: its rows are the batch


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        self.up = nnx.Linear(
            D_MODEL, D_MLP, kernel_init=nnx.with_partitioning(init, ("embed", "mlp")), rngs=rngs
        )
        self.down = nnx.Linear(
            D_MLP, D_MODEL, kernel_init=nnx.with_partitioning(init, ("mlp", "embed")), rngs=rngs
        )

    def __call__(self, x):
        return self.down(jax.nn.relu(self.up(x)))


@functools.cache
def abstract_model():
    """The model's structure and abstract state (`nnx.eval_shape`: nothing allocated)."""
    return nnx.split(nnx.eval_shape(lambda: MLP(nnx.Rngs(0))))


def train_step(state, batch):
    """One SGD step on an autoencoding loss; returns the new state and the loss."""
    graphdef, _ = abstract_model()

    def loss(s):
        return jnp.mean((nnx.merge(graphdef, s)(batch) - batch) ** 2)

    value, grads = jax.value_and_grad(loss)(state)
    return jax.tree.map(lambda p, g: p - LEARNING_RATE * g, state, grads), value


def inputs():
    """The step's arguments: the model's state (kernels named embed/mlp) and a batch."""
    _, state = abstract_model()
    return state, jax.ShapeDtypeStruct((BATCH, D_MODEL), jnp.float32)
