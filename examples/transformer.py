"""A transformer block (attention + MLP) with its parameters as a pytree, for `shardcli inspect`.

    shardcli inspect examples/transformer.py:block --inputs examples/transformer.py:inputs \
        --mesh 2x4 --axes data,model

`inputs(mesh)` returns the block's arguments as jax.ShapeDtypeStructs with shardings: nothing is
allocated, so the sizes below (set BATCH, SEQ, D_MODEL, ...) may be far beyond this machine's memory.
The layout is Megatron's: heads and the MLP's hidden dim over `model`, the batch over `data` (the
defaults divide over meshes up to 16x16, so `--target tpu-v5e:16x16` takes them as they are).
"""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

BATCH, SEQ, D_MODEL, HEADS, D_FF = 32, 512, 1024, 16, 4096
DTYPE = jnp.bfloat16


def block(params, x):
    """Pre-norm self-attention and MLP, each with a residual connection."""
    b, s, d = x.shape
    h = params["wq"].shape[1]
    y = _norm(x)
    q = jnp.einsum("bsd,dhk->bshk", y, params["wq"])
    k = jnp.einsum("bsd,dhk->bshk", y, params["wk"])
    v = jnp.einsum("bsd,dhk->bshk", y, params["wv"])
    scores = jnp.einsum("bqhk,bshk->bhqs", q, k) / jnp.sqrt(q.shape[-1]).astype(x.dtype)
    attn = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(x.dtype)
    out = jnp.einsum("bhqs,bshk->bqhk", attn, v).reshape(b, s, h * q.shape[-1])
    x = x + out @ params["wo"]
    y = _norm(x)
    return x + jax.nn.gelu(y @ params["w_up"]) @ params["w_down"]


def _norm(x):
    mean = jnp.mean(x.astype(jnp.float32), axis=-1, keepdims=True)
    var = jnp.var(x.astype(jnp.float32), axis=-1, keepdims=True)
    return ((x - mean) * jax.lax.rsqrt(var + 1e-6)).astype(x.dtype)


def inputs(mesh, batch=BATCH, seq=SEQ, d_model=D_MODEL, heads=HEADS, d_ff=D_FF, dtype=DTYPE):
    """The block's (params, x) as ShapeDtypeStructs on `mesh` (axes data and model)."""

    def arg(shape, *spec):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, P(*spec)))

    head = d_model // heads
    params = {
        "wq": arg((d_model, heads, head), None, "model", None),
        "wk": arg((d_model, heads, head), None, "model", None),
        "wv": arg((d_model, heads, head), None, "model", None),
        "wo": arg((d_model, d_model), "model", None),
        "w_up": arg((d_model, d_ff), None, "model"),
        "w_down": arg((d_ff, d_model), "model", None),
    }
    return params, arg((batch, seq, d_model), "data", None, None)
