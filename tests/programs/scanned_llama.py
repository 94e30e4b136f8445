"""A pure-JAX Llama: NamedTuple parameters stacked for `lax.scan`, hand-written AdamW, a step that is
already `@jax.jit` with its state donated, and a typed `rbg` PRNG key for dropout.

`inputs(mesh)` gives the arguments (abstract: nothing allocated); the step is compiled as jitted.

    shardcli inspect tests/programs/scanned_llama.py:train_step \\
        --inputs tests/programs/scanned_llama.py:inputs --mesh 2x4 --axes data,model
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

VOCAB, DIM, HEADS, HIDDEN, LAYERS, SEQ, BATCH = 512, 64, 4, 192, 3, 32, 16
DROPOUT, LEARNING_RATE, B1, B2, EPS = 0.1, 3e-4, 0.9, 0.95, 1e-8


class Layer(NamedTuple):
    """One decoder layer's weights, each stacked over the layers (arrays or their abstract shapes)."""

    attn_norm: Any  # [LAYERS, DIM]
    wq: Any  # [LAYERS, DIM, DIM]
    wk: Any
    wv: Any
    wo: Any
    mlp_norm: Any
    w_gate: Any  # [LAYERS, DIM, HIDDEN]
    w_up: Any
    w_down: Any  # [LAYERS, HIDDEN, DIM]


class Params(NamedTuple):
    embed: Any  # [VOCAB, DIM]
    layers: Layer
    final_norm: Any
    unembed: Any  # [DIM, VOCAB]


class AdamState(NamedTuple):
    count: Any
    mu: Params
    nu: Params


def rms_norm(x: jax.Array, scale: jax.Array) -> jax.Array:
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale


def rope(x: jax.Array) -> jax.Array:
    half = x.shape[-1] // 2
    freqs = 1.0 / 10000 ** (jnp.arange(half) / half)
    angles = jnp.arange(x.shape[1])[:, None] * freqs[None, :]
    sin, cos = jnp.sin(angles)[None, :, None, :], jnp.cos(angles)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def layer(x: jax.Array, w: Layer, key: jax.Array) -> jax.Array:
    b, s, _ = x.shape
    h = rms_norm(x, w.attn_norm)
    q, k, v = (jnp.einsum("bsd,de->bse", h, m).reshape(b, s, HEADS, -1) for m in (w.wq, w.wk, w.wv))
    q, k = rope(q), rope(k)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / q.shape[-1] ** 0.5
    causal = jnp.tril(jnp.ones((s, s), bool))
    weights = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1)
    attended = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, s, -1)
    keep = jax.random.bernoulli(key, 1 - DROPOUT, attended.shape)
    x = x + jnp.einsum("bse,ed->bsd", jnp.where(keep, attended / (1 - DROPOUT), 0), w.wo)
    h = rms_norm(x, w.mlp_norm)
    gated = jax.nn.silu(jnp.einsum("bsd,df->bsf", h, w.w_gate)) * jnp.einsum("bsd,df->bsf", h, w.w_up)
    return x + jnp.einsum("bsf,fd->bsd", gated, w.w_down)


def loss_fn(params: Params, tokens: jax.Array, targets: jax.Array, key: jax.Array) -> jax.Array:
    x = params.embed[tokens]

    def body(x: jax.Array, scanned: tuple[Layer, jax.Array]) -> tuple[jax.Array, None]:
        w, layer_key = scanned
        return layer(x, w, layer_key), None

    x, _ = jax.lax.scan(body, x, (params.layers, jax.random.split(key, LAYERS)))
    logits = jnp.einsum("bsd,dv->bsv", rms_norm(x, params.final_norm), params.unembed)
    labels = jax.nn.one_hot(targets, VOCAB)
    return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits), axis=-1))


@functools.partial(jax.jit, donate_argnums=(0, 1))
def train_step(
    params: Params, opt: AdamState, tokens: jax.Array, targets: jax.Array, key: jax.Array
) -> tuple[Params, AdamState, jax.Array]:
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens, targets, key)
    count = opt.count + 1
    mu = jax.tree.map(lambda m, g: B1 * m + (1 - B1) * g, opt.mu, grads)
    nu = jax.tree.map(lambda v, g: B2 * v + (1 - B2) * g * g, opt.nu, grads)
    scale = jnp.sqrt(1 - B2**count) / (1 - B1**count)
    params = jax.tree.map(
        lambda p, m, v: p - LEARNING_RATE * (scale * m / (jnp.sqrt(v) + EPS) + 0.1 * p), params, mu, nu
    )
    return params, AdamState(count, mu, nu), loss


def param_specs() -> Params:
    """FSDP over `data`, Megatron tensor parallelism over `model`; the layer axis is not sharded."""
    return Params(
        embed=P("model", "data"),
        layers=Layer(
            attn_norm=P(None, None),
            wq=P(None, "data", "model"),
            wk=P(None, "data", "model"),
            wv=P(None, "data", "model"),
            wo=P(None, "model", "data"),
            mlp_norm=P(None, None),
            w_gate=P(None, "data", "model"),
            w_up=P(None, "data", "model"),
            w_down=P(None, "model", "data"),
        ),
        final_norm=P(None),
        unembed=P("data", "model"),
    )


def param_shapes() -> Params:
    square = (LAYERS, DIM, DIM)
    return Params(
        embed=(VOCAB, DIM),
        layers=Layer(
            (LAYERS, DIM), square, square, square, square, (LAYERS, DIM),
            (LAYERS, DIM, HIDDEN), (LAYERS, DIM, HIDDEN), (LAYERS, HIDDEN, DIM),
        ),
        final_norm=(DIM,),
        unembed=(DIM, VOCAB),
    )  # fmt: skip


def inputs(mesh: Any) -> tuple[Any, ...]:
    """(params, opt_state, tokens, targets, key) as abstract arrays sharded on `mesh`."""

    def struct(shape: tuple[int, ...], spec: P, dtype: Any = jnp.float32) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))

    is_shape = lambda x: isinstance(x, tuple) and all(isinstance(d, int) for d in x)  # noqa: E731
    params = jax.tree.map(struct, param_shapes(), param_specs(), is_leaf=is_shape)
    opt = AdamState(struct((), P(), jnp.int32), params, params)
    tokens = struct((BATCH, SEQ), P("data", None), jnp.int32)
    key_type = jax.eval_shape(lambda: jax.random.key(0, impl="rbg")).dtype
    return params, opt, tokens, tokens, struct((), P(), key_type)
