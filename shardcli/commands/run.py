"""`shardcli run`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from shardcli.commands import options as opt
from shardcli.errors import ExitCode

if TYPE_CHECKING:
    from shardcli.specs.runs import RunOptions

Program = Annotated[
    str,
    typer.Argument(
        help="FILE.py:FUNCTION or package.module:FUNCTION: the function to run (jitted or not).",
        show_default=False,
    ),
]
Arg = Annotated[
    list[str] | None,
    typer.Option(
        "--arg",
        help="One per positional argument, in order: DTYPE[SHAPE]@SPEC=VALUES, e.g. 'f32[32]@x=arange' "
        "(VALUES: arange, ones, zeros, random, normal or a .npy file; left out: --init).",
        show_default=False,
    ),
]
Inputs = Annotated[
    str | None,
    typer.Option(
        "--inputs",
        help="FILE.py:NAME: NAME(mesh) returns the tuple of arguments: arrays (used as they are) or "
        "jax.ShapeDtypeStruct with shardings (filled with --init).",
    ),
]
Init = Annotated[
    str,
    typer.Option(
        "--init", help="What fills an argument given without =VALUES: arange, ones, zeros, random or normal."
    ),
]
ShowValues = Annotated[
    bool | None,
    typer.Option(
        "--show-values/--no-show-values",
        help="Show every array's values. \\[default: arrays of up to 256 elements]",
        show_default=False,
    ),
]
Mesh = Annotated[str, typer.Option("--mesh", "-m", help="Mesh shape: 8, 2x4 or 2x2x2.")]


@opt.with_run_options(formats=("table", "json"), processes=False, compile_cache=False)
def run(
    target: Program,
    arg: Arg = None,
    inputs: Inputs = None,
    init: Init = "arange",
    show_values: ShowValues = None,
    mesh: Mesh = "8",
    axes: opt.Axes = None,
    *,
    options: RunOptions,
) -> None:
    """Run your own function on concrete inputs and show every device's block of each input and
    result (BEFORE and AFTER, as collective shows them), the values `shardcli.probe(x, "name")`
    saw inside it (inside shard_map: per device, e.g. the per-shard sums before a psum), and the
    global result; then run the same function on one device and compare (exit 1 if they differ).

    run imports and runs the named file as `python FILE.py` would: only run code you trust.

    Example: shardcli run examples/lessons.py:sum_then_psum --mesh 8 --axes x --arg 'i32[32]@x=arange'
    """
    from shardcli.program.run_request import RunRequest, check_init, parse_run_arg
    from shardcli.specs.meshes import parse_mesh

    mesh_spec = parse_mesh(mesh, axes)
    request = RunRequest(
        target=target,
        args=tuple(parse_run_arg(a, mesh_spec) for a in arg or []),
        inputs=inputs,
        mesh=mesh_spec,
        init=check_init(init),
        show_values=show_values,
        options=options,
    )
    from shardcli.runtime.devices import import_jax_quietly

    import_jax_quietly()  # the core's imports may bring JAX: before them, as before the user's file
    from shardcli.program.run import run_function
    from shardcli.render.run import render_run

    result = run_function(request)
    render_run(result, options)
    raise typer.Exit(ExitCode.WRONG_RESULT if result.wrong else ExitCode.OK)
