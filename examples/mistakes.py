"""Small programs with the classic sharding mistakes, for `shardcli inspect` and its tutorial.

    shardcli inspect examples/mistakes.py:matmul --mesh 8 --axes data \
        --arg 'f32[64,1024]@data,None' --arg 'f32[1024,1024]@data,None'      # a weight gathered whole
    shardcli inspect examples/mistakes.py:layout_change --mesh 2x4 --axes data,model \
        --arg 'f32[64,64]@data,None'                                          # a reshard between ops
    shardcli inspect examples/mistakes.py:matmul --inputs examples/mistakes.py:replicated \
        --target tpu-v5e:4x4 --axes data,model                                # 16 GiB on every chip
"""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def matmul(x, w):
    return jnp.tanh(x @ w)


def layout_change(x):
    """Rows over data, then (a constraint) columns over data: the compiler moves every block."""
    y = jax.lax.with_sharding_constraint(x * 2, P(None, "data"))
    return y * 3


def replicated(mesh):
    """matmul's arguments with a 16 GiB float32 weight on every device."""
    x = jax.ShapeDtypeStruct((4096, 65536), jnp.float32, sharding=NamedSharding(mesh, P("data", None)))
    w = jax.ShapeDtypeStruct((65536, 65536), jnp.float32, sharding=NamedSharding(mesh, P()))
    return x, w
