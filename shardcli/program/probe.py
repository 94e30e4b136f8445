"""`shardcli.probe(x, "name")`: see an intermediate value of your function, device by device.

Call it anywhere in the function `shardcli run` runs, inside a `shard_map` body too:

    def f(x):
        partial = shardcli.probe(x.sum(), "per-shard sum")   # before the psum
        return jax.lax.psum(partial, "x")

It returns `x` unchanged and records nothing unless `shardcli run` is recording, so the function
runs as before anywhere else. The values reach the host through `jax.debug.callback` when the
program runs: inside `shard_map` the callback runs once per device with that device's block, and
the device's position on the manual mesh axes (`axis_index`) travels with it; under plain `jit` it
gets the whole (global) value.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ProbeCall:
    """One value a probe saw: its name, the manual mesh axes and the device's position on them."""

    name: str
    axes: tuple[str, ...]  # the shard_map's manual axes; () under plain jit: a global value
    coords: tuple[int, ...]
    value: Any  # a NumPy array


class _Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[ProbeCall] | None = None


_recorder = _Recorder()


@contextlib.contextmanager
def recording() -> Iterator[list[ProbeCall]]:
    """Record every probe's values while the block runs (the caller waits for the program's effects)."""
    calls: list[ProbeCall] = []
    with _recorder.lock:
        _recorder.calls = calls
    try:
        yield calls
    finally:
        with _recorder.lock:
            _recorder.calls = None


def _manual_axes() -> tuple[str, ...]:
    import jax
    from jax.sharding import AxisType

    mesh = jax.sharding.get_abstract_mesh()
    if mesh is None or mesh.empty:
        return ()
    return tuple(a for a, t in zip(mesh.axis_names, mesh.axis_types, strict=True) if t == AxisType.Manual)


def probe(x: Any, name: str) -> Any:
    """Show `x` per device under `shardcli run` (inside shard_map: each device's block); returns `x`.

    Args:
        x: an array inside the traced function (a pytree is shown leaf by leaf).
        name: the label shardcli shows beside the values.
    """
    import jax
    import numpy as np

    if not isinstance(name, str) or not name:
        raise TypeError(f"shardcli.probe needs a name (a non-empty str), not {name!r}")
    axes = _manual_axes()
    index = [jax.lax.axis_index(a) for a in axes]

    def recorder(label: str) -> Any:
        def record(value: Any, *coords: Any) -> None:
            with _recorder.lock:
                calls = _recorder.calls
                if calls is not None:
                    where = tuple(int(np.asarray(c)) for c in coords)
                    calls.append(ProbeCall(label, axes, where, np.asarray(value)))

        return record

    # A pytree is shown leaf by leaf: `name['w']`, `name[0]`.
    leaves = jax.tree_util.tree_flatten_with_path(x)[0]
    for path, leaf in leaves:
        jax.debug.callback(recorder(name + jax.tree_util.keystr(path)), leaf, *index)
    return x
