"""A Llama-style decoder (Llama 3.2 1B's shapes: 1.24B parameters) in pure JAX, as training code
writes it: NamedTuple parameters with the layers stacked for `lax.scan`, rematerialised layers,
grouped-query attention with rotary embeddings, SwiGLU, tied embeddings, AdamW by hand, and a step
that is already `jax.jit`-ed with its parameters and optimizer state donated.

Everything is abstract (`jax.ShapeDtypeStruct`): inspecting it allocates nothing.

    shardcli inspect examples/llama.py:train_step --inputs examples/llama.py:inputs \\
        --target tpu-v5e:4x4 --axes data,model

`inputs(mesh)` shards the weights FSDP over `data` and Megatron-style over `model`, the batch over
`data`; `tiny_inputs(mesh)` is the same program at toy size (seconds to compile).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

HEAD_DIM = 64
LEARNING_RATE, B1, B2, EPS, WEIGHT_DECAY = 3e-4, 0.9, 0.95, 1e-8, 0.1


@dataclass(frozen=True)
class Config:
    vocab: int = 128_256
    dim: int = 2048
    layers: int = 16
    heads: int = 32
    kv_heads: int = 8
    hidden: int = 8192
    batch: int = 16
    seq: int = 2048


LLAMA_1B = Config()
TINY = Config(vocab=512, dim=128, layers=2, heads=2, kv_heads=1, hidden=256, batch=8, seq=64)


class Layer(NamedTuple):
    """One decoder layer's weights, each stacked over the layers ([LAYERS, ...])."""

    attn_norm: Any  # [L, dim]
    wq: Any  # [L, dim, heads * HEAD_DIM]
    wk: Any  # [L, dim, kv_heads * HEAD_DIM]
    wv: Any  # [L, dim, kv_heads * HEAD_DIM]
    wo: Any  # [L, heads * HEAD_DIM, dim]
    mlp_norm: Any  # [L, dim]
    w_gate: Any  # [L, dim, hidden]
    w_up: Any  # [L, dim, hidden]
    w_down: Any  # [L, hidden, dim]


class Params(NamedTuple):
    embed: Any  # [vocab, dim], tied: also the output projection
    layers: Layer
    final_norm: Any  # [dim]


class AdamState(NamedTuple):
    count: Any
    mu: Params
    nu: Params


def rms_norm(x: jax.Array, scale: jax.Array) -> jax.Array:
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-5)
    return (normed * scale).astype(x.dtype)


def rope(x: jax.Array) -> jax.Array:
    half = x.shape[-1] // 2
    freqs = 1.0 / 500_000 ** (jnp.arange(half, dtype=jnp.float32) / half)
    angles = jnp.arange(x.shape[1], dtype=jnp.float32)[:, None] * freqs[None, :]
    sin, cos = jnp.sin(angles)[None, :, None, :], jnp.cos(angles)[None, :, None, :]
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1).astype(x.dtype)


def attention(h: jax.Array, w: Layer) -> jax.Array:
    b, s, _ = h.shape
    q = jnp.einsum("bsd,de->bse", h, w.wq.astype(h.dtype)).reshape(b, s, -1, HEAD_DIM)
    k = jnp.einsum("bsd,de->bse", h, w.wk.astype(h.dtype)).reshape(b, s, -1, HEAD_DIM)
    v = jnp.einsum("bsd,de->bse", h, w.wv.astype(h.dtype)).reshape(b, s, -1, HEAD_DIM)
    q, k = rope(q), rope(k)
    groups = q.shape[2] // k.shape[2]
    q = q.reshape(b, s, k.shape[2], groups, HEAD_DIM)
    scores = jnp.einsum("bqkgd,bskd->bkgqs", q, k).astype(jnp.float32) / HEAD_DIM**0.5
    causal = jnp.tril(jnp.ones((s, s), bool))
    weights = jax.nn.softmax(jnp.where(causal, scores, -1e30), axis=-1).astype(h.dtype)
    attended = jnp.einsum("bkgqs,bskd->bqkgd", weights, v).reshape(b, s, -1)
    return jnp.einsum("bse,ed->bsd", attended, w.wo.astype(h.dtype))


@functools.partial(jax.checkpoint, policy=jax.checkpoint_policies.nothing_saveable)
def layer(x: jax.Array, w: Layer) -> jax.Array:
    x = x + attention(rms_norm(x, w.attn_norm), w)
    h = rms_norm(x, w.mlp_norm)
    gate = jax.nn.silu(jnp.einsum("bsd,df->bsf", h, w.w_gate.astype(h.dtype)))
    up = jnp.einsum("bsd,df->bsf", h, w.w_up.astype(h.dtype))
    return x + jnp.einsum("bsf,fd->bsd", gate * up, w.w_down.astype(h.dtype))


def loss_fn(params: Params, tokens: jax.Array, targets: jax.Array) -> jax.Array:
    x = params.embed[tokens].astype(jnp.bfloat16)
    x, _ = jax.lax.scan(lambda x, w: (layer(x, w), None), x, params.layers)
    logits = jnp.einsum("bsd,vd->bsv", rms_norm(x, params.final_norm), params.embed.astype(x.dtype))
    logp = jax.nn.log_softmax(logits.astype(jnp.float32))
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


@functools.partial(jax.jit, donate_argnums=(0, 1))
def train_step(
    params: Params, opt: AdamState, tokens: jax.Array, targets: jax.Array
) -> tuple[Params, AdamState, jax.Array]:
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens, targets)
    count = opt.count + 1
    mu = jax.tree.map(lambda m, g: B1 * m + (1 - B1) * g, opt.mu, grads)
    nu = jax.tree.map(lambda v, g: B2 * v + (1 - B2) * g * g, opt.nu, grads)
    scale = jnp.sqrt(1 - B2**count) / (1 - B1**count)
    params = jax.tree.map(
        lambda p, m, v: p - LEARNING_RATE * (scale * m / (jnp.sqrt(v) + EPS) + WEIGHT_DECAY * p),
        params,
        mu,
        nu,
    )
    return params, AdamState(count, mu, nu), loss


def shapes(c: Config) -> Params:
    q, kv = c.heads * HEAD_DIM, c.kv_heads * HEAD_DIM
    stacked = lambda *dims: (c.layers, *dims)  # noqa: E731
    return Params(
        embed=(c.vocab, c.dim),
        layers=Layer(
            stacked(c.dim), stacked(c.dim, q), stacked(c.dim, kv), stacked(c.dim, kv), stacked(q, c.dim),
            stacked(c.dim), stacked(c.dim, c.hidden), stacked(c.dim, c.hidden), stacked(c.hidden, c.dim),
        ),
        final_norm=(c.dim,),
    )  # fmt: skip


def specs() -> Params:
    """FSDP over `data`, tensor parallelism over `model`; the layer axis is never sharded."""
    column, row = P(None, "data", "model"), P(None, "model", "data")
    return Params(
        embed=P("model", "data"),
        layers=Layer(P(), column, column, column, row, P(), column, column, row),
        final_norm=P(),
    )


def count_parameters(c: Config = LLAMA_1B) -> int:
    total = 0
    is_shape = lambda x: isinstance(x, tuple) and all(isinstance(d, int) for d in x)  # noqa: E731
    for shape in jax.tree.leaves(shapes(c), is_leaf=is_shape):
        size = 1
        for d in shape:
            size *= d
        total += size
    return total


def inputs(mesh: Any, config: Config = LLAMA_1B) -> tuple[Any, ...]:
    """(params, opt_state, tokens, targets), abstract, sharded on `mesh` (axes data and model)."""

    def struct(shape: tuple[int, ...], spec: P, dtype: Any = jnp.float32) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))

    is_shape = lambda x: isinstance(x, tuple) and all(isinstance(d, int) for d in x)  # noqa: E731
    params = jax.tree.map(struct, shapes(config), specs(), is_leaf=is_shape)
    opt = AdamState(struct((), P(), jnp.int32), params, params)
    tokens = struct((config.batch, config.seq), P("data", None), jnp.int32)
    return params, opt, tokens, tokens


def tiny_inputs(mesh: Any) -> tuple[Any, ...]:
    """The same program at toy size."""
    return inputs(mesh, TINY)
