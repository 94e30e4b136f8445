"""MaxText's pre-train step (src/maxtext/trainers/pre_train/train.py:train_step), built as its
train_compile.py builds it (NNX default, pure_nnx), at a tiny size on the mesh shardcli hands over.

Sources: $CORPUS_SRC/maxtext (AI-Hypercomputer/maxtext). Only the modules defining the model, the
optimizer and the train step are imported; data loaders and cloud clients are stubbed.

    shardcli inspect wrappers/maxtext_pretrain.py:step --inputs wrappers/maxtext_pretrain.py:inputs \
        --mesh 8 --axes fsdp
    shardcli plan wrappers/maxtext_pretrain.py:step --inputs wrappers/maxtext_pretrain.py:inputs \
        --target tpu-v5e:2x4

The mesh handed over sets MaxText's ici_{data,fsdp,tensor}_parallelism (as a user sets them in its
config), so `plan` moves the layout by handing each candidate mesh to `inputs`.
"""

from __future__ import annotations

import os
import sys

# What bench/real_programs.py reads (without importing this file): the source folder it needs
# under --sources, and the mesh it is inspected on.
SOURCE, MESH, AXES = "maxtext", "8", "fsdp"

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("CORPUS_SRC", "/work/corpus/src")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SRC, "maxtext", "src"))
os.environ.setdefault("DECOUPLE_GCLOUD", "TRUE")

import _stubs  # noqa: E402

_stubs.stub(
    "pathwaysutils",
    "tensorflow",
    "tensorflow_datasets",
    "grain",
    "tensorflow_text",
    "seqio",
    "google",
    "cloud_accelerator_diagnostics",
    "ml_goodput_measurement",
    "array_record",
    "datasets",
    "transformers",
    "tokamax",
    "huggingface_hub",
    "safetensors",
    "torch",
    "PIL",
    "tokenizers",
    "jsonlines",
    "tensorboard_plugin_profile",
    "tensorboard",
)

import contextlib  # noqa: E402

import jax  # noqa: E402
from flax.linen import partitioning as nn_partitioning  # noqa: E402
from jax.sharding import AxisType, Mesh  # noqa: E402

# MaxText prints notices ("[DECOUPLED NO-OP] ...") on stdout: sent to stderr, so that
# `shardcli inspect --format json` stays one JSON document.
with contextlib.redirect_stdout(sys.stderr):
    from maxtext.configs import pyconfig
    from maxtext.trainers.pre_train import train, train_compile
    from maxtext.utils import maxtext_utils, sharding

OVERRIDES = [
    "run_name=corpus",
    "base_emb_dim=256",
    "base_num_query_heads=4",
    "base_num_kv_heads=4",
    "head_dim=64",
    "base_mlp_dim=1024",
    "base_num_decoder_layers=2",
    "vocab_size=1024",
    "max_target_length=128",
    "per_device_batch_size=1",
    "enable_checkpointing=false",
    "dataset_type=synthetic",
    "attention=dot_product",
    "skip_jax_distributed_system=true",
    "ici_fsdp_parallelism=-1",
]
_BUILT: dict = {}


def build(mesh_devices, sizes=None):
    """train_compile.main's steps up to jit, with MaxText's own mesh over the given devices."""
    with contextlib.redirect_stdout(sys.stderr):
        return _build(mesh_devices, sizes)


def _build(mesh_devices, sizes=None):
    extra = [f"ici_{a}_parallelism={n}" for a, n in (sizes or {}).items()]
    overrides = [o for o in OVERRIDES if not (sizes and o.startswith("ici_fsdp"))] + extra
    config = pyconfig.initialize(
        ["train_compile.py", os.path.join(SRC, "maxtext/src/maxtext/configs/base.yml"), *overrides]
    )
    devices = maxtext_utils.create_device_mesh(config, list(mesh_devices))
    mesh = Mesh(devices, config.mesh_axes, axis_types=(AxisType.Auto,) * len(config.mesh_axes))
    args, kwargs, state_shardings, _, model = train_compile.get_shaped_inputs(mesh, config)
    params_shardings, state_shardings = sharding.maybe_update_params_sharding_with_opt(
        config, state_shardings
    )
    input_state = sharding.build_zero1_input_state_mesh_shardings(config, state_shardings, params_shardings)
    data_sharding = sharding.get_input_data_sharding(config, mesh)
    func, in_shard, out_shard, static, donate = maxtext_utils.get_functional_train_with_signature(
        train.train_step, data_sharding, input_state, model, config, params_shardings
    )
    rules = config.logical_axis_rules

    def train_step(state, batch):
        # train_compile lowers inside `jax.set_mesh(mesh), mesh, axis_rules(...)`; set_mesh cannot be
        # entered inside a trace, the other two are entered here so that any caller's lower() sees them.
        with mesh, nn_partitioning.axis_rules(rules):
            return func(state, batch)

    jitted = jax.jit(train_step, in_shardings=in_shard, out_shardings=out_shard, donate_argnums=donate)
    _BUILT["reference"] = (func, args, mesh, in_shard, out_shard, static, donate, config)
    return jitted, args, mesh, config


def step(*args):
    return _BUILT["fn"](*args)


def inputs(mesh):
    sizes = {a: n for a, n in mesh.shape.items() if a in ("data", "fsdp", "tensor")}
    jitted, args, _, _ = build(mesh.devices.flatten(), sizes or None)
    _BUILT["fn"] = jitted
    return {"fn": jitted, "args": args}


def hand_compile(mesh):
    """The reference: train_compile.jit_and_compile itself, with its own contexts."""
    build(mesh.devices.flatten())
    func, args, mt_mesh, in_shard, out_shard, static, donate, config = _BUILT["reference"]
    rules = nn_partitioning.axis_rules(config.logical_axis_rules)
    return train_compile.jit_and_compile(
        func, args, {}, mt_mesh, in_shard, out_shard, static, donate, config, rules
    )
