"""Training steps as training code writes them, for `shardcli inspect --run`: steps that donate their
state (`donate_argnums`, `donate_argnames`, equinox's `filter_jit(donate="all")`, `nnx.jit`), take
static and keyword arguments, or come already jitted from `--inputs`. Small shapes: each compiles in
well under a second on 8 faked CPU devices.

    shardcli inspect tests/programs/training_steps.py:by_argnums \\
        --inputs tests/programs/training_steps.py:params_and_batch --axes data,model --run
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

DIM, HIDDEN, BATCH = 16, 32, 8
LEARNING_RATE = 0.1


def _struct(mesh: Any, shape: tuple[int, ...], spec: P) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))


def params_of(mesh: Any) -> dict[str, Any]:
    """Three arrays: more than a step of (params, x) has parameters."""
    return {
        "w1": _struct(mesh, (DIM, HIDDEN), P(None, "model")),
        "b1": _struct(mesh, (HIDDEN,), P("model")),
        "w2": _struct(mesh, (HIDDEN, DIM), P("model", None)),
    }


def batch_of(mesh: Any) -> jax.ShapeDtypeStruct:
    return _struct(mesh, (BATCH, DIM), P("data", None))


def loss_fn(params: dict[str, Any], x: jax.Array) -> jax.Array:
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] - x) ** 2)


def sgd(params: dict[str, Any], x: jax.Array, lr: Any = LEARNING_RATE) -> tuple[dict[str, Any], jax.Array]:
    loss, grads = jax.value_and_grad(loss_fn)(params, x)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss


@functools.partial(jax.jit, donate_argnums=0)
def by_argnums(params: dict[str, Any], x: jax.Array) -> tuple[dict[str, Any], jax.Array]:
    return sgd(params, x)


@functools.partial(jax.jit, donate_argnames="params")
def by_argnames(params: dict[str, Any], x: jax.Array) -> tuple[dict[str, Any], jax.Array]:
    return sgd(params, x)


@functools.partial(jax.jit, donate_argnums=0)
def renamed(params: dict[str, Any], x: jax.Array) -> tuple[tuple[Any, ...], jax.Array]:
    """Donates its params and returns them as a tuple: the same arrays, another structure."""
    new, loss = sgd(params, x)
    return (new["w1"], new["b1"], new["w2"]), loss


@functools.partial(jax.jit, static_argnums=2, static_argnames="lr")
def with_static(params: dict[str, Any], x: jax.Array, steps: int, lr: float = 0.1) -> Any:
    for _ in range(steps):
        params, loss = sgd(params, x, lr)
    return params, loss


def keywords(params: dict[str, Any], *, x: jax.Array, lr: jax.Array) -> tuple[dict[str, Any], jax.Array]:
    """A plain function whose batch and learning rate are keyword-only."""
    return sgd(params, x, lr)


def params_and_batch(mesh: Any) -> tuple[Any, ...]:
    return params_of(mesh), batch_of(mesh)


def static_call(mesh: Any) -> dict[str, Any]:
    return {"args": (params_of(mesh), batch_of(mesh), 2), "kwargs": {"lr": 0.05}}


def keyword_call(mesh: Any) -> dict[str, Any]:
    lr = jax.ShapeDtypeStruct((), jnp.float32, sharding=NamedSharding(mesh, P()))
    return {"args": (params_of(mesh),), "kwargs": {"x": batch_of(mesh), "lr": lr}}


def keyword_missing(mesh: Any) -> dict[str, Any]:
    return {"args": (params_of(mesh),), "kwargs": {"x": batch_of(mesh)}}


def jitted_here(mesh: Any) -> dict[str, Any]:
    """The step jitted by the --inputs function itself, donating its params."""
    return {"fn": jax.jit(sgd, donate_argnums=0), "args": params_and_batch(mesh)}


def equinox_all(mesh: Any) -> dict[str, Any]:
    """`eqx.filter_jit(donate="all")`: every array donated, the batch too, though no result can
    take its buffer."""
    import equinox as eqx

    return {"fn": eqx.filter_jit(sgd, donate="all"), "args": params_and_batch(mesh)}


def nnx_step(mesh: Any, static: bool = False) -> dict[str, Any]:
    """An NNX model and optax optimizer updated in place by an `nnx.jit` step that donates both
    (and, `static`, takes its loss scale as a static keyword argument)."""
    import optax
    from flax import nnx

    class MLP(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.up = nnx.Linear(DIM, HIDDEN, rngs=rngs)
            self.down = nnx.Linear(HIDDEN, DIM, rngs=rngs)

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.down(jax.nn.relu(self.up(x)))

    @nnx.jit(donate_argnums=(0, 1), static_argnames="scale")
    def step(model: MLP, optimizer: nnx.Optimizer, x: jax.Array, scale: float = 1.0) -> jax.Array:
        loss, grads = nnx.value_and_grad(lambda m: scale * jnp.mean((m(x) - x) ** 2))(model)
        optimizer.update(model, grads)
        return loss

    def placed(leaf: Any) -> Any:
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, P()))

    model = nnx.eval_shape(lambda: MLP(nnx.Rngs(0)))
    optimizer = nnx.eval_shape(lambda: nnx.Optimizer(MLP(nnx.Rngs(0)), optax.adam(1e-3), wrt=nnx.Param))
    return {
        "fn": step,
        "args": (jax.tree.map(placed, model), jax.tree.map(placed, optimizer), batch_of(mesh)),
        "kwargs": {"scale": 0.5} if static else {},
    }


def nnx_static(mesh: Any) -> dict[str, Any]:
    return nnx_step(mesh, static=True)
