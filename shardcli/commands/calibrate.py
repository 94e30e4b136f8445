"""`shardcli calibrate`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from shardcli.commands import options as opt
from shardcli.errors import ExitCode

if TYPE_CHECKING:
    from shardcli.specs.runs import RunOptions


@opt.with_run_options(mode=False, compile_cache=False, processes=False)
def calibrate(
    mesh: opt.Mesh = "8",
    axes: opt.Axes = None,
    out: Annotated[
        str, typer.Option("--out", "-o", help="Where the profile (JSON) is written.")
    ] = "hardware-profile.json",
    quick: Annotated[
        bool,
        typer.Option("--quick", help="The smallest sizes and fewest runs, one collective (a smoke test)."),
    ] = False,
    *,
    options: RunOptions,
) -> None:
    """Measure this machine's devices into a hardware profile that --hardware FILE reads.

    GEMMs over a range of sizes and dtypes, a memory stream, each collective's bus bandwidth over
    each mesh axis, host-device copies, and the cost of a call and of a loop trip (on a GPU also of a
    kernel launch), each with how it was measured and its samples. Progress goes to stderr.

    Example: shardcli calibrate --mesh 8 --out cpu.json
    """
    from shardcli.hardware.profile import check_out_path, save_profile
    from shardcli.playground.calibrate import CalibrateRequest, run_calibrate
    from shardcli.render.calibrate import progress_lines, render_calibration
    from shardcli.specs.meshes import parse_mesh

    request = CalibrateRequest(parse_mesh(mesh, axes), options, quick=quick)
    check_out_path(out)
    profile = run_calibrate(request, progress_lines(options))
    save_profile(profile, out)
    render_calibration(profile, out, options)
    raise typer.Exit(ExitCode.OK)
