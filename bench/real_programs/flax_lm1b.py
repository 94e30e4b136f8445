"""flax examples/lm1b: train.py's train_step, jitted as train_and_evaluate jits it (in_shardings from
the state's logical annotations via utils.setup_initial_state's rules, static config/lr/label
smoothing, the state donated), at a tiny size, on the mesh shardcli hands over (axes data,fsdp,tensor,
lm1b's config.mesh_axes).

Sources: $CORPUS_SRC/flax/examples/lm1b (google/flax). tensorflow, tfds and clu are stubbed (only the
data pipeline, checkpoints and metric writers use them).

    shardcli inspect wrappers/flax_lm1b.py:step --inputs wrappers/flax_lm1b.py:inputs \
        --mesh 2x2x2 --axes data,fsdp,tensor
"""

from __future__ import annotations

import functools
import os
import sys

# What bench/real_programs.py reads (without importing this file): the source folder it needs
# under --sources, and the mesh it is inspected on.
SOURCE, MESH, AXES = "flax", "2x2x2", "data,fsdp,tensor"

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("CORPUS_SRC", "/work/corpus/src")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SRC, "flax", "examples", "lm1b"))

import _stubs  # noqa: E402

_stubs.stub("tensorflow", "tensorflow_datasets", "tensorflow_text", "clu")

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import models  # noqa: E402
import optax  # noqa: E402
import train  # noqa: E402
import utils  # noqa: E402
from configs import default  # noqa: E402
from flax.linen import partitioning as nn_partitioning  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

VOCAB, EMB, HEADS, MLP, LAYERS, BATCH, SEQ = 1024, 256, 4, 1024, 2, 8, 128


def config():
    c = default.get_config()
    c.emb_dim, c.qkv_dim, c.num_heads, c.mlp_dim, c.num_layers = EMB, EMB, HEADS, MLP, LAYERS
    c.per_device_batch_size, c.max_target_length, c.max_eval_target_length = BATCH, SEQ, SEQ
    return c


def build(mesh):
    """train_and_evaluate's model, optimizer, state shardings and jitted step; nothing allocated."""
    c = config()
    train_config = models.TransformerConfig(
        vocab_size=VOCAB,
        output_vocab_size=VOCAB,
        logits_via_embedding=c.logits_via_embedding,
        dtype=jnp.bfloat16 if c.use_bfloat16 else jnp.float32,
        emb_dim=c.emb_dim,
        num_heads=c.num_heads,
        num_layers=c.num_layers,
        qkv_dim=c.qkv_dim,
        mlp_dim=c.mlp_dim,
        max_len=max(c.max_target_length, c.max_eval_target_length),
        dropout_rate=c.dropout_rate,
        attention_dropout_rate=c.attention_dropout_rate,
        deterministic=False,
        decode=False,
        kernel_init=nn.initializers.xavier_uniform(),
        bias_init=nn.initializers.normal(stddev=1e-6),
    )
    m = models.TransformerLM(train_config.replace(deterministic=True))
    lr_fn = train.create_learning_rate_schedule(learning_rate=c.learning_rate, warmup_steps=c.warmup_steps)
    tx = optax.adamw(lr_fn, b1=0.9, b2=0.98, eps=1e-9, weight_decay=c.weight_decay)
    # utils.setup_initial_state without its initialising jit: the same annotations, an abstract state.
    init = functools.partial(utils.init_train_state, m, tx, c)
    rng = jax.random.PRNGKey(c.seed)
    abstract = jax.eval_shape(init, rng)
    logical = nn.get_partition_spec(abstract)
    with jax.set_mesh(mesh), nn_partitioning.axis_rules(c.logical_axis_rules):
        state_sharding = nn.logical_to_mesh_sharding(logical, mesh, c.logical_axis_rules)
    abstract = utils.unbox_logicallypartioned_trainstate(abstract)
    state = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, state_sharding
    )
    data_sharding = NamedSharding(mesh, P(c.data_sharding))
    batch = {
        k: jax.ShapeDtypeStruct((BATCH, SEQ), jnp.int32, sharding=data_sharding)
        for k in ("inputs", "inputs_position", "inputs_segmentation")
    }
    jit_train_step = jax.jit(
        train.train_step,
        in_shardings=(state_sharding, data_sharding, None),
        out_shardings=(state_sharding, None),
        static_argnums=(2, 3, 4),
        donate_argnums=0,
    )
    key = jax.ShapeDtypeStruct(rng.shape, rng.dtype, sharding=NamedSharding(mesh, P()))
    return jit_train_step, (state, batch, train_config, lr_fn, 0.0, key)


def step(*args):
    raise RuntimeError("built by inputs(mesh)")


def inputs(mesh):
    fn, args = build(mesh)
    return {"fn": fn, "args": args}
