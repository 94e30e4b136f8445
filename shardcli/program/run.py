"""`shardcli run FILE.py:FN`: run your own function on concrete inputs, every device's block shown.

The inputs are filled (`arange`, `ones`, `random`, a `.npy` file, or the arrays `--inputs` returns)
and placed with their shardings; the function runs once on the mesh (as `jit`, under
`jax.set_mesh`), and what each device held before and after is read back, with every
`shardcli.probe` value seen on the way (inside `shard_map` bodies: per device). Then the same
function runs on one device, on a mesh with the same axis names each of size 1, and the sharded
result is compared with it: exactly for integers and booleans, within a per-dtype tolerance for
floats. A result whose shape differs between the two (a `shard_map` that returns one value per
shard) is shown and named as depending on the mesh, not compared.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardcli.errors import ShardcliError
from shardcli.program.argument_facts import fact_of
from shardcli.program.probe import ProbeCall, recording
from shardcli.program.run_inputs import concrete_inputs
from shardcli.program.run_request import SHOW_VALUES_MAX, RunRequest
from shardcli.runtime.session import Session, open_session
from shardcli.runtime.verify import RTOL, element_errors, float_eps
from shardcli.tile_math import ShardingLayout


@dataclass(frozen=True)
class DeviceBlock:
    """One device's block of an array (or of a probe's value)."""

    device_ids: tuple[int, ...]  # the devices holding this block (several where it is replicated)
    coords: tuple[int, ...]  # the first device's mesh coordinates
    index: tuple[tuple[int, int], ...]  # its place in the global array
    values: np.ndarray | None  # None: not shown (too large)


@dataclass(frozen=True)
class ArrayValues:
    """An argument or a result: its type, sharding, and (when small) its values, global and per device."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    spec: str
    layout: ShardingLayout | None  # None: a host array with no sharding
    filled_with: str  # arange, ones, random, a file, "--inputs", "result"
    global_values: np.ndarray | None
    blocks: tuple[DeviceBlock, ...]

    @property
    def replicated(self) -> bool:
        return self.layout is None or len(self.layout.tiles) == 1


@dataclass(frozen=True)
class ProbeValues:
    """Every value one probe saw: per device inside shard_map, else the global value."""

    name: str
    axes: tuple[str, ...]  # the shard_map's manual axes; () for a global value
    blocks: tuple[DeviceBlock, ...]  # in mesh order; values of several calls are stacked


@dataclass(frozen=True)
class Tolerance:
    """How close the sharded result must come to the one-device result."""

    exact: bool
    rtol: float  # |err| <= rtol * max|reference| (floats)
    text: str


@dataclass(frozen=True)
class ResultCheck:
    """One result leaf against the same function run on one device."""

    name: str
    compared: bool  # False: the result's shape depends on the mesh
    wrong: int
    max_abs_err: float
    bound: float
    reference: np.ndarray | None  # the one-device result (shown when small)
    note: str


@dataclass(frozen=True)
class RunResult:
    """What `shardcli run` shows: inputs, probes, results and their check, device by device."""

    session: Session
    request: RunRequest
    inputs: tuple[ArrayValues, ...]
    probes: tuple[ProbeValues, ...]
    results: tuple[ArrayValues, ...]
    checks: tuple[ResultCheck, ...]
    tolerance_text: str
    show_values: bool

    @property
    def wrong(self) -> int:
        return sum(c.wrong for c in self.checks)

    @property
    def compared(self) -> bool:
        return any(c.compared for c in self.checks)


# --- tolerances -----------------------------------------------------------------------------------


def tolerance_for(dtype: np.dtype) -> Tolerance:
    """Integers and booleans exactly; floats within max(1e-4, 8 eps) of the largest |reference|.

    The two runs may sum in another order (a psum over shards against one long sum), so a float
    result differs by rounding; 8 eps of the dtype covers bfloat16 and float16, and 1e-4 (the
    project's float32 tolerance, `verify.RTOL`) float32 through a few layers.
    """
    if dtype.kind in "iub":
        return Tolerance(True, 0.0, "exactly")
    rtol = max(RTOL, 8 * float_eps(dtype))
    return Tolerance(False, rtol, f"{rtol:.3g} x max|ref| for {dtype.name}")


def compare_to_reference(name: str, got: np.ndarray, want: np.ndarray) -> ResultCheck:
    """The sharded result leaf against the one-device one (shapes that differ: not compared)."""
    if got.shape != want.shape:
        return ResultCheck(
            name,
            False,
            0,
            0.0,
            0.0,
            want,
            f"shape {got.shape} on the mesh, {want.shape} on one device: the result depends on the "
            f"mesh (one value per shard), so it is shown, not compared",
        )
    tol = tolerance_for(np.asarray(got).dtype)
    diff = element_errors(got, want)  # 0 where both are the same value, NaN in both included
    err = float(np.nanmax(diff)) if diff.size and not np.all(np.isnan(diff)) else 0.0
    if tol.exact:
        wrong = int(np.count_nonzero(diff != 0))
        return ResultCheck(name, True, wrong, err, 0.0, want, tol.text)
    finite = np.abs(np.asarray(want, dtype=np.float64))
    finite = finite[np.isfinite(finite)]
    scale = float(np.max(finite)) if finite.size else 0.0
    bound = tol.rtol * (scale or 1.0)
    wrong = int(np.count_nonzero(~((diff == 0) | (diff <= bound))))  # a NaN on one side is wrong
    return ResultCheck(name, True, wrong, err, bound, want, tol.text)


# --- reading values back --------------------------------------------------------------------------


def _coords_of(session: Session) -> dict[int, tuple[int, ...]]:
    return {c.device_id: c.coords for c in session.layout.cells}


def array_values(name: str, leaf: Any, filled_with: str, session: Session, show: bool | None) -> ArrayValues:
    """An argument or result leaf: its sharding and, when small enough, its global and per-device values."""
    import jax

    coords = _coords_of(session)
    size = math.prod(tuple(leaf.shape))
    shown = show if show is not None else size <= SHOW_VALUES_MAX
    if not isinstance(leaf, jax.Array):
        host = np.asarray(leaf)
        return ArrayValues(
            name=name,
            dtype=str(host.dtype),
            shape=tuple(host.shape),
            spec="host array (no sharding)",
            layout=None,
            filled_with=filled_with,
            global_values=host if shown else None,
            blocks=(),
        )
    fact = fact_of(name, leaf)
    by_device = {s.device.id: s for s in leaf.addressable_shards}
    blocks = []
    for tile in fact.layout.tiles:
        mine = [d for d in tile.device_ids if d in by_device]
        values = np.asarray(by_device[mine[0]].data) if mine and shown else None
        blocks.append(DeviceBlock(tuple(tile.device_ids), coords[tile.device_ids[0]], tile.index, values))
    whole = np.asarray(jax.device_get(leaf)) if shown and leaf.is_fully_addressable else None
    return ArrayValues(
        name=name,
        dtype=fact.dtype,
        shape=fact.shape,
        spec=fact.spec,
        layout=fact.layout,
        filled_with=filled_with,
        global_values=whole,
        blocks=tuple(sorted(blocks, key=lambda b: b.device_ids[0])),
    )


def _named_by_shape(calls: list[ProbeCall]) -> list[ProbeCall]:
    """One name probed at several shapes or dtypes (`probe(x, "a")`, then `probe(x[:2], "a")`):
    each kind shown apart, its type after the name (`a f32[2]`), as the calls cannot be stacked."""
    from dataclasses import replace

    kinds: dict[str, set[tuple[str, tuple[int, ...]]]] = {}
    for c in calls:
        kinds.setdefault(c.name, set()).add((np.asarray(c.value).dtype.str, np.asarray(c.value).shape))
    mixed = {name for name, seen in kinds.items() if len(seen) > 1}
    if not mixed:
        return calls

    def label(c: ProbeCall) -> str:
        value = np.asarray(c.value)
        return f"{c.name} {value.dtype.name}[{','.join(map(str, value.shape))}]"

    return [replace(c, name=label(c)) if c.name in mixed else c for c in calls]


def probe_values(calls: list[ProbeCall], session: Session, show: bool | None) -> tuple[ProbeValues, ...]:
    """Each probe's values per device (grouped by name, in the order first seen; calls stacked)."""
    axes = session.spec.axes
    cells = session.layout.cells
    calls = _named_by_shape(calls)
    out = []
    for name in dict.fromkeys(c.name for c in calls):
        mine = [c for c in calls if c.name == name]
        manual = mine[0].axes
        groups: dict[tuple[int, ...], list[Any]] = {}
        for c in mine:
            groups.setdefault(c.coords, []).append(c.value)
        blocks = []
        for where, values in sorted(groups.items()):
            want = dict(zip(manual, where, strict=True))
            ids = tuple(
                cell.device_id
                for cell in cells
                if all(cell.coords[axes.index(a)] == k for a, k in want.items())
            )
            value = values[0] if len(values) == 1 else np.stack([np.asarray(v) for v in values])
            size = int(np.asarray(value).size)
            keep = show if show is not None else size <= SHOW_VALUES_MAX
            first = ids[0] if ids else -1
            blocks.append(
                DeviceBlock(
                    ids,
                    next((c.coords for c in cells if c.device_id == first), ()),
                    (),
                    np.asarray(value) if keep else None,
                )
            )
        out.append(ProbeValues(name, manual, tuple(sorted(blocks, key=lambda b: b.device_ids or (-1,)))))
    return tuple(out)


# --- running --------------------------------------------------------------------------------------


def _result_names(out: Any) -> list[tuple[str, Any]]:
    import jax

    flat = jax.tree_util.tree_flatten_with_path(out)[0]
    if len(flat) == 1 and not flat[0][0]:
        return [("result", flat[0][1])]
    return [("result" + jax.tree_util.keystr(path), leaf) for path, leaf in flat]


def _one_device_mesh(session: Session) -> Any:
    """A mesh with the session's axis names and types, every axis of size 1, on its first device."""
    import jax

    return jax.make_mesh(
        (1,) * len(session.spec.axes),
        session.spec.axes,
        axis_types=tuple(session.mesh.axis_types),
        devices=[session.devices[0]],
    )


def _on_one_device(tree: Any, one: Any) -> Any:
    """The arguments on the one-device mesh: each sharded array with the same PartitionSpec (every
    axis of size 1, so one block holds it all, and a shard_map's in_specs still match under
    explicit axes); host arrays stay as they are."""
    import jax
    from jax.sharding import NamedSharding

    def leaf(x: Any) -> Any:
        if not isinstance(x, jax.Array):
            return x
        host = np.asarray(jax.device_get(x))
        spec = getattr(x.sharding, "spec", None)
        if spec is None:
            return jax.device_put(host, one.devices.flat[0])
        return jax.device_put(host, NamedSharding(one, spec))

    return jax.tree_util.tree_map(leaf, tree)


def argument_names(fn: Callable[..., Any], args: tuple[Any, ...]) -> list[str]:
    """`x`, `params['w1']`: each leaf of the positional arguments, named by the function's parameters."""
    import inspect as pyinspect

    import jax

    try:
        params = pyinspect.signature(getattr(fn, "__wrapped__", fn)).parameters.values()
        names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    out = []
    for i, arg in enumerate(args):
        base = names[i] if i < len(names) else f"arg{i}"
        out += [base + jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_flatten_with_path(arg)[0]]
    return out


def execute(
    fn: Callable[..., Any], args: Any, mesh: Any, roots: tuple[str, ...], what: str
) -> tuple[Any, list[ProbeCall]]:
    """Compile and run `fn(*args)` once on `mesh` (as jit, under `jax.set_mesh(mesh)`, where a
    `shard_map` without a mesh finds it), recording the probes.

    Raises:
        UserCodeError: the user's code raised while JAX traced or ran it.
        ShardcliError: JAX could not compile it.
    """
    import jax

    from shardcli.analysis.target import quiet_native_logs
    from shardcli.program.jit import compile_program
    from shardcli.program.user_code import call_user

    # A probe under plain jit gathers its value to one device: XLA's note on that is not the user's.
    with quiet_native_logs():
        compiled = compile_program(fn, tuple(args), roots, what, mesh).compiled

    def run_to_the_end(*given: Any) -> Any:
        # jax.debug.print and the probes' callbacks print while the program runs: still the user's
        # output (to stderr), so the wait for them is inside the guard too.
        out = compiled(*given)
        jax.block_until_ready(out)
        jax.effects_barrier()
        return out

    with recording() as calls, jax.set_mesh(mesh):
        out = call_user(run_to_the_end, roots, f"{what} raised while it ran:", *args)
    return out, list(calls)


def _kind(value: Any) -> str:
    return f"type ({value.__name__})" if isinstance(value, type) else type(value).__name__


def _check_results(out: Any, target: str) -> None:
    """Raises: ShardcliError for a result leaf run cannot show or compare (complex, a PRNG key)."""
    from shardcli.program.inputs import is_key

    for name, leaf in _result_names(out):
        dtype = getattr(leaf, "dtype", None)
        if dtype is not None and is_key(dtype):
            raise ShardcliError(
                f"run {target}: {name} is a typed PRNG key ({dtype}), whose values run cannot show; "
                f"return jax.random.key_data(key)"
            )
        if dtype is not None and np.dtype(dtype).kind == "c":
            raise ShardcliError(
                f"run {target}: {name} is {np.dtype(dtype).name}; run shows and checks real numbers: "
                f"return its parts (jnp.real(z), jnp.imag(z))"
            )


def run_function(request: RunRequest) -> RunResult:
    """`shardcli run`: fill the inputs, run the function on the mesh and on one device, compare.

    Raises:
        ShardcliError: bad input (one line).
        UserCodeError: the user's code raised.
    """
    import jax

    from shardcli.program.user_code import load
    from shardcli.runtime.devices import import_jax_quietly

    if request.args and request.inputs:
        raise ShardcliError("give the arguments with --arg or with --inputs, not both")
    import_jax_quietly()  # before the user's file imports it
    x64 = any(a.arg.dtype.needs_x64 for a in request.args)
    # The devices first, as inspect: a file that computes with JAX at import then finds the mesh's
    # devices started (JAX fixes the count when it starts).
    session = open_session(request.mesh, request.options, x64=x64)
    function = load(request.target, flag="run")
    if not callable(function.value) or isinstance(function.value, type):
        raise ShardcliError(f"run {request.target!r} names a {_kind(function.value)}, not a function")
    args, how, input_roots, step = concrete_inputs(request, session)
    fn = step or function.value
    roots = tuple(dict.fromkeys(function.roots + input_roots))

    leaves = jax.tree_util.tree_leaves(tuple(args))
    names = argument_names(fn, tuple(args))
    inputs = tuple(
        array_values(n, leaf, h, session, request.show_values)
        for n, leaf, h in zip(names, leaves, how, strict=True)
    )
    out, calls = execute(fn, args, session.mesh, roots, request.target)
    _check_results(out, request.target)
    results = tuple(
        array_values(n, leaf, "result", session, request.show_values) for n, leaf in _result_names(out)
    )
    probes = probe_values(calls, session, request.show_values)
    one = _one_device_mesh(session)
    reference, _ = execute(fn, _on_one_device(args, one), one, roots, request.target)
    got_leaves = [(name, np.asarray(jax.device_get(leaf))) for name, leaf in _result_names(out)]
    checks = tuple(
        compare_to_reference(name, got, np.asarray(jax.device_get(want)))
        for (name, got), (_, want) in zip(got_leaves, _result_names(reference), strict=True)
    )
    tol_text = "; ".join(dict.fromkeys(tolerance_for(got.dtype).text for _, got in got_leaves))
    show = request.show_values if request.show_values is not None else True
    return RunResult(
        session=session,
        request=request,
        inputs=inputs,
        probes=probes,
        results=results,
        checks=checks,
        tolerance_text=tol_text,
        show_values=show,
    )
