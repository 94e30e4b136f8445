"""Rendering `shardcli mesh`."""

from __future__ import annotations

from shardcli.core.session import Session
from shardcli.render import human, jsonout
from shardcli.render.console import make_console, prints_here, show_warnings
from shardcli.specs import RunOptions


def render_mesh(session: Session, options: RunOptions) -> None:
    show_warnings(session.runtime)
    if not prints_here(options, session.runtime):
        return
    if options.format == "json":
        jsonout.write_json(jsonout.document("mesh", session, {}), options)
        return
    console = make_console(options)
    if not options.quiet:
        console.print(human.header(session))
        console.print()
    console.print(human.mesh_grids(session.layout))
