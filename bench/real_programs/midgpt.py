"""AllanYangZhou/midGPT: src/train.py's `step` (make_training_fns: `eqx.filter_jit(donate='all')`, grads
constrained by shard_gpt, a scan over gradient-accumulation microbatches), with the model laid out by
shard_gpt (shard_model=True: arrays over 2**18 elements split on their last dim over `data`), optimizer
scalars replicated, the batch as P(None, ('replica', 'data'), None), on train()'s mesh (replica, data) =
(n/8, 8); tiny: n_embd 512, 2 layers, 8 heads, vocab 1024, block 128, batch 16, g_accum_iters 1.

Sources: $CORPUS_SRC/midGPT. wandb is stubbed (logging only).

    shardcli inspect wrappers/midgpt.py:step --inputs wrappers/midgpt.py:inputs --mesh 1x8 --axes replica,data
"""

from __future__ import annotations

import os
import sys

# What bench/real_programs.py reads (without importing this file): the source folder it needs
# under --sources, and the mesh it is inspected on.
SOURCE, MESH, AXES = "midGPT", "1x8", "replica,data"

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("CORPUS_SRC", "/work/corpus/src")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SRC, "midGPT"))

import _stubs  # noqa: E402

_stubs.stub("wandb", "tqdm")

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from src.model import GPT, GPTConfig, shard_gpt  # noqa: E402
from src.train import ExperimentConfig, cast_pytree, make_training_fns  # noqa: E402

BATCH = 16
CONFIG = ExperimentConfig(
    rundir="",
    data_dir="",
    learning_rate=6e-4,
    batch_size=BATCH,
    warmup_steps=100,
    min_lr=6e-5,
    lr_decay_steps=1000,
    max_steps=1000,
    beta2=0.95,
    weight_decay=0.1,
    eval_interval=1000,
    compute_dtype="bfloat16",
    param_dtype="float32",
    g_accum_iters=1,
    shard_model=True,
    model_config=GPTConfig(block_size=128, vocab_size=1024, n_layer=2, n_head=8, n_embd=512, dropout=0.0),
)


def inputs(mesh):
    c = CONFIG
    scheduler = optax.warmup_cosine_decay_schedule(
        0, c.learning_rate, c.warmup_steps, c.lr_decay_steps, end_value=c.min_lr
    )
    optimizer = optax.chain(  # train()'s optimizer
        optax.clip_by_global_norm(1.0),
        optax.scale_by_adam(b2=c.beta2),
        optax.add_decayed_weights(c.weight_decay / c.learning_rate),
        optax.scale_by_schedule(scheduler),
        optax.scale(-1),
    )
    step, _ = make_training_fns(c, optimizer, mesh)

    def placed(x, sharding):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)

    model = eqx.filter_eval_shape(
        lambda k: cast_pytree(GPT(c.model_config, k), c.param_dtype), jax.random.PRNGKey(1)
    )
    model = shard_gpt(model, mesh, c.shard_model, sharding_fn=placed)
    is_struct = lambda a: isinstance(a, jax.ShapeDtypeStruct)  # noqa: E731  (the model's arrays, abstract)
    opt_state = jax.eval_shape(optimizer.init, eqx.filter(model, is_struct))

    # Optimizer moments laid out as shard_gpt lays out the parameters they follow (train() lets
    # optax.init of the sharded model place them); scalars replicated (repl_opt_scalars).
    def layout(x):
        if x.ndim == 0:
            return placed(x, NamedSharding(mesh, P()))
        axes = (None,) * x.ndim
        if x.size > 2**18 and c.shard_model:
            axes = (None,) * (x.ndim - 1) + ("data",)
        return placed(x, NamedSharding(mesh, P(*axes)))

    opt_state = jax.tree.map(layout, opt_state)
    data = NamedSharding(mesh, P(None, ("replica", "data"), None))
    x = jax.ShapeDtypeStruct((c.g_accum_iters, BATCH, c.model_config.block_size), jnp.int32, sharding=data)
    key = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=NamedSharding(mesh, P()))
    # eqx.filter_jit traces the arrays and keeps every other leaf static; ShapeDtypeStructs are not
    # arrays to it, so the same split is made here: the model's arrays traced, the rest closed over,
    # under jax.jit with everything donated (donate='all').
    params, static = eqx.partition(model, is_struct)
    body = step.__wrapped__

    def train_step(params, opt_state, x, y, key):
        return body(eqx.combine(params, static), opt_state, x, y, key)

    jitted = jax.jit(train_step, donate_argnums=(0, 1, 2, 3, 4))
    return {"fn": jitted, "args": (params, opt_state, x, x, key)}


def step(*args):
    raise NotImplementedError("inspect takes train.py's own step from inputs()")
