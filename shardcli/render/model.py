"""Rendering `shardcli model train` and `shardcli model restore`."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from shardcli.analysis.report import collectives_text
from shardcli.render import human, jsonout
from shardcli.render.console import format_seconds, make_console, prints_here, show_warnings
from shardcli.render.layout import DataTable
from shardcli.results import bodies
from shardcli.specs.model import ACTIVATION, LOGICAL_AXES, OUTPUT, spec_text
from shardcli.specs.runs import RunOptions
from shardcli.training.model.mlp import ModelResult


def _annotations_text(result: ModelResult) -> str:
    rules = result.annotations.rules
    if rules is None:
        return "mesh axes named directly (no --rules)"
    return "logical names, through --rules " + ", ".join(f"{k}={v}" for k, v in rules)


def model_json(result: ModelResult) -> dict[str, Any]:
    ann = result.annotations
    return jsonout.document(
        f"model {result.action}",
        result.session,
        {
            "model": bodies.MODEL(
                kind="mlp", formula="relu(x @ W1 + b1) @ W2", depth=result.depth, batch=result.batch
            ),
            "rules": None if ann.rules is None else dict(ann.rules),
            "activation_sharding": spec_text(ann.resolved(ACTIVATION)),
            "params": [
                bodies.MODEL_PARAM(
                    name=p.name,
                    shape=list(p.shape),
                    annotation=p.annotation,
                    resolved=p.expected,
                    sharding=p.actual,
                    ok=p.ok,
                    tiles=jsonout.tiles_json(p.picture.layout.tiles),
                )
                for p in result.params
            ],
            "state_arrays": result.state_arrays,
            "compile_s": result.compile_s,
            "compile_cached": result.compile_cached,
            "steps": [bodies.MODEL_STEP(step=s.step, loss=s.loss, seconds=s.seconds) for s in result.steps],
            "final_loss": result.final_loss,
            "output_sharding": result.output_spec,
            "collectives": {name: jsonout.hlo_json(ops) for name, ops in result.collectives.items()},
            "checkpoint": result.checkpoint,
            "saved_mesh": result.saved_mesh,
            "checks": jsonout.checks_json(result.checks),
            "ok": not result.failed,
        },
    )


def _params_table(result: ModelResult) -> Table:
    table = DataTable(box=None, header_style="bold")
    # Left out first where narrow: what the annotation resolves to, then the annotation and shape.
    for name, priority in (
        ("parameter", 0),
        ("shape", 1),
        ("annotation", 2),
        ("resolves to", 3),
        ("sharding", 0),
        ("", 0),
    ):
        table.add_column(name, priority=priority)
    for p in result.params:
        mark = Text("ok", style="green") if p.ok else Text("DIFFERS", style="bold red")
        table.add_row(p.name, "x".join(map(str, p.shape)), p.annotation, p.expected, p.actual, mark)
    return table


def _rules_table(result: ModelResult) -> Table:
    table = DataTable(box=None, header_style="bold")
    table.add_column("logical axis")
    table.add_column("mesh axis")
    given = dict(result.annotations.rules or ())
    for name in LOGICAL_AXES:
        table.add_row(name, "None (replicated)" if given.get(name) is None else str(given[name]))
    return table


def _steps_table(result: ModelResult) -> Table:
    table = DataTable(box=None, header_style="bold")
    for name in ("step", "loss", "time"):
        table.add_column(name, justify="right")
    for what, seconds in result.compile_s.items():
        cached = " (cache)" if result.compile_cached.get(what) else ""
        table.add_row(f"compile {what}", "", format_seconds(seconds) + cached, style="dim")
    for s in result.steps:
        table.add_row(str(s.step), f"{s.loss:.6g}", format_seconds(s.seconds))
    if result.final_loss is not None:
        table.add_row("after", f"{result.final_loss:.6g}", "")
    return table


def render_model(result: ModelResult, options: RunOptions) -> None:
    show_warnings(result.session.runtime)
    if not prints_here(options, result.session.runtime):
        return
    if options.format == "json":
        jsonout.write_json(model_json(result), options)
        return
    console = make_console(options)
    ann = result.annotations
    if not options.quiet:
        extra = {
            "model": f"relu(x @ W1 + b1) @ W2, depth {result.depth}, batch {result.batch} (Flax NNX, adam)",
            "annotations": _annotations_text(result),
        }
        if result.saved_mesh is not None:
            extra["saved on"] = result.saved_mesh
        console.print(human.header(result.session, extra, verbose=options.verbose))
        if ann.rules is not None:
            human.section(console, "rules: logical axis -> mesh axis", _rules_table(result))
        title = (
            "parameters, initialised sharded" if result.action == "train" else "parameters, restored sharded"
        )
        human.section(
            console, f"{title} ({result.state_arrays} arrays in the train state)", _params_table(result)
        )
        for p in result.params:
            human.section(
                console,
                f"{p.name}: global {p.picture.layout.shape}, {p.picture.spec}",
                human.sharding_picture(p.picture.layout),
            )
        human.section(
            console,
            "activations and output",
            Text(
                f"between the layers: constrained to {spec_text(ann.resolved(ACTIVATION))}\n"
                f"output: {result.output_spec}, as the compiler chose it "
                f"(expected {spec_text(ann.resolved(OUTPUT))}: batch rows, embed columns)"
            ),
        )
        human.section(
            console,
            "collectives the compiler inserted",
            Text("\n".join(f"{name}: {collectives_text(ops)}" for name, ops in result.collectives.items())),
        )
    if result.steps:
        human.section(
            console,
            "training (each step blocked until its loss is read; compile apart)",
            _steps_table(result),
        )
    if result.checkpoint is not None:
        verb = "saved" if result.action == "train" else "restored"
        human.section(
            console,
            f"checkpoint {verb}",
            Text("\n".join(f"{k}: {v}" for k, v in result.checkpoint.items())),
        )
    console.print()
    human.print_checks(console, result.checks)
