"""The shard_map bodies of the collective registry: each collective as JAX traces it on one device.

JAX is imported inside the functions (they run only when traced): `--help` lists the registry and
must stay fast.
"""

from __future__ import annotations

from shardcli.playground.collective.entries import CollectiveParams


def body_psum(x, p: CollectiveParams, n: int):
    from jax import lax

    return lax.psum(x, p.axes)


def body_pmean(x, p: CollectiveParams, n: int):
    from jax import lax

    return lax.pmean(x, p.axes)


def body_pmax(x, p: CollectiveParams, n: int):
    from jax import lax

    return lax.pmax(x, p.axes)


def body_pmin(x, p: CollectiveParams, n: int):
    from jax import lax

    return lax.pmin(x, p.axes)


def body_gather(x, p: CollectiveParams, n: int):
    from jax import lax

    # The gathered value is the same on every device of the group; say so, so that out_specs
    # may drop the group's axes.
    return lax.all_gather(x, p.axes, axis=p.gather_dim, tiled=p.tiled, to="invarying")


def body_scatter(x, p: CollectiveParams, n: int):
    from jax import lax

    return lax.psum_scatter(x, p.axes, scatter_dimension=p.scatter_dim, tiled=True)


def body_permute(x, p: CollectiveParams, n: int):
    from jax import lax

    return lax.ppermute(x, p.axes, perm=list(p.pairs(n)))


def body_all_to_all(x, p: CollectiveParams, n: int):
    from jax import lax

    return lax.all_to_all(x, p.axes, p.split_dim, p.concat_dim, tiled=True)


def body_broadcast(x, p: CollectiveParams, n: int):
    import jax.numpy as jnp
    from jax import lax

    # lax.pbroadcast has no CPU lowering: keep the root's block, zero the rest, and sum.
    mine = jnp.where(lax.axis_index(p.axes) == p.root, x, jnp.zeros_like(x))
    return lax.psum(mine, p.axes)


def body_index(x, p: CollectiveParams, n: int):
    import jax.numpy as jnp
    from jax import lax

    return jnp.full((1,), lax.axis_index(p.axes), dtype=jnp.int32)
