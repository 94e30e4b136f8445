"""stanford-crfm/levanter: the train step `Trainer` jits for main/train_lm.py (`Trainer._jit_train_step_fn_no_hook`:
haliax `named_jit(partial(Trainer._train_step, _no_hooks=True), axis_resources=parameter_axis_mapping,
out_axis_resources=parameter_axis_mapping, donate_args=(True,))`, the step run on every step no jit hook is due),
with `compute_next_token_loss`, `AdamConfig().build(...)`, mp `p=f32,c=bfloat16` (as config/llama_small_fast.yaml),
and the default `TrainerConfig` mapping: batch -> (replica, data), FSDP `embed -> data` for parameters and optimizer
state, on Levanter's own mesh axes (replica, data, model) = (1, 8, 1) as `create_fsdp_mesh` makes it on 8 devices.

Shrunk: LlamaConfig(seq_len 128, hidden 256, intermediate 1024, 2 layers, 4 heads, 4 kv heads; Levanter's
defaults otherwise: scanned layers, gradient checkpointing, default attention backend), vocab 1024,
train_batch_size 16. The state is `Trainer.initial_state`'s `TrainerState` taken abstract (filter_eval_shape of
its own init) and laid out by `parameter_axis_mapping`; the batch is an `LmExample.causal` batch laid out by
`compute_axis_mapping` (as its DataLoader places it). `hand_compile` is Levanter's own path: real arrays from
`trainer.initial_state` inside `with trainer:`, then `_jit_train_step_fn_no_hook.lower(state, batch, {})`.

Sources: $CORPUS_SRC/levanter (src/ put on the path). Installed besides haliax: draccus, async-lru (pure Python).
Stubbed (data pipeline, trackers, HF, ray): datasets, wandb, transformers, tokenizers, ray (its `remote`
decorator kept an identity), pyarrow, zstandard, gcsfs, braceexpand, pytimeparse, humanfriendly, matplotlib,
tblib, dataclasses_json, tqdm(_loggable), deepdiff, lenses, jinja2, git, huggingface_hub, safetensors.numpy.
haliax 1.4.dev453 calls `jax.core.is_constant_dim`, gone from jax 0.12's `jax.core`: set back to jax._src.core's. Levanter's loss hands
its float 0/1 loss weights to jnp.mean as `where`, which jax 0.12 refuses: haliax.nn.loss.maybe_reduce_loss is
wrapped to pass them as booleans (the same mask).

    shardcli inspect wrappers/levanter.py:step --inputs wrappers/levanter.py:inputs --mesh 1x8x1 --axes replica,data,model
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys

# What bench/real_programs.py reads (without importing this file): the source folder it needs
# under --sources, and the mesh it is inspected on.
SOURCE, MESH, AXES = "levanter", "1x8x1", "replica,data,model"

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("CORPUS_SRC", "/work/corpus/src")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SRC, "levanter", "src"))

import _stubs  # noqa: E402

_stubs.stub(
    "datasets", "wandb", "transformers", "tokenizers", "ray", "pyarrow", "zstandard", "gcsfs", "braceexpand",
    "pytimeparse", "humanfriendly", "matplotlib", "tblib", "dataclasses_json", "tqdm_loggable", "tqdm",
    "deepdiff", "lenses", "jinja2", "git", "huggingface_hub", "safetensors.numpy",
)  # fmt: skip

import ray  # noqa: E402  (the stub)


def _remote(*args, **kwargs):  # @ray.remote and @ray.remote(num_cpus=...) leave the class as it is
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda f: f


ray.remote = _remote

import equinox as eqx  # noqa: E402
import haliax as hax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jax.random as jrandom  # noqa: E402
import jmp  # noqa: E402
from jax._src import core as _jax_core  # noqa: E402

# haliax 1.4.dev453's dot (jax_utils._jittable_dg_einsum) calls jax.core.is_constant_dim, which jax 0.12 no longer
# exports from jax.core: put JAX's own function back under that name.
if not hasattr(jax.core, "is_constant_dim"):
    jax.core.is_constant_dim = _jax_core.is_constant_dim

_reduce_loss = hax.nn.loss.maybe_reduce_loss


def _maybe_reduce_loss(arr, reduction, reduction_axis, where):
    # Levanter's loss passes its float loss weights (0/1 here) as `where`; jax 0.12's jnp.mean takes only a
    # boolean `where` (older JAX masked by nonzero): the same mask, as booleans.
    if where is not None and where.dtype != jnp.bool_:
        where = where != 0
    return _reduce_loss(arr, reduction, reduction_axis, where)


hax.nn.loss.maybe_reduce_loss = _maybe_reduce_loss
from haliax.partitioning import infer_resource_partitions, round_axis_for_partitioning  # noqa: E402

with contextlib.redirect_stdout(sys.stderr):  # nothing of Levanter's import noise on stdout (--format json)
    from levanter.models.llama import LlamaConfig  # noqa: E402
    from levanter.models.lm_model import LmExample, compute_next_token_loss  # noqa: E402
    from levanter.optim import AdamConfig  # noqa: E402
    from levanter.tracker import NoopConfig  # noqa: E402
    from levanter.trainer import Trainer, TrainerConfig  # noqa: E402
    from levanter.trainer_state import TrainerState  # noqa: E402

VOCAB, BATCH = 1024, 16
MODEL = LlamaConfig(
    seq_len=128, hidden_dim=256, intermediate_dim=1024, num_layers=2, num_heads=4, num_kv_heads=4
)


def trainer(mesh):
    config = TrainerConfig(
        tracker=NoopConfig(),
        mp=jmp.get_policy("p=f32,c=bfloat16"),
        train_batch_size=BATCH,
        num_train_steps=1000,
        id="corpus",
        require_accelerator=False,
    )
    config.__dict__["device_mesh"] = mesh  # the cached_property create_fsdp_mesh fills: the mesh given
    optimizer = AdamConfig(learning_rate=1e-3, weight_decay=0.1, warmup=0.01).build(config.num_train_steps)
    loss_function = functools.partial(compute_next_token_loss, logsumexp_weight=None)  # train_lm.main
    return Trainer(config, optimizer, loss_function, add_default_hooks=False)


def _parts(t):
    with t.device_mesh:  # train_lm.main rounds it inside `with Trainer(...)`
        Vocab = round_axis_for_partitioning(hax.Axis("vocab", VOCAB), t.parameter_axis_mapping)
    data_key, loader_key, model_key, training_key = jrandom.split(jrandom.PRNGKey(t.config.seed), 4)

    def model_build():  # train_lm.main's model_init
        return MODEL.build(Vocab, key=model_key)

    def init_state(training_key):  # Trainer.initial_state's init_state_and_model
        return TrainerState.init(t.optimizer, model_build(), key=training_key, is_trainable=True, mp=t.mp)

    init_state.model_build = model_build

    Batch, Pos = t.TrainBatch, MODEL.Pos

    def batch():
        tokens = hax.zeros((Batch, Pos), dtype=jnp.int32)
        return hax.vmap(LmExample.causal, Batch)(tokens)

    return init_state, training_key, batch


def _placed(tree, mapping, mesh):
    """Each abstract array of `tree` with the NamedSharding haliax's named_jit would give it under `mapping`
    (infer_resource_partitions: one sharding per NamedArray, a prefix of the tree)."""
    shardings = infer_resource_partitions(tree, mapping, mesh=mesh, preserve_existing_shardings=False)

    def place(sharding, sub):
        if sharding is None:
            return sub
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding), sub)

    return jax.tree.map(
        place, shardings, tree, is_leaf=lambda x: x is None or isinstance(x, jax.sharding.NamedSharding)
    )


def inputs(mesh):
    t = trainer(mesh)
    init_state, training_key, batch = _parts(t)
    with mesh, hax.axis_mapping(t.parameter_axis_mapping):
        state = eqx.filter_eval_shape(init_state, training_key)
        state = _placed(state, t.parameter_axis_mapping, mesh)
        example = _placed(eqx.filter_eval_shape(batch), t.compute_axis_mapping, mesh)
    return {"fn": t._jit_train_step_fn_no_hook, "args": (state, (example,), {})}


def hand_compile(mesh):
    """Levanter's own path: real state from Trainer.initial_state, a real batch, named_jit's lower."""
    t = trainer(mesh)
    init_state, training_key, batch = _parts(t)
    with t:
        model_init = functools.partial(init_state.model_build)
        state = t.initial_state(training_key, model_init=model_init)
        example = hax.named_jit(batch, axis_resources=t.compute_axis_mapping)()
        return t._jit_train_step_fn_no_hook.lower(state, (example,), {}).compile()


def step(*args):
    raise NotImplementedError("inspect takes the Trainer's own step from inputs()")
