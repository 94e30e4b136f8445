"""Arguments named by logical axes, laid out on a mesh by rules (`plan FILE.py:FN`, `inspect --rules`).

The user's arguments carry logical axis names, the Flax/MaxText convention:

- linen parameters boxed by `nn.with_partitioning(init, ("embed", "mlp"))` (a `Partitioned`, whose
  `names` are kept through `jax.eval_shape(model.init, ...)`);
- NNX variables made with `nnx.with_partitioning(init, ("embed", "mlp"))`, under `nnx.eval_shape`,
  `nnx.split` or `nnx.state` (the names are the variable's `out_sharding` metadata in flax 0.12,
  `sharding_names` before it);
  A box with fewer names than dimensions (lm1b's (embed, heads, head_dim) kernel named
  ('embed', 'kv')) is padded with None at the end, as Flax's `PartitionSpec(*names)` leaves the
  dims past the last name whole;
- plain leaves named by a table `LOGICAL_AXES = {"params['w1']": ("embed", "mlp"), "batch": ("batch",
  None)}` in the inputs' file (paths as `named_leaves` gives them: the function's parameter name,
  then the pytree path).

A rule set (`embed=fsdp,mlp=tensor,batch=data+fsdp`) maps those names to mesh axes;
`decoder_spec.resolve_axes` turns each leaf's names into its partition spec on a mesh. Both `plan`
(every candidate) and `inspect --rules` (one) lay the arguments out here, so a plan's candidate and
the `inspect` command that reproduces it compile the same program.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

from shardcli.errors import ShardcliError
from shardcli.specs.decoder import Rules, partition_spec_args, resolve_axes

TABLE_NAME = "LOGICAL_AXES"
# flax 0.12 keeps an NNX variable's names as `out_sharding`; 0.11 called them `sharding_names`, 0.10
# `sharding`. The first present that is a tuple of names (not a PartitionSpec's mesh axes) is read.
_NNX_KEYS = ("out_sharding", "sharding_names", "sharding")

Named = tuple[str, Any, tuple[str | None, ...] | None]  # (path, leaf or box, logical names or None)


def _is_nnx_variable(leaf: Any) -> bool:
    return type(leaf).__module__.startswith("flax.nnx") and hasattr(leaf, "get_metadata")


def names_of(leaf: Any) -> tuple[str | None, ...] | None:
    """A leaf's logical axis names where it carries them (linen's Partitioned, an NNX variable)."""
    if _is_nnx_variable(leaf):
        metadata = leaf.get_metadata()
        for key in _NNX_KEYS:
            names = metadata.get(key)
            if isinstance(names, tuple) and all(n is None or isinstance(n, str) for n in names):
                return names if names else None
        return None
    names = getattr(leaf, "names", None)
    if names is not None and hasattr(leaf, "unbox"):
        return tuple(names)
    return None


def is_box(x: Any) -> bool:
    """A leaf that holds an array with its logical names (linen's box, an NNX variable)."""
    return _is_nnx_variable(x) or names_of(x) is not None


def value_of(leaf: Any) -> Any:
    """The array (or ShapeDtypeStruct) a box holds; a plain leaf itself."""
    if _is_nnx_variable(leaf):
        return leaf.get_value()
    return leaf.unbox() if is_box(leaf) else leaf


def _boxed(leaf: Any, value: Any) -> Any:
    """`value` in `leaf`'s box (its names and metadata kept)."""
    if _is_nnx_variable(leaf):
        return leaf.replace(value)
    return leaf.replace_boxed(value) if is_box(leaf) else value


def table_of(maker: Any) -> dict[str, tuple[str | None, ...]]:
    """The LOGICAL_AXES table in the file that defines the inputs' function (empty where none)."""
    import sys

    module = sys.modules.get(getattr(maker, "__module__", "") or "")
    table = getattr(module, TABLE_NAME, None)
    if table is None:
        return {}
    where = f"{TABLE_NAME} in {getattr(module, '__file__', None) or getattr(module, '__name__', 'the file')}"
    example = 'e.g. {"params[\'w1\']": ("embed", "mlp")}'
    if not isinstance(table, dict):
        raise ShardcliError(
            f"{where} is a {type(table).__name__}; make it a dict of path -> names, {example}"
        )
    out: dict[str, tuple[str | None, ...]] = {}
    for path, names in table.items():
        if not isinstance(path, str):
            raise ShardcliError(f"{where} has the key {path!r}, not a path (a str); {example}")
        if not isinstance(names, (tuple, list)) or not all(n is None or isinstance(n, str) for n in names):
            raise ShardcliError(
                f"{where} gives {path!r} {names!r}; give a tuple of logical axis names (str or None), "
                f"one per dimension, {example}"
            )
        out[path] = tuple(names)
    return out


def named_leaves(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    table: dict[str, tuple[str | None, ...]],
    kwargs: dict[str, Any] | None = None,
) -> list[Named]:
    """(path, leaf or box, logical names) for every array leaf of the arguments.

    The path is the function's parameter name (a keyword argument's keyword), then the pytree path
    to the leaf or its box.
    """
    import inspect as pyinspect

    import jax

    from shardcli.program.inputs import is_array_leaf

    try:
        params = list(pyinspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    out = []
    named = [(params[i] if i < len(params) else f"arg{i}", arg) for i, arg in enumerate(args)]
    for base, arg in [*named, *(kwargs or {}).items()]:
        for path, leaf in jax.tree_util.tree_flatten_with_path(arg, is_leaf=is_box)[0]:
            if not (is_box(leaf) or is_array_leaf(leaf)):
                continue  # a Python number, a function: no memory, no layout
            name = base + jax.tree_util.keystr(path)
            names = names_of(leaf)
            shape = tuple(value_of(leaf).shape)
            if names is not None and len(names) < len(shape):
                # Flax's spec of a box is PartitionSpec(*names), which leaves the dims past the
                # last name whole: the names are padded with None at the end, as JAX pads a spec.
                names = tuple(names) + (None,) * (len(shape) - len(names))
            names = names if names is not None else table.get(name)
            if names is not None and len(names) != len(shape):
                raise ShardcliError(
                    f"{name} has {len(shape)} dimension(s) {shape} but {len(names)} logical axis "
                    f"name(s) {tuple(names)}; give one name (or None) per dimension"
                )
            out.append((name, leaf, names))
    unused = sorted(set(table) - {name for name, _, _ in out})
    if unused:
        paths = ", ".join(name for name, _, _ in out[:4])
        raise ShardcliError(
            f"{TABLE_NAME} names {', '.join(map(repr, unused))}, which is no array argument's path; "
            f"the paths are like {paths}"
        )
    return out


def check_named(leaves: list[Named], program: str) -> int:
    """The number of leaves with logical names.

    Raises:
        ShardcliError: none has any.
    """
    named = sum(n is not None for _, _, n in leaves)
    if not named:
        raise ShardcliError(
            f"no argument of {program} carries logical axis names: box them with "
            "nn.with_partitioning or nnx.with_partitioning(init, ('embed', 'mlp')), or name them in "
            f"{TABLE_NAME} in the inputs' file"
        )
    return named


def check_rule_names(rules: Rules, leaves: list[Named], flag: str = "--rules") -> None:
    """Raises: ShardcliError when `rules` map a logical name that no argument carries (a rule that
    would lay nothing out, a misspelt name most likely)."""
    from shardcli.specs.decoder import rules_text

    carried = names_used(leaves)
    unknown = [name for name in dict(rules) if name not in carried]
    if unknown:
        raise ShardcliError(
            f"{flag} {rules_text(rules)} maps logical axis {', '.join(map(repr, unknown))}, which no "
            f"argument carries; the arguments carry {', '.join(carried)}"
        )


def names_used(leaves: list[Named]) -> tuple[str, ...]:
    """The logical axis names the arguments carry, sorted."""
    return tuple(sorted({x for _, _, n in leaves for x in (n or ()) if x is not None}))


def spec_entries(
    leaf: Any, logical: tuple[str | None, ...] | None, rules: Rules, sizes: dict[str, int]
) -> Any:
    """The partition spec entries (mesh axes per dim) of one leaf under `rules`."""
    shape = tuple(value_of(leaf).shape)
    return resolve_axes(tuple(logical or (None,) * len(shape)), rules, sizes, shape)


def lay_out(
    args: tuple[Any, ...],
    fn: Callable[..., Any],
    table: dict[str, Any],
    rules: Rules,
    mesh: Any,
    kwargs: dict[str, Any] | None = None,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments (and keyword arguments) as ShapeDtypeStructs sharded by their logical names
    under `rules` on `mesh` (boxes keep their names); a leaf without names is replicated."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from shardcli.program.inputs import is_array_leaf

    sizes = dict(zip(map(str, mesh.axis_names), mesh.devices.shape, strict=True))
    names = {id(leaf): n for _, leaf, n in named_leaves(fn, args, table, kwargs)}

    def place(leaf: Any) -> Any:
        if not (is_box(leaf) or is_array_leaf(leaf)):
            return leaf
        value = value_of(leaf)
        entries = spec_entries(leaf, names.get(id(leaf)), rules, sizes)
        spec = P(*partition_spec_args(entries))
        struct = jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=NamedSharding(mesh, spec))
        return _boxed(leaf, struct)

    laid = tuple(jax.tree_util.tree_map(place, a, is_leaf=is_box) for a in args)
    return laid, {k: jax.tree_util.tree_map(place, v, is_leaf=is_box) for k, v in (kwargs or {}).items()}


def argument_bytes(leaves: list[Named], rules: Rules, sizes: dict[str, int]) -> int:
    """Bytes per chip of the arguments laid out by `rules` on a mesh of `sizes` (pure arithmetic)."""
    total = 0
    for _, leaf, logical in leaves:
        value = value_of(leaf)
        entries = spec_entries(leaf, logical, rules, sizes)
        split = math.prod(sizes[a] for e in entries for a in e)
        total += math.prod(value.shape) * int(value.dtype.itemsize) // split
    return total


def unknown_mesh_axes(rules: Rules, axes: tuple[str, ...]) -> list[str]:
    """The mesh axes `rules` name that are not among `axes`, in order."""
    return list(dict.fromkeys(a for _, mesh_axes in rules for a in mesh_axes if a not in axes))


@contextlib.contextmanager
def names_only() -> Iterator[None]:
    """While the user's file is imported and its inputs made: NNX variables keep their logical names
    and are not sharded as they are made (flax 0.12's eager sharding would need a mesh whose axes
    are those names); the layout's rules place them afterwards. Without flax, nothing changes."""
    import importlib.util

    if importlib.util.find_spec("flax") is None:
        yield
        return
    from flax import nnx

    eager = getattr(nnx, "use_eager_sharding", None)  # flax before 0.12 made no variable sharded
    with eager(False) if eager is not None else contextlib.nullcontext():
        yield


def effective_rules(rules: Rules, names: tuple[str, ...], axes: tuple[str, ...]) -> Rules:
    """The rules that take effect for arguments carrying `names` on a mesh of `axes` (the others
    lay nothing out): the same layout, said in fewer words."""
    table = dict(rules)  # parse_rules refuses a name given twice
    kept = ((name, tuple(a for a in table[name] if a in axes)) for name in table if name in names)
    return tuple((name, mesh_axes) for name, mesh_axes in kept if mesh_axes)


# --- a program that lays itself out by its own rules ----------------------------------------------

RULES_NAME = "LOGICAL_AXIS_RULES"  # the inputs' file's own rules (MaxText's `logical_axis_rules`)
RULES_KEYWORD = "rules"  # def inputs(mesh, rules=LOGICAL_AXIS_RULES)

FlaxRules = tuple[tuple[str, Any], ...]  # Flax's format: (name, mesh axis | tuple of them | None)


def own_shardings(fn: Any) -> bool:
    """Whether `fn` is a `jax.jit` given its own in_shardings or out_shardings (MaxText's train step,
    flax lm1b's): it fixes its arguments' layout, so their logical names cannot move them."""
    from jax.sharding import Sharding

    info = getattr(fn, "_jit_info", None)  # jax's PjitInfo; absent: not a jit, or a jax to come
    if info is None:
        return False
    leaves = (*getattr(info, "in_shardings_leaves", ()), *getattr(info, "out_shardings_leaves", ()))
    return any(isinstance(s, Sharding) for s in leaves)


def lays_itself_out(fn: Any, maker: Any) -> str:
    """Why a program lays its arguments out itself, in words (its step is a jax.jit with its own
    in_shardings, or its inputs' function can be handed rules), or "" where its logical names do."""
    if own_shardings(fn):
        return "a jax.jit with its own in_shardings"
    reach = rules_reach(maker)
    if reach == "keyword":
        return f"its inputs take {RULES_KEYWORD}="
    if reach == "module":
        return f"its inputs' file defines {RULES_NAME}"
    return ""


def call_inputs_with_rules(maker: Any, flag: str, mesh: Any, rules: Rules | None) -> Any:
    """`inputs.call_inputs` of a program that lays itself out, on `mesh`, handed `rules` followed by
    its own for the names they do not map (None: its own, as written).

    Raises:
        ShardcliError: `rules` given to a program whose rules cannot be reached (`rules_reach`).
        UserCodeError: the user's code raised.
    """
    from shardcli.program.inputs import call_inputs
    from shardcli.program.user_code import UserObject

    if rules is not None and rules_reach(maker.value) is None:
        raise ShardcliError(
            f"--inputs {flag} lays the arguments out by rules shardcli cannot reach; give it a "
            f"{RULES_KEYWORD}= keyword (def inputs(mesh, {RULES_KEYWORD}=RULES)) or define {RULES_NAME} in "
            "its file"
        )
    merged = None if rules is None else merged_rules(rules, own_rules(maker.value))
    with handing_rules(maker.value, merged) as value:
        return call_inputs(UserObject(maker.target, value, maker.roots), flag, mesh)


def rules_reach(maker: Any) -> str | None:
    """How plan can hand the inputs' function a rule set: "keyword" (it takes `rules`), "module"
    (its file defines LOGICAL_AXIS_RULES, read when it is called), or None (it cannot)."""
    import inspect as pyinspect
    import sys

    try:
        params = dict(pyinspect.signature(maker).parameters)
    except (TypeError, ValueError):
        params = {}
    if RULES_KEYWORD in params and params[RULES_KEYWORD].kind != pyinspect.Parameter.POSITIONAL_ONLY:
        return "keyword"
    module = sys.modules.get(getattr(maker, "__module__", "") or "")
    return "module" if hasattr(module, RULES_NAME) else None


def own_rules(maker: Any) -> Rules | None:
    """The program's own rules, as its inputs' function uses them when called with the mesh alone:
    the `rules` keyword's default, else LOGICAL_AXIS_RULES in its file; None where there are none.

    Raises:
        ShardcliError: they are not rules in Flax's format.
    """
    import inspect as pyinspect
    import sys

    where = rules_reach(maker)
    if where == "keyword":
        default = pyinspect.signature(maker).parameters[RULES_KEYWORD].default
        if default is pyinspect.Parameter.empty:
            return None
        return rules_of_flax(default, f"the default of {RULES_KEYWORD}= in {maker.__name__}")
    if where == "module":
        module = sys.modules[maker.__module__]
        return rules_of_flax(getattr(module, RULES_NAME), f"{RULES_NAME} in {module.__file__}")
    return None


def rules_of_flax(value: Any, where: str) -> Rules:
    """Flax's rules ((name, "fsdp"), (name, ("data", "fsdp")), (name, None)) as shardcli's.

    Raises:
        ShardcliError: an entry that is not (name, mesh axis, tuple of them, or None).
    """
    example = "e.g. (('embed', 'fsdp'), ('batch', ('data', 'fsdp')), ('kv', None))"
    if not isinstance(value, (tuple, list)):
        raise ShardcliError(f"{where} is a {type(value).__name__}; give Flax's logical axis rules, {example}")
    out = []
    for entry in value:
        ok = isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[0], str)
        axes = entry[1] if ok else None
        axes = () if axes is None else (axes,) if isinstance(axes, str) else axes
        if not ok or not isinstance(axes, (tuple, list)) or not all(isinstance(a, str) for a in axes):
            raise ShardcliError(
                f"{where} has the entry {entry!r}; give (logical name, mesh axis or tuple of them or "
                f"None), {example}"
            )
        out.append((entry[0], tuple(axes)))
    return tuple(out)


def flax_rules(rules: Rules) -> FlaxRules:
    """shardcli's rules in Flax's format: one mesh axis as its name, several as a tuple, none as None."""
    return tuple((name, axes[0] if len(axes) == 1 else (tuple(axes) or None)) for name, axes in rules)


def merged_rules(rules: Rules, own: Rules | None) -> Rules:
    """`rules` first, then the program's own for every name `rules` do not map (Flax reads rules in
    order, the first that applies wins)."""
    given = {name for name, _ in rules}
    return rules + tuple(r for r in own or () if r[0] not in given)


@contextlib.contextmanager
def handing_rules(maker: Any, rules: Rules | None) -> Iterator[Any]:
    """The inputs' function, to be called with `rules` (None: as written): with its `rules` keyword
    bound, or with its file's LOGICAL_AXIS_RULES set to them while it runs (restored after)."""
    import functools
    import sys

    where = rules_reach(maker) if rules is not None else None
    if where is None or rules is None:
        yield maker
        return
    given = flax_rules(rules)
    if where == "keyword":
        yield functools.wraps(maker)(functools.partial(maker, **{RULES_KEYWORD: given}))
        return
    module = sys.modules[maker.__module__]
    before = getattr(module, RULES_NAME)
    setattr(module, RULES_NAME, given)
    try:
        yield maker
    finally:
        setattr(module, RULES_NAME, before)


def jit_in_shardings(fn: Any, args: tuple[Any, ...]) -> list[Any]:
    """Per array leaf of `args` (flattened as jax.jit flattens them), the sharding the jit's own
    in_shardings give it, or None (none given, or a structure this cannot follow)."""
    import jax
    from jax.sharding import Sharding

    count = len(jax.tree_util.tree_leaves(args))
    info = getattr(fn, "_jit_info", None)
    if info is None or not own_shardings(fn):
        return [None] * count
    given = jax.tree_util.tree_unflatten(info.in_shardings_treedef, info.in_shardings_leaves)
    tree = tuple(given) if isinstance(given, (tuple, list)) else (given,) * len(args)
    if len(tree) != len(args):
        return [None] * count  # static arguments: left to JAX to check
    out: list[Any] = []

    def each(sharding: Any, part: Any) -> None:
        n = len(jax.tree_util.tree_leaves(part))
        out.extend([sharding if isinstance(sharding, Sharding) else None] * n)

    try:
        jax.tree_util.tree_map(
            each,
            tree,
            tuple(args),
            is_leaf=lambda x: x is None or isinstance(x, Sharding) or type(x).__name__ == "UnspecifiedValue",
        )
    except (ValueError, TypeError):
        return [None] * count
    return out if len(out) == count else [None] * count


def argument_leaves(fn: Any, args: tuple[Any, ...]) -> list[tuple[str, Any]]:
    """(path, leaf) for every leaf of the positional arguments as jax.jit flattens them (a box's
    array is a leaf of its own), named by the function's parameters (`params['w1']`)."""
    import inspect as pyinspect

    import jax

    try:
        params = list(pyinspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    out = []
    for i, arg in enumerate(args):
        base = params[i] if i < len(params) else f"arg{i}"
        out += [(base + jax.tree_util.keystr(p), x) for p, x in jax.tree_util.tree_flatten_with_path(arg)[0]]
    return out


def same_mesh(a: Any, b: Any) -> bool:
    """Whether two concrete meshes are one: the same axis names over the same devices in order."""
    return (
        tuple(a.axis_names) == tuple(b.axis_names)
        and a.devices.shape == b.devices.shape
        and all(x.id == y.id for x, y in zip(a.devices.flat, b.devices.flat, strict=True))
    )


def follows_mesh(a: Any, b: Any) -> bool:
    """Whether mesh `a` is `b` renamed: the same devices, and the same sizes once axes of size 1 are
    left out (MaxText's mesh of a dozen axes made from the sizes of the mesh it was handed)."""
    import numpy as np

    squeezed = (np.squeeze(np.asarray(m.devices)) for m in (a, b))
    x, y = squeezed
    return x.shape == y.shape and {d.id for d in x.flat} == {d.id for d in y.flat}
