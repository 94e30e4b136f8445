"""ayaka14732/llama-2-jax: train.py's own `train_step` (`@jax.jit`: value_and_grad of forward_llama +
cross_entropy_loss, optax.MultiSteps(adamw(warmup_cosine_decay_schedule), 8), apply_updates), with the
parameters laid out as lib/multihost_utils/shard_model_params lays them out (each array split on one
axis over all devices: q/k/v/out_proj on the heads, gate/up_proj on d_ff, down_proj on d_ff; embedding,
norms and lm_head replicated), float32 as init_llama makes them (train.py's commented-out init path; the
bfloat16 checkpoint of scripts/convert_params_runner.py does not trace with today's optax: MultiSteps'
cond gets bfloat16 accumulated gradients on one branch and float32 on the other); the optimizer
state follows the parameters it belongs to (optimizer.init of the sharded parameters), scalars, the
rotary values, the batch (uint16 token ids from gsm_collate_fn_train) and the rbg key replicated.
Tiny: d_model 256, 8 kv heads x 1, d_k 64, d_ff 1024, 2 layers, vocab 1024, batch 6 (train.py's), length 128.

Sources: $CORPUS_SRC/llama-2-jax. train.py is imported as it is; its first line's
`initialise_tpu('v3-32')` runs only the flags it sets for every platform (_post_init_general: custom
PRNG, matmul precision highest; its spmd_mode allow_all no longer exists in JAX), not its TPU environment. jax_smi, transformers,
tqdm, wandb, torch are stubbed (data loading and logging only). Needs einops.

    shardcli inspect wrappers/llama2_jax.py:step --inputs wrappers/llama2_jax.py:inputs --mesh 8 --axes mp
"""

from __future__ import annotations

import os
import sys

# What bench/real_programs.py reads (without importing this file): the source folder it needs
# under --sources, and the mesh it is inspected on.
SOURCE, MESH, AXES = "llama-2-jax", "8", "mp"

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("CORPUS_SRC", "/work/corpus/src")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SRC, "llama-2-jax"))

import _stubs  # noqa: E402

_stubs.stub("jax_smi", "transformers", "tqdm", "wandb", "torch")

import jax  # noqa: E402
import lib.proc_init_utils  # noqa: E402


def _post_init_general(*args, **kwargs):
    """lib/proc_init_utils/initialisation.py's _post_init_general, in today's spelling: the enum
    Precision.HIGHEST is now the string 'highest'; jax_spmd_mode no longer exists (allow_all was
    the permission to jit over non-fully-addressable arrays, which this single process has none of)."""
    jax.config.update("jax_enable_custom_prng", True)
    jax.config.update("jax_default_matmul_precision", "highest")


lib.proc_init_utils.initialise_tpu = _post_init_general
if not hasattr(jax, "tree_map"):  # removed from JAX since; lib/tree_utils still calls it
    jax.tree_map = jax.tree.map

import jax.numpy as jnp  # noqa: E402
import jax.random as rand  # noqa: E402
import optax  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import train  # noqa: E402  (llama-2-jax/train.py)
from lib.data import TrainData  # noqa: E402
from lib.llama import Llama, ModelConfig, init_llama, make_rotary_values  # noqa: E402
from lib.multihost_utils.shard_model_params import sharding_mp  # noqa: E402

BATCH, MAX_LEN, N_ACCUMULATION = 6, 128, 8  # train.py: batch_size 6, n_accumulation_steps 8
TINY = ModelConfig(
    d_ff=1024,
    d_k=64,
    d_model=256,
    d_v=64,
    n_heads_kv=8,
    n_layers=2,
    n_rep_kv=1,
    rms_norm_eps=1e-6,
    token_id_bos=1,
    token_id_eos=2,
    token_id_pad=0,
    vocab_size=1024,
    dropout_rate=0.1,
    return_kv_cache=False,
)

# train.py's main(): the optimizer and the module globals its train_step reads.
_schedule = optax.warmup_cosine_decay_schedule(
    init_value=0.0, peak_value=0.00005, warmup_steps=100, decay_steps=101, end_value=0.00005
)
OPTIMIZER = optax.MultiSteps(optax.adamw(learning_rate=_schedule), N_ACCUMULATION)
train.optimize = OPTIMIZER.update
train.model_config = TINY

step = train.train_step  # the @jax.jit train_step of train.py


def inputs(mesh):
    def placed(x, spec):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, spec))

    def shard(x, axis):  # lib/multihost_utils/shard_array: `axis` over every device, `...` replicated
        if axis is ...:
            return placed(x, P())
        names = [None] * x.ndim
        names[axis] = "mp"
        return placed(x, P(*names))

    params = jax.eval_shape(lambda k: init_llama(key=k, model_config=TINY), rand.key(42))  # float32
    params = jax.tree.map(shard, params, sharding_mp)
    opt_state = jax.eval_shape(OPTIMIZER.init, params)
    is_llama = lambda x: isinstance(x, Llama)  # noqa: E731  (moments, accumulated grads: like the params)
    opt_state = jax.tree.map(lambda x: params if is_llama(x) else placed(x, P()), opt_state, is_leaf=is_llama)
    rotary = jax.eval_shape(lambda: make_rotary_values(None, BATCH, MAX_LEN, model_config=TINY))
    rotary = jax.tree.map(lambda x: placed(x, P()), rotary)
    total_loss = placed(jax.ShapeDtypeStruct((), jnp.float32), P())
    ids = jax.ShapeDtypeStruct((BATCH, MAX_LEN), jnp.uint16)
    mask = jax.ShapeDtypeStruct((BATCH, MAX_LEN), jnp.bool_)
    batch = TrainData(*(placed(x, P()) for x in (ids, mask, ids, mask)))
    key = placed(jax.eval_shape(lambda: rand.key(3407, impl="rbg")), P())
    return (params, opt_state, rotary, total_loss, batch, key)
