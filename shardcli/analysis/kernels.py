"""The library kernels a GPU program calls, and the FLOPs and bytes XLA's cost analysis leaves out.

On a real GPU XLA hands every dot to cuBLAS (`custom_call_target="__cublas$lt$matmul"`), attention
it fuses to cuDNN (`__cudnn$fmha...`) and convolutions to cuDNN (`__cudnn$conv...`).
`compiled.cost_analysis()` counts a custom call as nothing: two bf16 GEMMs of 8.8e12 FLOPs read as
5.4e8 (the tanh between them). This module reads each such call from the optimized HLO text: its
FLOPs from its operand shapes and the dot dimensions in its `backend_config`, the bytes it reads and
writes from its operand and result shapes, and the dtype its maths runs in. A custom call whose cost
cannot be known (a Pallas or Mosaic kernel, an FFI call) is counted by target, never as silently 0.
On TPUs, Pallas splash attention's kernels are counted from their shapes and block mask
(`analysis.splash`).

Part of the one reading of compiled programs (`program_analysis` adds these to its totals, each call
counted once per run of the computation holding it, loops per trip). No JAX import: tested on strings
and on optimized HLO from a real H200 (examples/gpu_h200).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shardcli.analysis.hlo.arrays import INTEGER_TYPES, NUMPY_NAMES, Array, array_bytes, array_types
from shardcli.analysis.hlo.constants import Callers, constant_of, integer_values, while_callers
from shardcli.analysis.hlo.module import (
    INT64_MAX,
    Computation,
    HloModuleText,
    Instruction,
    instruction_callees,
)
from shardcli.analysis.hlo.trips import find_loops
from shardcli.analysis.splash import BLOCK_MASK_OPERAND, block_sizes, splash_flops, splash_phase

# cuBLAS GEMMs: xla/service/gpu/cublas_cudnn.h (kGemmCallTarget, kCublasLtMatmulCallTarget, ...F8).
GEMM_TARGETS = ("__cublas$gemm", "__cublas$lt$matmul", "__cublas$lt$matmul$f8", "__cublas$lt$matmul$mx")
# cuDNN convolutions and fused attention, by prefix.
CONV_PREFIX = "__cudnn$conv"
ATTENTION_PREFIX = "__cudnn$fmha"
# Pallas/Mosaic kernels on TPUs; splash attention's are counted (`analysis.splash`), others are not.
TPU_KERNEL_TARGET = "tpu_custom_call"
# Custom calls that move or make data but do no floating-point maths: their bytes only, never missing.
DATA_ONLY_TARGETS = (
    "__cub$DeviceRadixSort",
    "cu_threefry2x32",
    "cu_threefry2x32_ffi",
    "Sharding",
    "SPMDFullToShardShape",
    "SPMDShardToFullShape",
    "AllocateBuffer",
    "MoveToHost",
    "MoveToDevice",
    "annotate_device_placement",
    "LayoutConstraint",
    "ConcatBitcast",  # the TPU compiler's: a concatenation as a bitcast
    "AsyncCollectiveStart",  # the TPU compiler's wrappers of an asynchronous collective (counted as one)
    "AsyncCollectiveDone",
    "xla_python_gpu_callback",
    "xla_ffi_python_gpu_callback",
)

_TARGET_RE = re.compile(r'custom_call_target="(?P<target>[^"]*)"')
_WINDOW_SIZE_RE = re.compile(r"window=\{size=(?P<size>[0-9x]+)")
_DIM_LABELS_RE = re.compile(r"dim_labels=(?P<lhs>[0-9a-z]+)_(?P<rhs>[0-9a-z]+)->(?P<out>[0-9a-z]+)")
_GROUPS_RE = re.compile(r"feature_group_count=(?P<n>\d+)")


@dataclass(frozen=True)
class KernelCall:
    """One library kernel the program calls: what one call costs and how many times it runs."""

    name: str  # the HLO instruction
    computation: str
    target: str  # the custom call target, "__cublas$lt$matmul"
    kind: str  # "gemm", "attention" or "convolution"
    flops: float  # one call
    bytes_accessed: float  # one call: its operands read and its result written
    dtype: str | None  # the dtype its maths runs in (NumPy's name; float32 at TF32 on a GPU by default)
    precision: str  # the operands' precision: "DEFAULT", "HIGHEST", ...
    runs: int  # per execution of the program, loops counted per trip
    # the narrowest dimension its matmuls contract or produce (splash attention: the head dim), which
    # a TPU's matrix unit pads to its width; None where not read
    narrowest: int | None = None


@dataclass(frozen=True)
class KernelCalls:
    """Every library kernel of a program, and the custom calls whose cost is unknown (target, count)."""

    calls: tuple[KernelCall, ...]
    unknown: tuple[tuple[str, int], ...]

    @property
    def flops(self) -> float:
        """FLOPs of every call, times its runs."""
        return sum(c.flops * c.runs for c in self.calls)

    @property
    def bytes_accessed(self) -> float:
        """Bytes every call reads and writes, times its runs."""
        return sum(c.bytes_accessed * c.runs for c in self.calls)

    @property
    def libraries(self) -> tuple[str, ...]:
        """Whose kernels the calls are, in a fixed order: "cuBLAS", "cuDNN", "splash attention"."""
        targets = {c.target for c in self.calls}
        named = (
            ("cuBLAS", any(t in GEMM_TARGETS for t in targets)),
            ("cuDNN", any(t.startswith("__cudnn$") for t in targets)),
            ("splash attention", TPU_KERNEL_TARGET in targets),
        )
        return tuple(name for name, found in named if found)

    @property
    def missing(self) -> tuple[str, ...]:
        """One line naming the custom calls whose FLOPs are not in the count, or nothing."""
        if not self.unknown:
            return ()
        named = ", ".join(f"{target} x{count}" for target, count in self.unknown)
        total = sum(count for _, count in self.unknown)
        return (f"FLOPs and bytes leave out {total} custom call(s) whose cost is unknown: {named}",)


def kernel_calls(
    module: HloModuleText, runs: dict[str, tuple[int, bool]], constants: Mapping[str, str] | None = None
) -> KernelCalls:
    """The library kernels of `module` with their costs, counted `runs` times per computation.

    Args:
        module: the parsed optimized HLO.
        runs: how many times one execution runs each computation (`loop_costs.runs_per_computation`).
        constants: the literals of constants the text elides (`{...}`), by instruction name: what a
            splash attention kernel's block mask needs (`read_elided_constants`).
    """
    calls: list[KernelCall] = []
    unknown: dict[str, int] = {}
    callers = None
    for comp in module.computations.values():
        for inst in comp.instructions.values():
            if inst.opcode != "custom-call":
                continue
            target_match = _TARGET_RE.search(inst.attributes)
            target = target_match.group("target") if target_match else "?"
            times = runs.get(comp.name, (0, True))[0]
            if times == 0:  # a computation nothing executes (a fusion's body never holds these)
                continue
            call: KernelCall | str | None
            if target == TPU_KERNEL_TARGET and splash_phase(inst.name):
                callers = while_callers(module) if callers is None else callers
                call = _splash_call(module, comp, inst, times, constants or {}, callers)
                if isinstance(call, str):  # the reason it cannot be counted
                    target, call = f"{target} {inst.name.split('.')[0]} ({call})", None
            else:
                call = _kernel_call(comp, inst, target, times)
            if call is not None:
                calls.append(call)
            elif target not in DATA_ONLY_TARGETS:
                unknown[target] = unknown.get(target, 0) + times
    return KernelCalls(calls=tuple(calls), unknown=tuple(sorted(unknown.items())))


def _splash_call(
    module: HloModuleText,
    comp: Computation,
    inst: Instruction,
    times: int,
    constants: Mapping[str, str],
    callers: Callers,
) -> KernelCall | str:
    """A splash attention kernel's cost (`analysis.splash`), or why it cannot be counted."""
    phase = splash_phase(inst.name)
    if phase is None or len(inst.operands) <= BLOCK_MASK_OPERAND:
        return "its operands are not splash's"
    mask = constant_of(module, comp, inst.operands[BLOCK_MASK_OPERAND], callers)
    values = integer_values(constants.get(mask.name, mask.literal)) if mask is not None else None
    mask_shape = _shape_of(comp, inst.operands[BLOCK_MASK_OPERAND])
    if mask is None or not values or mask_shape is None or len(mask_shape[1]) != 3:
        return "its block mask is not in the text"
    blocks = block_sizes(phase, inst.attributes)
    if blocks is None:
        return "its block sizes are not in its metadata"
    operand_shapes = [_shape_of(comp, name) for name in inst.operands]
    shapes = [s for s in operand_shapes if s is not None]
    if len(shapes) != len(operand_shapes):
        return "its operands' shapes are not in the text"
    results = array_types(inst.shape)
    flops = splash_flops(phase, shapes, results, values, mask_shape[1][0], blocks)
    if isinstance(flops, str):
        return flops
    q = next(s for s in shapes if s[0] not in INTEGER_TYPES)
    return KernelCall(
        name=inst.name,
        computation=comp.name,
        target=TPU_KERNEL_TARGET,
        kind="attention",
        flops=flops,
        bytes_accessed=float(sum(map(array_bytes, shapes)) + sum(map(array_bytes, results))),
        dtype=NUMPY_NAMES.get(q[0], q[0]),
        precision="DEFAULT",
        runs=times,
        narrowest=q[1][-1] if q[1] else None,
    )


def _kind(target: str) -> str | None:
    """ "gemm", "attention" or "convolution" for a library kernel's target; None for any other."""
    if target in GEMM_TARGETS:
        return "gemm"
    if target.startswith(ATTENTION_PREFIX):
        return "attention"
    if target.startswith(CONV_PREFIX):
        return "convolution"
    return None


def _kernel_call(comp: Computation, inst: Instruction, target: str, times: int) -> KernelCall | None:
    """The call's cost, or None where it is no kernel this module knows (or its config is unreadable)."""
    kind = _kind(target)
    if kind is None:
        return None
    config = _backend_config(inst.attributes)
    operand_shapes = [_shape_of(comp, name) for name in inst.operands]
    results = array_types(inst.shape)
    if not results or any(s is None for s in operand_shapes) or config is None:
        return None
    shapes = [s for s in operand_shapes if s is not None]
    precision = "DEFAULT"
    if kind == "gemm":
        gemm = _section(config, "gemm_backend_config")
        flops, precision = _gemm_flops(gemm, shapes, results[0]), _precision(gemm)
    elif kind == "attention":
        flops = _attention_flops(_section(config, "cudnn_fmha_backend_config"), shapes, target)
    else:
        flops = _conv_flops(inst.attributes, shapes, results[0])
    if flops is None or not math.isfinite(flops):
        return None
    if len(results) > 1 and _is_workspace(results[-1]):
        results = results[:-1]
    dtype = shapes[0][0] if shapes else results[0][0]
    return KernelCall(
        name=inst.name,
        computation=comp.name,
        target=target,
        kind=kind,
        flops=float(flops),
        bytes_accessed=float(sum(map(array_bytes, shapes)) + sum(map(array_bytes, results))),
        dtype=NUMPY_NAMES.get(dtype, dtype),
        precision=precision,
        runs=times,
    )


def _gemm_flops(gemm: dict[str, object], shapes: Sequence[Array], result: Array) -> float | None:
    """2 x (result elements) x (the product of the left operand's contracting dimensions)."""
    dims = gemm.get("dot_dimension_numbers")
    if not isinstance(dims, dict) or not shapes:
        return None
    lhs = shapes[0][1]
    contracting = _dimension_numbers(dims.get("lhs_contracting_dimensions", []), len(lhs))
    if contracting is None:
        return None
    return 2.0 * math.prod(result[1]) * math.prod(lhs[d] for d in contracting)


def _whole(value: object, below: int = INT64_MAX + 1) -> int | None:
    """A whole number a backend config holds (a JSON number or a string of digits), 0 <= n < below;
    None for anything else (1e999, "-1", true, 300 digits)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,19}", value):
        value = int(value)
    return value if isinstance(value, int) and 0 <= value < below else None


def _dimension_numbers(values: object, rank: int) -> list[int] | None:
    """Dimension numbers of an operand of `rank` dimensions, or None where any is not one."""
    if not isinstance(values, list):
        return None
    dims = [_whole(v, rank) for v in values]
    return None if any(d is None for d in dims) else [d for d in dims if d is not None]


def _attention_flops(fmha: dict[str, object], shapes: Sequence[Array], target: str) -> float | None:
    """cuDNN fused attention: its two batched products, Q.K^T and P.V, are 4 x B x H x Sq x Sk x D
    FLOPs forward; the backward pass recomputes the first and runs four more, 2.5 times that. A
    causal mask (`mask_type` CAUSAL) leaves only the visible share: flash kernels skip the masked tiles.

    B x H x Sq x Sk is the config's `intermediate_tensor_shape` (the scores, which never reach HBM),
    D the head width (Q's elements over B x H x Sq). Without that shape, B is the batch (and heads)
    dimensions of bmm1, D its contracting dimension, Sq and Sk the rest of Q and K."""
    if len(shapes) < 2:
        return None
    q, k = shapes[0][1], shapes[1][1]
    scores = _intermediate_shape(fmha)
    try:
        if scores is not None and len(scores) == 4 and math.prod(scores[:3]) > 0:
            batch, sq, sk = scores[0] * scores[1], scores[2], scores[3]
            depth = math.prod(q) // (batch * sq)
        else:
            dims = fmha.get("bmm1_dot_dimension_numbers")
            if not isinstance(dims, dict):
                return None
            q_batch = _dimension_numbers(dims.get("lhs_batch_dimensions", []), len(q))
            q_contract = _dimension_numbers(dims.get("lhs_contracting_dimensions", []), len(q))
            k_batch = _dimension_numbers(dims.get("rhs_batch_dimensions", []), len(k))
            k_contract = _dimension_numbers(dims.get("rhs_contracting_dimensions", []), len(k))
            if q_batch is None or q_contract is None or k_batch is None or k_contract is None:
                return None
            batch = math.prod(q[d] for d in q_batch)
            depth = math.prod(q[d] for d in q_contract)
            sq = math.prod(n for d, n in enumerate(q) if d not in q_batch and d not in q_contract)
            sk = math.prod(n for d, n in enumerate(k) if d not in k_batch and d not in k_contract)
    except (TypeError, ValueError, IndexError, ZeroDivisionError):
        return None
    forward = 4.0 * batch * sq * sk * depth * _visible_share(str(fmha.get("mask_type", "")), sq, sk)
    return forward * 2.5 if "Backward" in target else forward


def _intermediate_shape(fmha: dict[str, object]) -> list[int] | None:
    shape = fmha.get("intermediate_tensor_shape")
    dims = shape.get("dimensions") if isinstance(shape, dict) else None
    sizes = [_whole(d) for d in dims] if isinstance(dims, list) else [None]
    if any(d is None for d in sizes) or math.prod(d for d in sizes if d is not None) > INT64_MAX:
        return None  # no shape XLA makes: read from the operands instead
    return [d for d in sizes if d is not None]


def causal_share(sq: int, sk: int) -> float:
    """The share of a causal mask's Sq x Sk scores a query sees (query i sees keys 0..i)."""
    if sq <= 0 or sk <= 0:
        return 1.0
    seen = sk * (sk + 1) / 2 + (sq - sk) * sk if sq > sk else sq * (sq + 1) / 2
    return seen / (sq * sk)


def _visible_share(mask: str, sq: int, sk: int) -> float:
    return causal_share(sq, sk) if "CAUSAL" in mask.upper() else 1.0


def _conv_flops(attributes: str, shapes: Sequence[Array], result: Array) -> float | None:
    """A convolution as XLA writes it (window, dim_labels, feature groups): 2 x result elements x
    window elements x input features per group, as XLA's HloCostAnalysis counts a convolution."""
    window = _WINDOW_SIZE_RE.search(attributes)
    labels = _DIM_LABELS_RE.search(attributes)
    groups = _GROUPS_RE.search(attributes)
    if labels is None or not shapes:
        return None
    lhs = shapes[0][1]
    feature = labels.group("lhs").find("f")
    if feature < 0 or feature >= len(lhs):
        return None
    count = _whole(groups.group("n")) if groups else 1
    sizes = [_whole(n) for n in window.group("size").split("x")] if window else [1]
    if not count or any(n is None for n in sizes):  # 0 groups, or sizes past an int64: unreadable
        return None
    taps = math.prod(n for n in sizes if n is not None)
    return 2.0 * math.prod(result[1]) * min(taps, INT64_MAX) * (lhs[feature] // count)


_PRECISIONS = ("DEFAULT", "HIGH", "HIGHEST")


def _precision(gemm: dict[str, object]) -> str:
    """The highest of the operands' precisions ("DEFAULT" where the config gives none)."""
    config = gemm.get("precision_config")
    given = config.get("operand_precision") if isinstance(config, dict) else None
    known = [p for p in given if p in _PRECISIONS] if isinstance(given, list) else []
    return max(known, key=_PRECISIONS.index) if known else "DEFAULT"


def _section(config: dict[str, object], key: str) -> dict[str, object]:
    value = config.get(key)
    return value if isinstance(value, dict) else {}


def _backend_config(attributes: str) -> dict[str, object] | None:
    """The JSON after `backend_config=`, or None where there is none or it does not parse."""
    at = attributes.find("backend_config=")
    if at < 0:
        return None
    text = attributes[at + len("backend_config=") :].lstrip()
    if text.startswith('"'):  # older printers quote and escape it
        try:
            text = json.loads(text[: _string_end(text)])
        except (ValueError, RecursionError):
            return None
        if not isinstance(text, str):
            return None
    try:
        value, _ = json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError):  # RecursionError: JSON nested deeper than Python recurses
        return None
    return value if isinstance(value, dict) else None


def _string_end(text: str) -> int:
    """The end of the quoted string that starts `text`."""
    i = 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i + 1
        i += 1
    return len(text)


def _is_workspace(array: Array) -> bool:
    """cuBLAS's scratch buffer (the s8[N] last element of a kernel's result tuple): never read back."""
    return array[0] == "s8" and len(array[1]) == 1


def _shape_of(comp: Computation, name: str) -> Array | None:
    """The (first) array type of instruction `name`, or None where the computation has no such one."""
    arrays = array_types(comp.instructions[name].shape) if name in comp.instructions else []
    return arrays[0] if arrays else None


# Instructions that launch no kernel of their own on a GPU: values passed along, control flow (its
# bodies' instructions launch), and the waits of async pairs (their start launches).
_NO_LAUNCH = frozenset(
    {
        "parameter",
        "get-tuple-element",
        "tuple",
        "bitcast",
        "constant",
        "while",
        "conditional",
        "call",
        "after-all",
        "add-dependency",
        "opt-barrier",
        "partition-id",
        "replica-id",
        "all-reduce-done",
        "all-gather-done",
        "collective-permute-done",
        "async-done",
        "copy-done",
        "send-done",
        "recv-done",
    }
)


@dataclass(frozen=True)
class Launches:
    """What one execution launches on a GPU, whatever each kernel does: its kernels, its loop trips
    (each reads the loop's predicate back), and the array buffers it takes and returns."""

    kernels: int
    loop_trips: int
    buffers: int


def launches_of(module: HloModuleText, runs: dict[str, tuple[int, bool]], text: str) -> Launches:
    """The `Launches` of `module` (a loop of unknown trips counted once)."""
    from shardcli.analysis.hlo.header import entry_array_counts

    trips = sum(
        (loop.trips if loop.trips is not None else 1) * runs.get(loop.computation, (0, True))[0]
        for loop in find_loops(module)
    )
    taken, returned = entry_array_counts(text)
    return Launches(kernel_launches(module, runs), trips, taken + returned)


def kernel_launches(module: HloModuleText, runs: dict[str, tuple[int, bool]]) -> int:
    """How many kernels one execution of `module` launches on a GPU: each launching instruction of
    the computations that run as instruction sequences (the entry, loop bodies and conditions,
    branches, `call`ed ones; a fusion's body or a reduction's `to_apply` runs inside its kernel),
    counted once per run of its computation (loops per trip)."""
    sequences: set[str] = set()
    times = {name: count for name, (count, _) in runs.items()}
    todo = [module.entry] if module.entry else []
    while todo:
        name = todo.pop()
        if name in sequences or name not in module.computations:
            continue
        sequences.add(name)
        for inst in module.computations[name].instructions.values():
            if inst.opcode in ("while", "conditional", "call"):
                calls = list(instruction_callees(inst))
                by_kind = dict(calls)
                if "condition" in by_kind and "body" in by_kind:  # the condition runs every trip too
                    times[by_kind["condition"]] = times.get(by_kind["body"], 0)
                todo.extend(callee for _, callee in calls)
    return sum(
        times.get(name, 0)
        for name in sequences
        for inst in module.computations[name].instructions.values()
        if inst.opcode not in _NO_LAUNCH
    )
