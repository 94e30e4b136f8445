"""Running the user's own step as their training loop runs it (`shardcli inspect --run`).

The step runs through the executable inspect compiled (program/jit.py: a jitted function with
its own shardings, donated and static arguments; an equinox `filter_jit` step as its arrays alone;
an `nnx.jit` step through NNX's own call), on inputs generated on the devices the executable takes
them on: random normal floats, random typed keys, zeros otherwise. Static arguments stay out of the
call (the executable has them built in); keyword arguments are passed by keyword.

A step that donates an argument consumes its buffers: the next call cannot take them again. Each
donated argument is fed back from the results of the call before where a result has its structure,
shapes and shardings (the new parameters and optimizer state, as a training loop feeds them back);
every other donated array the program consumes gets a fresh copy before each call, made outside the
timed region. `nnx.jit` writes its results back into the model and optimizer objects itself. Each
timed call waits for all of its results (`jax.block_until_ready`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from shardcli.errors import ShardcliError
from shardcli.runtime.timing import Timing, summarize


@dataclass(frozen=True)
class Donation:
    """How the donated arrays of a step were given to each timed call."""

    donated: int  # array arguments the step donates
    fed_back: int  # ... taken from the results of the call before
    copied: int  # ... copied afresh before each call, untimed (the program consumes them)
    written_back_by: str = "shardcli"  # who feeds the results back: shardcli, or nnx.jit into its objects

    @property
    def method(self) -> str:
        """none, fed back, copied, or fed back and copied."""
        ways = [w for w, n in (("fed back", self.fed_back), ("copied", self.copied)) if n]
        return " and ".join(ways) or "none"


@dataclass
class _Step:
    """One way to call the compiled step: the leaves of (args, kwargs) it takes, and what to do with
    the donated ones between calls."""

    call: Callable[..., Any]
    tree: Any  # the treedef of (args, kwargs)
    leaves: list[Any]
    donated: int
    feeds: dict[int, int] = field(default_factory=dict)  # input leaf -> the result leaf that replaces it
    copies: list[int] = field(default_factory=list)  # input leaves copied afresh before each call
    fed_back: int = 0  # donated array leaves fed back (by `feeds`, or by the wrapper into its objects)
    wrapper: bool = False  # the call writes results into the argument objects (nnx.jit)


def time_step(
    built: Any, what: str, *, warmup: int, iters: int, process_timing: str, compile_s: float
) -> tuple[Timing, Donation]:
    """Run `built` (a `jit_compile.Compiled`) warmup + iters times on generated inputs; time the
    last `iters` calls.

    Raises:
        ShardcliError: the call cannot be made from what was given (static arguments that cannot be
            told apart), or a donated argument was left deleted by the step.
    """
    import jax

    from shardcli.program.user_code import call_user
    from shardcli.runtime.processes import combine_timing

    compiled = built.compiled
    inner = getattr(compiled, "compiled", None)
    if isinstance(inner, jax.stages.Compiled) and not isinstance(compiled, jax.stages.Compiled):
        step = _through_wrapper(compiled, inner, built.jitted, built.args, built.kwargs)
    else:
        step = _through_executable(compiled, built.jitted, built.args, built.kwargs, what)
    # The user's code runs here too (jax.debug.print, their callbacks): what it prints goes to stderr,
    # and a callback that raises or exits is their error (`call_user`).
    samples, copied = call_user(
        _timed_calls, getattr(built, "roots", ()), f"{what} raised while it ran:", step, what, warmup, iters
    )
    timing = Timing(
        compile_s=compile_s, warmup=warmup, samples=samples, stats=summarize(samples), compile_cached=None
    )
    donation = Donation(
        donated=step.donated,
        fed_back=step.fed_back,
        copied=copied,
        written_back_by="nnx.jit" if step.wrapper else "shardcli",
    )
    return combine_timing(timing, process_timing), donation


def _timed_calls(step: _Step, what: str, warmup: int, iters: int) -> tuple[tuple[float, ...], int]:
    """The per-call seconds, and how many donated arrays each call consumed from a fresh copy."""
    import jax

    state = list(step.leaves)
    copies = list(step.copies)
    samples: list[float] = []
    for i in range(warmup + iters):
        given = list(state)
        fresh = [_fresh_copy(state[j]) for j in copies]
        jax.block_until_ready(fresh)
        for j, copy in zip(copies, fresh, strict=True):
            given[j] = copy
        _check_alive(given, step.tree, what)
        args, kwargs = jax.tree_util.tree_unflatten(step.tree, given)
        start = time.perf_counter()
        y = step.call(*args, **kwargs)
        # NNX writes the rest of the results into the argument objects: wait for those too.
        jax.block_until_ready([y, _alive(jax.tree_util.tree_leaves((args, kwargs)))] if step.wrapper else y)
        seconds = time.perf_counter() - start
        if i >= warmup:
            samples.append(seconds)
        after = jax.tree_util.tree_leaves((args, kwargs)) if step.wrapper else list(given)
        results = jax.tree_util.tree_leaves(y)
        for j in copies:  # the original stays; the consumed copy is not taken again
            after[j] = state[j]
        for j, k in step.feeds.items():
            after[j] = results[k]
        if i == 0:  # copy only what the program consumes (XLA leaves a donation it cannot use)
            copies = [j for j in copies if _deleted(given[j])]
        state = after
        del y, results, given, args, kwargs  # hold no result past its use: fed back or freed
    jax.effects_barrier()  # the last call's callbacks have printed (or failed) before the report
    return tuple(samples), len(copies)


def _through_executable(
    compiled: Any, jitted: Any, args: tuple[Any, ...], kwargs: dict[str, Any], what: str
) -> _Step:
    """Calling the jax executable itself: its dynamic arguments, donated ones fed back where a result
    matches them."""
    import jax

    from shardcli.program.jit import input_shardings_of

    args, kwargs = _dynamic_arguments(compiled, jitted, args, kwargs, what)
    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    inputs = _generated(leaves, input_shardings_of(compiled, len(leaves)))
    donated = [bool(info.donated) for info in jax.tree_util.tree_leaves(compiled.args_info)]
    step = _Step(
        compiled, tree, inputs, donated=sum(d and _is_array(x) for d, x in zip(donated, inputs, strict=True))
    )
    outs = _result_structs(compiled)
    used = [False] * len(outs)
    for unit, first in _arguments(tree):
        count = unit.num_leaves
        taken = [first + n for n in range(count) if donated[first + n] and _is_array(inputs[first + n])]
        if not taken:
            continue
        at = _matching_result(unit, inputs[first : first + count], compiled.out_tree, outs, used)
        if at is None:
            step.copies.extend(taken)
            continue
        used[at : at + count] = [True] * count
        for j in taken:
            if _fits(inputs[j], outs[at + j - first]):
                step.feeds[j] = at + j - first
                step.fed_back += 1
            else:  # the compiler gave this result another sharding: the next call cannot take it
                step.copies.append(j)
    return step


def _through_wrapper(
    compiled: Any, inner: Any, jitted: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> _Step:
    """Calling a wrapper's own compiled object (`nnx.jit`): it splits the model and optimizer into
    arrays, runs the executable and writes the results back into them. A donated argument that is no
    NNX object (a plain array) is copied afresh."""
    import jax

    # Its executable has the static arguments built in, and its call hands on whatever it is given.
    args, kwargs = _without_static(
        getattr(getattr(jitted, "jitted_fn", None), "_jit_info", None), args, kwargs
    )
    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    inputs = _generated(leaves, None)
    info_args, info_kwargs = inner.args_info
    flags = [_any_donated(a) for a in info_args] + [_any_donated(info_kwargs[k]) for k in sorted(info_kwargs)]
    values = [*args, *(kwargs[k] for k in sorted(kwargs))]
    step = _Step(compiled, tree, inputs, donated=0, wrapper=True)
    graph_node = _graph_node_test(compiled)
    units = list(_arguments(tree))
    for value, flag, (unit, first) in zip(values, flags, units, strict=False):
        arrays = [first + n for n in range(unit.num_leaves) if _is_array(inputs[first + n])]
        if not flag or not arrays:
            continue
        step.donated += len(arrays)
        if graph_node(value):
            step.fed_back += len(arrays)
        else:
            step.copies.extend(arrays)
    return step


def _dynamic_arguments(
    compiled: Any, jitted: Any, args: tuple[Any, ...], kwargs: dict[str, Any], what: str
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """`args` and `kwargs` without the static ones (`static_argnums`, `static_argnames`), which the
    executable has built in and does not take.

    Raises:
        ShardcliError: what is left does not have the structure the executable takes.
    """
    import jax

    if jax.tree_util.tree_structure((args, kwargs)) == compiled.in_tree:
        return args, kwargs
    dynamic, keywords = _without_static(getattr(jitted, "_jit_info", None), args, kwargs)
    if jax.tree_util.tree_structure((dynamic, keywords)) != compiled.in_tree:
        raise ShardcliError(
            f"--run cannot call {what}: the arguments given, less its static ones, are not what the compiled "
            "program takes; give the static arguments as jax.jit's static_argnums/static_argnames name them"
        )
    return dynamic, keywords


def _without_static(
    info: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """`args` and `kwargs` less those `info` (jax.jit's own record of a jitted function: `_jit_info`)
    names static, by position or by name."""
    numbers = {
        n % len(args) for n in getattr(info, "static_argnums", ()) or () if -len(args) <= n < len(args)
    }
    names = set(getattr(info, "static_argnames", ()) or ())
    signature = getattr(info, "fun_signature", None)
    if signature is not None:
        positional = [
            p.name
            for p in signature.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        numbers |= {i for i, name in enumerate(positional) if name in names and i < len(args)}
        names |= {positional[i] for i in numbers if i < len(positional)}
    return tuple(a for i, a in enumerate(args) if i not in numbers), {
        k: v for k, v in kwargs.items() if k not in names
    }


def _arguments(tree: Any) -> Iterator[tuple[Any, int]]:
    """(treedef, first leaf) of each positional argument, then each keyword argument, in `tree` (the
    treedef of (args, kwargs))."""
    first = 0
    for part in tree.children():
        for unit in part.children():
            yield unit, first
            first += unit.num_leaves


def _subtrees(tree: Any, first: int = 0) -> Iterator[tuple[Any, int]]:
    """(treedef, first leaf) of `tree` and of every subtree in it, outermost first."""
    yield tree, first
    for child in tree.children():
        yield from _subtrees(child, first)
        first += child.num_leaves


def _matching_result(
    unit: Any, inputs: list[Any], out_tree: Any, outs: list[Any], used: list[bool]
) -> int | None:
    """The first leaf of the result not yet taken that has the argument's structure and the most
    leaves of its shape, dtype and sharding (the first such, outermost first); None where no result
    has its structure and one such leaf."""
    best, most = None, 0
    for sub, at in _subtrees(out_tree) if outs else ():
        if sub != unit or any(used[at : at + unit.num_leaves]):
            continue
        fitting = sum(_fits(x, outs[at + n]) for n, x in enumerate(inputs))
        if fitting > most:
            best, most = at, fitting
        if fitting == len(inputs):
            break
    return best


def _fits(x: Any, out: Any) -> bool:
    sharding = getattr(out, "sharding", None)
    return (
        _is_array(x)
        and tuple(x.shape) == tuple(out.shape)
        and x.dtype == out.dtype
        and sharding is not None
        and x.sharding.is_equivalent_to(sharding, len(x.shape))
    )


def _result_structs(compiled: Any) -> list[Any]:
    """Each result leaf's shape, dtype and sharding (empty where the executable does not say)."""
    import jax

    from shardcli.program.jit import result_structs_of

    structs = result_structs_of(compiled)
    shardings = jax.tree_util.tree_leaves(compiled.output_shardings)
    if len(structs) != compiled.out_tree.num_leaves or len(shardings) != len(structs):
        return []
    return [
        jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh) for s, sh in zip(structs, shardings, strict=True)
    ]


def _generated(leaves: list[Any], shardings: list[Any] | None) -> list[Any]:
    """Each abstract leaf made on its devices (`shardings`, where the executable places it, else its
    own); other leaves (Python numbers) as they are."""
    import jax

    key = jax.random.key(0)
    made = []
    makers: dict[Any, Any] = {}
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, jax.ShapeDtypeStruct):
            made.append(leaf)
            continue
        sharding = (shardings[i] if shardings is not None else None) or leaf.sharding
        kind = (tuple(leaf.shape), leaf.dtype, sharding)
        if kind not in makers:  # one compile per kind of leaf, not per leaf
            makers[kind] = jax.jit(_generator(leaf), out_shardings=sharding)
        made.append(makers[kind](jax.random.fold_in(key, i)))
    return made


def _generator(leaf: Any) -> Callable[[Any], Any]:
    """A function of a PRNG key making one input: random normal floats, random keys, zeros otherwise."""
    import jax
    import jax.numpy as jnp

    from shardcli.program.inputs import is_key, key_impl_of

    if is_key(leaf.dtype):
        impl = key_impl_of(leaf.dtype)
        return lambda key: jax.random.wrap_key_data(
            jax.random.bits(key, (*leaf.shape, impl.words), jnp.uint32), impl=impl.name
        )
    if jnp.issubdtype(leaf.dtype, jnp.floating):
        return lambda key: jax.random.normal(key, leaf.shape, leaf.dtype)
    return lambda key: jnp.zeros(leaf.shape, leaf.dtype)


def _fresh_copy(x: Any) -> Any:
    """A copy of `x` in buffers of its own, on the same devices (never `x` itself)."""
    import jax

    return jax.device_put(x, x.sharding, may_alias=False)


def _check_alive(leaves: list[Any], tree: Any, what: str) -> None:
    """Raises: ShardcliError naming the first argument whose buffers a call consumed and nothing gave
    back (rather than JAX's crash on a deleted buffer)."""
    import jax

    from shardcli.program.inputs import path_text

    dead = [n for n, x in enumerate(leaves) if _deleted(x)]
    if dead:
        paths = jax.tree_util.tree_flatten_with_path(jax.tree_util.tree_unflatten(tree, leaves))[0]
        path = paths[dead[0]][0]
        name = ("args" if path[0].idx == 0 else "kwargs") + path_text(path[1:])
        raise ShardcliError(
            f"--run cannot call {what} again: the call before consumed its donated argument {name} "
            "and gave nothing back in its place"
        )


def _alive(leaves: list[Any]) -> list[Any]:
    return [x for x in leaves if not _deleted(x)]


def _deleted(x: Any) -> bool:
    return _is_array(x) and bool(x.is_deleted())


def _is_array(x: Any) -> bool:
    import jax

    return isinstance(x, jax.Array)


def _any_donated(infos: Any) -> bool:
    import jax

    return any(bool(getattr(i, "donated", False)) for i in jax.tree_util.tree_leaves(infos))


def _graph_node_test(compiled: Any) -> Callable[[Any], bool]:
    """Whether an argument is an object the wrapper writes its new state back into (an NNX module or
    optimizer); for a wrapper shardcli does not know, nothing is."""
    if type(compiled).__module__.split(".")[0] != "flax":
        return lambda value: False
    from flax.nnx import graph

    return graph.is_graph_node
