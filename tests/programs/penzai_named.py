"""A penzai transformer trained as penzai's own trainer trains one: a llama-like model built from
its config (`penzai.models.transformer`), named axes laid out on the mesh by name
(`sharding_util.name_to_name_device_put`), and `basic_training.StatefulTrainer.build(donate_states=True)`,
whose step is `jax.jit(..., donate_argnames=..., static_argnames=["loss_fn", "optimizer_def"])`
called by keywords alone.

    shardcli inspect tests/programs/penzai_named.py:train_step \\
        --inputs tests/programs/penzai_named.py:inputs --mesh 2x4 --axes data,model
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from penzai import pz
from penzai.models.transformer.variants import llamalike_common
from penzai.toolshed import basic_training, sharding_util

CONFIG = llamalike_common.LlamalikeTransformerConfig(
    num_kv_heads=4,
    query_head_multiplier=1,
    embedding_dim=64,
    projection_dim=16,
    mlp_hidden_dim=256,
    num_decoder_blocks=2,
    vocab_size=128,
    mlp_variant="swiglu",
    tie_embedder_and_logits=False,
)
BATCH, SEQ = 8, 32
# Heads and MLP neurons over `model`, the batch over `data` (penzai's sharding tutorial's split)
AXIS_TO_MESH = {"heads": "model", "neurons": "model", "batch": "data"}


def loss_fn(*, model: Any, state: Any, rng: Any, tokens: pz.nx.NamedArray) -> tuple[Any, Any, Any]:
    logits = model(tokens)
    log_probs = jax.nn.log_softmax(logits.untag("vocabulary").data_array[..., :-1, :], axis=-1)
    targets = tokens.untag("seq").data_array[..., 1:]
    picked = jnp.take_along_axis(log_probs, targets[..., None], axis=-1)
    return -jnp.mean(picked), state, None


def _abstract_trainer(mesh: Any) -> tuple[Any, Any, Any]:
    """The trainer's state as shapes alone, each array laid out by its axis names: how one compiles
    penzai's step ahead of time for chips this host does not have."""
    optimizer = optax.adamw(1e-3)

    def start() -> tuple[Any, Any]:
        model = llamalike_common.build_llamalike_transformer(CONFIG, init_base_rng=jax.random.key(0))
        _, params = pz.unbind_params(model, freeze=True)
        return params, optimizer.init(params)

    params, opt_state = jax.eval_shape(start)
    laid_out = sharding_util.name_to_name_sharding(
        (params, opt_state), mesh, AXIS_TO_MESH, ignore_unnamed_arrays=True, as_shape_dtype_struct=True
    )
    model = llamalike_common.build_llamalike_transformer(CONFIG, init_base_rng=None)  # slots, no arrays
    stateless, _ = pz.unbind_params(model)
    return stateless, laid_out, optimizer


def inputs(mesh: Any) -> dict[str, Any]:
    """The jitted step `StatefulTrainer.build(donate_states=True)` makes, and the keywords
    `StatefulTrainer.step` calls it with."""
    stateless, (params, opt_state), optimizer = _abstract_trainer(mesh)
    trainer_step = basic_training.StatefulTrainer.build(
        root_rng=jax.random.key(1),
        model=stateless,
        optimizer_def=optimizer,
        loss_fn=loss_fn,
        jit=True,
        donate_states=True,
    ).step_fn
    batch = sharding_util.name_to_name_sharding(
        jax.eval_shape(lambda: pz.nx.zeros({"batch": BATCH, "seq": SEQ}, jnp.int32)),
        mesh,
        AXIS_TO_MESH,
        as_shape_dtype_struct=True,
    )
    return {
        "fn": trainer_step,
        "args": (),
        "kwargs": {
            "root_rng": jax.eval_shape(lambda: jax.random.key(1)),
            "state": basic_training.InternalTrainerState(
                step=jax.ShapeDtypeStruct((), jnp.int32), opt_state=opt_state, loss_fn_state=None
            ),
            "stateless_model": stateless,
            "trainable_params": tuple(params),
            "frozen_params": (),
            "state_vars": (),
            "loss_fn": loss_fn,
            "optimizer_def": optimizer,
            "kwargs": {"tokens": batch},
        },
    }


def train_step(**kwargs: Any) -> Any:  # pragma: no cover - named for the command line; inputs gives "fn"
    raise NotImplementedError("inspect takes the trainer's own step from inputs()")
