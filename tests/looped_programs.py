"""Looped programs and their unrolled twins, compiled on the CPU and for a TPU target.

Shared by tests/test_trip_counts.py and bench/trip_counts.py. Each case is a function of
(x, weights) written once with `lax.scan`/`fori_loop` and once unrolled by JAX (`unroll=True` or a
Python loop): the same operations, so an honest count of the looped program's FLOPs equals the
unrolled program's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardcli.analysis.program import ProgramAnalysis, analyze_compiled

LAYERS, D, F, BATCH, SEQ = 4, 128, 512, 4, 64
TPU_TARGET = "tpu-v5e:2x2"
GPU_TARGET = "gpu-h100:4"


def _layer(x: Any, w: dict[str, Any]) -> Any:
    """A transformer-ish layer: RMS norm, attention, gated MLP."""
    h = x / jnp.sqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)
    scores = jnp.einsum("bsd,btd->bst", h @ w["wq"], h @ w["wk"]) / 8.0
    x = x + jnp.einsum("bst,btd->bsd", jax.nn.softmax(scores, -1), h @ w["wv"]) @ w["wo"]
    h = x / jnp.sqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)
    return x + (jax.nn.gelu(h @ w["up"]) * (h @ w["gate"])) @ w["down"]


def _train_step(policy: Any, unroll: bool) -> Callable[..., Any]:
    layer = jax.checkpoint(_layer, policy=policy)

    def loss(x: Any, ws: dict[str, Any]) -> Any:
        y = lax.scan(lambda c, w: (layer(c, w), None), x, ws, unroll=unroll)[0]
        return jnp.mean(y * y)

    return jax.grad(loss, argnums=(0, 1))


def _scan_matmuls(unroll: bool) -> Callable[..., Any]:
    def f(x: Any, ws: dict[str, Any]) -> Any:
        return lax.scan(lambda c, w: (jnp.tanh(c @ w), None), x, ws["w"], unroll=unroll)[0]

    return f


def _nested(unroll: bool) -> Callable[..., Any]:
    def f(x: Any, ws: dict[str, Any]) -> Any:
        def outer(c: Any, w: Any) -> Any:
            return lax.scan(lambda c2, _: (jnp.tanh(c2 @ w), None), c, None, length=3, unroll=unroll)[0], None

        return lax.scan(outer, x, ws["w"], unroll=unroll)[0]

    return f


def _fori(unroll: bool) -> Callable[..., Any]:
    def f(x: Any, ws: dict[str, Any]) -> Any:
        w = ws["w"][0]
        if unroll:
            for _ in range(6):
                x = jnp.tanh(x @ w)
            return x
        return lax.fori_loop(0, 6, lambda i, c: jnp.tanh(c @ w), x)

    return f


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[bool], Callable[..., Any]]  # unroll -> the function
    weights: tuple[tuple[str, tuple[int, ...]], ...]
    loops: int  # while loops the looped program holds


_MATMULS = (("w", (8, D, D)),)
_LAYERS = tuple(
    (name, (LAYERS, *shape))
    for name, shape in (
        ("wq", (D, D)),
        ("wk", (D, D)),
        ("wv", (D, D)),
        ("wo", (D, D)),
        ("up", (D, F)),
        ("gate", (D, F)),
        ("down", (F, D)),
    )
)
CASES = (
    Case("scan-of-matmuls", _scan_matmuls, _MATMULS, 1),
    Case("nested-scans", _nested, _MATMULS, 2),
    Case("fori-same-weight", _fori, _MATMULS, 1),
    Case("layers-full-remat", lambda u: _train_step(jax.checkpoint_policies.nothing_saveable, u), _LAYERS, 2),
    Case("layers-dots-saved", lambda u: _train_step(jax.checkpoint_policies.checkpoint_dots, u), _LAYERS, 2),
)


def platforms() -> list[str]:
    from shardcli.hardware.compilers import compiler_installed

    return (
        ["cpu"]
        + ([TPU_TARGET] if compiler_installed("tpu") else [])
        + ([GPU_TARGET] if compiler_installed("cuda") else [])
    )


@functools.cache
def mesh_for(platform: str) -> Any:
    """A 2x2 (data, model) mesh: four of the CPU devices, or the target's four chips or GPUs."""
    if platform == "cpu":
        import numpy as np

        devices = np.array(jax.devices("cpu")[:4]).reshape(2, 2)
        return jax.sharding.Mesh(devices, ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    from shardcli.analysis.target import open_target_session
    from shardcli.hardware.targets import parse_target
    from shardcli.specs.runs import RunOptions

    return open_target_session(parse_target(platform), "2x2", "data,model", RunOptions()).mesh


def analyze(case: Case, platform: str, unroll: bool) -> ProgramAnalysis:
    """Compile the case (float32 on the CPU, bfloat16 for a target) and read it. A case compiled
    before in this process for a target is in JAX's persistent cache, which a described TPU or GPU
    cannot load: compiled again, as shardcli's own compiles do."""
    from shardcli.analysis.target import quiet_native_logs
    from shardcli.runtime.cache import unreadable_entries_compiled_again

    mesh = mesh_for(platform)
    dtype = jnp.float32 if platform == "cpu" else jnp.bfloat16
    x = jax.ShapeDtypeStruct((BATCH, SEQ, D), dtype, sharding=NamedSharding(mesh, P("data")))
    ws = {
        name: jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, P()))
        for name, shape in case.weights
    }
    with quiet_native_logs(), jax.set_mesh(mesh), unreadable_entries_compiled_again():
        compiled = jax.jit(case.make(unroll)).lower(x, ws).compile()
    return analyze_compiled(compiled, mesh)


def compare(case: Case, platform: str) -> tuple[ProgramAnalysis, ProgramAnalysis]:
    """(the looped program's analysis, the unrolled one's)."""
    return analyze(case, platform, False), analyze(case, platform, True)
