"""The tiny self-made program `bench/real_programs.py --quick` runs when no fetched sources are
there: examples/mlp.py's train step with abstract arguments (batch over data, Megatron-style
weights over model), through the same inspect-and-hand-compile path as the corpus wrappers."""

from __future__ import annotations

import os
import sys

SOURCE, MESH, AXES = "", "2x4", "data,model"

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mlp  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

step = mlp.train_step


def inputs(mesh):
    def arg(shape, *spec):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, P(*spec)))

    return (arg((64, 128), "data", None), arg((128, 256), None, "model"), arg((256, 128), "model", None))
