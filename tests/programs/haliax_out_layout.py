"""A haliax `named_jit` train step as Levanter's trainer jits it: its state donated
(`donate_args=(True,)`), its results laid out by `out_axis_resources`. It returns the loss (an f32
scalar) before the new state, whose step count is an s32 scalar: where the results' layout is left
to the compiler, the donated buffers are paired with other results (the loss takes the step count's
4 bytes) and the temporaries differ from what `named_jit` compiles. shardcli must compile exactly
the program `named_jit` compiles.

    shardcli inspect tests/programs/haliax_out_layout.py:step \\
        --inputs tests/programs/haliax_out_layout.py:inputs --mesh 2x4 --axes data,model
"""

from __future__ import annotations

from typing import Any

import haliax as hax
import jax
import jax.numpy as jnp

Batch = hax.Axis("batch", 16)
Embed = hax.Axis("embed", 64)
MAPPING = {"batch": "data", "embed": "model"}


def _step(state: dict[str, Any], x: hax.NamedArray) -> tuple[Any, dict[str, Any]]:
    def loss_of(w: hax.NamedArray) -> jax.Array:
        return hax.mean(hax.tanh(x * w) ** 2).array

    loss, grad = jax.value_and_grad(loss_of)(state["w"])
    return loss, {"step": state["step"] + 1, "w": state["w"] - 0.1 * grad}


step = hax.named_jit(_step, axis_resources=MAPPING, donate_args=(True, False))


def inputs(mesh: Any) -> tuple[Any, ...]:
    def placed(spec: Any, shape: tuple[int, ...], dtype: Any = jnp.float32) -> Any:
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

    state = {
        "step": placed((), (), jnp.int32),
        "w": hax.NamedArray(placed(("model",), (Embed.size,)), (Embed,)),
    }
    x = hax.NamedArray(placed(("data", "model"), (Batch.size, Embed.size)), (Batch, Embed))
    return state, x
