"""`shardcli plan FILE.py:FN --inputs FILE.py:NAME`: layouts for the user's own program.

The user's arguments carry logical axis names, the Flax/MaxText convention: parameters boxed by
`nn.with_partitioning(init, ("embed", "mlp"))` (linen's `Partitioned`, whose `names` are kept
through `jax.eval_shape(model.init, ...)`), or plain `jax.ShapeDtypeStruct`s named by a table
`LOGICAL_AXES = {"params['w1']": ("embed", "mlp"), "batch": ("batch", None)}` in the inputs' file
(paths as `inspect` names arguments: the function's parameter name, then the pytree path).

A layout is a mesh over the target's chips and a rule set mapping those names to mesh axes (the
decoder's rule sets, or `--rules`). The model here is the arguments' bytes per chip (the program's
FLOPs are the compiler's to say): layouts whose arguments fit are compiled, the fewest bytes per
chip first, each as `inspect` compiles a program, and ranked by the step-time estimate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardcli.core.plan_candidates import RULE_SETS, MeshChoice, mesh_choices
from shardcli.core.plan_compile import CompiledFigures, figures_of
from shardcli.core.plan_model import HEADROOM
from shardcli.core.step_time import StepEstimate
from shardcli.decoder_spec import Rules, resolve_axes
from shardcli.errors import ShardcliError
from shardcli.specs import RunOptions
from shardcli.targets import TargetSpec

TABLE_NAME = "LOGICAL_AXES"


@dataclass(frozen=True)
class ProgramPlanRequest:
    """`shardcli plan FILE.py:FN --inputs FILE.py:NAME`'s flags."""

    program: str
    inputs: str
    target: TargetSpec
    rules: Rules | None = None  # --rules; None: the decoder's rule sets
    compile_n: int = 8
    options: RunOptions = field(default_factory=RunOptions)


@dataclass(frozen=True)
class ProgramRow:
    """One layout of the user's program."""

    mesh: MeshChoice
    rule_set: str
    rules: Rules
    argument_bytes: int  # per chip, from the arguments' shapes and specs
    status: str  # "compiled", "modelled", "pruned"
    why: str = ""
    compiled: CompiledFigures | None = None
    estimate: StepEstimate | None = None

    @property
    def label(self) -> str:
        return f"{self.mesh.label} {self.rule_set}"


@dataclass(frozen=True)
class ProgramPlanResult:
    request: ProgramPlanRequest
    rows: tuple[ProgramRow, ...]
    named_leaves: int  # leaves with logical names
    leaves: int
    names_used: tuple[str, ...]  # the logical axis names the arguments carry
    peak_flops: float
    interrupted: bool
    compile_s: float

    @property
    def winner(self) -> ProgramRow | None:
        fitting = [r for r in self.rows if r.compiled is not None and r.compiled.fits and r.estimate]
        return fitting[0] if fitting else None


def _names_of(leaf: Any) -> tuple[str | None, ...] | None:
    """A leaf's logical axis names where it carries them (linen's Partitioned and its kin)."""
    names = getattr(leaf, "names", None)
    if names is not None and hasattr(leaf, "unbox"):
        return tuple(names)
    return None


def _is_box(x: Any) -> bool:
    return _names_of(x) is not None


def named_leaves(
    fn: Callable[..., Any], args: tuple[Any, ...], table: dict[str, tuple[str | None, ...]]
) -> list[tuple[str, Any, tuple[str | None, ...] | None]]:
    """(path as inspect names it, leaf or box, logical names) for every leaf of the arguments."""
    import inspect as pyinspect

    import jax

    try:
        params = list(pyinspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    out = []
    for i, arg in enumerate(args):
        base = params[i] if i < len(params) else f"arg{i}"
        for path, leaf in jax.tree_util.tree_flatten_with_path(arg, is_leaf=_is_box)[0]:
            name = base + jax.tree_util.keystr(path)
            names = _names_of(leaf)
            out.append((name, leaf, names if names is not None else table.get(name)))
    return out


def lay_out(
    args: tuple[Any, ...], fn: Callable[..., Any], table: dict[str, Any], rules: Rules, mesh: Any
) -> tuple[Any, ...]:
    """The arguments as ShapeDtypeStructs sharded by their logical names under `rules` on `mesh`."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    sizes = dict(zip(mesh.axis_names, mesh.devices.shape, strict=True))
    names = {id(leaf): n for _, leaf, n in named_leaves(fn, args, table)}

    def place(leaf: Any) -> Any:
        value = leaf.unbox() if _is_box(leaf) else leaf
        logical = names.get(id(leaf)) or (None,) * len(value.shape)
        entries = resolve_axes(tuple(logical), rules, sizes, tuple(value.shape))
        spec = P(*(e if len(e) > 1 else (e[0] if e else None) for e in entries))
        struct = jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=NamedSharding(mesh, spec))
        return leaf.replace_boxed(struct) if _is_box(leaf) else struct

    return tuple(jax.tree_util.tree_map(place, a, is_leaf=_is_box) for a in args)


def argument_bytes(leaves: list[tuple[str, Any, Any]], rules: Rules, mesh: MeshChoice) -> int:
    """Bytes per chip of the arguments laid out by `rules` on `mesh` (pure arithmetic)."""
    import numpy as np

    sizes = dict(mesh.sizes)
    total = 0
    for _, leaf, logical in leaves:
        value = leaf.unbox() if _is_box(leaf) else leaf
        shape = tuple(value.shape)
        entries = resolve_axes(tuple(logical or (None,) * len(shape)), rules, sizes, shape)
        split = math.prod(sizes[a] for e in entries for a in e)
        total += math.prod(shape) * np.dtype(value.dtype).itemsize // split
    return total


def run_program_plan(
    request: ProgramPlanRequest, progress: Callable[[int, int, str], None] | None = None
) -> ProgramPlanResult:
    """Load the program and its named arguments, rank the layouts, compile the best.

    Raises:
        ShardcliError: bad input (one line).
        UserCodeError: the user's code raised.
    """
    from shardcli.core.inspect import inspect_program
    from shardcli.core.plan import _cost_flags
    from shardcli.core.plan_estimate import estimate_of
    from shardcli.core.target import open_target_session
    from shardcli.hardware import CHIPS
    from shardcli.runtime import import_jax_quietly
    from shardcli.user_code import call_user, load

    import_jax_quietly()
    target = request.target
    # JAX on the CPU with the target described (quietly) before the user's file can start a backend
    open_target_session(target, None, None, request.options)
    function = load(request.program)
    maker = load(request.inputs, flag="--inputs", what="NAME")
    roots = tuple(dict.fromkeys(function.roots + maker.roots))
    args = call_user(maker.value, maker.roots, f"--inputs {request.inputs} raised")
    if not isinstance(args, (tuple, list)):
        raise ShardcliError(
            f"--inputs {request.inputs} returned a {type(args).__name__}; return the tuple of the "
            "function's positional arguments (their leaves with logical axis names)"
        )
    args = tuple(args)
    module = __import__("sys").modules.get(getattr(maker.value, "__module__", ""), None)
    table = dict(getattr(module, TABLE_NAME, {}) or {})
    leaves = named_leaves(function.value, args, table)
    named = sum(n is not None for _, _, n in leaves)
    if not named:
        raise ShardcliError(
            f"no argument of {request.program} carries logical axis names: box them with "
            f"nn.with_partitioning(init, ('embed', 'mlp')) or name them in {TABLE_NAME} in the inputs' file"
        )
    rule_sets = {"--rules": request.rules} if request.rules is not None else dict(RULE_SETS)
    chip = CHIPS[target.generation.name]
    rows: list[ProgramRow] = []
    for mesh in mesh_choices(target.topology):
        seen: set[int] = set()
        for name, rules in rule_sets.items():
            nbytes = argument_bytes(leaves, rules, mesh)
            specs = hash(tuple(resolve_axes(tuple(n or ()), rules, dict(mesh.sizes)) for _, _, n in leaves))
            if specs in seen:
                continue  # the same arguments as a rule set before it
            seen.add(specs)
            fits = nbytes <= HEADROOM * chip.hbm_bytes.value
            rows.append(
                ProgramRow(
                    mesh,
                    name,
                    rules,
                    nbytes,
                    "modelled" if fits else "pruned",
                    "" if fits else "arguments do not fit",
                )
            )
    rows.sort(key=lambda r: (r.status != "modelled", r.argument_bytes, -r.mesh.size("fsdp")))
    start = time.perf_counter()
    interrupted = False
    done: list[ProgramRow] = []
    todo = [r for r in rows if r.status == "modelled"][: request.compile_n]
    for i, row in enumerate(todo):
        if progress is not None:
            progress(i, len(todo), row.label)
        try:
            _cost_flags()
            session = open_target_session(
                target, "x".join(map(str, row.mesh.shape)), ",".join(row.mesh.axes), request.options
            )
            laid = lay_out(args, function.value, table, row.rules, session.mesh)
            began = time.perf_counter()
            result = inspect_program(
                session, request.program, function.value, laid, roots=roots, target=target
            )
            figures = figures_of(result, target, "scan", time.perf_counter() - began)
        except KeyboardInterrupt:
            interrupted = True
            break
        done.append(_replace(row, "compiled", figures, estimate_of(figures, session.mesh)))
    compiled_ids = {(r.mesh, r.rule_set) for r in done}
    rest = [r for r in rows if (r.mesh, r.rule_set) not in compiled_ids]
    done.sort(
        key=lambda r: (
            not (r.compiled and r.compiled.fits),
            r.estimate is None,
            r.estimate.estimate_s if r.estimate and r.estimate.estimate_s else 0.0,
        )
    )
    return ProgramPlanResult(
        request=request,
        rows=tuple(done + rest),
        named_leaves=named,
        leaves=len(leaves),
        names_used=tuple(sorted({x for _, _, n in leaves for x in (n or ()) if x is not None})),
        peak_flops=chip.bf16_flops.value,
        interrupted=interrupted,
        compile_s=time.perf_counter() - start,
    )


def _replace(
    row: ProgramRow, status: str, figures: CompiledFigures, estimate: StepEstimate | None
) -> ProgramRow:
    from dataclasses import replace

    return replace(row, status=status, compiled=figures, estimate=estimate)
