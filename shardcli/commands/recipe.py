"""`shardcli recipe`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from shardcli.commands import options as opt
from shardcli.errors import ExitCode
from shardcli.playground.recipe.cases import RECIPES, get_recipe

if TYPE_CHECKING:
    from shardcli.specs.runs import RunOptions

LIST = "list"


def _doc() -> str:
    lines = "\n\n".join(f"[bold]{r.name}[/bold] ({r.default}): {r.summary}" for r in RECIPES.values())
    return (
        "Run one of the classic sharding lessons, print what a tutorial would show, and verify it "
        f"against NumPy. `shardcli recipe list` lists them.\n\n{lines}\n\n"
        "Example: shardcli recipe three-ways --mesh 2x4 --axes data,model"
    )


@opt.with_run_options(mode=False, process_timing=False)
def recipe(
    name: Annotated[str, typer.Argument(help="The recipe, or list: " + ", ".join(RECIPES) + ".")],
    mesh: Annotated[
        str | None,
        typer.Option("--mesh", "-m", help="Mesh shape: 8, 2x4, 2x2x2. \\[default: the recipe's own]"),
    ] = None,
    axes: opt.Axes = None,
    steps: Annotated[
        int | None,
        typer.Option("--steps", help="pipeline-ring: how many ring steps. \\[default: the ring's length]"),
    ] = None,
    shape: Annotated[
        str | None,
        typer.Option(
            "--shape", "-s", help="The recipe's input shape (elementwise, reduce, pipeline-ring): 4x8."
        ),
    ] = None,
    init: Annotated[
        str | None,
        typer.Option(
            "--init",
            help="Fill the recipe's input (elementwise, reduce, pipeline-ring, sharded-mac): arange, ones, "
            "zeros, random or normal. \\[default: the recipe's own values]",
        ),
    ] = None,
    *,
    options: RunOptions,
) -> None:
    if name == LIST:
        from shardcli.render.recipe import render_recipe_list

        render_recipe_list(options)
        raise typer.Exit(ExitCode.OK)
    from shardcli.specs.meshes import parse_mesh
    from shardcli.specs.values import parse_init, parse_shape

    chosen = get_recipe(name)
    if mesh is None and axes is None:
        mesh_spec = parse_mesh(chosen.default_mesh, chosen.default_axes)
    else:
        mesh_spec = parse_mesh(mesh or chosen.default_mesh, axes)

    from shardcli.playground.recipe.run import RecipeRequest, run_recipe
    from shardcli.render.recipe import render_recipe

    request = RecipeRequest(
        name=name,
        mesh=mesh_spec,
        options=options,
        steps=steps,
        shape=parse_shape(shape) if shape is not None else None,
        init=parse_init(init) if init is not None else None,
    )
    result = run_recipe(request)
    render_recipe(result, options)
    raise typer.Exit(ExitCode.WRONG_RESULT if result.failed else ExitCode.OK)


recipe.__doc__ = _doc()
