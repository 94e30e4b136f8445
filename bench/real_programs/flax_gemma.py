"""google/flax examples/gemma: train.py's `jax_train_step` (use_nnx_transforms "no": `jax.jit(partial(
jax_train_step, with_capture=True), static_argnames=("label_smoothing", "pad_id"), donate_argnames=
("model", "optimizer"))`; with_capture because the default sow_config is {}), on the model, optimizer,
rngs and metrics `train_and_evaluate` builds: `Transformer(TransformerConfig.from_dict(**configs/tiny.py's
transformer_params, num_embed=VOCAB, dtype=bfloat16, shd_config=ShardingConfig.fsdp_tp_sharding(
fsdp_axis_name="fsdp", tensor_parallel_axis_name="tensor")))`, `nnx.Optimizer(model, adamw(rsqrt schedule,
0.9, 0.98, 1e-9, wd 0.1), wrt=nnx.Param)`, `nnx.Rngs(params=0, dropout=0)`, MultiMetric(loss, accuracy),
all built under `jax.set_mesh(mesh)` with an Explicit (fsdp, tensor) mesh as `jax.make_mesh` makes it;
batch `inputs/targets/inputs_position/inputs_segmentation` int32[16,128] on P('fsdp') (config.data_sharding).
Tiny: configs/tiny.py's model (4 layers, embed 256, 4 heads x 128, 1 kv head, hidden 512), vocab 1024
(instead of the trained sentencepiece's 35008), per-device batch 2.

Sources: $CORPUS_SRC/flax (examples/gemma on the path). clu and grain are stubbed (metrics writers, data).

    shardcli inspect wrappers/flax_gemma.py:step --inputs wrappers/flax_gemma.py:inputs \
        --mesh 8x1 --axes fsdp,tensor --mode explicit
"""

from __future__ import annotations

import os
import sys
from functools import partial

# What bench/real_programs.py reads (without importing this file): the source folder it needs
# under --sources, and the mesh it is inspected on.
SOURCE, MESH, AXES = "flax", "8x1", "fsdp,tensor"
MODE = "explicit"  # gemma's train_and_evaluate makes its mesh with jax.make_mesh's default: Explicit axes

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("CORPUS_SRC", "/work/corpus/src")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SRC, "flax", "examples", "gemma"))

import _stubs  # noqa: E402

_stubs.stub("clu", "grain", "tensorflow", "tensorflow_datasets", "tensorflow_text")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import sow_lib  # noqa: E402
import train  # noqa: E402  (examples/gemma/train.py)
import transformer as transformer_lib  # noqa: E402
from configs import tiny  # noqa: E402
from transformer_cfg import ShardingConfig  # noqa: E402

VOCAB, PER_DEVICE_BATCH = 1024, 2
CONFIG = tiny.get_config()

step = jax.jit(  # train_and_evaluate's jit_train_step
    partial(train.jax_train_step, with_capture=CONFIG.sow_config is not None),
    static_argnames=("label_smoothing", "pad_id"),
    donate_argnames=("model", "optimizer"),
)


def explicit(mesh):
    """The mesh with Explicit axes (train_and_evaluate's jax.make_mesh default), the same devices."""
    if all(t == AxisType.Explicit for t in mesh.axis_types):
        return mesh
    return jax.sharding.Mesh(
        mesh.devices, mesh.axis_names, axis_types=(AxisType.Explicit,) * mesh.devices.ndim
    )


def _build(mesh):
    c = CONFIG
    shd_config = ShardingConfig.fsdp_tp_sharding(fsdp_axis_name="fsdp", tensor_parallel_axis_name="tensor")
    model_config = transformer_lib.TransformerConfig.from_dict(
        **c.transformer_params, num_embed=VOCAB, dtype=jnp.bfloat16, shd_config=shd_config
    )
    lr_fn = train.create_learning_rate_schedule(learning_rate=c.learning_rate, warmup_steps=c.warmup_steps)

    def build():
        rngs = nnx.Rngs(params=c.seed, dropout=c.seed)
        model = transformer_lib.Transformer(
            model_config, rngs=rngs, sow_config=sow_lib.SowConfig(**c.sow_config)
        )
        optimizer = nnx.Optimizer(
            model,
            tx=optax.adamw(lr_fn, b1=0.9, b2=0.98, eps=1e-9, weight_decay=c.weight_decay),
            wrt=nnx.Param,
        )
        metrics = nnx.MultiMetric(loss=nnx.metrics.Average("loss"), accuracy=nnx.metrics.Accuracy())
        return model, optimizer, rngs, metrics

    with jax.set_mesh(mesh):
        model, optimizer, rngs, metrics = nnx.eval_shape(build)
    data = NamedSharding(mesh, P(*c.data_sharding))
    batch_size = PER_DEVICE_BATCH * mesh.devices.size
    shape = (batch_size, c.max_target_length)
    batch = {
        k: jax.ShapeDtypeStruct(shape, jnp.int32, sharding=data)
        for k in ("inputs", "targets", "inputs_position", "inputs_segmentation")
    }
    return (model, optimizer, rngs, batch, metrics), {"label_smoothing": c.label_smoothing}


def inputs(mesh):
    args, kwargs = _build(explicit(mesh))
    return {"fn": step, "args": args, "kwargs": kwargs}


def hand_compile(mesh):
    """The hand AOT compile: the Explicit mesh entered as train_and_evaluate enters it."""
    mesh = explicit(mesh)
    args, kwargs = _build(mesh)
    with jax.set_mesh(mesh):
        return step.lower(*args, **kwargs).compile()
