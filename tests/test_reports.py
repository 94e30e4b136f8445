"""Reports: the latency-bandwidth fit, terminal charts, several collectives, plot files, --save."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from test_cli_foundation import assert_one_line_error, has_color

from shardcli.playground.fit import fit_latency_bandwidth
from shardcli.render.plot import CURVE, Series, text_chart

# Compiles, processes or whole programs: left out of the quick subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

SWEEP = ("--mesh", "4", "--sizes", "1K:64K:x4", "--iters", "3", "--warmup", "1")


# --- the fit --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("alpha", "beta"), [(20e-6, 2e9), (1e-3, 5e8), (0.0, 1e10)])
def test_fit_recovers_alpha_and_beta_of_exact_data(alpha, beta):
    sizes = [1024 * 4**k for k in range(7)]
    fit = fit_latency_bandwidth(sizes, [alpha + s / beta for s in sizes])
    assert fit is not None and fit.points == 7
    assert fit.alpha_s == pytest.approx(alpha, abs=1e-12)
    assert fit.beta_bytes_per_s == pytest.approx(beta, rel=1e-9)
    assert fit.r2 == pytest.approx(1.0) and fit.max_rel_residual < 1e-9


def test_fit_of_noisy_data_reports_its_quality():
    rng = np.random.default_rng(0)
    sizes = np.array([1024 * 2**k for k in range(12)], dtype=float)
    times = (50e-6 + sizes / 1e9) * rng.uniform(0.8, 1.2, sizes.size)
    fit = fit_latency_bandwidth(sizes, times)
    assert 30e-6 < fit.alpha_s < 80e-6 and 0.7e9 < fit.beta_bytes_per_s < 1.4e9
    assert 0.9 < fit.r2 < 1.0 and 0 < fit.max_rel_residual <= 0.5


@pytest.mark.parametrize(
    ("sizes", "times", "expected"),
    [
        pytest.param([1024], [1e-3], None, id="one-size"),
        pytest.param([1024, 1024], [1e-3, 2e-3], None, id="same-size"),
    ],
)
def test_fit_needs_two_sizes(sizes, times, expected):
    assert fit_latency_bandwidth(sizes, times) is expected


def test_fit_of_flat_times_has_no_bandwidth_term():
    fit = fit_latency_bandwidth([1024, 4096, 16384], [2e-3, 1.9e-3, 1.8e-3])
    assert fit.beta_bytes_per_s is None and fit.alpha_s == pytest.approx(1.9e-3, rel=0.06)


# --- the terminal chart ---------------------------------------------------------------------------


def test_chart_places_points_by_log2_size_and_value():
    chart = text_chart([Series("a", ((1024, 0.0), (1024 * 1024, 2.0)))], y_label="busbw", width=21, height=5)
    lines = chart.plain.splitlines()
    grid = [line.split("│" if "│" in line else "┤", 1)[1] for line in lines[1:6]]
    assert grid[-1][0] == "o" and grid[0][20] == "o"  # (1K, 0) bottom left; (1M, 2) top right
    assert "1K" in lines[7] and "1M" in lines[7]
    assert lines[-1].strip() == "o a"


def test_chart_draws_the_model_under_the_points_and_one_marker_per_series():
    chart = text_chart(
        [
            Series("psum", ((1024, 1.0), (4096, 2.0)), curve=lambda s: s / 4096 * 2),
            Series("all_gather", ((1024, 0.5), (4096, 1.5))),
        ],
        y_label="y",
    )
    text = chart.plain
    assert CURVE in text and "o psum" in text and "x all_gather" in text
    assert text.count("o") >= 2 and text.count("x") >= 2


def test_chart_log_axis_has_ticks_in_a_narrow_range():
    chart = text_chart([Series("t", ((1024, 300.0), (8192, 900.0)))], y_label="us", log_y=True, height=14)
    grid = chart.plain.splitlines()[1:15]  # the 14 rows between the y label and the x axis
    assert grid[0].rstrip().endswith("o") and grid[-1].split("│", 1)[1].startswith("o")  # 900 top, 300 bottom
    ticks = [(r, line.split("┤", 1)[0].strip()) for r, line in enumerate(grid) if "┤" in line]
    # on a log axis 500 sits log(900/500) / log(900/300) of the way down: row 7 (linear: row 9)
    assert round(math.log10(900 / 500) / math.log10(900 / 300) * 13) == 7
    assert ticks == [(7, "500")]


# --- collective sweeps: fit, charts, several collectives ------------------------------------------


def test_sweep_shows_charts_and_the_fit(cli):
    result = cli(["collective", "psum", *SWEEP, "--no-color"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    for title in ("busbw against size", "time against size (log-log)"):
        assert title in out
    assert "fit out-of-place: t(S) = alpha + S / beta, alpha = " in out
    assert "4 sizes" in out
    assert not has_color(out)


def test_sweep_json_carries_the_fit(cli):
    doc = json.loads(cli(["collective", "psum", *SWEEP, "--format", "json"]).stdout)
    fit = doc["summary"]["fit"]["out"]
    assert set(fit) == {"model", "alpha_us", "beta_gbps", "r2", "max_rel_residual", "points"}
    assert fit["points"] == 4 and fit["alpha_us"] >= 0
    # the fit reproduces the measured times it was made from, within its stated worst residual
    sizes = doc["sizes"]
    for s in sizes:
        t = s["placements"][0]["timing"]["stats_s"]["p50"] * 1e6
        beta = fit["beta_gbps"]
        model = fit["alpha_us"] + (s["algbw_bytes"] / (beta * 1e3) if beta else 0.0)
        assert abs(t - model) / t <= fit["max_rel_residual"] + 1e-9


def test_a_single_size_has_no_fit(cli):
    doc = json.loads(cli(["collective", "psum", "--mesh", "4", "--format", "json", "--iters", "2"]).stdout)
    assert doc["summary"]["fit"] == {"out": None}


def test_several_collectives_in_one_command(cli):
    result = cli(["collective", "psum,all_gather", *SWEEP, "--no-color"])
    assert result.exit_code == 0, result.output
    assert "psum sweep" in result.stdout and "all_gather sweep" in result.stdout
    assert "busbw of psum, all_gather" in result.stdout
    assert "o psum out-of-place" in result.stdout and "x all_gather out-of-place" in result.stdout
    doc = json.loads(cli(["collective", "psum,all_gather", *SWEEP, "--format", "json"]).stdout)
    assert [d["config"]["collective"] for d in doc["collectives"]] == ["psum", "all_gather"]
    assert doc["summary"]["wrong"] == 0 and doc["command"] == "collective"
    rows = cli(["collective", "psum,all_gather", *SWEEP, "--format", "csv"]).stdout.splitlines()
    assert rows[0].startswith("collective,size_bytes,")
    assert [r.split(",")[0] for r in rows[1:]] == ["psum"] * 4 + ["all_gather"] * 4


def test_a_knob_goes_to_the_collectives_that_take_it(cli):
    doc = json.loads(
        cli(
            ["collective", "psum,all_gather", "--mesh", "4", "--no-tiled", "--format", "json", "--iters", "2"]
        ).stdout
    )
    psum, gather = doc["collectives"]
    assert "tiled" not in psum["config"]["params"] and gather["config"]["params"]["tiled"] is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["psum,psum"], "collective list 'psum,psum' names one twice", id="twice"),
        pytest.param(["psum,nosuch"], "unknown collective 'nosuch'", id="unknown"),
        pytest.param(
            ["psum,pmax", "--no-tiled"],
            "--tiled/--no-tiled does not apply to psum, pmax; it is for all_gather",
            id="knob",
        ),
        pytest.param(
            ["psum", "--plot-file", "x.png"],
            "--plot-file draws a sweep over sizes; give --sizes",
            id="no-sweep",
        ),
        pytest.param(
            ["psum", "--sizes", "1K,2K", "--plot-file", "x.jpg"], "needs the suffix .png or .svg", id="suffix"
        ),
        pytest.param(
            ["psum", "--sizes", "1K,2K", "--plot-file", "/no/such/dir/x.png"],
            "the folder /no/such/dir does not exist",
            id="folder",
        ),
    ],
)
def test_bad_report_input_exits_2(cli, args, message):
    assert message in assert_one_line_error(cli(["collective", *args, "--mesh", "4"]))


def test_plot_file_writes_a_png(cli, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "sweep.png"
    result = cli(["collective", "psum,all_gather", *SWEEP, "--plot-file", str(path), "-q"])
    assert result.exit_code == 0, result.output
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    import matplotlib.image

    image = matplotlib.image.imread(path)
    height, width = image.shape[:2]
    assert width > 1000 and height > 400
    assert np.std(image[..., :3]) > 0.05  # not a blank canvas


def test_plot_file_without_matplotlib_names_the_extra(cli, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a)
    )
    line = assert_one_line_error(
        cli(["collective", "psum", "--mesh", "4", "--sizes", "1K,2K", "--plot-file", "x.png"])
    )
    assert (
        "--plot-file needs matplotlib, which comes with the plot extra: pip install 'shardcli[plot]'" in line
    )


def test_chart_math_is_finite_for_real_sweeps(cli):
    doc = json.loads(cli(["collective", "all_to_all", *SWEEP, "--format", "json"]).stdout)
    fit = doc["summary"]["fit"]["out"]
    assert all(math.isfinite(v) for v in (fit["alpha_us"], fit["r2"]))


# --- --save ---------------------------------------------------------------------------------------

SAVE_COMMANDS = [
    pytest.param(["mesh", "--mesh", "2x2"], id="mesh"),
    pytest.param(["shard", "--mesh", "2x2", "--shape", "4x4", "--spec", "x,y"], id="shard"),
    pytest.param(["collective", "psum", "--mesh", "4", "--iters", "2"], id="collective"),
    pytest.param(["matmul", "--case", "allreduce", "--mesh", "2x2", "--iters", "2"], id="matmul"),
    pytest.param(["recipe", "axis-index", "--mesh", "4"], id="recipe"),
]


@pytest.mark.parametrize("args", SAVE_COMMANDS)
def test_save_text_is_exactly_what_was_printed(cli, tmp_path, args):
    path = tmp_path / "out.txt"
    result = cli([*args, "--no-color", "--save", str(path)])
    assert result.exit_code == 0, result.output
    assert path.read_text() == result.stdout


@pytest.mark.parametrize(("suffix", "marker"), [(".svg", "<svg"), (".html", "<html")])
def test_save_svg_and_html(cli, tmp_path, suffix, marker):
    path = tmp_path / f"mesh{suffix}"
    result = cli(["mesh", "--mesh", "2x2", "--save", str(path)])
    assert result.exit_code == 0, result.output
    text = path.read_text()
    assert marker in text and "dev 3" in text.replace("&#160;", " ").replace("\xa0", " ")


def test_save_json_records_the_document(cli, tmp_path):
    path = tmp_path / "doc.txt"
    result = cli(["mesh", "--mesh", "2", "--format", "json", "--save", str(path)])
    assert json.loads(path.read_text()) == json.loads(result.stdout)


@pytest.mark.parametrize(
    ("save", "message"),
    [
        pytest.param("out.pdf", "--save 'out.pdf' needs one of the suffixes .svg, .html, .txt", id="suffix"),
        pytest.param("/no/such/out.svg", "the folder /no/such does not exist", id="folder"),
    ],
)
def test_bad_save_exits_2(cli, save, message):
    assert message in assert_one_line_error(cli(["mesh", "--save", save]))


def test_a_sweep_of_a_collective_that_moves_nothing_has_no_fit(cli):
    result = cli(
        ["collective", "axis_index", "--mesh", "4", "--sizes", "1K,4K", "--iters", "2", "--no-color"]
    )
    assert result.exit_code == 0, result.output
    assert "no fit: axis_index moves no data" in result.stdout
    doc = json.loads(
        cli(["collective", "axis_index", "--mesh", "4", "--sizes", "1K,4K", "--format", "json"]).stdout
    )
    assert doc["summary"]["fit"] == {}


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["mesh", "--save", "/proc/shardcli.txt"], id="save"),
        pytest.param(
            ["collective", "psum", "--mesh", "4", "--sizes", "1K,2K", "--plot-file", "/proc/x.png"], id="plot"
        ),
    ],
)
def test_an_unwritable_folder_is_refused_before_the_run(cli, args):
    assert "cannot write in /proc" in assert_one_line_error(cli(args))


def test_matmul_sweep_charts_flops_and_fits_each_case_and_impl(cli):
    args = ["matmul", "--case", "allreduce,local", "--impl", "manual,auto", "--sizes", "1:4", "--mesh", "2x2"]
    args += ["--dims", "32,64,32", "--iters", "2", "--warmup", "1"]
    result = cli([*args, "--no-color", "-q"])
    assert result.exit_code == 0, result.output
    assert "achieved FLOP/s against the product's FLOPs" in result.stdout
    assert "fit allreduce/manual: t(F) = alpha + F / rate" in result.stdout
    doc = json.loads(cli([*args, "--format", "json"]).stdout)
    fits = doc["summary"]["fit"]
    assert set(fits) == {"allreduce/manual", "allreduce/auto", "local/manual", "local/auto"}
    for fit in fits.values():
        assert fit["points"] == 3 and fit["alpha_us"] >= 0
        assert set(fit) == {"model", "alpha_us", "rate_tflops", "r2", "max_rel_residual", "points"}


def test_a_single_matmul_size_has_no_fit(cli):
    doc = json.loads(
        cli(["matmul", "--case", "local", "--mesh", "2x2", "--iters", "2", "--format", "json"]).stdout
    )
    assert doc["summary"]["fit"] == {}


def test_matmul_plot_file_writes_a_png(cli, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "matmul.png"
    args = ["matmul", "--case", "local", "--impl", "manual,auto", "--sizes", "1:4", "--mesh", "2x2"]
    result = cli(
        [*args, "--dims", "32,64,32", "--iters", "2", "--warmup", "1", "-q", "--plot-file", str(path)]
    )
    assert result.exit_code == 0, result.output
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_matmul_plot_file_needs_a_sweep(cli):
    line = assert_one_line_error(cli(["matmul", "--mesh", "2x2", "--plot-file", "x.png"]))
    assert "--plot-file draws a sweep over sizes; give --sizes (such as 1:8)" in line


# --- narrow terminals -----------------------------------------------------------------------------


@pytest.mark.parametrize("columns", ["60", "69", "80", "92", "100"])
@pytest.mark.parametrize(
    "args",
    [
        pytest.param(
            ("collective", "psum", "--mesh", "2x4", "--axes", "data,model", "--axis", "model"), id="timing"
        ),
        pytest.param(("collective", "psum", *SWEEP), id="sweep"),
        pytest.param(
            ("matmul", "--case", "allreduce", "--impl", "all", "--mesh", "2x4", "--iters", "2"), id="matmul"
        ),
    ],
)
def test_a_narrow_terminal_never_cuts_a_figure(cli, columns, args):
    """An 80-column terminal used to get "4.78e…" for an algbw of 4.78e-05 and "#wro…" for #wrong:
    a table wider than the terminal is printed whole, one line per row (86-98 columns cut figures
    too while headers were still wrapped to fit)."""
    result = cli([*args, "--no-color"], env={"COLUMNS": columns})
    assert result.exit_code == 0, result.output
    assert [line for line in result.stdout.splitlines() if "…" in line] == []
    assert "#wrong" in result.stdout


def test_save_svg_keeps_a_table_wider_than_the_terminal(cli, tmp_path):
    """rich draws the SVG at the console's width and crops longer lines; the recording is widened
    to its widest line, so the timing table's last column survives a 60-column terminal."""
    path = tmp_path / "psum.svg"
    args = [
        "collective",
        "psum",
        "--mesh",
        "2x4",
        "--axes",
        "data,model",
        "--axis",
        "model",
        "--save",
        str(path),
    ]
    result = cli([*args, "--no-color"], env={"COLUMNS": "60"})
    assert result.exit_code == 0, result.output
    svg = path.read_text().replace("&#160;", " ").replace("\xa0", " ")
    assert "#wrong" in result.stdout and "#wrong" in svg and "roofline %" in svg


# --- pictures wider than the terminal -------------------------------------------------------------

# name: (arguments, the blocks' label)
TILES = ("shard", "--no-show-values", "--mesh")
PICTURES = {
    "mesh 8": (["mesh", "--mesh", "8"], "x ="),
    "mesh 2x4": (["mesh", "--mesh", "2x4", "--axes", "data,model"], "model ="),
    "mesh 2x2x2": (["mesh", "--mesh", "2x2x2"], "z ="),
    "tiles 8": ([*TILES, "8", "--shape", "4x64", "--spec", "None,x"], "tile columns"),
    "tiles 3-D": (
        [*TILES, "2x4", "--axes", "a,b", "--shape", "2x4x512", "--spec", "a,None,b"],
        "tile columns",
    ),
    # Tiles held by four devices each ("dev 0,1,2,3"), two grids side by side where they fit.
    "replicated 3-D": (
        [*TILES, "2x4", "--axes", "a,b", "--shape", "2x4x8", "--spec", "a,None,None"],
        "tile columns",
    ),
}
LEFT, RIGHT = "┌│├└", "┐│┤┘"


def box_lines(out: str) -> list[str]:
    """The lines of the output that start a box (a grid's border or a row of its cells)."""
    return [line.rstrip() for line in out.splitlines() if line.strip() and line.strip()[0] in LEFT]


def ours(out: str) -> str:
    """The output from shardcli's own picture on (`shard` draws JAX's first, which JAX lays out)."""
    at = out.find("tiles (device ids")
    return out if at < 0 else out[at:]


def widest_grid(out: str) -> int:
    """The width of the widest single grid drawn (grids side by side are told apart)."""
    tops = [line.strip() for line in ours(out).splitlines() if line.strip().startswith("┌")]
    return max(len(box) + 1 for top in tops for box in top.split("┐") if box.strip())


def block_notes(out: str, what: str) -> list[tuple[int, int, int]]:
    """(first, last, of) for every `WHAT 0..2 of 8` or `WHAT 3 of 8` a split picture printed."""
    # A label longer than a narrow terminal wraps (never cut): "... tile columns 0\n  of 4".
    found = re.findall(rf"{re.escape(what)}\s+(\d+)(?:\.\.(\d+))?\s+of\s+(\d+)", out)
    return [(int(a), int(b or a), int(n)) for a, b, n in found]


def assert_whole_pictures(out: str, columns: int | None) -> None:
    """No label ends in '…', every box is closed on its line (nothing cropped without a mark), and
    with `columns` every line of our pictures fits in it."""
    lines = out.splitlines()
    assert [line for line in lines if "…" in line] == []
    assert [line for line in box_lines(out) if line[-1] not in RIGHT] == []
    if columns is not None:
        assert max(len(line) for line in box_lines(ours(out))) <= columns


def runs_of_blocks(notes: list[tuple[int, int, int]]) -> list[list[tuple[int, int, int]]]:
    """The blocks' labels grouped per grid: pictures of several grids repeat the run once per grid."""
    runs: list[list[tuple[int, int, int]]] = []
    for note in notes:
        if note[0] == 0:
            runs.append([])
        runs[-1].append(note)
    return runs


@pytest.mark.parametrize("columns", [40, 60, 80, 120])
@pytest.mark.parametrize("name", PICTURES)
def test_a_picture_wider_than_the_terminal_is_split_into_whole_blocks(cli, name, columns):
    """A 16-device mesh in 80 columns used to read "d…" in every cell: now every cell is whole,
    every line fits, and the blocks' labels cover each column exactly once, in order."""
    args, what = PICTURES[name]
    result = cli([*args, "--no-color"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    assert_whole_pictures(result.stdout, columns)
    for device in range(8):
        assert re.search(rf"\bdev ([0-9,]*,)?{device}\b", result.stdout)
    wide = cli([*args, "--no-color"], env={"COLUMNS": "1000"})
    assert block_notes(wide.stdout, what) == []
    notes = block_notes(result.stdout, what)
    if widest_grid(wide.stdout) <= columns:
        assert notes == []
        return
    if not notes:  # folded: the mesh's cells without the coords their headers give, one whole grid
        assert args[0] == "mesh" and widest_grid(result.stdout) <= columns, result.stdout
        return
    runs = runs_of_blocks(notes)
    assert runs, result.stdout
    for run in runs:
        count = run[0][2]
        covered = [c for first, last, _ in run for c in range(first, last + 1)]
        assert covered == list(range(count)) and len(run) > 1


@pytest.mark.parametrize(
    ("args", "what", "whole"),
    [
        pytest.param(["mesh", "--mesh", "2x4", "--axes", "d,m"], "m =", "d=1 m=3", id="one grid"),
        # Grids side by side: rich's Columns would crop a grid wider than the terminal unmarked.
        pytest.param(["mesh", "--mesh", "2x2x2"], "z =", "x=1 y=1 z=1", id="side by side"),
        pytest.param(PICTURES["replicated 3-D"][0], "tile columns", "[1:2, 0:4, 0:8]", id="tiles"),
    ],
)  # fmt: skip
def test_a_single_column_wider_than_the_terminal_is_drawn_whole(cli, args, what, whole):
    result = cli([*args, "--no-color"], env={"COLUMNS": "16"})
    assert result.exit_code == 0, result.output
    assert_whole_pictures(result.stdout, None)
    assert whole in result.stdout
    for run in runs_of_blocks(block_notes(result.stdout, what)):
        assert run == [(c, c, run[0][2]) for c in range(run[0][2])]
