"""The model's forward and backward pass in float64 NumPy, and the checks of a run against them:
the first step's gradients, the output and its sharding, and the loss.

A run may differ from NumPy by RTOL of the values' size, and where the platform's dots round their
float32 inputs (TF32 on a GPU, bf16 on a TPU) by what that rounding allows (see `Reference`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shardcli.analysis.report import Check, close_check, spec_of
from shardcli.runtime.verify import EPS32, RTOL, dot_input_roundoff
from shardcli.specs.model import OUTPUT, Annotations, spec_text
from shardcli.training.model.mlp import param_state

SIGMAS = 10  # how many standard deviations of the input rounding a run may be off by


def host_params(state: Any) -> dict[str, np.ndarray]:
    """The parameters as float64 NumPy arrays (whole copies on the host: only to check against)."""
    return {name: np.asarray(a, dtype=np.float64) for name, a in param_state(state).items()}


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


def reference(params: dict[str, np.ndarray], x: np.ndarray, platform: str) -> Reference:
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


def gradient_check(
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


def loss_check(what: str, got: float, ref: Reference, y: np.ndarray, label: str = "NumPy") -> Check:
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


def output_checks(
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
        loss_check("the loss matches NumPy", loss, ref, y),
    ]
