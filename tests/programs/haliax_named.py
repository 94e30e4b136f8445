"""A Haliax model trained as Levanter trains one: named axes (`hax.Axis`), `hax.nn` layers, an axis
mapping from logical axes to the mesh's (`Embed`/`Mlp` over `model`, `Batch` over `data`), and the step
under `hax.named_jit(axis_resources=..., donate_args=...)`.

    shardcli inspect tests/programs/haliax_named.py:train_step \\
        --inputs tests/programs/haliax_named.py:inputs --mesh 2x4 --axes data,model
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import haliax as hax
import haliax.nn as hnn
import jax
import jax.numpy as jnp
import optax

Batch = hax.Axis("batch", 16)
Pos = hax.Axis("position", 32)
Embed = hax.Axis("embed", 64)
Mlp = hax.Axis("mlp", 256)
Vocab = hax.Axis("vocab", 128)

# Levanter's split: parameters over `model`, the batch over `data`
AXIS_MAPPING = {"batch": "data", "mlp": "model", "vocab": "model"}
OPTIMIZER = optax.adamw(1e-3)


class Block(eqx.Module):
    norm: hnn.LayerNorm
    up: hnn.Linear
    down: hnn.Linear

    @staticmethod
    def init(*, key: jax.Array) -> Block:
        k_up, k_down = jax.random.split(key)
        return Block(
            hnn.LayerNorm.init(Embed),
            hnn.Linear.init(In=Embed, Out=Mlp, key=k_up),
            hnn.Linear.init(In=Mlp, Out=Embed, key=k_down),
        )

    def __call__(self, x: hax.NamedArray) -> hax.NamedArray:
        return x + self.down(hnn.gelu(self.up(self.norm(x))))


class Model(eqx.Module):
    embed: hnn.Embedding
    blocks: tuple[Block, ...]
    head: hnn.Linear

    @staticmethod
    def init(*, key: jax.Array) -> Model:
        keys = jax.random.split(key, 4)
        return Model(
            hnn.Embedding.init(Vocab, Embed, key=keys[0]),
            (Block.init(key=keys[1]), Block.init(key=keys[2])),
            hnn.Linear.init(In=Embed, Out=Vocab, key=keys[3]),
        )

    def __call__(self, tokens: hax.NamedArray) -> hax.NamedArray:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def loss_fn(model: Model, tokens: hax.NamedArray) -> jax.Array:
    logits = model(tokens)
    targets = hnn.one_hot(hax.roll(tokens, -1, Pos), Vocab, dtype=logits.dtype)
    return hnn.cross_entropy_loss(logits, Vocab, targets, reduction=hax.mean).array


def _train_step(model: Model, opt_state: Any, tokens: hax.NamedArray) -> tuple[Model, Any, jax.Array]:
    loss, grads = eqx.filter_value_and_grad(loss_fn)(model, tokens)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), opt_state, loss


train_step = hax.named_jit(_train_step, axis_resources=AXIS_MAPPING, donate_args=(True, True, False))


def inputs(mesh: Any) -> tuple[Any, ...]:
    """(model, opt_state, tokens) as shapes alone, each laid out by the axis mapping
    (`hax.partitioning.infer_resource_partitions`): how Levanter compiles a step ahead of time."""

    def start() -> tuple[Any, ...]:
        model = Model.init(key=jax.random.PRNGKey(0))
        tokens = hax.random.randint(jax.random.PRNGKey(1), (Batch, Pos), 0, Vocab.size)
        return model, OPTIMIZER.init(eqx.filter(model, eqx.is_array)), tokens

    shapes = eqx.filter_eval_shape(start)
    shardings = hax.partitioning.infer_resource_partitions(shapes, AXIS_MAPPING, mesh=mesh)

    def placed(shape: Any, sharding: Any) -> Any:
        if isinstance(shape, hax.NamedArray):
            return hax.NamedArray(placed(shape.array, sharding), shape.axes)
        return jax.ShapeDtypeStruct(shape.shape, shape.dtype, sharding=sharding)

    return jax.tree.map(placed, shapes, shardings, is_leaf=lambda x: isinstance(x, hax.NamedArray))


def demo_tokens() -> jnp.ndarray:  # pragma: no cover - for a reader trying the model by hand
    return jnp.zeros((Batch.size, Pos.size), jnp.int32)
