"""Rendering `shardcli recipe`: every recipe's sections and checks, drawn the same way."""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.text import Text

from shardcli.analysis.report import Picture, Section, TableSection, TextSection
from shardcli.playground.recipe.cases import RECIPES
from shardcli.playground.recipe.run import RecipeResult
from shardcli.render import human, jsonout
from shardcli.render.console import make_console, prints_here, show_warnings
from shardcli.render.layout import DataTable
from shardcli.results import bodies
from shardcli.specs.runs import RunOptions


def _cell_text(value: Any) -> str | Text:
    if isinstance(value, np.ndarray):
        return human.format_values(value)
    return str(value)


def _cell_json(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return jsonout.values_json(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def section_json(section: Section) -> dict[str, Any]:
    if isinstance(section, Picture):
        return bodies.SHARDING_SECTION(
            kind="sharding",
            title=section.title,
            shape=list(section.layout.shape),
            spec=section.spec,
            tiles=jsonout.tiles_json(section.layout.tiles),
        )
    if isinstance(section, TableSection):
        return bodies.TABLE_SECTION(
            kind="table",
            title=section.title,
            columns=list(section.columns),
            rows=[[_cell_json(v) for v in row] for row in section.rows],
        )
    return bodies.TEXT_SECTION(kind="text", title=section.title, lines=list(section.lines))


def recipe_json(result: RecipeResult) -> dict[str, Any]:
    r = result.recipe
    return jsonout.document(
        "recipe",
        result.session,
        {
            "recipe": bodies.RECIPE(name=r.name, summary=r.summary, default=r.default),
            "sections": [section_json(s) for s in result.sections],
            "checks": jsonout.checks_json(result.checks),
            "ok": not result.failed,
        },
    )


def _section_body(section: Section) -> Any:
    if isinstance(section, Picture):
        return human.sharding_picture(section.layout)
    if isinstance(section, TableSection):
        table = DataTable(box=None, header_style="bold")
        for name in section.columns:
            table.add_column(name)
        for row in section.rows:
            table.add_row(*(_cell_text(v) for v in row))
        return table
    assert isinstance(section, TextSection)
    return Text("\n".join(section.lines))


def _title(section: Section) -> str:
    if isinstance(section, Picture):
        return f"{section.title}: global {section.layout.shape}, {section.spec}"
    return section.title


def render_recipe(result: RecipeResult, options: RunOptions) -> None:
    show_warnings(result.session.runtime)
    if not prints_here(options, result.session.runtime):
        return
    if options.format == "json":
        jsonout.write_json(recipe_json(result), options)
        return
    console = make_console(options)
    r = result.recipe
    if not options.quiet:
        console.print(
            human.header(result.session, {"recipe": f"{r.name}: {r.summary}"}, verbose=options.verbose)
        )
        for section in result.sections:
            human.section(console, _title(section), _section_body(section))
        console.print()
    human.print_checks(console, result.checks, human.checked_where(result.session))


def recipe_list_json() -> dict[str, Any]:
    return bodies.RECIPE_LIST(
        recipes=[
            bodies.RECIPE_ENTRY(name=r.name, summary=r.summary, default=r.default, needs=r.needs)
            for r in RECIPES.values()
        ]
    )


def render_recipe_list(options: RunOptions) -> None:
    if options.format == "json":
        jsonout.write_json(recipe_list_json(), options)
        return
    table = DataTable(box=None, header_style="bold")
    for name in ("recipe", "default mesh", "what it shows"):
        table.add_column(name, prose=name == "what it shows")
    for r in RECIPES.values():
        table.add_row(r.name, r.default, r.summary)
    make_console(options).print(table)
