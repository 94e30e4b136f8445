"""`shardcli model train` and `shardcli model restore`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from shardcli.commands import options as opt
from shardcli.errors import ExitCode

if TYPE_CHECKING:
    from shardcli.specs.meshes import MeshSpec
    from shardcli.specs.runs import RunOptions
    from shardcli.training.model.mlp import ModelResult

app = typer.Typer(
    name="model",
    no_args_is_help=True,
    help="A sharded Flax NNX model end to end: annotate, initialise sharded, train, checkpoint, "
    "restore (needs the model extra: pip install 'shardcli\\[model]').",
)

Mesh = Annotated[str, typer.Option("--mesh", "-m", help="Mesh shape: 2x4, 4x2, 8 (with --rules).")]
Axes = Annotated[
    str | None,
    typer.Option("--axes", "-a", help="Axis names, one per mesh dim. \\[default: data,model for a 2-D mesh]"),
]
Rules = Annotated[
    str | None,
    typer.Option(
        "--rules",
        help="Logical axis names on the model, mapped to mesh axes: batch=data,hidden=model,embed=None. "
        "A name left out is replicated. \\[default: the kernels annotated with mesh axes directly]",
    ),
]


def _mesh(mesh: str, axes: str | None) -> MeshSpec:
    """--mesh with --axes, or the model's default axis names for that many dims."""
    from shardcli.specs.meshes import parse_mesh
    from shardcli.specs.model import default_axes  # not at import: --help is light

    return parse_mesh(mesh, axes if axes is not None else default_axes(mesh))


def _report(result: ModelResult, options: RunOptions) -> NoReturn:
    """Print the result and exit: 1 when a check failed, else 0."""
    from shardcli.render.model import render_model

    render_model(result, options)
    raise typer.Exit(ExitCode.WRONG_RESULT if result.failed else ExitCode.OK)


@app.command("train", short_help="Initialise sharded, train with adam, verify; --checkpoint saves it.")
@opt.with_run_options(mode=False, processes=False)
def train(
    depth: Annotated[
        int, typer.Option("--depth", help="Width of the inputs, hidden layer and outputs.")
    ] = 1024,
    batch: Annotated[int, typer.Option("--batch", help="Rows of the regression batch.")] = 8,
    steps: Annotated[int, typer.Option("--steps", help="Adam steps (at least 2).")] = 5,
    lr: Annotated[float, typer.Option("--lr", help="Adam's learning rate.")] = 5e-3,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the initial parameters and the data.")] = 0,
    rules: Rules = None,
    checkpoint: Annotated[
        str | None,
        typer.Option("--checkpoint", help="Save the trained state here with orbax (a new or empty folder)."),
    ] = None,
    mesh: Mesh = "2x4",
    axes: Axes = None,
    *,
    options: RunOptions,
) -> None:
    """Initialise a two-layer MLP sharded from its annotations, train it with adam, and check the
    shardings, the falling loss and the output against NumPy; optionally save it.

    Example: shardcli model train --mesh 2x4 --axes data,model --depth 1024 --batch 8 --steps 5
    """
    from shardcli.specs.model import TrainRequest, require_model_extra, validate_train

    require_model_extra()
    request = TrainRequest(
        mesh=_mesh(mesh, axes),
        depth=depth,
        batch=batch,
        steps=steps,
        learning_rate=lr,
        rules=rules,
        checkpoint=checkpoint,
        seed=seed,
        options=options,
    )
    validate_train(request)  # bad input answers before JAX and Flax load
    from shardcli.runtime.devices import import_jax_quietly  # not at import: --help starts nothing

    import_jax_quietly()
    from shardcli.training.model.train import run_train

    _report(run_train(request), options)


@app.command("restore", short_help="Restore a checkpoint into the annotated shardings, on any mesh; verify.")
@opt.with_run_options(mode=False, processes=False)
def restore(
    folder: Annotated[str, typer.Argument(help="The folder `shardcli model train --checkpoint` wrote.")],
    depth: Annotated[
        int | None,
        typer.Option("--depth", help="Must match the checkpoint's. \\[default: the checkpoint's]"),
    ] = None,
    rules: Rules = None,
    mesh: Mesh = "2x4",
    axes: Axes = None,
    *,
    options: RunOptions,
) -> None:
    """Restore a checkpoint straight into the annotated shardings on this mesh (any shape the model
    fits), from abstract shapes only; check the values equal the saved ones. Writes nothing.

    Example: shardcli model restore ckpt --mesh 4x2 --axes data,model
    """
    from shardcli.specs.model import RestoreRequest, require_model_extra, validate_restore

    require_model_extra()
    request = RestoreRequest(
        folder=folder,
        mesh=_mesh(mesh, axes),
        depth=depth,
        rules=rules,
        options=options,
    )
    validate_restore(request)  # bad input answers before JAX and Flax load
    from shardcli.runtime.devices import import_jax_quietly  # not at import: --help starts nothing

    import_jax_quietly()
    from shardcli.training.model.checkpoint import run_restore

    _report(run_restore(request), options)
