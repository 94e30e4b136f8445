"""shardcli: a command-line sharding playground for JAX, and its small Python surface.

    import shardcli
    shardcli.show(x)                                   # which device holds which block of x
    report = shardcli.inspect(step, x, w, mesh=mesh)   # what the compiler did with step(x, w)
    report                                             # renders in Jupyter; report.to_json()
    shardcli.probe(x, "name")                          # in your function: `shardcli run` shows x per device

Importing shardcli imports neither JAX nor NumPy: they load when a function is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["InspectReport", "ShardingPicture", "__version__", "inspect", "picture", "probe", "show"]

if TYPE_CHECKING:
    from shardcli.api import InspectReport, ShardingPicture


def show(x: Any, title: str | None = None) -> None:
    """Draw which device holds which block of `x` (a jax.Array), in a notebook or a terminal."""
    from shardcli.api import show as _show

    _show(x, title)


def picture(x: Any, title: str | None = None) -> ShardingPicture:
    """The picture `show` draws, as an object a notebook cell shows as its value."""
    from shardcli.api import picture as _picture

    return _picture(x, title)


def inspect(fn: Any, *args: Any, **kwargs: Any) -> InspectReport:
    """What the compiler makes of `fn(*args)`: see `shardcli.api.inspect` for the arguments."""
    from shardcli.api import inspect as _inspect

    return _inspect(fn, *args, **kwargs)


def probe(x: Any, name: str) -> Any:
    """Show `x` device by device under `shardcli run` (inside shard_map: each device's block); returns `x`."""
    from shardcli.program.probe import probe as _probe

    return _probe(x, name)


def __getattr__(name: str) -> Any:
    if name in ("InspectReport", "ShardingPicture"):
        from shardcli import api

        return getattr(api, name)
    raise AttributeError(f"module 'shardcli' has no attribute {name!r}")
