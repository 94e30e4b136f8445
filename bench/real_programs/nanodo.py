"""google-deepmind/nanodo: train.py's Trainer.step_fn (`jax.jit(partial(_train_step, c=..., mesh=...),
in_shardings=(shardings, P()), out_shardings=..., donate_argnames=...)`) with the state laid out by
`nn.get_sharding` of its fsdp boxes (fsdp_enabled=True), on a 1-D `data` mesh as train_and_evaluate
builds it, at a tiny size (D 256, H 4, L 128, N 2, F 1024, vocab 1024, batch 16).

Sources: $CORPUS_SRC/nanodo. grain, tensorflow_datasets, clu are stubbed (data pipeline, metric writers).

    shardcli inspect wrappers/nanodo.py:step --inputs wrappers/nanodo.py:inputs --mesh 8 --axes data
"""

from __future__ import annotations

import functools
import os
import sys

# What bench/real_programs.py reads (without importing this file): the source folder it needs
# under --sources, and the mesh it is inspected on.
SOURCE, MESH, AXES = "nanodo", "8", "data"

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("CORPUS_SRC", "/work/corpus/src")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SRC, "nanodo"))

import _stubs  # noqa: E402

_stubs.stub("grain", "tensorflow", "tensorflow_datasets", "clu")

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax.training.train_state import TrainState  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from nanodo import loss as loss_lib  # noqa: E402
from nanodo import model_factory, optimizer, train  # noqa: E402
from nanodo.configs import default  # noqa: E402

VOCAB, BATCH = 1024, 16


def config():
    c = default.get_config()
    c.model.D, c.model.H, c.model.L, c.model.N, c.model.F = 256, 4, 128, 2, 1024
    c.batch_size = BATCH
    return c


def inputs(mesh):
    c = config()
    model, get_loss_fn = model_factory.get_model_and_loss(c, VOCAB)
    example = jax.ShapeDtypeStruct(shape=(1, c.model.L), dtype=jnp.int32)

    def init(rng, x):  # train._init_train_state's init
        params = model.init(rng, x)
        return TrainState.create(
            apply_fn=model.apply, params=params["params"], tx=optimizer.get_optimizer(c.opt)
        )

    abstract = jax.eval_shape(init, jax.random.PRNGKey(c.seed), example)
    shardings = nn.get_sharding(abstract, mesh)
    state = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), nn.unbox(abstract), shardings
    )
    step_fn = jax.jit(  # Trainer.__init__
        functools.partial(train._train_step, c=c, get_loss_fn=get_loss_fn, mesh=mesh),
        in_shardings=(shardings, NamedSharding(mesh, P())),
        out_shardings=(shardings, NamedSharding(mesh, P())),
        donate_argnames=("state", "in_BxL"),
    )
    batch = jax.ShapeDtypeStruct((BATCH, c.model.L), jnp.int32, sharding=NamedSharding(mesh, P()))
    return {"fn": step_fn, "args": (state, batch)}


def step(*args):
    raise NotImplementedError("inspect takes the Trainer's own step from inputs()")


_ = loss_lib
