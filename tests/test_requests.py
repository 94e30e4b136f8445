"""Flags to requests without the CLI: the shared run options and the request builders.

The builders are pure (no JAX); the CLI tables in test_cli_foundation, test_collective and
test_matmul run the same checks through the app.
"""

from __future__ import annotations

import inspect

import pytest
import typer
from typer.testing import CliRunner

from shardcli.commands import options as opt
from shardcli.commands.requests.collective import (
    InputFlags,
    build_collective_requests,
    default_malloc,
    parse_collective_axes,
    parse_collective_names,
)
from shardcli.commands.requests.playground import build_matmul_request
from shardcli.commands.requests.training import build_pipeline_request
from shardcli.errors import ShardcliError
from shardcli.specs.meshes import MeshSpec
from shardcli.specs.runs import Format, Mode, Platform, ProcessTiming, RunOptions

MULTI_PROCESS = [
    "coordinator",
    "num_processes",
    "process_id",
    "distributed",
    "join_timeout",
    "coordinator_bind",
    "all_processes",
]


def _flags(**kwargs: object) -> list[str]:
    """The parameters Typer sees on a command decorated with these arguments."""

    @opt.with_run_options(**kwargs)  # type: ignore[arg-type]
    def command(shape: str = "8", *, options: RunOptions) -> None: ...

    return list(inspect.signature(command).parameters)


@pytest.mark.parametrize(
    ("kwargs", "shared"),
    [
        pytest.param(
            {},
            [
                "platform",
                "devices",
                "mode",
                "format",
                "no_color",
                "quiet",
                "verbose",
                "wide",
                "save",
                "no_compile_cache",
            ]
            + MULTI_PROCESS
            + ["process_timing"],
            id="everything",
        ),
        pytest.param(
            {"compile_cache": False, "process_timing": False},
            ["platform", "devices", "mode", "format", "no_color", "quiet", "verbose", "wide", "save"]
            + MULTI_PROCESS,
            id="mesh-shard",
        ),
        pytest.param(
            {"mode": False, "processes": False},
            [
                "platform",
                "devices",
                "format",
                "no_color",
                "quiet",
                "verbose",
                "wide",
                "save",
                "no_compile_cache",
            ],
            id="model-pipeline",
        ),
        pytest.param(
            {"mode": False, "devices": False, "compile_cache": False, "processes": False},
            ["format", "no_color", "quiet", "verbose", "wide", "save"],
            id="compare",
        ),
    ],
)
def test_run_options_follow_the_commands_own_flags(kwargs, shared):
    assert _flags(**kwargs) == ["shape", *shared]


def _app(**kwargs: object) -> tuple[typer.Typer, list[tuple[str, RunOptions]]]:
    """A one-command app that records what the decorated command was called with."""
    calls: list[tuple[str, RunOptions]] = []

    @opt.with_run_options(**kwargs)  # type: ignore[arg-type]
    def command(shape: str = "8", *, options: RunOptions) -> None:
        calls.append((shape, options))

    app = typer.Typer()
    app.command()(command)
    app.command("other")(lambda: None)  # two commands: `command` is a subcommand
    return app, calls


@pytest.mark.parametrize(
    ("kwargs", "args", "expected"),
    [
        pytest.param({}, [], RunOptions(compile_cache=True), id="defaults"),
        pytest.param(
            {"formats": ("table", "json", "csv"), "mode": False},
            ["--format", "csv", "--platform", "cpu", "--devices", "4", "-q", "--no-color"],
            RunOptions(
                platform=Platform.CPU,
                devices=4,
                format=Format.CSV,
                color=False,
                quiet=True,
                compile_cache=True,
            ),
            id="csv-no-mode",
        ),
        pytest.param(
            {},
            ["--mode", "explicit", "--no-compile-cache", "--process-timing", "avg", "--all-processes"],
            RunOptions(mode=Mode.EXPLICIT, process_timing=ProcessTiming.AVG, all_processes=True),
            id="mode-and-timing",
        ),
        pytest.param(
            {"compile_cache": False, "process_timing": False},
            [],
            RunOptions(compile_cache=False),
            id="no-compile-cache-flag-keeps-it-off",
        ),
    ],
)
def test_the_command_gets_its_flags_and_the_run_options(kwargs, args, expected):
    app, calls = _app(**kwargs)
    result = CliRunner().invoke(app, ["command", "--shape", "2x4", *args])
    assert result.exit_code == 0, result.output
    assert calls == [("2x4", expected)]


@pytest.mark.parametrize(
    ("kwargs", "args", "message"),
    [
        pytest.param(
            {}, ["--format", "csv"], "--format 'csv' is not valid; choose one of table, json", id="format"
        ),
        pytest.param({"mode": False}, ["--mode", "auto"], "No such option: --mode", id="no-mode"),
        pytest.param(
            {"processes": False},
            ["--num-processes", "2"],
            "No such option: --num-processes",
            id="no-processes",
        ),
    ],
)
def test_run_options_are_checked_before_the_command_runs(kwargs, args, message):
    app, calls = _app(**kwargs)
    result = CliRunner().invoke(app, ["command", *args])
    assert result.exit_code != 0
    assert message in str(result.exception) + result.output
    assert calls == []


def test_format_help_lists_the_commands_formats():
    params = inspect.signature(
        opt.with_run_options(("table", "json", "csv"))(lambda *, options: None)
    ).parameters
    assert params["format"].annotation.__metadata__[0].help == "table, json or csv."
    params = inspect.signature(opt.with_run_options()(lambda *, options: None)).parameters
    assert params["format"].annotation is opt.Format


MESH = MeshSpec(shape=(2, 4), axes=("data", "model"))


@pytest.mark.parametrize(
    ("text", "axes"),
    [
        pytest.param(None, ("data", "model"), id="default-every-axis"),
        pytest.param("model", ("model",), id="one"),
        pytest.param("model, data", ("model", "data"), id="two-in-order"),
    ],
)
def test_collective_axes(text, axes):
    assert parse_collective_axes(text, MESH) == axes


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("rows", "--axis 'rows' is not a mesh axis; the mesh axes are data, model", id="unknown"),
        pytest.param("data,data", "--axis 'data,data' names an axis twice", id="twice"),
    ],
)
def test_collective_axes_refused(text, message):
    with pytest.raises(ShardcliError) as error:
        parse_collective_axes(text, MESH)
    assert str(error.value) == message


def test_collective_names():
    assert parse_collective_names("psum, all_gather") == ["psum", "all_gather"]
    with pytest.raises(ShardcliError, match="names one twice"):
        parse_collective_names("psum,psum")


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param(
            {
                "name": "psum",
                "mesh": "2x4",
                "axes": "data,model",
                "axis": "model",
                "array": InputFlags(size="1K"),
            },
            [("psum", ("model",), frozenset(), (1024,), "reuse")],
            id="psum-size",
        ),
        pytest.param(
            {"name": "psum,all_gather", "mesh": "8", "tiled": False, "out_buffer": "fresh"},
            [
                ("psum", ("x",), frozenset(), None, "system"),
                ("all_gather", ("x",), {"tiled"}, None, "system"),
            ],
            id="knob-goes-to-its-collective",
        ),
        pytest.param(
            {
                "name": "ppermute",
                "mesh": "4",
                "perm": "0:1,1:0",
                "malloc": "system",
                "array": InputFlags(sizes="1K:4K"),
            },
            [("ppermute", ("x",), {"perm"}, (1024, 2048, 4096), "system")],
            id="perm-parsed-sweep",
        ),
    ],
)
def test_build_collective_requests(kwargs, expected):
    requests = build_collective_requests(**kwargs)
    got = [(r.collective, r.params.axes, r.set_params, r.sizes, r.options.malloc) for r in requests]
    assert got == expected
    assert requests[0].sweep == (kwargs.get("array", InputFlags()).sizes is not None)


def test_build_collective_requests_keeps_the_run_options():
    options = RunOptions(platform="cpu", format="json", quiet=True)
    [request] = build_collective_requests("psum", options=options)
    assert request.options == RunOptions(
        platform="cpu", format="json", quiet=True, malloc="reuse", malloc_why=None
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param(
            {"name": "psum", "placement": "in", "out_buffer": "fresh"},
            "--out-buffer is for out-of-place runs, and --placement in writes the result into the input; "
            "use --placement out or both",
            id="out-buffer-in-place",
        ),
        pytest.param(
            {"name": "psum", "malloc": "jemalloc"},
            "--malloc 'jemalloc' is not valid; choose one of reuse, system",
            id="malloc",
        ),
        pytest.param(
            {"name": "psum", "array": InputFlags(shape="8", size="1K")},
            "--shape and --size both set the input; give only one of them",
            id="two-inputs",
        ),
        pytest.param(
            {"name": "ppermute", "shift": 2, "perm": "0:1,1:0"},
            "--shift and --perm both set ppermute's pairs; give only one",
            id="shift-and-perm",
        ),
        pytest.param(
            {"name": "psum,pmax", "gather_dim": 0},
            "--gather-dim does not apply to psum, pmax; it is for all_gather",
            id="knob-fits-none",
        ),
        pytest.param(
            {"name": "psum", "plot_file": "out.png"},
            "--plot-file draws a sweep over sizes; give --sizes (such as 1K:64M)",
            id="plot-without-sizes",
        ),
        pytest.param(
            {"name": "psum", "iters": 0},
            "--iters 0 is not valid; give at least 1",
            id="core-check",
        ),
        pytest.param(
            {"name": "psum", "placement": "sideways"},
            "--placement 'sideways' is not valid; choose one of out, in, both",
            id="placement",
        ),
        pytest.param(
            {"name": "pmean", "placement": "in", "array": InputFlags(dtype="int32")},
            "--placement in needs pmean's result to fit its input buffer, but pmean of int32 gives "
            "float32, so the result cannot overwrite the input; use --placement out",
            id="pmean-int-in-place",
        ),
        pytest.param(
            {"name": "psum,all_gather", "show_values": True, "array": InputFlags(sizes="1K:2K")},
            "--show-values is for a single run; --sizes runs several sizes",
            id="checked-before-any-runs",
        ),
    ],
)
def test_build_collective_requests_refused(kwargs, message):
    if "plot_file" in kwargs:
        pytest.importorskip("matplotlib")
    with pytest.raises(ShardcliError) as error:
        build_collective_requests(**kwargs)
    assert str(error.value) == message


@pytest.mark.parametrize(
    ("malloc", "out_buffer", "platform", "chosen"),
    [
        pytest.param(None, "preallocated", "auto", ("reuse", None), id="reuse"),
        pytest.param("system", "preallocated", "auto", ("system", None), id="given"),
        pytest.param(None, "fresh", "cpu", ("system", "the default with --out-buffer fresh"), id="fresh"),
    ],
)
def test_default_malloc(malloc, out_buffer, platform, chosen):
    assert default_malloc(malloc, out_buffer, platform) == chosen


def test_build_matmul_request():
    options = RunOptions(format="csv")
    request = build_matmul_request(
        case="allreduce,collective", impl="all", dims="8,16,8", sizes="1:2", options=options
    )
    assert request.cases == ("allreduce", "collective")
    assert request.impls == ("manual", "auto", "explicit")
    assert request.dims == (8, 16, 8)
    assert request.scales == (1.0, 2.0)
    assert request.mesh == MeshSpec(shape=(2, 4), axes=("x", "y"))
    assert request.options is options


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param(
            {"case": "allreduce,allreduce"},
            "--case 'allreduce,allreduce' names 'allreduce' twice; give each once",
            id="case-twice",
        ),
        pytest.param(
            {"impl": "fast"},
            "--impl 'fast' is not valid; choose one of manual, auto, explicit or all",
            id="impl",
        ),
        pytest.param(
            {"plot_file": "out.png"},
            "--plot-file draws a sweep over sizes; give --sizes (such as 1:8)",
            id="plot-without-sizes",
        ),
    ],
)
def test_build_matmul_request_refused(kwargs, message):
    if "plot_file" in kwargs:
        pytest.importorskip("matplotlib")
    with pytest.raises(ShardcliError) as error:
        build_matmul_request(**kwargs)
    assert str(error.value) == message


def test_collective_requests_carry_the_closed_choices_as_enums():
    from shardcli.specs.runs import OutBuffer, Placement

    [request] = build_collective_requests("psum", placement="both", out_buffer="fresh")
    assert (request.placement, request.out_buffer) == (Placement.BOTH, OutBuffer.FRESH)
    assert (type(request.placement), type(request.out_buffer)) == (Placement, OutBuffer)


@pytest.mark.parametrize(
    ("kwargs", "mesh", "impls"),
    [
        pytest.param({}, MeshSpec(shape=(4, 2), axes=("stage", "model")), ("mpmd",), id="defaults"),
        pytest.param({"mesh": "8"}, MeshSpec(shape=(8,), axes=("stage",)), ("mpmd",), id="1d-stage"),
        pytest.param(
            {"mesh": "2x2x2"}, MeshSpec(shape=(2, 2, 2), axes=("x", "y", "z")), ("mpmd",), id="3d-usual-names"
        ),
        pytest.param(
            {"mesh": "2x4", "axes": "pp,tp", "impl": "spmd"},
            MeshSpec(shape=(2, 4), axes=("pp", "tp")),
            ("spmd",),
            id="axes-given",
        ),
        pytest.param(
            {"impl": "both"}, MeshSpec(shape=(4, 2), axes=("stage", "model")), ("mpmd", "spmd"), id="both"
        ),
    ],
)
def test_build_pipeline_request(kwargs, mesh, impls):
    options = RunOptions(format="json")
    request = build_pipeline_request(microbatches=4, stages=2, forward_only=True, options=options, **kwargs)
    assert (request.mesh, request.impls) == (mesh, impls)
    assert (request.microbatches, request.stages, request.forward_only) == (4, 2, True)
    assert (request.schedule, request.layers, request.width, request.batch) == ("1f1b", 8, 256, 32)
    assert request.options is options


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"impl": "x"}, "--impl 'x' is not valid; choose one of mpmd, spmd, both", id="impl"),
        pytest.param(
            {"mesh": "4x2", "axes": "a"},
            "--axes 'a' names 1 axes but the mesh has 2; give 2 comma-separated names, such as x,y",
            id="axes",
        ),
    ],
)
def test_build_pipeline_request_refused(kwargs, message):
    with pytest.raises(ShardcliError) as error:
        build_pipeline_request(**kwargs)
    assert str(error.value) == message


def test_launch_runs_the_commands_given_the_multi_process_options(monkeypatch):
    from shardcli.cli import app
    from shardcli.commands.launch import launchable_commands

    def commands() -> dict:
        return {c.name: c.callback for c in app.registered_commands if c.name is not None}

    names = launchable_commands(commands())
    assert {"mesh", "shard", "collective", "matmul", "einsum", "reshard", "recipe", "pipeline"} <= set(names)
    assert not {"run", "compare", "launch"} & set(names)

    @opt.with_run_options()
    def extra(*, options: RunOptions) -> None: ...

    @opt.with_run_options(processes=False)
    def single(*, options: RunOptions) -> None: ...

    monkeypatch.setattr(app, "registered_commands", list(app.registered_commands))
    app.command("extra")(extra)
    app.command("single")(single)
    assert launchable_commands(commands()) == (*names, "extra")
