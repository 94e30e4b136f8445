"""A collective matmul in `shard_map`, on a mesh the module builds when it is imported (as the JAX
docs' examples do): the all-gather of `x` over `model` is overlapped with the matmul by passing
blocks around the ring with `ppermute`.

    shardcli inspect tests/programs/shard_map_module_mesh.py:step \\
        --inputs tests/programs/shard_map_module_mesh.py:inputs
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

ROWS, DIM, COLS = 64, 128, 256
mesh = jax.make_mesh((2, 4), ("data", "model"))  # explicit axes, built at import
STEPS = mesh.shape["model"]


@functools.partial(
    jax.shard_map, mesh=mesh, in_specs=(P("data", "model"), P(None, "model")), out_specs=P("data", "model")
)
def collective_matmul(x_block: jax.Array, w_block: jax.Array) -> jax.Array:
    """x[data, model] @ w[:, model]: each device's x block visits every device of its ring."""
    index = jax.lax.axis_index("model")
    width = x_block.shape[1]
    ring = [(i, (i + 1) % STEPS) for i in range(STEPS)]

    def body(i: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        out, block = carry
        source = (index - i) % STEPS  # whose block of x's columns this device holds now
        rows = jax.lax.dynamic_slice_in_dim(w_block, source * width, width, axis=0)
        return out + block @ rows, jax.lax.ppermute(block, "model", ring)

    zeros = jnp.zeros((x_block.shape[0], w_block.shape[1]), x_block.dtype)
    out = jax.lax.pcast(zeros, ("data", "model"), to="varying")
    out, _ = jax.lax.fori_loop(0, STEPS, body, (out, x_block))
    return out


@jax.jit
def step(x: jax.Array, w: jax.Array) -> jax.Array:
    return jax.nn.relu(collective_matmul(x, w))


def inputs() -> tuple[Any, Any]:
    """x and w, abstract, on the module's mesh."""
    x = jax.ShapeDtypeStruct((ROWS, DIM), jnp.float32, sharding=NamedSharding(mesh, P("data", "model")))
    w = jax.ShapeDtypeStruct((DIM, COLS), jnp.float32, sharding=NamedSharding(mesh, P(None, "model")))
    return x, w
