"""Compiling the user's program as `jax.jit(fn).lower(*args).compile()` would, and nothing else.

A function already jitted keeps its own configuration; a plain one is jitted as `jax.jit` would;
a context mesh is set only where JAX asks for one. An error raised in the user's code is theirs
(`UserCodeError`); a program the TPU compiler refuses as too big for the chip is a verdict
(`DoesNotFit`), not an error.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardcli.analysis.target import FitVerdict, oom_verdict
from shardcli.errors import ShardcliError
from shardcli.hardware.targets import TargetSpec
from shardcli.program.inputs import jit_of, unusable_donations_quiet, wrapper_name


class DoesNotFit(Exception):
    """The TPU compiler refused the program as too big for the chip: a verdict, not an error."""

    def __init__(self, verdict: FitVerdict, lower_s: float) -> None:
        super().__init__(verdict.text)
        self.verdict = verdict
        self.lower_s = lower_s


# What JAX says when a program names shardings by bare PartitionSpecs (with_sharding_constraint,
# shard_map without a mesh, explicit-axes out_sharding=P(...)) and no context mesh is set.
_ASKS_FOR_MESH = (
    "jax.set_mesh",
    "mesh in context",
    "context mesh cannot be empty",
    "under a mesh context",
    "not found in mesh: ()",  # a PartitionSpec laid out on the empty context mesh
    "No mesh found",  # haliax: named_jit lays its axes out on the context mesh
)


def asks_for_context_mesh(error: BaseException, explicit: bool = False) -> bool:
    """Whether JAX refused the program only because no context mesh (`jax.set_mesh`) was set.

    On a mesh with explicit axes any refusal counts: explicit-axes code is written to run under
    `jax.set_mesh` (`out_sharding=P(...)`, indexing, `reshard`), and fails in many ways without it.
    """
    if explicit:
        return True
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if any(phrase in str(current) for phrase in _ASKS_FOR_MESH):
            return True
        current = current.__cause__ or current.__context__
    return False


@dataclass(frozen=True)
class Compiled:
    """A compiled program, how long it took, and whether it needed a context mesh to trace."""

    jitted: Any
    compiled: Any
    lower_s: float
    compile_s: float
    context_mesh: bool  # traced under `jax.set_mesh(mesh)`: the program named shardings by PartitionSpec
    # What `jitted.lower` was called with (an equinox step's arrays alone, its other leaves held static)
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    roots: tuple[str, ...] = ()  # the user's files: an error raised in them while the step runs is theirs


def compile_program(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    roots: tuple[str, ...],
    what: str,
    mesh: Any,
    target: TargetSpec | None = None,
    kwargs: dict[str, Any] | None = None,
) -> Compiled:
    """Lower and compile `fn` as `jax.jit(fn).lower(*args, **kwargs).compile()` would; an error in the
    user's code is theirs.

    A function already jitted is compiled with its own configuration (in/out shardings, donated and
    static arguments). The program is traced without a context mesh, as plain `jax.jit` traces it;
    only where JAX asks for one (a bare PartitionSpec in `with_sharding_constraint`, a `shard_map`
    without a mesh), or where explicit-axes code fails without one, is it traced again under
    `jax.set_mesh(mesh)`, as the user's own script runs it.

    Raises:
        DoesNotFit: compiling for `target`, the TPU compiler ran out of the chip's HBM.
        ShardcliError: JAX refused the program (one line).
        UserCodeError: the user's code raised while JAX traced it.
    """
    import jax
    from jax._src import config as jax_config

    from shardcli.analysis.target import compiler_options, quiet_native_logs
    from shardcli.program.user_code import guarded, raised_in, user_error
    from shardcli.runtime.cache import unreadable_entries_compiled_again

    jitted, args, kwargs = jit_of(fn, args, kwargs or {})
    lower_s = 0.0
    quiet: contextlib.AbstractContextManager[list[str]] = (
        quiet_native_logs() if target is not None else contextlib.nullcontext([])
    )
    # An argument with no sharding goes where jit puts it on the target's own host, or on the mesh's
    # platform: its first device (without this, on the platform JAX defaults to: for a target the
    # CPU, so the program compiled for the CPU; for CPU devices faked on a GPU host the GPU, so an
    # H200 ran a program reported as the CPU's). JAX takes the default device only where no sharding,
    # constraint or context mesh names devices.
    first = mesh.devices.flat[0]
    elsewhere = target is not None or first.platform != jax.default_backend()
    placed = jax.default_device(first) if elsewhere else contextlib.nullcontext()
    try:
        # Not from the persistent compile cache: a program compiled before from another copy of the
        # same file would bring that copy's source lines (the cache key leaves locations out).
        with (
            quiet,
            placed,
            guarded(f"tracing {what}"),
            jax_config.enable_compilation_cache(False),
            unreadable_entries_compiled_again(),
            unusable_donations_quiet(fn),
        ):
            start = time.perf_counter()
            context_mesh = False
            try:
                jitted = as_the_wrapper_jits(fn, jitted, args, kwargs)
                lowered = jitted.lower(*args, **kwargs)
            except Exception as error:  # noqa: BLE001 - retried only where JAX asked for a mesh
                explicit = any(getattr(t, "name", "") == "Explicit" for t in mesh.axis_types)
                if not asks_for_context_mesh(error, explicit):
                    raise
                context_mesh = True
                with jax.set_mesh(mesh):
                    jitted = as_the_wrapper_jits(fn, jitted, args, kwargs)
                    lowered = jitted.lower(*args, **kwargs)
            lower_s = time.perf_counter() - start
            start = time.perf_counter()
            compiled = lowered.compile(compiler_options=compiler_options(target))
            compile_s = time.perf_counter() - start
    except ShardcliError:
        raise
    except Exception as error:  # noqa: BLE001 - sorted into the user's error or JAX's refusal
        verdict = oom_verdict(error, target) if target is not None else None
        if verdict is not None:
            raise DoesNotFit(verdict, lower_s) from None
        if raised_in(error, roots):
            raise user_error(error, roots, f"{what} raised while JAX traced it:") from None
        wrapper = wrapper_name(fn)
        instead = (
            f" ({what} is {wrapper}; hand over the function it wraps (`.__wrapped__`), or a jax.jit of it,"
            ' as --inputs\' "fn")'
            if wrapper
            else ""
        )
        raise ShardcliError(f"JAX could not compile {what}: {refusal_line(error)}{instead}") from None
    return Compiled(jitted, compiled, lower_s, compile_s, context_mesh, args, kwargs, roots)


def _haliax_named_jit(fn: Any) -> bool:
    return type(fn).__name__ == "_NamedJitWrapper" and type(fn).__module__.split(".")[0] == "haliax"


def as_the_wrapper_jits(fn: Any, jitted: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """For a haliax `named_jit` step, which `jit_of` calls whole inside a jit of shardcli's own (its
    `lower` would hold abstract arrays static): that jit with the result shardings and donations
    named_jit gives its own jit, so the program compiled is the one the framework compiles.

    Without them the outer jit leaves the results' layout to the compiler, which may choose another
    than named_jit's `out_axis_resources` (Levanter's train step: 64 bytes more temporaries per
    device than Levanter's own `lower(...).compile()`). Where the traced program is not one call of
    an inner jit taking every argument and giving every result, `jitted` is returned as it is.
    """
    if not _haliax_named_jit(fn):
        return jitted
    import jax

    closed = jitted.trace(*args, **kwargs).jaxpr
    eqns = closed.jaxpr.eqns
    if len(eqns) != 1 or eqns[0].primitive.name not in ("pjit", "jit"):
        return jitted
    (inner,) = eqns
    if list(inner.invars) != list(closed.jaxpr.invars) or list(inner.outvars) != list(closed.jaxpr.outvars):
        return jitted
    donated = tuple(n for n, d in enumerate(inner.params["donated_invars"]) if d)
    return jax.jit(
        jitted.__wrapped__, donate_argnums=donated, out_shardings=list(inner.params["out_shardings"])
    )


def refusal_line(error: BaseException) -> str:
    """JAX's reason as one line: its first line, and the lines it announces with a colon (`Mismatch
    details (1 found): pytree structure error: ...`), at most three."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    taken = lines[:1]
    while taken and taken[-1].endswith(":") and len(taken) < min(3, len(lines)):
        taken.append(lines[len(taken)])
    return f"{type(error).__name__}: {' '.join(taken)}"


def result_structs_of(compiled: Any) -> list[Any]:
    """Each result leaf's shape and dtype (`compiled.out_info`); empty where JAX cannot say: for a
    program with ordered effects (an `io_callback(..., ordered=True)`) jax 0.10's `out_info` fails
    on an assertion about its tokens' layouts."""
    import jax

    try:
        info = compiled.out_info
    except (AttributeError, AssertionError):
        return []
    return jax.tree_util.tree_leaves(info)


def input_shardings_of(compiled: Any, count: int) -> list[Any] | None:
    """The shardings the compiled program takes its array arguments in, where they line up one to one
    with the `count` array leaves (a jitted function's in_shardings, or what the compiler chose for a
    leaf given none); None where they do not (Python numbers among the arguments)."""
    import jax

    shardings = getattr(compiled, "input_shardings", None)
    if shardings is None:
        return None
    tree = getattr(compiled, "in_tree", None)
    try:  # one per argument leaf: an argument that is None (penzai's `loss_fn_state`) has none
        flat = list(tree.flatten_up_to(shardings)) if tree is not None else None
    except (TypeError, ValueError):
        flat = None
    if flat is None:
        flat = jax.tree_util.tree_leaves(shardings, is_leaf=lambda x: x is None)
    return flat if len(flat) == count else None
