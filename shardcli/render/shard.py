"""Rendering `shardcli shard`."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from shardcli.playground.shard import ShardResult
from shardcli.render import human, jsonout
from shardcli.render.console import make_console, prints_here, show_warnings
from shardcli.render.layout import DataTable
from shardcli.results import bodies
from shardcli.specs.runs import RunOptions
from shardcli.tile_math import format_index


def shard_json(result: ShardResult) -> dict:
    req = result.request
    layout = result.layout
    return jsonout.document(
        "shard",
        result.session,
        {
            "array": bodies.SHARD_ARRAY(
                shape=list(req.array.shape),
                dtype=req.array.dtype.name,
                init=req.array.init if req.array.values is None else "values",
                nbytes=req.array.nbytes,
                spec=jsonout.spec_json(req.sharding.entries),
                jax_type=result.jax_type,
                values=jsonout.values_json(result.global_values),
            ),
            "tiles": jsonout.tiles_json(layout.tiles),
            "replication": layout.replication,
            "shards": [
                bodies.SHARD(
                    device_id=s.device_id,
                    coords=dict(zip(result.session.layout.axes, s.coords, strict=True)),
                    process_index=s.process_index,
                    index=jsonout.index_json(s.index),
                    local_shape=list(s.local_shape),
                    nbytes=s.nbytes,
                    values=jsonout.values_json(s.values),
                )
                for s in result.shards
            ],
            "verified": bodies.VERIFIED(ok=result.ok, wrong_devices=list(result.wrong_devices)),
        },
    )


def shard_table(result: ShardResult) -> Table:
    axes = result.session.layout.axes
    show_values = any(s.values is not None for s in result.shards)
    table = DataTable(box=None, header_style="bold")
    # Left out first where narrow: proc, bytes, local shape, mesh coords; the values never.
    priorities = {"mesh coords": 1, "local shape": 2, "bytes": 3, "proc": 4}
    for name in ("device", "mesh coords", "proc", "index", "local shape", "bytes"):
        table.add_column(
            name, justify="right" if name in ("bytes", "proc") else "left", priority=priorities.get(name, 0)
        )
    if show_values:
        table.add_column("local values")
    for s in result.shards:
        row: list[str | Text] = [
            str(s.device_id),
            human.coords_text(axes, s.coords),
            str(s.process_index),
            format_index(s.index),
            "x".join(map(str, s.local_shape)),
            f"{s.nbytes:,}",
        ]
        if show_values:  # every shard holds its values, or none does
            row.append(
                human.format_values(s.values, human.CELL_VALUES_WIDTH) if s.values is not None else "-"
            )
        table.add_row(*row)
    return table


def render_shard(result: ShardResult, options: RunOptions) -> None:
    show_warnings(result.session.runtime)
    if not prints_here(options, result.session.runtime):
        return
    if options.format == "json":
        jsonout.write_json(shard_json(result), options)
        return
    req = result.request
    console = make_console(options)
    if not options.quiet:
        shape = "x".join(map(str, req.array.shape))
        console.print(
            human.header(
                result.session,
                {
                    "array": f"{shape} {req.array.dtype.name}, {req.array.source}",
                    "spec": req.sharding.describe(),
                    "type": result.jax_type,
                },
                details={"sharding": str(result.jax_sharding.spec)},
                verbose=options.verbose,
            )
        )
        picture = human.jax_picture(req.array.shape, result.jax_sharding)
        if picture is not None:
            human.section(console, "jax.debug.visualize_sharding", picture)
        else:
            console.print()
            console.print(
                Text(
                    "jax.debug.visualize_sharding draws 1-D and 2-D arrays only; "
                    "shardcli's picture below handles this rank.",
                    style="dim",
                )
            )
        human.section(
            console,
            "tiles (device ids and global index ranges)",
            human.sharding_picture(result.layout, req.view_dims),
        )
        if result.global_values is not None:
            human.section(console, "global array", human.ValuesText(result.global_values))
    human.section(console, "per-device shards", shard_table(result))
    if result.ok:
        console.print(
            Text(
                "\nverified: every device holds its NumPy slice exactly"
                + human.checked_where(result.session),
                style="green",
            )
        )
    else:
        ids = ", ".join(map(str, result.wrong_devices))
        console.print(Text(f"\nWRONG: devices {ids} do not hold their NumPy slice", style="bold red"))
