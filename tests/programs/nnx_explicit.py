"""A Flax NNX model as the NNX Gemma example builds it: on an explicit-axes mesh (`jax.make_mesh`'s
default), created abstractly by `nnx.eval_shape` under `jax.set_mesh` (its shardings on the mesh's
AbstractMesh), with `nnx.Rngs` for dropout (typed keys in its state) and `out_sharding=P(...)` where
explicit sharding must be told.

    shardcli inspect tests/programs/nnx_explicit.py:make_step --inputs tests/programs/nnx_explicit.py:make
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

VOCAB, DIM, HIDDEN, LAYERS, SEQ, BATCH = 256, 64, 256, 2, 16, 16


def linear(d_in: int, d_out: int, names: tuple[str | None, ...], rngs: nnx.Rngs) -> nnx.Linear:
    init = nnx.with_partitioning(nnx.initializers.lecun_normal(), names)
    return nnx.Linear(d_in, d_out, use_bias=False, kernel_init=init, rngs=rngs)


class MLPBlock(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.norm = nnx.RMSNorm(DIM, rngs=rngs)
        self.up = linear(DIM, HIDDEN, (None, "model"), rngs)
        self.down = linear(HIDDEN, DIM, ("model", None), rngs)
        self.dropout = nnx.Dropout(0.1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = nnx.gelu(self.up(self.norm(x)))
        # contracting over `model` on both sides: explicit axes want the result's sharding said
        return x + self.dropout(self.down(h, out_sharding=P("data", None, None)))


class Model(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        init = nnx.with_partitioning(nnx.initializers.normal(0.02), (None, "model"))
        self.embed = nnx.Embed(VOCAB, DIM, embedding_init=init, rngs=rngs)
        self.blocks = nnx.List([MLPBlock(rngs) for _ in range(LAYERS)])
        self.head = linear(DIM, VOCAB, (None, "model"), rngs)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        x = self.embed(tokens, out_sharding=P("data", None, None))
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def make_step(graphdef: nnx.GraphDef[Any]) -> Any:
    """The jitted SGD step of the model `graphdef` describes, on its (params, rest) state."""

    @jax.jit
    def train_step(params: nnx.State, rest: nnx.State, tokens: jax.Array) -> tuple[Any, Any, jax.Array]:
        model = nnx.merge(graphdef, params, rest)

        def loss_fn(model: Model) -> jax.Array:
            labels = jax.nn.one_hot(tokens, VOCAB)
            return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(model(tokens)), axis=-1))

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        _, params, rest = nnx.split(model, nnx.Param, ...)  # type: ignore[misc]
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), rest, loss

    return train_step


MESH_SHAPE, MESH_AXES = (2, 4), ("data", "model")


def make() -> dict[str, Any]:
    """The step and its arguments, as the script builds them: its own explicit-axes mesh, the model
    created abstractly under it (shardings on its AbstractMesh), its state split into params and the
    rest (RNG keys and counts); the tokens sharded over `data`."""
    mesh = jax.make_mesh(MESH_SHAPE, MESH_AXES)  # explicit axes: jax.make_mesh's default
    with jax.set_mesh(mesh):
        model = nnx.eval_shape(lambda: Model(nnx.Rngs(params=0, dropout=1)))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)  # type: ignore[misc]
    tokens = jax.ShapeDtypeStruct((BATCH, SEQ), jnp.int32, sharding=NamedSharding(mesh, P("data", None)))
    return {"fn": make_step(graphdef), "args": (params, rest, tokens)}
