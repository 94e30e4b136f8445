"""`shardcli model`: a sharded Flax NNX model, initialised sharded, trained, checkpointed and restored.

Needs the `model` extra (flax, optax, orbax-checkpoint); `shardcli/commands/model.py` checks for
it before importing the training modules.

Here: the model (an MLP whose kernels carry sharding annotations), its train state from shapes
alone, the checks that every array of it has the sharding its annotation gives, the regression
batch on the mesh, and the forward pass. Training is `model.train`, the float64 NumPy reference
`model.reference`, saving and restoring a checkpoint `model.checkpoint`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shardcli.analysis.program import HloCollective, find_collectives
from shardcli.analysis.report import Check, Picture, picture_of, spec_of
from shardcli.runtime.memory import check_fits_in_memory
from shardcli.runtime.session import Session
from shardcli.specs.model import (
    ACTIVATION,
    INPUT,
    PARAMS,
    Annotations,
    memory_need,
    spec_text,
)


class MLP(nnx.Module):
    """`relu(x @ W1 + b1) @ W2`, with its kernels annotated and its activations constrained."""

    def __init__(self, depth: int, ann: Annotations, rngs: nnx.Rngs) -> None:
        rules: dict[str, Any] = {} if ann.rules is None else {"sharding_rules": ann.rules}
        init = nnx.initializers.lecun_normal()
        self.dot1 = nnx.Linear(
            depth,
            depth,
            kernel_init=nnx.with_partitioning(init, ann.annotation(PARAMS[0][1]), **rules),
            bias_init=nnx.with_partitioning(
                nnx.initializers.zeros_init(), ann.annotation(PARAMS[1][1]), **rules
            ),
            rngs=rngs,
        )
        self.w2 = nnx.Param(
            init(rngs.params(), (depth, depth)), out_sharding=ann.annotation(PARAMS[2][1]), **rules
        )
        self.activation = P(*ann.resolved(ACTIVATION))

    def __call__(self, x: jax.Array) -> jax.Array:
        y = nnx.relu(self.dot1(x))
        y = jax.lax.with_sharding_constraint(y, self.activation)
        return y @ self.w2[...]


@dataclass(frozen=True)
class ParamRow:
    """One parameter: its annotation, what that resolves to, and the sharding it really has."""

    name: str
    shape: tuple[int, ...]
    annotation: str
    expected: str
    actual: str
    ok: bool
    picture: Picture


@dataclass(frozen=True)
class StepRow:
    step: int
    loss: float
    seconds: float


@dataclass(frozen=True)
class ModelResult:
    """`shardcli model train` or `restore`: plain data for the render layer."""

    session: Session
    action: str  # "train" or "restore"
    depth: int
    batch: int
    annotations: Annotations
    params: tuple[ParamRow, ...]
    state_arrays: int  # arrays in the whole train state (parameters and adam's)
    compile_s: dict[str, float]  # what was compiled -> seconds
    compile_cached: dict[str, bool | None]  # ... -> came from the persistent compile cache (None: off)
    steps: tuple[StepRow, ...]
    final_loss: float | None
    output_spec: str | None
    collectives: dict[str, tuple[HloCollective, ...]]
    checkpoint: dict[str, str] | None  # what was written or read -> path
    saved_mesh: str | None  # restore: the mesh the checkpoint was saved on
    checks: tuple[Check, ...]

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.ok)


# --- building -----------------------------------------------------------------------------------


def build_model(depth: int, ann: Annotations, seed: int, learning_rate: float) -> tuple[MLP, nnx.Optimizer]:
    model = MLP(depth, ann, nnx.Rngs(seed))
    return model, nnx.Optimizer(model, optax.adam(learning_rate), wrt=nnx.Param)


def abstract_state(
    depth: int, ann: Annotations, seed: int, learning_rate: float, mesh: Any
) -> tuple[Any, Any, Any]:
    """The graph, the abstract train state and its shardings, from shapes only (nothing allocated)."""
    with jax.set_mesh(mesh):
        graphdef, abstract = nnx.split(nnx.eval_shape(lambda: build_model(depth, ann, seed, learning_rate)))
        shardings = nnx.get_named_sharding(abstract, mesh)
    return graphdef, abstract, shardings


def state_leaves(state: Any) -> list[tuple[str, Any]]:
    """(path, array) for every array of a train state, in a fixed order."""
    return [(".".join(str(k) for k in path), v.get_value()) for path, v in nnx.to_flat_state(state)]


def param_state(state: Any) -> dict[str, Any]:
    """The model's parameters out of a (model, optimizer) state, by their Flax names."""
    return {path[2:]: value for path, value in state_leaves(state) if path.startswith("0.")}


def param_rows(state: Any, ann: Annotations, mesh: Any) -> tuple[ParamRow, ...]:
    params = param_state(state)
    rows = []
    for name, roles in PARAMS:
        array = params[name]
        expected = NamedSharding(mesh, P(*ann.resolved(roles)))
        rows.append(
            ParamRow(
                name=name,
                shape=tuple(array.shape),
                annotation=spec_text(ann.annotation(roles)),
                expected=spec_text(ann.resolved(roles)),
                actual=spec_of(array),
                ok=array.sharding.is_equivalent_to(expected, array.ndim),
                picture=picture_of(name, array),
            )
        )
    return tuple(rows)


def _expected_sharding(path: str, ann: Annotations, mesh: Any) -> NamedSharding:
    """What the annotations say an array of the train state should have, from its path alone.

    A parameter (`0.w2`) and adam's moments of it (`1.opt_state.0.mu.w2`) follow the parameter's
    annotation; the scalars (adam's count, the optimizer's step) are replicated.
    """
    roles = dict(PARAMS)
    for name in roles:
        if path == f"0.{name}" or path.endswith((f".mu.{name}", f".nu.{name}")):
            return NamedSharding(mesh, P(*ann.resolved(roles[name])))
    return NamedSharding(mesh, P())


def sharding_checks(state: Any, rows: tuple[ParamRow, ...], ann: Annotations, mesh: Any) -> list[Check]:
    checks = [
        Check(
            "every parameter has the sharding its annotation gives",
            all(r.ok for r in rows),
            "; ".join(f"{r.name}: {r.actual}, annotated {r.expected}" for r in rows if not r.ok)
            or ", ".join(f"{r.name} {r.actual}" for r in rows),
        )
    ]
    arrays = state_leaves(state)
    off = [
        f"{path} {spec_of(a)}"
        for path, a in arrays
        if not path.startswith("0.")
        and not a.sharding.is_equivalent_to(_expected_sharding(path, ann, mesh), a.ndim)
    ]
    checks.append(
        Check(
            "adam's moments are sharded like their parameters",
            not off,
            f"{len(arrays)} arrays in the train state" + (f"; off: {', '.join(off)}" if off else ""),
        )
    )
    return checks


def _batch(depth: int, batch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The regression data: inputs and targets, float32, the same on every run with this seed."""
    rng = np.random.default_rng(seed + 1)
    x = rng.standard_normal((batch, depth), dtype=np.float32)
    y = rng.standard_normal((batch, depth), dtype=np.float32)
    return x, y


def prepare_batch(
    mesh: Any, depth: int, batch: int, seed: int, ann: Annotations
) -> tuple[np.ndarray, np.ndarray, Any, Any]:
    x, y = _batch(depth, batch, seed)
    sharding = NamedSharding(mesh, P(*ann.resolved(INPUT)))
    return x, y, jax.device_put(x, sharding), jax.device_put(y, sharding)


def evaluate(graphdef: Any, state: Any, x: Any, y: Any) -> tuple[Any, float, tuple[HloCollective, ...]]:
    """The model's output on `x`, its loss against `y`, and the collectives of the forward pass.

    The forward pass is compiled once; the same executable runs and is read for its collectives.
    """

    def forward(state: Any, x: jax.Array) -> jax.Array:
        model, _ = nnx.merge(graphdef, state)
        return model(x)

    compiled = jax.jit(forward).lower(state, x).compile()
    out = compiled(state, x)
    return out, _loss_of(out, y), find_collectives(compiled.as_text() or "")


def _loss_of(out: Any, y: Any) -> float:
    return float(jax.jit(lambda o, t: jnp.mean((o - t) ** 2))(out, y))


def check_memory(session: Session, ann: Annotations, depth: int, batch: int) -> None:
    per_device, total = memory_need(ann, depth, batch)
    check_fits_in_memory(
        session.runtime, list(session.devices), per_device=per_device, total=total, what=f"--depth {depth}"
    )
