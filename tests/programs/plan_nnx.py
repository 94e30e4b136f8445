"""A Flax NNX MLP whose kernels carry logical axis names, for `shardcli plan FILE.py:FN`.

`nnx.with_partitioning` names each kernel ("embed", "mlp"); the biases carry no names (replicated)
and the batch is named by the LOGICAL_AXES table. `inputs` returns the model's abstract state
(`nnx.eval_shape`, then `nnx.split`) and a batch; `train_step` merges the state back into the
module and takes one SGD step. plan lays it out by mapping the names to mesh axes.

flax 0.12 shards a variable with names as it is made, which needs a mesh with those axes: plan (and
inspect --rules) call `inputs` with that off (`nnx.use_eager_sharding(False)`), so the model is made
there, once, and the step reuses its structure.
"""

import functools

import jax
import jax.numpy as jnp
from flax import nnx

D, F, BATCH = 512, 2048, 64


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        self.up = nnx.Linear(D, F, kernel_init=nnx.with_partitioning(init, ("embed", "mlp")), rngs=rngs)
        self.down = nnx.Linear(F, D, kernel_init=nnx.with_partitioning(init, ("mlp", "embed")), rngs=rngs)

    def __call__(self, x):
        return self.down(jax.nn.relu(self.up(x)))


LOGICAL_AXES = {"batch": ("batch", None)}


@functools.cache
def abstract_model():
    """The model's structure and abstract state: nothing allocated."""
    return nnx.split(nnx.eval_shape(lambda: MLP(nnx.Rngs(0))))


def train_step(state, batch):
    graphdef, _ = abstract_model()

    def loss(s):
        return jnp.mean((nnx.merge(graphdef, s)(batch) - batch) ** 2)

    value, grads = jax.value_and_grad(loss)(state)
    return jax.tree.map(lambda p, g: p - 0.01 * g, state, grads), value


def inputs():
    _, state = abstract_model()
    return state, jax.ShapeDtypeStruct((BATCH, D), jnp.float32)
