"""Typer option declarations shared by every command that runs on devices."""

from __future__ import annotations

from typing import Annotated

import typer

from shardcli.specs import FORMATS, MODES, PLATFORMS, RunOptions, parse_choice

Mesh = Annotated[str, typer.Option("--mesh", "-m", help="Mesh shape: 8, 2x4 or 2x2x2 ('x'-separated sizes).")]
Axes = Annotated[
    str | None,
    typer.Option("--axes", "-a", help="Comma-separated axis names, one per mesh dim. \\[default: x,y,z,w]"),
]
Platform = Annotated[
    str,
    typer.Option(
        "--platform",
        help="auto, cpu, gpu or tpu. cpu (or auto without enough accelerators) fakes the devices.",
    ),
]
Devices = Annotated[
    int | None,
    typer.Option(
        "--devices",
        help="Devices the process starts with (on CPU: how many to fake). \\[default: the mesh size]",
    ),
]
Mode = Annotated[
    str,
    typer.Option("--mode", help="Mesh axis types for automatic sharding: auto or explicit."),
]
Dtype = Annotated[str, typer.Option("--dtype", help="float32, bfloat16, int32, ...")]
Init = Annotated[str, typer.Option("--init", help="arange, ones, zeros or random.")]
Format = Annotated[str, typer.Option("--format", "-f", help="table (for people) or json (for scripts).")]
NoColor = Annotated[bool, typer.Option("--no-color", help="Plain text; NO_COLOR is honoured too.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Only the results: no header, no pictures.")]


def run_options(
    platform: str,
    devices: int | None,
    mode: str,
    format: str,
    no_color: bool,
    quiet: bool,
    formats: tuple[str, ...] = FORMATS,
) -> RunOptions:
    """Validate the shared options into a RunOptions."""
    return RunOptions(
        platform=parse_choice(platform, "--platform", PLATFORMS),
        devices=devices,
        mode=parse_choice(mode, "--mode", MODES),
        format=parse_choice(format, "--format", formats),
        color=not no_color,
        quiet=quiet,
    )
