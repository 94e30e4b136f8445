"""The ProJAX "Introduction to sharded computation" lessons as functions for `shardcli run`.

    shardcli run examples/lessons.py:sin_per_shard --mesh 8 --axes x --arg 'i32[32]@x=arange'
    shardcli run examples/lessons.py:sum_then_psum --mesh 8 --axes x --arg 'i32[32]@x=arange'
    shardcli run examples/lessons.py:layer_sharded --mesh 8 --axes x --inputs examples/lessons.py:layer_inputs

Each `shard_map` is built when the function runs, on the mesh `shardcli run` sets
(`jax.set_mesh`), so the same function also runs on one device for the comparison.
`shardcli.probe(value, "name")` shows a value inside the function, device by device.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import shardcli


def f_elementwise(x):
    return 2 * jnp.sin(x) + 1


def sin_per_shard(x):
    """shard_map of 2 sin(x) + 1: each device computes its own block (no communication)."""
    return jax.shard_map(f_elementwise, in_specs=P("x"), out_specs=P("x"))(x)


def times_two(x):
    """shard_map of x * 2: the function sees only its device's block (shape (4,) of (32,))."""
    return jax.shard_map(lambda block: block * 2, in_specs=P("x"), out_specs=P("x"))(x)


def sum_per_shard(x):
    """shard_map of jnp.sum(keepdims=True): one sum per shard, not the global sum."""
    return jax.shard_map(lambda block: jnp.sum(block, keepdims=True), in_specs=P("x"), out_specs=P("x"))(x)


def sum_then_psum(x):
    """Each shard's sum (probed), then psum over x: the global sum on every device."""

    def per_shard(block):
        partial = shardcli.probe(block.sum(), "per-shard sum")
        return jax.lax.psum(partial, "x")

    return jax.shard_map(per_shard, in_specs=P("x"), out_specs=P())(x)


# --- the same layer three ways ---------------------------------------------------------------------


def layer(x, weights, bias):
    return jax.nn.sigmoid(x @ weights + bias)


def layer_inputs(mesh):
    """The lesson's inputs: x[32], weights[32, 4], bias[4] from np.random.default_rng(0), unsharded."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32,)).astype(np.float32)
    weights = rng.normal(size=(32, 4)).astype(np.float32)
    bias = rng.normal(size=(4,)).astype(np.float32)
    return x, weights, bias


def layer_inputs_sharded(mesh):
    """The same inputs with x and the rows of weights sharded over x (automatic sharding)."""
    x, weights, bias = layer_inputs(mesh)
    sharding = jax.NamedSharding(mesh, P("x"))
    return jax.device_put(x, sharding), jax.device_put(weights, sharding), bias


def layer_auto(x, weights, bias):
    """Semi-automatic: with_sharding_constraint distributes unsharded inputs."""
    x = jax.lax.with_sharding_constraint(x, P("x"))
    weights = jax.lax.with_sharding_constraint(weights, P("x"))
    return layer(x, weights, bias)


def layer_sharded(x, weights, bias):
    """Manual: shard_map, each device's partial x @ weights summed with psum."""

    def body(x, weights, bias):
        partial = shardcli.probe(x @ weights, "partial x @ weights")
        return jax.nn.sigmoid(jax.lax.psum(partial, "x") + bias)

    return jax.shard_map(body, in_specs=(P("x"), P("x", None), P(None)), out_specs=P(None))(x, weights, bias)


def plus_axis_index(x):
    """A function whose result depends on the mesh: each block plus its device's index along x.

    On one device (x of size 1) the index is always 0, so `shardcli run` reports the difference and
    exits 1: a sharded program that does not compute what the same function computes unsharded.
    """
    return jax.shard_map(lambda block: block + jax.lax.axis_index("x"), in_specs=P("x"), out_specs=P("x"))(x)
