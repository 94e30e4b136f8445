"""A train step jitted with its own in_shardings and out_shardings, as MaxText's `train_compile.py`
and flax `examples/lm1b` build theirs, for `shardcli plan FILE.py:FN`.

`inputs(mesh, rules=...)` makes the abstract state (`jax.eval_shape` of a linen model whose weights
carry logical names), turns its logical partition specs into shardings on the mesh it is given by
the rules (`nn.logical_to_mesh_sharding`), and jits the step with them, MaxText's pattern. plan
calls it once per candidate mesh, and with its own rule sets through the `rules` keyword.
"""

import jax
import jax.numpy as jnp
from flax import linen as nn
from jax.sharding import PartitionSpec as P

D, F, BATCH = 512, 2048, 64

# The program's own rules (MaxText's `logical_axis_rules`, Flax's format): logical name -> mesh axes.
# The batch over every axis: fewer bytes per chip than plan's rule sets (batch over data and fsdp)
# wherever the mesh has a tensor axis, the same layout where it has none.
LOGICAL_AXIS_RULES = (("batch", ("data", "fsdp", "tensor")), ("embed", "fsdp"), ("mlp", "tensor"))


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        init = nn.initializers.lecun_normal()
        w1 = self.param("w1", nn.with_logical_partitioning(init, ("embed", "mlp")), (D, F))
        w2 = self.param("w2", nn.with_logical_partitioning(init, ("mlp", "embed")), (F, D))
        return jax.nn.relu(x @ w1) @ w2


MODEL = MLP()


def train_step(params, batch):
    def loss(p):
        return jnp.mean((MODEL.apply(p, batch) - batch) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), value


def inputs(mesh, rules=LOGICAL_AXIS_RULES):
    boxed = jax.eval_shape(MODEL.init, jax.random.key(0), jnp.zeros((8, D)))
    params_sharding = nn.logical_to_mesh_sharding(nn.get_partition_spec(boxed), mesh, rules)
    batch_sharding = nn.logical_to_mesh_sharding(P("batch", None), mesh, rules)
    step = jax.jit(
        train_step,
        in_shardings=(params_sharding, batch_sharding),
        out_shardings=(params_sharding, None),
        donate_argnums=0,
    )
    params = jax.tree.map(
        lambda s, sharding: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding),
        nn.unbox(boxed),
        params_sharding,
    )
    return step, (params, jax.ShapeDtypeStruct((BATCH, D), jnp.float32))
