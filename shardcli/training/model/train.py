"""`shardcli model train`: the model initialised sharded, trained, checked against NumPy, and saved
when asked.

- Sharded initialisation: the model and its adam state are built inside one jitted function
  whose out_shardings come from the parameters' annotations, so every device only ever holds its
  own blocks.
- Training: one jitted step (loss, gradients, adam update) with the train state donated, compiled
  ahead of time so that compile and steady-state step times are reported apart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from shardcli.analysis.program import HloCollective, find_collectives
from shardcli.analysis.report import Check, spec_of
from shardcli.runtime.session import open_session
from shardcli.runtime.timing import compile_timed
from shardcli.specs.model import Annotations, TrainRequest, validate_train
from shardcli.training.model.checkpoint import save_checkpoint
from shardcli.training.model.folder import claimed_folder
from shardcli.training.model.mlp import (
    ModelResult,
    ParamRow,
    StepRow,
    abstract_state,
    build_model,
    check_memory,
    evaluate,
    param_rows,
    prepare_batch,
    sharding_checks,
    state_leaves,
)
from shardcli.training.model.reference import (
    Reference,
    gradient_check,
    host_params,
    loss_check,
    output_checks,
    reference,
)


@dataclass(frozen=True)
class _Training:
    """What initialising and training left: the state after the last step, the checks made on the
    way, the data, and what was compiled."""

    state: Any
    rows: tuple[ParamRow, ...]
    checks: tuple[Check, ...]  # the shardings after initialisation, and the first gradients
    first_ref: Reference  # NumPy's pass on the initial parameters
    x_host: np.ndarray
    y_host: np.ndarray
    steps: tuple[StepRow, ...]
    out: Any  # the output after the last step
    final: float  # its loss
    compile_s: dict[str, float]
    compile_cached: dict[str, bool | None]
    collectives: dict[str, tuple[HloCollective, ...]]


def run_train(request: TrainRequest) -> ModelResult:
    """Initialise the model sharded, train it, check it against NumPy, and save it when asked.

    Raises:
        ShardcliError: bad sizes, rules, a checkpoint folder that would be overwritten, or a model
            that does not fit, all before anything is allocated.
    """
    ann, target = validate_train(request)

    session = open_session(request.mesh, request.options)
    mesh, platform = session.mesh, session.runtime.platform
    check_memory(session, ann, request.depth, request.batch)
    trained = _train(request, ann, mesh, platform)
    state, final, y_host = trained.state, trained.final, trained.y_host

    first = trained.steps[0].loss
    checks = [
        *trained.checks,
        loss_check("the first step's loss matches NumPy", first, trained.first_ref, y_host),
        Check(
            "the loss goes down",
            final < first,
            f"{first:.6g} at step 1, {final:.6g} after step {request.steps}",
        ),
        *output_checks(
            trained.out, mesh, ann, reference(host_params(state), trained.x_host, platform), y_host, final
        ),
    ]
    checkpoint = None
    if target is not None:
        with claimed_folder(target, f"--checkpoint {request.checkpoint}"):
            checkpoint = save_checkpoint(target, state, request, session, ann, final)
    return ModelResult(
        session=session,
        action="train",
        depth=request.depth,
        batch=request.batch,
        annotations=ann,
        params=trained.rows,
        state_arrays=len(state_leaves(state)),
        compile_s=trained.compile_s,
        compile_cached=trained.compile_cached,
        steps=trained.steps,
        final_loss=final,
        output_spec=spec_of(trained.out),
        collectives=trained.collectives,
        checkpoint=checkpoint,
        saved_mesh=None,
        checks=tuple(checks),
    )


def _train(request: TrainRequest, ann: Annotations, mesh: Any, platform: str) -> _Training:
    """Initialise the train state sharded, check its shardings and the first gradients against
    NumPy, and take the steps."""
    depth, batch, seed = request.depth, request.batch, request.seed
    graphdef, _, shardings = abstract_state(depth, ann, seed, request.learning_rate, mesh)

    def create() -> Any:
        return nnx.state(build_model(depth, ann, seed, request.learning_rate))

    def step(state: Any, x: jax.Array, y: jax.Array) -> tuple[Any, jax.Array]:
        model, optimizer = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    with jax.set_mesh(mesh):
        x_host, y_host, x, y = prepare_batch(mesh, depth, batch, seed, ann)
        init, init_s, init_cached = compile_timed(jax.jit(create, out_shardings=shardings))
        state = init()
        rows = param_rows(state, ann, mesh)
        checks = sharding_checks(state, rows, ann, mesh)
        initial = host_params(state)  # before the first step donates the state
        first_ref = reference(initial, x_host, platform)
        gradients = jax.jit(
            lambda s, x, y: nnx.grad(lambda m: jnp.mean((m(x) - y) ** 2))(nnx.merge(graphdef, s)[0])
        )
        grads = dict(state_leaves(gradients(state, x, y)))
        checks.append(gradient_check(first_ref, initial, x_host, y_host, grads))
        train, train_s, train_cached = compile_timed(
            jax.jit(step, donate_argnums=0, out_shardings=(shardings, None)), state, x, y
        )
        steps = []
        for k in range(request.steps):
            start = time.perf_counter()
            state, loss = train(state, x, y)
            value = float(loss)  # waits for the step
            steps.append(StepRow(k + 1, value, time.perf_counter() - start))
        out, final, forward_ops = evaluate(graphdef, state, x, y)
    return _Training(
        state=state,
        rows=rows,
        checks=tuple(checks),
        first_ref=first_ref,
        x_host=x_host,
        y_host=y_host,
        steps=tuple(steps),
        out=out,
        final=final,
        compile_s={"init": init_s, "train step": train_s},
        compile_cached={"init": init_cached, "train step": train_cached},
        collectives={"train step": find_collectives(train.as_text()), "forward": forward_ops},
    )
