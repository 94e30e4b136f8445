"""The Python surface for notebooks and scripts: `show` and `inspect`, re-exported by `shardcli`.

The objects returned are the core's frozen results, drawn by the render layer: rich renders them
in a terminal and, through its Jupyter support, as HTML in a notebook.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.jupyter import JupyterMixin

from shardcli.errors import ShardcliError
from shardcli.program.inspect import InspectResult

TEXT_WIDTH = 100  # print(report) and str(report): the text report at this width, without colour


def _as_text(renderable: Any) -> str:
    """What rich draws for `renderable`, as plain text (the terminal report, no escape codes)."""
    import io

    console = Console(file=io.StringIO(), width=TEXT_WIDTH, color_system=None, highlight=False)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]


@dataclass(frozen=True, repr=False)
class InspectReport(JupyterMixin):
    """What `shardcli.inspect` returns: the report `shardcli inspect` prints, as an object.

    Shown as the last value of a notebook cell it renders itself; `to_json()` gives the document
    `shardcli inspect --format json` writes, and `result` holds every figure.
    """

    result: InspectResult

    @property
    def findings(self) -> tuple[str, ...]:
        """The classic mistakes found, one sentence each (empty for a clean program)."""
        return tuple(f.text for f in self.result.findings)

    @property
    def collectives(self) -> tuple[Any, ...]:
        """Every collective the compiler inserted (none where a target's compiler refused it)."""
        return self.result.analysis.collectives if self.result.analysis is not None else ()

    @property
    def memory(self) -> Any:
        """Per-device memory (`MemoryUse`); None where there is no compiled program."""
        return self.result.analysis.memory if self.result.analysis is not None else None

    def to_dict(self) -> dict[str, Any]:
        from shardcli.render.inspect_json import inspect_json

        return inspect_json(self.result)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from shardcli.render.inspect import report_renderable

        yield report_renderable(self.result)

    def __str__(self) -> str:
        """The report as `shardcli inspect` prints it, in plain text: `print(report)`."""
        return _as_text(self)

    def __repr__(self) -> str:
        r = self.result
        parts = [f"{len(r.arguments)} argument(s)", f"{len(self.collectives)} collective(s)"]
        if self.memory is not None and getattr(self.memory, "total_bytes", None) is not None:
            from shardcli.specs.values import format_bytes

            parts.append(f"{format_bytes(self.memory.total_bytes)} per device")
        if r.findings:
            parts.append(f"{len(r.findings)} finding(s)")
        return f"<InspectReport {r.target}: {', '.join(parts)}>"


@dataclass(frozen=True, repr=False)
class ShardingPicture(JupyterMixin):
    """The N-D tile picture of one array: which device holds which block."""

    title: str
    layout: Any

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.text import Text

        from shardcli.render.human import sharding_picture

        yield Text(self.title, style="bold")
        yield sharding_picture(self.layout)

    def __str__(self) -> str:
        return _as_text(self)

    def __repr__(self) -> str:
        return f"<ShardingPicture {self.title}>"


def picture(x: Any, title: str | None = None) -> ShardingPicture:
    """The picture `show` draws, as an object (a notebook cell shows it as its value)."""
    from shardcli.program.argument_facts import fact_of

    if getattr(x, "sharding", None) is None:
        raise ShardcliError(
            f"shardcli.show needs a jax.Array (or a ShapeDtypeStruct with a sharding), not {type(x).__name__}"
        )
    fact = fact_of(title or "array", x)
    head = title or f"{fact.dtype}{list(fact.shape)}"
    return ShardingPicture(
        title=f"{head}: spec {fact.spec}, {fact.layout.replication} cop(ies) of each tile", layout=fact.layout
    )


def show(x: Any, title: str | None = None) -> None:
    """Draw which device holds which block of `x` (a jax.Array), in a notebook or a terminal."""
    Console().print(picture(x, title))


def _mesh_of(args: Sequence[Any]) -> Any:
    import jax

    for leaf in jax.tree_util.tree_leaves(args):
        mesh = getattr(getattr(leaf, "sharding", None), "mesh", None)
        if mesh is not None and hasattr(mesh, "devices"):
            return mesh
    raise ShardcliError("shardcli.inspect found no mesh: give mesh= or arguments with NamedShardings")


def inspect(
    fn: Callable[..., Any],
    *args: Any,
    mesh: Any = None,
    outs: Sequence[Any] = (),
    peak_tflops: float | None = None,
    link_gbps: float | None = None,
    run: bool = False,
) -> InspectReport:
    """What the compiler makes of `fn(*args)`, compiled from the arguments' shapes and shardings.

    Args:
        fn: a function or a jitted one.
        args: its positional arguments: arrays, or pytrees of `jax.ShapeDtypeStruct` with shardings
            (nothing of their size is allocated).
        mesh: the mesh; default: the one the arguments' shardings name.
        outs: the PartitionSpec you expect for each result (named if it comes out otherwise).
        peak_tflops, link_gbps: the cost model's figures (default: the device table).
        run: also run it on generated inputs and time it.

    Returns:
        The report: rendered as the value of a notebook cell; `.to_json()` for scripts.
    """
    from shardcli.program.inspect import inspect_program
    from shardcli.runtime.mesh import entries_of_spec
    from shardcli.runtime.session import session_of_mesh
    from shardcli.specs.meshes import ShardingSpec

    session = session_of_mesh(mesh if mesh is not None else _mesh_of(args))
    specs = tuple(ShardingSpec(entries_of_spec(spec, len(tuple(spec)))) for spec in outs)
    name = getattr(fn, "__name__", None) or type(fn).__name__
    result = inspect_program(
        session,
        name,
        fn,
        tuple(args),
        outs=specs,
        peak_tflops=peak_tflops,
        link_gbps=link_gbps,
        run=run,
        fixes=True,
    )
    return InspectReport(result)
