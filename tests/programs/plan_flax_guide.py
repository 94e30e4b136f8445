"""A Flax NNX model as Flax's sharding guide writes it: mesh-axis names ('model', 'data') in
`nnx.with_partitioning`, and `inputs` that make the model under `jax.set_mesh`
with its own sharding constraints (for `shardcli plan` and `inspect --rules`)."""

import jax
import jax.numpy as jnp
from flax import nnx

DEPTH = 256
LOGICAL_AXES = {"x": ("data", None)}  # the step's `x` argument: its rows are the batch
GRAPHDEF: list[nnx.GraphDef] = []  # the model's structure, from inputs


class DotReluDot(nnx.Module):
    def __init__(self, depth, rngs):
        init_fn = nnx.initializers.lecun_normal()
        self.dot1 = nnx.Linear(
            depth,
            depth,
            kernel_init=nnx.with_partitioning(init_fn, (None, "model")),
            use_bias=False,
            rngs=rngs,
        )
        self.dot2 = nnx.Linear(
            depth,
            depth,
            kernel_init=nnx.with_partitioning(init_fn, ("model", None)),
            use_bias=False,
            rngs=rngs,
        )

    def __call__(self, x):
        return self.dot2(jax.nn.relu(self.dot1(x)))


@nnx.jit
def create_sharded_model():
    model = DotReluDot(DEPTH, rngs=nnx.Rngs(0))
    state = nnx.state(model)
    pspecs = nnx.get_partition_spec(state)
    nnx.update(model, jax.lax.with_sharding_constraint(state, pspecs))
    return model


def train_step(state, x):
    def loss(s):
        return (nnx.merge(GRAPHDEF[0], s)(x) ** 2).mean()

    grads = jax.grad(loss)(state)
    return jax.tree.map(lambda p, g: p - 0.1 * g, state, grads)


def inputs(mesh):
    with jax.set_mesh(mesh):
        model = create_sharded_model()
    GRAPHDEF[:] = [nnx.graphdef(model)]
    return nnx.state(model), jnp.ones((64, DEPTH))
