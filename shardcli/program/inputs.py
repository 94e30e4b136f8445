"""The arguments of a user's program as `jax.jit(...).lower` takes them, on the run's mesh.

Whatever `lower` accepts is accepted here: any pytree (NamedTuples, dataclasses, Flax boxes, NNX
state, equinox modules, whose non-array leaves are left alone), typed PRNG keys of any
implementation, and shardings on an `AbstractMesh` (what `nnx.eval_shape` gives under
`jax.set_mesh`), which are bound to the run's concrete mesh by their axis names and sizes. Nothing
here changes what the program computes: a leaf keeps its shape, dtype and partition spec.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardcli.errors import ShardcliError
from shardcli.specs.arguments import KEY_IMPLS, AbstractArg, KeyImpl

if TYPE_CHECKING:
    from shardcli.runtime.session import Session


def key_dtype(impl: KeyImpl) -> Any:
    """JAX's dtype of a typed PRNG key of `impl` (`key<fry>`), made without computing anything."""
    import jax

    return jax.eval_shape(lambda: jax.random.key(0, impl=impl.name)).dtype


def is_key(dtype: Any) -> bool:
    """Whether `dtype` is a typed PRNG key's (`key<fry>`, `key<rbg>`)."""
    import jax

    return bool(jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key))


def key_impl_of(dtype: Any) -> KeyImpl:
    """The implementation of a key dtype, by the name JAX prints (`key<rbg>` -> rbg)."""
    short = str(dtype)[len("key<") : -1]
    for impl in KEY_IMPLS.values():
        if impl.short == short:
            return impl
    raise ShardcliError(f"the PRNG key dtype {dtype} is not one shardcli knows ({', '.join(KEY_IMPLS)})")


def abstract_args(args: tuple[AbstractArg, ...], mesh: Any) -> tuple[Any, ...]:
    """`jax.ShapeDtypeStruct`s with NamedShardings on the mesh: nothing allocated."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding

    from shardcli.runtime.mesh import partition_spec

    return tuple(
        jax.ShapeDtypeStruct(
            a.shape,
            key_dtype(a.key) if a.key is not None else jnp.dtype(a.dtype.name),
            sharding=NamedSharding(mesh, partition_spec(a.sharding.entries)),
        )
        for a in args
    )


def is_array_leaf(x: Any) -> bool:
    """An array-like leaf (an array or a ShapeDtypeStruct); other leaves (Python numbers, functions
    in an equinox module, None) are not arguments that take memory or a sharding."""
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, type)


def path_text(path: tuple[Any, ...]) -> str:
    """A pytree path as `jax.tree_util.keystr` writes it (`['params'].w[0]`), less a last entry
    that only numbers a node's one child (`[<flat index 0>]` under a haliax NamedArray, whose array
    is its one leaf)."""
    import jax

    while path and isinstance(path[-1], jax.tree_util.FlattenedIndexKey) and path[-1].key == 0:
        path = path[:-1]
    return jax.tree_util.keystr(path)


def as_abstract(tree: Any) -> Any:
    """Arrays in a pytree become ShapeDtypeStructs with their shardings (nothing is copied). An array
    never placed (`jax.random.key(0)` at the top of a script) is left for the compiler to place, as
    jax.jit does with an uncommitted array: it does not pin the program to its one device."""
    import jax

    def leaf(x: Any) -> Any:
        if isinstance(x, jax.ShapeDtypeStruct) or not is_array_leaf(x) or not hasattr(x, "sharding"):
            return x
        placed = getattr(x, "_committed", True)
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding if placed else None)

    return jax.tree_util.tree_map(leaf, tree)


def _shardings(tree: Any) -> Iterator[Any]:
    import jax

    for leaf in jax.tree_util.tree_leaves(tree):
        sharding = getattr(leaf, "sharding", None) if is_array_leaf(leaf) else None
        if sharding is not None:
            yield sharding


@dataclass(frozen=True)
class ProgramMesh:
    """The mesh the arguments' shardings name: a concrete one (its devices), or an AbstractMesh."""

    mesh: Any
    abstract: bool

    @property
    def explicit(self) -> bool:
        return any(getattr(t, "name", "") == "Explicit" for t in getattr(self.mesh, "axis_types", ()))

    def describe(self) -> str:
        sizes = "x".join(str(s) for s in self.mesh.axis_sizes)
        return f"{sizes} ({', '.join(map(str, self.mesh.axis_names))})"


def program_mesh(tree: Any) -> ProgramMesh | None:
    """The mesh of the arguments' NamedShardings: the first concrete one, else the first abstract."""
    from jax.sharding import AbstractMesh

    abstract = None
    for sharding in _shardings(tree):
        mesh = getattr(sharding, "mesh", None)
        if mesh is None or not getattr(mesh, "axis_names", ()):
            continue
        if not isinstance(mesh, AbstractMesh):
            return ProgramMesh(mesh, abstract=False)
        abstract = abstract or ProgramMesh(mesh, abstract=True)
    return abstract


def check_binds(found: ProgramMesh, mesh: Any, where: str) -> None:
    """An AbstractMesh binds to `mesh` when their axis names and sizes agree; else one line.

    Raises:
        ShardcliError: the names or sizes differ.
    """
    have = tuple(zip(map(str, found.mesh.axis_names), found.mesh.axis_sizes, strict=True))
    run = tuple(zip(map(str, mesh.axis_names), mesh.axis_sizes, strict=True))
    if have != run:
        shape = "x".join(str(s) for s in found.mesh.axis_sizes)
        axes = ",".join(map(str, found.mesh.axis_names))
        raise ShardcliError(
            f"{where} are sharded on an abstract mesh {found.describe()}, which does not match this run's "
            f"mesh {ProgramMesh(mesh, False).describe()}; run with --mesh {shape} --axes {axes}"
        )


def bind_to_mesh(tree: Any, mesh: Any) -> Any:
    """Every NamedSharding in `tree` on `mesh`: same partition spec, `mesh`'s devices and axis types.

    The caller has checked that the names and sizes agree (`check_binds`); a leaf without a sharding
    or with another kind of sharding is left as it is.
    """
    import jax
    from jax.sharding import NamedSharding

    def leaf(x: Any) -> Any:
        sharding = getattr(x, "sharding", None) if isinstance(x, jax.ShapeDtypeStruct) else None
        if not isinstance(sharding, NamedSharding) or sharding.mesh is mesh:
            return x
        bound = NamedSharding(mesh, sharding.spec, memory_kind=sharding.memory_kind)
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=bound, weak_type=x.weak_type)

    return jax.tree_util.tree_map(leaf, tree)


def with_axis_types(mesh: Any, explicit: bool) -> Any:
    """`mesh` with every axis Explicit (or Auto): the same devices and names."""
    import jax
    from jax.sharding import AxisType

    kind = AxisType.Explicit if explicit else AxisType.Auto
    if all(t == kind for t in mesh.axis_types):
        return mesh
    return jax.sharding.Mesh(mesh.devices, mesh.axis_names, axis_types=(kind,) * len(mesh.axis_names))


@dataclass(frozen=True)
class GivenInputs:
    """What `--inputs FILE.py:NAME` gave: the arguments, and the step itself where it returned one."""

    fn: Any  # None: compile the function the command line named
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


_RETURNS = (
    "return the tuple of the function's positional arguments, (step, args), or "
    '{"fn": step, "args": (...), "kwargs": {...}} (pytrees of jax.ShapeDtypeStruct with shardings, or arrays)'
)


def _mesh_call(value: Any, flag: str, mesh: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """How the maker takes the mesh: as its one positional parameter, as a keyword-only `mesh`, or
    not at all.

    Raises:
        ShardcliError: it needs more than one argument, or a keyword-only one other than `mesh`.
    """
    import inspect

    try:
        params = list(inspect.signature(value).parameters.values())
    except (TypeError, ValueError):
        return (mesh,), {}
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in params if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    keyword = [p for p in required if p.kind == p.KEYWORD_ONLY]
    if len(required) > 1 or (keyword and keyword[0].name != "mesh"):
        names = ", ".join(p.name for p in required)
        raise ShardcliError(
            f"--inputs {flag} takes {len(required)} arguments ({names}); give a function of no "
            f"arguments or of one, the mesh (def inputs(mesh) or def inputs(*, mesh))"
        )
    if keyword:
        return (), {"mesh": mesh}
    if positional or any(p.kind == p.VAR_POSITIONAL for p in params):
        return (mesh,), {}
    return (), {}


def _is_step(x: Any) -> bool:
    """A function to compile (jitted or not), not an argument: callables that hold no arrays."""
    import jax

    return callable(x) and not any(is_array_leaf(leaf) for leaf in jax.tree_util.tree_leaves(x))


def call_inputs(maker: Any, flag: str, mesh: Any) -> GivenInputs:
    """Call the `--inputs` maker (with the mesh if it takes one) and sort out what it returned.

    Args:
        maker: the loaded `UserObject`.
        flag: the `--inputs` value as typed.
        mesh: the run's mesh.

    Raises:
        ShardcliError: it names no function, takes the wrong arguments or returns something else.
        UserCodeError: it raised.
    """
    from shardcli.program.user_code import call_user

    value = maker.value
    if not callable(value) or isinstance(value, type):
        what = f"the type {value.__name__}" if isinstance(value, type) else f"a {type(value).__name__}"
        raise ShardcliError(
            f"--inputs {flag} names {what}, not a function; give a function that takes the mesh (or "
            f"nothing) and returns the arguments"
        )
    given, by_name = _mesh_call(value, flag, mesh)
    made = call_user(
        functools.partial(value, **by_name),
        maker.roots,
        f"--inputs {flag} raised",
        *given,
        doing=f"calling --inputs {flag}",
    )
    if isinstance(made, dict):
        unknown = sorted(set(map(str, made)) - {"fn", "args", "kwargs"})
        if unknown or "args" not in made:
            raise ShardcliError(
                f"--inputs {flag} returned a dict with keys {', '.join(map(str, made)) or 'none'}; "
                f'give "args" (and "fn", "kwargs" where needed)'
            )
        fn, args, kwargs = made.get("fn"), made["args"], made.get("kwargs") or {}
        if fn is not None and not callable(fn):
            raise ShardcliError(f'--inputs {flag} returned "fn": a {type(fn).__name__}, not a function')
        if not isinstance(args, (tuple, list)) or not isinstance(kwargs, dict):
            raise ShardcliError(f'--inputs {flag}: "args" must be a tuple or list and "kwargs" a dict')
        return GivenInputs(fn, tuple(args), dict(kwargs))
    if not isinstance(made, (tuple, list)):
        raise ShardcliError(f"--inputs {flag} returned a {type(made).__name__}; {_RETURNS}")
    if len(made) == 2 and _is_step(made[0]) and isinstance(made[1], (tuple, list)):
        return GivenInputs(made[0], tuple(made[1]), {})
    return GivenInputs(None, tuple(made), {})


# JAX's words when an array is sharded over a mesh axis the mesh lacks (jax.set_mesh + a spec).
_MISSING_AXIS = re.compile(r"Resource axis: (?P<axis>[A-Za-z_][A-Za-z0-9_]*) of .* is not found in mesh")
MAX_NAMED_AXES = 4


def call_inputs_on_their_axes(maker: Any, flag: str, mesh: Any) -> GivenInputs:
    """`call_inputs` on `mesh` (for plan, and inspect --rules: logical names laid out afterwards);
    where the user's --inputs shards arrays over mesh
    axes the mesh lacks (`jax.set_mesh(mesh)` and `nnx.with_partitioning(init, (None, 'model'))`,
    as Flax's guide writes them), again on a mesh of this host's CPU devices whose axes carry those
    names (the first all the devices, the others 1; the target's chips run nothing, and a jitted
    initializer runs): the arrays' shapes and their names are what plan reads, and each layout's
    rules place them afterwards.

    Raises:
        ShardcliError: more names than MAX_NAMED_AXES, or a name JAX refuses as a mesh axis.
        UserCodeError: the user's code raised otherwise.
    """
    import jax
    import numpy as np

    from shardcli.program.user_code import UserCodeError

    devices = jax.devices("cpu")
    names: list[str] = []
    while True:
        try:
            return call_inputs(maker, flag, mesh)
        except UserCodeError as error:
            found = _MISSING_AXIS.search(str(error))
            if found is None or found.group("axis") in names:
                raise
            names.append(found.group("axis"))
            if len(names) > MAX_NAMED_AXES:
                raise ShardcliError(
                    f"--inputs {flag} shards its arrays over mesh axes {', '.join(names)} (jax.set_mesh); "
                    "the rules lay them out instead: make them without a mesh (nnx.eval_shape) and name "
                    "their dims with logical names (nnx.with_partitioning)"
                ) from None
            shape = (len(devices),) + (1,) * (len(names) - 1)
            mesh = jax.sharding.Mesh(np.asarray(devices, dtype=object).reshape(shape), tuple(names))


_PLAIN_LEAVES = (int, float, complex, bool, type(None))


@contextlib.contextmanager
def unusable_donations_quiet(fn: Any) -> Iterator[None]:
    """JAX's "Some donated buffers were not usable" warning silenced where the user's step silences it:
    equinox's `filter_jit(donate="all")` and `"all-except-first"`, which donate the batch too."""
    import warnings

    if not (_filtered_jit(fn) and getattr(fn, "filter_warning", False)):
        yield
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
        yield


def _filter_donations(fn: Any, args: tuple[Any, ...], count: int) -> list[bool]:
    """Per leaf of (args, kwargs): whether equinox's `filter_jit(donate=...)` donates it ("all":
    every array; "all-except-first": all but the first argument's; "warn"/"none": none)."""
    import jax

    first = len(jax.tree_util.tree_leaves(args[0])) if args else 0
    return [
        (getattr(fn, "donate_first", False) and i < first)
        or (getattr(fn, "donate_rest", False) and i >= first)
        for i in range(count)
    ]


def _named_donations(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[bool]:
    """Per leaf of (args, kwargs): whether haliax's `named_jit(donate_args=..., donate_kwargs=...)`
    donates it. Each argument's flag is a bool, or a pytree of bools over its parts (a prefix of it)."""
    import jax

    given = fn._donate_args
    flags = (given,) * len(args) if isinstance(given, bool) else tuple(given or ())
    flags = flags + (False,) * (len(args) - len(flags))
    by_name = fn._donate_kwargs or {}
    spec = (flags[: len(args)], {k: by_name.get(k, False) for k in kwargs})
    return [bool(f) for f in jax.tree_util.tree_leaves(jax.tree.broadcast(spec, (args, kwargs)))]


def wrapper_name(fn: Any) -> str | None:
    """`haliax's _NamedJitWrapper` for a step jitted by another library's wrapper (its own class,
    from outside JAX); None for a plain function or one `jax.jit` made."""
    kind = type(fn)
    package = kind.__module__.split(".")[0]
    if package in ("jax", "jaxlib", "builtins", "functools") or not callable(fn):
        return None
    return f"{package}'s {kind.__name__}"


def _named_jit(fn: Any) -> bool:
    """A haliax `named_jit` function: its own `lower` takes arrays alone as traced (abstract ones
    would be held static) and needs its axis mapping's mesh."""
    return type(fn).__name__ == "_NamedJitWrapper" and type(fn).__module__.split(".")[0] == "haliax"


def _filtered_jit(fn: Any) -> bool:
    """An equinox `filter_jit` function: arrays are its traced arguments, every other leaf static."""
    return type(fn).__module__.split(".")[0] == "equinox" and hasattr(fn, "__wrapped__")


def jit_of(
    fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """The jitted function `lower` is called on, with its arguments, computing what `fn` computes.

    A `jax.jit` function is taken as it is (its shardings, donated and static arguments). A plain
    function is `jax.jit`-ed, as `jax.jit(fn).lower(*args)` would. Where the arguments hold leaves
    that are no JAX type (an equinox module's activation function), or `fn` is an equinox
    `filter_jit` function (which takes abstract arrays as static values), the arrays are traced and
    every other leaf is held static, as `eqx.filter_jit` does; its `donate` is kept.
    """
    import inspect

    import jax

    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    filtered, named = _filtered_jit(fn), _named_jit(fn)
    if not (filtered or named) and (
        hasattr(fn, "lower") or all(is_array_leaf(x) or isinstance(x, _PLAIN_LEAVES) for x in leaves)
    ):
        return (fn if hasattr(fn, "lower") else jax.jit(fn)), args, kwargs
    # A haliax `named_jit` step is called whole inside the trace: it sets its axis mapping, lays its
    # arguments and results out by it and jits the step, as it does when Levanter calls it.
    inner = fn.__wrapped__ if filtered else fn
    traced = [is_array_leaf(x) for x in leaves]
    held = [None if t else x for x, t in zip(leaves, traced, strict=True)]
    donated = _named_donations(fn, args, kwargs) if named else _filter_donations(fn, args, len(leaves))
    donate = [sum(traced[:i]) for i, t in enumerate(traced) if t and donated[i]]

    def call(*arrays: Any) -> Any:
        given = iter(arrays)
        a, k = jax.tree_util.tree_unflatten(
            tree, [next(given) if t else h for t, h in zip(traced, held, strict=True)]
        )
        out = inner(*a, **k)
        return [x for x in jax.tree_util.tree_leaves(out) if is_array_leaf(x)]

    call.__name__ = getattr(inner, "__name__", "step")
    call.__wrapped__ = inner  # type: ignore[attr-defined]
    # It takes one array per leaf, however many parameters `inner` has: jax.jit checks the donated
    # positions against this signature, not against `inner`'s.
    call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("arrays", inspect.Parameter.VAR_POSITIONAL)]
    )
    return (
        jax.jit(call, donate_argnums=tuple(donate)),
        tuple(x for x, t in zip(leaves, traced, strict=True) if t),
        {},
    )


def on_program_mesh(
    session: Session, tree: Any, mode: str | None, where: str, *, mesh_given: bool = True
) -> tuple[Session, Any]:
    """The program's arguments and the session on the mesh they name.

    Arguments sharded on a concrete mesh (one the user's file built) bring it: the session takes it,
    its devices being the run's. Arguments on an AbstractMesh (`nnx.eval_shape` under `jax.set_mesh`)
    are bound to the run's mesh by axis names and sizes; where no mesh was given (`mesh_given`), the
    run's devices take the abstract mesh's shape and names. The axis types follow the arguments' mesh
    (explicit inputs give an explicit run); `mode` (--mode typed) overrides them.

    Raises:
        ShardcliError: a mesh of other devices, or an abstract mesh whose names or sizes differ.
    """
    from shardcli.runtime.session import session_on

    found = program_mesh(tree)
    mesh = session.mesh
    if found is not None and found.abstract:
        if not mesh_given and found.mesh.size <= len(session.devices):
            import jax
            import numpy as np

            devices = np.asarray(session.devices[: found.mesh.size], dtype=object)
            mesh = jax.sharding.Mesh(devices.reshape(found.mesh.axis_sizes), found.mesh.axis_names)
        check_binds(found, mesh, where)
    elif found is not None:
        own = {(d.platform, d.id) for d in session.devices}
        theirs = list(found.mesh.devices.flat)
        if not all((d.platform, d.id) in own for d in theirs):
            kind = theirs[0].device_kind if theirs else "no"
            raise ShardcliError(
                f"{where} are sharded on a mesh {found.describe()} of {kind} devices that this run does "
                f"not have ({session.runtime.describe_devices()}); build the mesh from the one "
                f"--inputs FILE.py:NAME receives (NAME(mesh)), or from jax.make_mesh"
            )
        mesh = found.mesh
    explicit = (
        mode == "explicit" if mode is not None else (found.explicit if found else session.mode == "explicit")
    )
    mesh = with_axis_types(mesh, explicit)
    return session_on(session, mesh), bind_to_mesh(tree, mesh)


def argument_trees(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None = None
) -> list[tuple[str, Any]]:
    """(name, pytree) of every argument: positional ones named by the function's parameters
    (`arg3` past them), keyword ones by their keywords."""
    import inspect as pyinspect

    try:
        params = pyinspect.signature(fn).parameters.values()
        names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    named = [(names[i] if i < len(names) else f"arg{i}", arg) for i, arg in enumerate(args)]
    return [*named, *(kwargs or {}).items()]
