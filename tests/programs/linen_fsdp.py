"""A Flax linen transformer trained with FSDP, as the Flax guides write it.

Parameters are boxed with `nn.with_partitioning` (their layer stack scanned with `nn.scan`), the
state is a `flax.training.train_state.TrainState` with optax's AdamW, activations are pinned with
`with_sharding_constraint`, and the jitted step's in/out shardings come from the boxes'
`nn.get_partition_spec`: it needs the mesh, so `make(mesh)` builds both the step and its arguments.

    shardcli inspect tests/programs/linen_fsdp.py:train_step --inputs tests/programs/linen_fsdp.py:make
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

VOCAB, DIM, HEADS, HIDDEN, LAYERS, SEQ, BATCH = 512, 64, 4, 256, 2, 32, 16


def dense(features: int, names: tuple[str | None, ...], name: str) -> nn.Dense:
    init = nn.with_partitioning(nn.initializers.lecun_normal(), names)
    return nn.Dense(features, use_bias=False, kernel_init=init, name=name)


class Block(nn.Module):
    mesh: Any

    @nn.compact
    def __call__(self, x: jax.Array, _: Any) -> tuple[jax.Array, None]:
        x = jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, P("data", None, None)))
        h = nn.LayerNorm(use_bias=False, scale_init=nn.with_partitioning(nn.initializers.ones, (None,)))(x)
        q, k, v = (dense(DIM, ("data", None), n)(h) for n in ("query", "key", "value"))
        q, k, v = (t.reshape(*t.shape[:2], HEADS, DIM // HEADS) for t in (q, k, v))
        weights = nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / (DIM // HEADS) ** 0.5)
        attended = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(x.shape)
        x = x + dense(DIM, ("data", None), "out")(attended)
        h = nn.LayerNorm(use_bias=False, scale_init=nn.with_partitioning(nn.initializers.ones, (None,)))(x)
        x = x + dense(DIM, ("data", None), "down")(nn.gelu(dense(HIDDEN, (None, "data"), "up")(h)))
        return x, None


class Transformer(nn.Module):
    mesh: Any

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        embed = nn.Embed(
            VOCAB, DIM, embedding_init=nn.with_partitioning(nn.initializers.normal(0.02), ("data", None))
        )
        x = embed(tokens)
        stack = nn.scan(
            Block,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            length=LAYERS,
            metadata_params={nn.PARTITION_NAME: None},
        )
        x, _ = stack(self.mesh, name="layers")(x, None)
        return embed.attend(nn.LayerNorm(use_bias=False)(x))


OPTIMIZER = optax.adamw(3e-4)


def init_state(model: Transformer, key: jax.Array, tokens: jax.Array) -> train_state.TrainState:
    params = model.init(key, tokens)["params"]
    return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=OPTIMIZER)


def loss_fn(params: Any, state: train_state.TrainState, batch: dict[str, jax.Array]) -> jax.Array:
    logits = state.apply_fn({"params": params}, batch["tokens"])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"]).mean()


def train_step(state: train_state.TrainState, batch: dict[str, jax.Array]) -> tuple[Any, jax.Array]:
    loss, grads = jax.value_and_grad(loss_fn)(state.params, state, batch)
    return state.apply_gradients(grads=grads), loss


def abstract_batch(mesh: Any) -> dict[str, jax.ShapeDtypeStruct]:
    sharding = NamedSharding(mesh, P("data", None))
    return {
        name: jax.ShapeDtypeStruct((BATCH, SEQ), jnp.int32, sharding=sharding)
        for name in ("tokens", "targets")
    }  # noqa: E501


def make(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """The jitted step with the state's shardings, and its abstract arguments (nothing allocated)."""
    batch = abstract_batch(mesh)
    init = functools.partial(init_state, Transformer(mesh))
    abstract = jax.eval_shape(init, jax.random.key(0), batch["tokens"])
    state_sharding = jax.tree.map(lambda spec: NamedSharding(mesh, spec), nn.get_partition_spec(abstract))

    # The state keeps its boxes (as TrainState.create made it): flax unboxes them as the step reads them.
    def placed(leaf: Any, sharding: NamedSharding) -> Any:
        if isinstance(leaf, nn.Partitioned):
            return leaf.replace_boxed(placed(leaf.value, sharding))
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)

    state = jax.tree.map(placed, abstract, state_sharding, is_leaf=lambda x: isinstance(x, nn.Partitioned))
    step = jax.jit(train_step, in_shardings=(state_sharding, None), out_shardings=(state_sharding, None))
    return step, (state, batch)
