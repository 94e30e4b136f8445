"""`shardcli model`: a sharded Flax NNX model, initialised sharded, trained, checkpointed and restored.

Needs the `model` extra (flax, optax, orbax-checkpoint); `shardcli/commands/model.py` checks for
it before importing this module.

- Sharded initialisation: the model and its adam state are built inside one jitted function
  whose out_shardings come from the parameters' annotations, so every device only ever holds its
  own blocks.
- Training: one jitted step (loss, gradients, adam update) with the train state donated, compiled
  ahead of time so that compile and steady-state step times are reported apart.
- Checkpoints: orbax writes the sharded train state; `shardcli-model.json` beside it records the
  model's sizes and a digest of every array. Restoring reads straight into the shardings the
  annotations give on the (possibly different) mesh, from abstract shapes only, and compares the
  digests.
"""

from __future__ import annotations

import json
import os
import time
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
from shardcli.analysis.report import Check, Picture, close_check, picture_of, spec_of
from shardcli.errors import ShardcliError
from shardcli.runtime.memory import check_fits_in_memory
from shardcli.runtime.session import Session, open_session
from shardcli.runtime.timing import compile_timed
from shardcli.runtime.verify import EPS32, RTOL, dot_input_roundoff
from shardcli.specs.model import (
    ACTIVATION,
    INPUT,
    METADATA_FILE,
    OUTPUT,
    PARAMS,
    STATE_DIR,
    Annotations,
    RestoreRequest,
    SavedModel,
    TrainRequest,
    memory_need,
    spec_text,
    validate_restore,
    validate_train,
)
from shardcli.tile_math import normalize_index
from shardcli.training.checkpoints import FileRecord, claimed_folder, record_files, verify_files

MAX_REASON = 240  # characters of orbax's reason in a one-line error
DIGEST_MULTIPLIER = 0x9E3779B97F4A7C15  # spreads positions over 64 bits (Fibonacci hashing)


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


def _build(depth: int, ann: Annotations, seed: int, learning_rate: float) -> tuple[MLP, nnx.Optimizer]:
    model = MLP(depth, ann, nnx.Rngs(seed))
    return model, nnx.Optimizer(model, optax.adam(learning_rate), wrt=nnx.Param)


def _abstract(
    depth: int, ann: Annotations, seed: int, learning_rate: float, mesh: Any
) -> tuple[Any, Any, Any]:
    """The graph, the abstract train state and its shardings, from shapes only (nothing allocated)."""
    with jax.set_mesh(mesh):
        graphdef, abstract = nnx.split(nnx.eval_shape(lambda: _build(depth, ann, seed, learning_rate)))
        shardings = nnx.get_named_sharding(abstract, mesh)
    return graphdef, abstract, shardings


def _leaves(state: Any) -> list[tuple[str, Any]]:
    """(path, array) for every array of a train state, in a fixed order."""
    return [(".".join(str(k) for k in path), v.get_value()) for path, v in nnx.to_flat_state(state)]


def _param_state(state: Any) -> dict[str, Any]:
    """The model's parameters out of a (model, optimizer) state, by their Flax names."""
    return {path[2:]: value for path, value in _leaves(state) if path.startswith("0.")}


def _param_rows(state: Any, ann: Annotations, mesh: Any) -> tuple[ParamRow, ...]:
    params = _param_state(state)
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


def _sharding_checks(state: Any, rows: tuple[ParamRow, ...], ann: Annotations, mesh: Any) -> list[Check]:
    checks = [
        Check(
            "every parameter has the sharding its annotation gives",
            all(r.ok for r in rows),
            "; ".join(f"{r.name}: {r.actual}, annotated {r.expected}" for r in rows if not r.ok)
            or ", ".join(f"{r.name} {r.actual}" for r in rows),
        )
    ]
    arrays = _leaves(state)
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


# --- digests ------------------------------------------------------------------------------------


def digest(array: Any) -> str:
    """A digest of an array's values that does not depend on how it is sharded.

    The sum, modulo 2**64, of every element's bit pattern times a hash of its row-major position.
    Each block is read from the device that holds it (replicas once), so no whole copy is made;
    equal arrays give equal digests on any mesh, and a changed or moved element changes it.
    """
    shape = tuple(array.shape)
    uint = np.dtype(f"uint{8 * array.dtype.itemsize}")
    strides = [int(np.prod(shape[k + 1 :], dtype=np.int64)) for k in range(len(shape))]
    total = 0
    for shard in array.addressable_shards:
        if shard.replica_id != 0:
            continue
        bounds = normalize_index(shard.index, shape)
        flat = np.zeros((), dtype=np.uint64)
        for axis, ((lo, hi), stride) in enumerate(zip(bounds, strides, strict=True)):
            index = np.arange(lo, hi, dtype=np.uint64) * np.uint64(stride)
            flat = np.expand_dims(flat, -1) + index.reshape((1,) * axis + (-1,))
        weights = flat * np.uint64(DIGEST_MULTIPLIER) + np.uint64(1)
        bits = np.ascontiguousarray(np.asarray(shard.data)).view(uint).astype(np.uint64)
        total = (total + int(np.sum(bits * weights, dtype=np.uint64))) % 2**64
    return f"{total:016x}"


def _digests(state: Any) -> dict[str, str]:
    return {path: digest(array) for path, array in _leaves(state)}


# --- data and reference -------------------------------------------------------------------------


def _batch(depth: int, batch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The regression data: inputs and targets, float32, the same on every run with this seed."""
    rng = np.random.default_rng(seed + 1)
    x = rng.standard_normal((batch, depth), dtype=np.float32)
    y = rng.standard_normal((batch, depth), dtype=np.float32)
    return x, y


def _host_params(state: Any) -> dict[str, np.ndarray]:
    """The parameters as float64 NumPy arrays (whole copies on the host: only to check against)."""
    return {name: np.asarray(a, dtype=np.float64) for name, a in _param_state(state).items()}


SIGMAS = 10  # how many standard deviations of the input rounding a run may be off by


@dataclass(frozen=True)
class Reference:
    """The model's forward pass in float64 NumPy, and how far a run on this platform may be from it.

    `bound` (per output element) is RTOL x the largest |output| (the pipeline command's bound): a
    worst-case float32 bound for two matmuls of depth D grows like D^2 eps and would let a wrong
    loss pass at large depth, while a real sharding or communication mistake is off by the size of
    the values themselves. Where the platform's dots round their float32 inputs (TF32 on a GPU,
    bf16 on a TPU), two allowances are added:

    - SIGMAS standard deviations of that rounding: each rounded input is off by a relative error
      spread evenly over a width of 2 u_in (to nearest or towards zero alike), independently of
      the others, and the variances are carried through both layers. (Adding the worst cases
      instead gives D^2 u_in, of the size of the values at depth 1024 with TF32.)
    - the bias of truncation (Hopper's tensor cores may drop TF32's low bits rather than round
      them): on average each product is then (1 - u_in)^2 of the exact one, so the pass is also
      run with every dot scaled by that and the difference allowed.
    """

    pre: np.ndarray  # x @ W1 + b1
    hidden: np.ndarray  # relu(pre)
    out: np.ndarray  # hidden @ W2
    u_in: float  # unit roundoff of the dots' inputs (0: exact products, and every allowance 0)
    rounding: str  # what rounds them, in words ("" for exact products)
    rtol_bound: float  # RTOL x max|out|
    pre_var: np.ndarray | float = 0.0  # variance of a run's pre from the input rounding
    out_var: np.ndarray | float = 0.0
    scaled_pre: np.ndarray | None = None  # the pass with every dot scaled by (1 - u_in)^2
    scaled_out: np.ndarray | None = None

    @property
    def product_var(self) -> float:
        return _product_var(self.u_in)

    @property
    def scale(self) -> float:
        return _truncation_scale(self.u_in)

    @property
    def out_bias(self) -> np.ndarray | float:
        return 0.0 if self.scaled_out is None else np.abs(self.out - self.scaled_out)

    @property
    def bound(self) -> np.ndarray | float:
        """|out - run's out| allowed per element."""
        return self.rtol_bound + self.out_bias + SIGMAS * np.sqrt(self.out_var)

    def how(self, what: str) -> str:
        """The bound on |err| in words, relative to the largest |what|."""
        text = f"{RTOL:g} x max|{what}|"
        if self.u_in:
            text += f" + {SIGMAS} sigma and the truncation bias of {self.rounding} (u_in = {self.u_in:.2g})"
        return text


def _product_var(u_in: float) -> float:
    """Variance of the relative error of one product of two rounded inputs: 2 u_in^2 / 3."""
    return 2 * u_in**2 / 3


def _truncation_scale(u_in: float) -> float:
    """What a product of two truncated inputs is, on average, of the exact one."""
    return (1 - u_in) ** 2


def _forward(params: dict[str, np.ndarray], x64: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(pre, out) of the model in float64, each dot's result scaled by `scale`."""
    pre = scale * (x64 @ params["dot1.kernel"]) + params["dot1.bias"]
    return pre, scale * (np.maximum(pre, 0.0) @ params["w2"])


def _reference(params: dict[str, np.ndarray], x: np.ndarray, platform: str) -> Reference:
    u_in, in_text = dot_input_roundoff(platform, "float32")
    x64 = x.astype(np.float64)
    pre, out = _forward(params, x64, 1.0)
    hidden = np.maximum(pre, 0.0)
    rtol_bound = RTOL * (float(np.max(np.abs(out))) or 1.0)
    if not u_in:  # exact products: nothing more to allow, and nothing more to compute
        return Reference(pre, hidden, out, 0.0, "", rtol_bound)
    c, w2sq = _product_var(u_in), params["w2"] ** 2
    pre_var = c * (x64**2 @ params["dot1.kernel"] ** 2)
    # relu passes a live unit's error on (and a dead one's, near the kink, as an upper bound)
    out_var = pre_var @ w2sq + c * (hidden**2 @ w2sq)
    scaled_pre, scaled_out = _forward(params, x64, _truncation_scale(u_in))
    return Reference(pre, hidden, out, u_in, in_text, rtol_bound, pre_var, out_var, scaled_pre, scaled_out)


def _gradients(
    params: dict[str, np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    pre: np.ndarray,
    out: np.ndarray,
    scale: float,
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """The first gradients from a forward pass (pre, out), each dot scaled by `scale`; also the
    loss gradient g and relu's input gradient before the mask."""
    x64 = x.astype(np.float64)
    g = 2 * (out - y.astype(np.float64)) / y.size
    back = scale * (g @ params["w2"].T)
    dh = back * (pre > 0)
    grads = {
        "dot1.kernel": scale * (x64.T @ dh),
        "dot1.bias": dh.sum(axis=0),
        "w2": scale * (np.maximum(pre, 0.0).T @ g),
    }
    return grads, g, back


def _gradient_check(
    ref: Reference, params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, got: dict[str, Any]
) -> Check:
    """The first step's gradients (before any update) against NumPy's backward pass in float64.

    Each array within RTOL x its largest |gradient|, plus (where the platform's dots round their
    inputs) SIGMAS standard deviations of that rounding carried through the backward pass and the
    truncation bias (see `Reference`). Where a hidden unit's pre-activation is so close to 0 that
    the run may put it on either side of relu's kink, both answers are allowed. `ref` is the
    forward pass on these parameters; `got` the run's gradients by parameter path (dot1.kernel,
    dot1.bias, w2).
    """
    x64 = x.astype(np.float64)
    want, g, back = _gradients(params, x, y, ref.pre, ref.out, 1.0)
    near = np.abs(ref.pre) <= RTOL * (float(np.max(np.abs(ref.pre))) or 1.0)
    allowance: dict[str, Any] = {name: 0.0 for name in want}
    if ref.u_in:
        # set whenever the dots round their inputs
        assert ref.scaled_pre is not None and ref.scaled_out is not None
        c, w2sq = ref.product_var, params["w2"] ** 2
        g_var = (2 / y.size) ** 2 * ref.out_var
        back_var = g_var @ w2sq.T + c * (g**2 @ w2sq.T)
        dh = back * (ref.pre > 0)
        variance = {
            "dot1.kernel": (x64**2).T @ back_var + c * ((x64**2).T @ dh**2),
            "dot1.bias": back_var.sum(axis=0),
            "w2": np.asarray(ref.pre_var).T @ g**2
            + (ref.hidden**2).T @ g_var
            + c * ((ref.hidden**2).T @ g**2),
        }
        scaled, _, _ = _gradients(params, x, y, ref.scaled_pre, ref.scaled_out, ref.scale)
        allowance = {n: SIGMAS * np.sqrt(variance[n]) + np.abs(want[n] - scaled[n]) for n in want}
        near |= np.abs(ref.pre) <= SIGMAS * np.sqrt(ref.pre_var) + np.abs(ref.pre - ref.scaled_pre)
    kink = np.abs(back) * near
    slack = {"dot1.kernel": np.abs(x64).T @ kink, "dot1.bias": kink.sum(axis=0), "w2": 0.0}
    worst, off = 0.0, []
    for name, wanted in want.items():
        err = np.abs(np.asarray(got[name], dtype=np.float64) - wanted)
        scale = float(np.max(np.abs(wanted))) or 1.0
        if not np.all(err <= RTOL * scale + slack[name] + allowance[name]):
            off.append(name)
        worst = max(worst, float(np.max(err / scale)))
    return Check(
        "the first step's gradients match NumPy",
        not off,
        f"max |err| {worst:.1e} x max|gradient| (<= {ref.how('gradient')})"
        + (f"; off: {', '.join(off)}" if off else ""),
    )


def _loss_check(what: str, got: float, ref: Reference, y: np.ndarray, label: str = "NumPy") -> Check:
    """A loss against NumPy's from the reference output, within what the output's bound allows.

    The RTOL part of the output's bound may line up in every element; the input rounding's errors
    are independent, so the loss gets SIGMAS standard deviations of their weighted sum, and the
    truncated pass's loss may differ by its own bias.
    """
    diff = ref.out - y.astype(np.float64)
    want = float(np.mean(diff**2))
    flat = ref.rtol_bound
    # float32 sums of the squares in any order add at most (elements) eps of the mean
    allowed = float(np.mean(2 * np.abs(diff) * flat + flat**2)) + (diff.size + 2) * EPS32 * abs(want)
    if ref.u_in:
        assert ref.scaled_out is not None  # set whenever the dots round their inputs
        allowed += SIGMAS * float(np.sqrt(np.sum((2 * diff / diff.size) ** 2 * ref.out_var)))
        allowed += abs(float(np.mean((ref.scaled_out - y.astype(np.float64)) ** 2)) - want)
    return Check(what, abs(got - want) <= allowed, f"{got:.6g}; {label} {want:.6g}; |err| <= {allowed:.1e}")


def _output_checks(
    out: Any, mesh: Any, ann: Annotations, ref: Reference, y: np.ndarray, loss: float
) -> list[Check]:
    """The output's sharding and values, and the loss, against `ref` (the pass on the same state)."""
    expected = NamedSharding(mesh, P(*ann.resolved(OUTPUT)))
    return [
        Check(
            "the output is sharded as its annotation gives",
            out.sharding.is_equivalent_to(expected, out.ndim),
            f"{spec_of(out)}, expected {spec_text(ann.resolved(OUTPUT))}",
        ),
        close_check("the output matches NumPy", out, ref.out, ref.bound, "|err| <= " + ref.how("output")),
        _loss_check("the loss matches NumPy", loss, ref, y),
    ]


def _prepare(
    mesh: Any, depth: int, batch: int, seed: int, ann: Annotations
) -> tuple[np.ndarray, np.ndarray, Any, Any]:
    x, y = _batch(depth, batch, seed)
    sharding = NamedSharding(mesh, P(*ann.resolved(INPUT)))
    return x, y, jax.device_put(x, sharding), jax.device_put(y, sharding)


def _evaluate(graphdef: Any, state: Any, x: Any, y: Any) -> tuple[Any, float, tuple[HloCollective, ...]]:
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


def _check_memory(session: Session, ann: Annotations, depth: int, batch: int) -> None:
    per_device, total = memory_need(ann, depth, batch)
    check_fits_in_memory(
        session.runtime, list(session.devices), per_device=per_device, total=total, what=f"--depth {depth}"
    )


# --- train --------------------------------------------------------------------------------------


def run_train(request: TrainRequest) -> ModelResult:
    """Initialise the model sharded, train it, check it against NumPy, and save it when asked.

    Raises:
        ShardcliError: bad sizes, rules, a checkpoint folder that would be overwritten, or a model
            that does not fit, all before anything is allocated.
    """
    ann, target = validate_train(request)

    session = open_session(request.mesh, request.options)
    mesh, platform = session.mesh, session.runtime.platform
    _check_memory(session, ann, request.depth, request.batch)
    depth, batch, seed = request.depth, request.batch, request.seed

    graphdef, abstract, shardings = _abstract(depth, ann, seed, request.learning_rate, mesh)

    def create() -> Any:
        return nnx.state(_build(depth, ann, seed, request.learning_rate))

    def step(state: Any, x: jax.Array, y: jax.Array) -> tuple[Any, jax.Array]:
        model, optimizer = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    with jax.set_mesh(mesh):
        x_host, y_host, x, y = _prepare(mesh, depth, batch, seed, ann)
        init, init_s, init_cached = compile_timed(jax.jit(create, out_shardings=shardings))
        state = init()
        rows = _param_rows(state, ann, mesh)
        checks = _sharding_checks(state, rows, ann, mesh)
        initial = _host_params(state)  # before the first step donates the state
        first_ref = _reference(initial, x_host, platform)
        gradients = jax.jit(
            lambda s, x, y: nnx.grad(lambda m: jnp.mean((m(x) - y) ** 2))(nnx.merge(graphdef, s)[0])
        )
        grads = dict(_leaves(gradients(state, x, y)))
        checks.append(_gradient_check(first_ref, initial, x_host, y_host, grads))
        train, train_s, train_cached = compile_timed(
            jax.jit(step, donate_argnums=0, out_shardings=(shardings, None)), state, x, y
        )
        steps = []
        for k in range(request.steps):
            start = time.perf_counter()
            state, loss = train(state, x, y)
            value = float(loss)  # waits for the step
            steps.append(StepRow(k + 1, value, time.perf_counter() - start))
        out, final, forward_ops = _evaluate(graphdef, state, x, y)

    first = steps[0].loss
    checks.append(_loss_check("the first step's loss matches NumPy", first, first_ref, y_host))
    checks.append(
        Check(
            "the loss goes down",
            final < first,
            f"{first:.6g} at step 1, {final:.6g} after step {request.steps}",
        )
    )
    checks.extend(
        _output_checks(out, mesh, ann, _reference(_host_params(state), x_host, platform), y_host, final)
    )
    checkpoint = None
    if target is not None:
        with claimed_folder(target, f"--checkpoint {request.checkpoint}"):
            checkpoint = _save(target, state, request, session, ann, final)
    return ModelResult(
        session=session,
        action="train",
        depth=depth,
        batch=batch,
        annotations=ann,
        params=rows,
        state_arrays=len(_leaves(state)),
        compile_s={"init": init_s, "train step": train_s},
        compile_cached={"init": init_cached, "train step": train_cached},
        steps=tuple(steps),
        final_loss=final,
        output_spec=spec_of(out),
        collectives={
            "train step": find_collectives(train.as_text()),
            "forward": forward_ops,
        },
        checkpoint=checkpoint,
        saved_mesh=None,
        checks=tuple(checks),
    )


def write_error_text(error: BaseException) -> str:
    """A failed write in a few words: `No space left on device` for tensorstore's paragraph that
    ends in `[os_error_code='28']`, the OS's words for an OSError, else the first line."""
    import re

    code = getattr(error, "errno", None)
    found = re.search(r"os_error_code='(\d+)'", str(error))
    if found:
        code = int(found.group(1))
    if isinstance(code, int) and code > 0:
        return os.strerror(code)
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


def _save(
    target: str, state: Any, request: TrainRequest, session: Session, ann: Annotations, final: float
) -> dict[str, str]:
    import logging

    import orbax.checkpoint as ocp

    _quiet_late_reads()  # a failed save's writes still in flight report "Event loop is closed" too
    absl = logging.getLogger("absl")
    # orbax's notes about OCDBT (not used here), and the traceback each of its writer threads logs
    # when a write fails (a full disk: over a hundred lines); the failure itself is raised here.
    level = absl.level
    absl.setLevel(logging.CRITICAL)  # setLevel, not .level: it clears the logger's cache
    state_path = os.path.join(target, STATE_DIR)
    # one folder per array (not OCDBT's shared data files), so a damaged file names its array
    checkpointer = ocp.Checkpointer(ocp.StandardCheckpointHandler(use_ocdbt=False))
    try:
        checkpointer.save(state_path, state)
    except (OSError, ValueError) as error:
        raise ShardcliError(
            f"--checkpoint {request.checkpoint}: saving failed after training ({write_error_text(error)}); "
            "nothing was kept"
        ) from None
    finally:
        checkpointer.close()
        absl.setLevel(max(level, logging.ERROR))
    saved = SavedModel(
        depth=request.depth,
        batch=request.batch,
        seed=request.seed,
        steps=request.steps,
        learning_rate=request.learning_rate,
        mesh=session.spec,
        rules=ann.rules,
        digests=_digests(state),
        final_loss=final,
        files={name: (r.size, r.sha256) for name, r in record_files(state_path).items()},
    )
    meta_path = os.path.join(target, METADATA_FILE)
    try:
        with open(meta_path + ".tmp", "w", encoding="utf-8") as f:  # whole, or not there at all
            json.dump(saved.to_json(), f, indent=2)
            f.write("\n")
        os.replace(meta_path + ".tmp", meta_path)
    except OSError as error:
        raise ShardcliError(
            f"--checkpoint {request.checkpoint}: saving failed after training ({write_error_text(error)}); "
            "nothing was kept"
        ) from None
    return {"folder": target, "state": state_path, "metadata": meta_path}


# --- restore ------------------------------------------------------------------------------------


def run_restore(request: RestoreRequest) -> ModelResult:
    """Restore a checkpoint straight into the annotated shardings on this mesh and verify it.

    Raises:
        ShardcliError: a missing folder, one that is not a checkpoint, a --depth that differs from
            the checkpoint's, a mesh or rules the model cannot be laid out on, or a state orbax
            cannot read; nothing is written.
    """
    saved, ann = validate_restore(request)

    session = open_session(request.mesh, request.options)
    mesh, platform = session.mesh, session.runtime.platform
    _check_memory(session, ann, saved.depth, saved.batch)
    graphdef, abstract, shardings = _abstract(saved.depth, ann, saved.seed, saved.learning_rate, mesh)
    target = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings
    )
    folder = os.path.abspath(request.folder)
    state_path = os.path.join(folder, STATE_DIR)
    if saved.files is not None:  # metadata from before the record: orbax alone reads it
        records = {name: FileRecord(size, sha) for name, (size, sha) in saved.files.items()}
        verify_files(request.folder, state_path, records)
    state = _orbax_restore(state_path, target, request.folder)

    rows = _param_rows(state, ann, mesh)
    checks = _sharding_checks(state, rows, ann, mesh)
    digests = _digests(state)
    differ = [p for p, d in digests.items() if saved.digests.get(p) != d]
    missing = sorted(set(saved.digests) - set(digests))
    checks.append(
        Check(
            "the restored values equal the saved ones",
            not differ and not missing,
            f"digests of {len(digests)} arrays"
            + (f"; differ: {', '.join(differ)}" if differ else "")
            + (f"; not restored: {', '.join(missing)}" if missing else ""),
        )
    )
    with jax.set_mesh(mesh):
        x_host, y_host, x, y = _prepare(mesh, saved.depth, saved.batch, saved.seed, ann)
        out, final, forward_ops = _evaluate(graphdef, state, x, y)
    ref = _reference(_host_params(state), x_host, platform)
    checks.extend(_output_checks(out, mesh, ann, ref, y_host, final))
    checks.append(
        _loss_check(
            "the loss at save time is the restored model's",
            saved.final_loss,
            ref,
            y_host,
            label="NumPy on the restored values",
        )
    )
    return ModelResult(
        session=session,
        action="restore",
        depth=saved.depth,
        batch=saved.batch,
        annotations=ann,
        params=rows,
        state_arrays=len(digests),
        compile_s={},
        compile_cached={},
        steps=(),
        final_loss=final,
        output_spec=spec_of(out),
        collectives={"forward": forward_ops},
        checkpoint={"folder": folder, "state": state_path, "metadata": os.path.join(folder, METADATA_FILE)},
        saved_mesh=saved.mesh.describe(),
        checks=tuple(checks),
    )


def _orbax_restore(state_path: str, target: Any, folder: str) -> Any:
    """Read the state into `target`'s shardings, after checking it holds the arrays the model needs.

    Raises:
        ShardcliError: a state with other arrays or shapes than the model's, or one orbax cannot read.
    """
    import logging

    import orbax.checkpoint as ocp

    _quiet_late_reads()
    # orbax logs a warning through absl when it cannot read the metadata; the error says it once
    logging.getLogger("absl").setLevel(logging.ERROR)
    checkpointer = ocp.StandardCheckpointer()
    try:
        _check_saved_arrays(checkpointer.metadata(state_path), target, folder)
        return checkpointer.restore(state_path, target)
    except (ValueError, KeyError, TypeError, FileNotFoundError, OSError) as error:
        text = str(error).strip()
        first = text.splitlines()[0].split(" [tensorstore_spec")[0] if text else type(error).__name__
        if len(first) > MAX_REASON:
            first = first[: MAX_REASON - 3] + "..."
        raise ShardcliError(
            f"{folder}: the saved state does not restore into this model ({first})"
        ) from error
    finally:
        checkpointer.close()


def _check_saved_arrays(metadata: Any, target: Any, folder: str) -> None:
    """Raises: ShardcliError when the saved arrays' names or shapes differ from the model's."""
    tree = getattr(metadata, "item_metadata", metadata)
    saved = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        keys = [str(getattr(k, "key", getattr(k, "idx", k))) for k in path]
        saved[".".join(k for k in keys if k != "value")] = tuple(getattr(leaf, "shape", ()) or ())
    if not saved:
        raise ShardcliError(f"{folder}: orbax finds no arrays in the saved state; the checkpoint is damaged")
    wanted = {path: tuple(a.shape) for path, a in _leaves(target)}
    missing = sorted(set(wanted) - set(saved))
    extra = sorted(set(saved) - set(wanted))
    if missing or extra:
        raise ShardcliError(
            f"{folder}: the saved state does not hold this model's arrays (missing: "
            f"{', '.join(missing) or 'none'}; not the model's: {', '.join(extra) or 'none'})"
        )
    for name, shape in wanted.items():
        if saved[name] != shape:
            raise ShardcliError(
                f"{folder}: the saved state holds {name} with shape {saved[name]}, but the model needs "
                f"{shape}; the state does not match its shardcli-model.json"
            )


def _quiet_late_reads() -> None:
    """When a restore fails, tensorstore still finishes the reads it had started and hands each
    result to orbax's event loop, which is closed by then; each hand-off reports "Event loop is
    closed" with a traceback, as an unraisable exception or from its thread. They add nothing to
    the error already reported, so those (and only those) are dropped."""
    import sys
    import threading

    def closed_loop(value: BaseException | None) -> bool:
        return isinstance(value, RuntimeError) and str(value) == "Event loop is closed"

    previous_unraisable, previous_thread = sys.unraisablehook, threading.excepthook

    def unraisable(info: Any) -> None:
        if not closed_loop(info.exc_value):
            previous_unraisable(info)

    def thread(args: Any) -> None:
        if not closed_loop(args.exc_value):
            previous_thread(args)

    sys.unraisablehook, threading.excepthook = unraisable, thread
