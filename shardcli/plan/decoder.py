"""shardcli's own decoder-only transformer train step, in pure JAX, laid out by logical axis rules.

One step: token embedding (a one-hot matmul, MaxText's `use_iota_embed`), the layers under `lax.scan`
with a remat policy, causal grouped-query attention (`dot`: queries in blocks, each block recomputed
in the backward pass as flash attention does, the scores through HBM; `flash`: cuDNN's fused
kernel on GPUs, Pallas splash attention on TPUs), a gated (or plain ReLU) MLP, RMSNorm, the
unembedding (tied or not), cross-entropy, the gradient and an AdamW update. Parameters are float32,
the maths bfloat16, the optimizer's moments float32: MaxText's defaults.

Every parameter carries logical axis names (`shardcli.specs.decoder.parameter_table`) and every
activation constraint names logical axes too; a layout's rules map them to mesh axes. `unrolled=k`
builds a copy with k layers and no loop, for per-layer costs extrapolated from 1- and 2-layer copies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shardcli.errors import ShardcliError
from shardcli.specs.decoder import (
    SPLASH_BLOCK,
    DecoderConfig,
    ParamInfo,
    Rules,
    parameter_table,
    partition_spec_args,
    resolve_axes,
)
from shardcli.specs.remat import RematPolicy, parse_policy

COMPUTE = jnp.bfloat16
PARAM = jnp.float32
ADAM_B1, ADAM_B2, ADAM_EPS, WEIGHT_DECAY, LEARNING_RATE = 0.9, 0.95, 1e-8, 0.1, 3e-4
QUERY_BLOCKS_MAX = 8  # attention's queries in at most this many blocks (each at least 256 long)


@dataclass(frozen=True)
class StepProgram:
    """A train step ready to lower: the jitted function and its abstract arguments."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    layers: int  # layers the program holds (the model's, or an unrolled copy's)


def remat_policy(policy: RematPolicy) -> Any:
    """The `jax.checkpoint` policy of a remat policy (`shardcli.specs.remat`), MaxText's way:
    named activations kept or offloaded to pinned host memory, matmul outputs without batch
    dimensions kept or offloaded (`minimal`, `minimal_offloaded`); None: keep only what the
    layer's function is given (`full`)."""
    policies = jax.checkpoint_policies
    named = None
    if policy.offloaded:
        named = policies.save_and_offload_only_these_names(
            names_which_can_be_saved=list(policy.saved),
            names_which_can_be_offloaded=list(policy.offloaded),
            offload_src="device",
            offload_dst="pinned_host",
        )
    elif policy.saved:
        named = policies.save_only_these_names(*policy.saved)
    dots = {
        "save": policies.checkpoint_dots_with_no_batch_dims,
        "offload": policies.offload_dot_with_no_batch_dims("device", "pinned_host")
        if policy.dots == "offload"
        else None,
    }.get(policy.dots or "")
    if named is None or dots is None:
        return named if named is not None else dots
    # MaxText's minimal_flash: the dots and named ones kept, both policies answering yes or no (no
    # policy both offloads and keeps dots: JAX's save_from_both_policies takes no offloading one)
    return policies.save_from_both_policies(dots, named)


class _Layout:
    """Logical axis names -> PartitionSpecs on one mesh."""

    def __init__(self, rules: Rules, mesh: Any) -> None:
        self.rules = rules
        self.mesh = mesh
        self.sizes = dict(zip(mesh.axis_names, mesh.devices.shape, strict=True))
        self.platform = str(mesh.devices.flat[0].platform)

    def spec(self, logical: tuple[str | None, ...], shape: tuple[int, ...] | None = None) -> P:
        entries = resolve_axes(logical, self.rules, self.sizes, shape)
        return P(*partition_spec_args(entries))

    def constrain(self, x: Any, *logical: str | None) -> Any:
        return jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, self.spec(logical, x.shape)))


def _rms_norm(x: Any, scale: Any) -> Any:
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6)
    return (normed * scale).astype(COMPUTE)


def _attention_block(q: Any, k: Any, v: Any, start: int) -> Any:
    """Causal attention of one block of queries (starting at `start`) on the keys before them.

    q [b, t, kv, g, hd]; k, v [b, s, kv, hd] with s = start + t.
    """
    t, s = q.shape[1], k.shape[1]
    scores = jnp.einsum("btkgh,bskh->bkgts", q, k, preferred_element_type=jnp.float32)
    scores = scores * (q.shape[-1] ** -0.5)
    visible = (jnp.arange(s)[None, :] <= (start + jnp.arange(t))[:, None])[None, None, None]
    scores = jnp.where(visible, scores, -1e30)
    probs = jax.nn.softmax(scores, axis=-1).astype(COMPUTE)
    return jnp.einsum("bkgts,bskh->btkgh", probs, v)


def _attention(q: Any, k: Any, v: Any, layout: _Layout) -> Any:
    """Causal grouped-query attention in query blocks; each block sees only the keys up to its end
    (masked blocks are skipped, as flash attention skips them) and is recomputed in the backward."""
    b, s, heads, hd = q.shape
    kv = k.shape[2]
    q = q.reshape(b, s, kv, heads // kv, hd)
    blocks = 1
    while blocks < QUERY_BLOCKS_MAX and s % (blocks * 2) == 0 and s // (blocks * 2) >= 256:
        blocks *= 2
    t = s // blocks
    block = jax.checkpoint(_attention_block, static_argnums=(3,), prevent_cse=True)
    outs = [
        block(q[:, i * t : (i + 1) * t], k[:, : (i + 1) * t], v[:, : (i + 1) * t], i * t)
        for i in range(blocks)
    ]
    out = outs[0] if blocks == 1 else jnp.concatenate(outs, axis=1)
    return layout.constrain(out.reshape(b, s, heads, hd), "batch", "length", "act_heads", None)


def _flash_attention(q: Any, k: Any, v: Any, layout: _Layout) -> Any:
    """Causal grouped-query attention as fused kernels whose scores never reach HBM: cuDNN's flash
    attention on GPUs (`jax.nn.dot_product_attention(implementation="cudnn")`, compiled to
    `__cudnn$fmha` calls) and Pallas splash attention on TPUs (MaxText's; `tpu_custom_call` kernels).
    `shardcli.analysis.kernels` counts both from their shapes (XLA counts them as nothing)."""
    if layout.platform not in ("cuda", "gpu", "tpu"):
        raise ShardcliError(
            f"flash attention is cuDNN's kernel on GPUs and splash attention on TPUs; this mesh is on "
            f"{layout.platform} (give --attention dot)"
        )
    heads, kv = q.shape[2], k.shape[2]
    kv_axis = "act_kv_heads"
    if kv != heads and layout.spec((None, None, "act_heads"), q.shape) != layout.spec(
        (None, None, "act_kv_heads"), k.shape
    ):
        # The tensor axis splits the query heads but not the fewer key/value heads: both kernels split
        # both alike, so each key/value head is repeated to its queries' heads (as a tensor axis
        # wider than the key/value heads does in Megatron and MaxText).
        k, v = (
            layout.constrain(jnp.repeat(t, heads // kv, axis=2), "batch", "length", "act_heads", None)
            for t in (k, v)
        )
        kv_axis = "act_heads"
    if layout.platform == "tpu":
        return _splash_attention(q, k, v, layout, kv_axis)
    out = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")
    return layout.constrain(out, "batch", "length", "act_heads", None)


def _splash_attention(q: Any, k: Any, v: Any, layout: _Layout, kv_axis: str) -> Any:
    """Pallas splash attention on each device's batch and heads (MaxText's TPU attention, under
    `shard_map` as MaxText calls it): a causal block mask whose empty blocks the kernels skip."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

    seq = q.shape[1]
    block = min(SPLASH_BLOCK, seq)
    sizes = splash.BlockSizes(
        block_q=block,
        block_kv=block,
        block_kv_compute=block,
        block_q_dkv=block,
        block_kv_dkv=block,
        block_kv_dkv_compute=block,
        block_q_dq=block,
        block_kv_dq=block,
    )

    def local(q: Any, k: Any, v: Any) -> Any:  # [b, s, h, d] on one device
        q, k, v = (jnp.swapaxes(t, 1, 2) for t in (q, k, v))  # splash's [h, s, d] per example
        mask = masks.MultiHeadMask([masks.CausalMask((seq, seq)) for _ in range(q.shape[1])])
        kernel = splash.make_splash_mha(mask, head_shards=1, q_seq_shards=1, block_sizes=sizes)
        return jnp.swapaxes(jax.vmap(kernel)(q.astype(COMPUTE) * (q.shape[-1] ** -0.5), k, v), 1, 2)

    specs = tuple(
        layout.spec(("batch", "length", axis, None), t.shape)
        for axis, t in (("act_heads", q), (kv_axis, k), (kv_axis, v))
    )
    out = jax.shard_map(local, mesh=layout.mesh, in_specs=specs, out_specs=specs[0], check_vma=False)(q, k, v)
    return layout.constrain(out, "batch", "length", "act_heads", None)


def _layer(cfg: DecoderConfig, layout: _Layout, x: Any, p: dict[str, Any]) -> Any:
    """One decoder layer on the residual stream x [batch, length, embed]; its activations named as
    MaxText names them (`shardcli.specs.remat.ACTIVATION_NAMES`), for the remat policies."""
    w = {k: v.astype(COMPUTE) for k, v in p.items()}
    x = checkpoint_name(x, "decoder_layer_input")
    h = _rms_norm(x, p["attn_norm"])
    q, k, v = (
        checkpoint_name(
            layout.constrain(jnp.einsum("bsd,dnh->bsnh", h, w[weight]), "batch", "length", heads, None), name
        )
        for weight, heads, name in (
            ("wq", "act_heads", "query_proj"),
            ("wk", "act_kv_heads", "key_proj"),
            ("wv", "act_kv_heads", "value_proj"),
        )
    )
    attended = checkpoint_name(
        (_flash_attention if cfg.attention == "flash" else _attention)(q, k, v, layout), "context"
    )
    out = layout.constrain(jnp.einsum("bsnh,nhd->bsd", attended, w["wo"]), "batch", "length", "act_embed")
    x = x + checkpoint_name(out, "out_proj")
    h = _rms_norm(x, p["mlp_norm"])
    up = checkpoint_name(
        jnp.einsum("bsd,df->bsf", h, w["w_up"]), "mlpwi" if cfg.activation == "relu" else "mlpwi_1"
    )
    if cfg.activation == "relu":
        hidden = jax.nn.relu(up)
    else:
        gate = checkpoint_name(jnp.einsum("bsd,df->bsf", h, w["w_gate"]), "mlpwi_0")
        act = jax.nn.silu if cfg.activation == "swiglu" else jax.nn.gelu
        hidden = act(gate) * up
    hidden = layout.constrain(hidden, "batch", "length", "act_mlp")
    out = layout.constrain(jnp.einsum("bsf,fd->bsd", hidden, w["w_down"]), "batch", "length", "act_embed")
    return layout.constrain(x + checkpoint_name(out, "mlpwo"), "batch", "length", "act_embed")


def _loss(
    cfg: DecoderConfig, layout: _Layout, remat: str, unrolled: int | None, params: Any, batch: Any
) -> Any:
    tokens, targets = batch
    one_hot = layout.constrain(
        jax.nn.one_hot(tokens, cfg.vocab, dtype=COMPUTE), "batch", "length", "act_vocab"
    )
    x = jnp.einsum("bsv,vd->bsd", one_hot, params["embed"].astype(COMPUTE))
    x = layout.constrain(x, "batch", "length", "act_embed")
    policy = parse_policy(remat)
    layer = jax.checkpoint(
        lambda x, p: _layer(cfg, layout, x, p), policy=remat_policy(policy), prevent_cse=unrolled is not None
    )
    if not policy.remat:
        layer = lambda x, p: _layer(cfg, layout, x, p)  # noqa: E731 - the same signature as the remat one
    if unrolled is None:
        x, _ = jax.lax.scan(lambda x, p: (layer(x, p), None), x, params["layers"])
    else:
        for p in params["layers"]:
            x = layer(x, p)
    h = _rms_norm(x, params["final_norm"])
    unembed = params["embed"].T if cfg.tied_embeddings else params["unembed"]
    # MaxText's defaults (logits_dot_in_fp32 false, cast_logits_to_fp32 true): the dot in the compute
    # dtype, its result cast to float32 for the loss, so what backward keeps is the bfloat16 logits
    logits = jnp.einsum("bsd,dv->bsv", h, unembed.astype(COMPUTE))
    logits = layout.constrain(logits, "batch", "length", "act_vocab").astype(jnp.float32)
    # logsumexp - the target's logit: no [batch, length, vocab] log-probabilities kept beside the logits
    picked = jnp.sum(logits * jax.nn.one_hot(targets, cfg.vocab, dtype=jnp.float32), axis=-1)
    return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - picked)


def _adamw(params: Any, grads: Any, opt: Any) -> tuple[Any, Any]:
    count, mu, nu = opt
    count = count + 1
    mu = jax.tree.map(lambda m, g: ADAM_B1 * m + (1 - ADAM_B1) * g, mu, grads)
    nu = jax.tree.map(lambda n, g: ADAM_B2 * n + (1 - ADAM_B2) * g * g, nu, grads)
    c1 = 1 - ADAM_B1 ** count.astype(jnp.float32)
    c2 = 1 - ADAM_B2 ** count.astype(jnp.float32)

    def update(p: Any, m: Any, n: Any) -> Any:
        step = (m / c1) / (jnp.sqrt(n / c2) + ADAM_EPS) + WEIGHT_DECAY * p
        return p - LEARNING_RATE * step

    return jax.tree.map(update, params, mu, nu), (count, mu, nu)


def _params_tree(
    cfg: DecoderConfig, leaf: Callable[[ParamInfo], Any], unrolled: int | None
) -> dict[str, Any]:
    """The params pytree with `leaf(info)` at every parameter (one dict per layer when unrolled)."""
    table = parameter_table(cfg, stacked=unrolled is None)
    tree: dict[str, Any] = {}
    layer: dict[str, Any] = {}
    for info in table:
        if info.path[0] == "layers":
            layer[info.path[1]] = leaf(info)
        else:
            tree[info.path[0]] = leaf(info)
    tree["layers"] = layer if unrolled is None else [dict(layer) for _ in range(unrolled)]
    return tree


def build_train_step(
    cfg: DecoderConfig,
    rules: Rules,
    mesh: Any,
    *,
    remat: str,
    global_batch: int,
    unrolled: int | None = None,
) -> StepProgram:
    """The jitted train step and its abstract arguments (params, optimizer state, batch) on `mesh`.

    Args:
        unrolled: None for the model as it trains (layers under `lax.scan`); k for a copy with k
            layers written out one after another (no loop), for per-layer costs.
    """
    layout = _Layout(rules, mesh)

    def sharding(info: ParamInfo) -> NamedSharding:
        return NamedSharding(mesh, layout.spec(info.axes, info.shape))

    def struct(info: ParamInfo) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(info.shape, PARAM, sharding=sharding(info))

    copy = cfg if unrolled is None else _with_layers(cfg, unrolled)
    params = _params_tree(copy, struct, unrolled)
    param_shardings = _params_tree(copy, sharding, unrolled)
    replicated = NamedSharding(mesh, P())
    count = jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated)
    opt = (count, params, params)
    opt_shardings = (replicated, param_shardings, param_shardings)
    tokens_sharding = NamedSharding(mesh, layout.spec(("batch", "length"), (global_batch, cfg.seq)))
    tokens = jax.ShapeDtypeStruct((global_batch, cfg.seq), jnp.int32, sharding=tokens_sharding)

    def train_step(params: Any, opt_state: Any, batch: Any) -> tuple[Any, Any, Any]:
        loss, grads = jax.value_and_grad(lambda p: _loss(cfg, layout, remat, unrolled, p, batch))(params)
        params, opt_state = _adamw(params, grads, opt_state)
        return params, opt_state, loss

    jitted = jax.jit(
        train_step,
        in_shardings=(param_shardings, opt_shardings, (tokens_sharding, tokens_sharding)),
        out_shardings=(param_shardings, opt_shardings, replicated),
        donate_argnums=(0, 1),
    )
    return StepProgram(jitted, (params, opt, (tokens, tokens)), copy.layers)


def _with_layers(cfg: DecoderConfig, layers: int) -> DecoderConfig:
    from dataclasses import replace

    return replace(cfg, layers=layers)
