"""The first screen (issue 25): every command's default view fits the terminal, 80 columns and up.

Each command is rendered at 80, 100 and 120 columns (rich sizes its console from COLUMNS): no
line is wider than the terminal, no figure is cut ('…'), every column a table leaves out is named
in the dim line under it and shown by --wide; the header is short, its provenance under -v.
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text

from shardcli.analysis.arguments import shown_path
from shardcli.render.layout import Clauses, DataTable

# Compiles, processes or whole programs: left out of the quick subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

MLP = str(Path(__file__).resolve().parents[1] / "examples" / "mlp.py")
LESSONS = str(Path(__file__).resolve().parents[1] / "examples" / "lessons.py")
TRANSFORMER = str(Path(__file__).resolve().parents[1] / "examples" / "transformer.py")
MESH = ("--mesh", "2x4", "--axes", "data,model")
FAST = ("--warmup", "1", "--iters", "2")
WIDTHS = (80, 100, 120)

# id: the arguments of a default run (a checkpoint or compare's inputs are made by `prepare`).
COMMANDS = {
    "mesh": ("mesh", *MESH),
    "shard": ("shard", *MESH, "--shape", "8x8", "--spec", "data,model"),
    "collective": ("collective", "psum", "--mesh", "4", *FAST),
    "collective 2x4": ("collective", "all_gather", *MESH, "--axis", "model", "--placement", "both", *FAST),
    "collective sweep": ("collective", "psum", "--mesh", "8", "--sizes", "1K:16K:x4", *FAST),
    "matmul": ("matmul", "--case", "allreduce", "--impl", "all", *MESH, "--dims", "64,128,64", *FAST),
    "matmul sweep": (
        "matmul",
        "--case",
        "allreduce,gather-a",
        *MESH,
        "--dims",
        "32,64,32",
        "--sizes",
        "1:2",
        *FAST,
    ),
    "einsum": (
        "einsum",
        "bsd,df->bsf",
        "--shape",
        "8x16x64",
        "--shape",
        "64x128",
        "--in",
        "data,None,None",
        "--in",
        "None,model",
        "--out",
        "data,None,model",
        *MESH,
        *FAST,
    ),
    "reshard": ("reshard", "--shape", "8x1024", "--from", "data,model", "--to", "model,data", *MESH, *FAST),
    "inspect": (
        "inspect",
        f"{MLP}:train_step",
        *MESH,
        "--arg",
        "f32[256,1024]@data,None",
        "--arg",
        "f32[1024,4096]@None,model",
        "--arg",
        "f32[4096,1024]@model,None",
    ),
    "run": (
        "run",
        f"{LESSONS}:layer_sharded",
        "--mesh",
        "8",
        "--axes",
        "x",
        "--inputs",
        f"{LESSONS}:layer_inputs",
    ),
    "inspect tpu": (
        "inspect",
        f"{TRANSFORMER}:block",
        "--inputs",
        f"{TRANSFORMER}:inputs",
        "--target",
        "tpu-v5e:16x16",
        "--axes",
        "data,model",
        "-q",
    ),
    "mesh tpu": ("mesh", "--target", "tpu-v5e:4x4", "--axes", "data,model"),
    "matmul cases": ("matmul", *MESH, "--dims", "32,64,32", *FAST),
    "einsum tpu": (
        "einsum",
        "bsd,df->bsf",
        "--shape",
        "64x2048x8192",
        "--shape",
        "8192x32768",
        "--in",
        "data,None,model",
        "--in",
        "model,None",
        "--target",
        "tpu-v5e:4x4",
        "--axes",
        "data,model",
        "--dtype",
        "bfloat16",
    ),
    "recipe": ("recipe", "axis-index", "--mesh", "2x2", "--axes", "data,model"),
    "recipe list": ("recipe", "list"),
    "pipeline": (
        "pipeline",
        "--mesh",
        "4x2",
        "--layers",
        "4",
        "--width",
        "16",
        "--batch",
        "8",
        "--microbatches",
        "4",
    ),
    "model train": (
        "model",
        "train",
        *MESH,
        "--depth",
        "32",
        "--batch",
        "8",
        "--steps",
        "2",
        "--checkpoint",
        "{ckpt}",
    ),
    "model restore": ("model", "restore", "{ckpt}", "--mesh", "4x2", "--axes", "data,model"),
    "compare": ("compare", "{base}", "{new}"),
}


@pytest.fixture(scope="module")
def inputs(cli, tmp_path_factory) -> dict[str, str]:
    """A checkpoint for `model restore` and two collective results for `compare`."""
    folder = tmp_path_factory.mktemp("screen")
    ckpt = folder / "ckpt"
    made = cli(
        ["model", "train", *MESH, "--depth", "32", "--batch", "8", "--steps", "2", "--checkpoint", str(ckpt)]
    )
    assert made.exit_code == 0, made.output
    paths = {"ckpt": str(ckpt)}
    # One run as both sides: two runs' timings differ by chance, and a "regression" would exit 1
    run = cli(["collective", "psum", "--mesh", "4", *FAST, "--format", "json"])
    assert run.exit_code == 0, run.output
    for name in ("base", "new"):
        paths[name] = str(folder / f"{name}.json")
        Path(paths[name]).write_text(run.stdout)
    return paths


# Commands that compile for a TPU target: the tpu extra (libtpu), which CI installs.
NEEDS_TPU = {"inspect tpu", "mesh tpu", "einsum tpu"}


def run(cli, name: str, inputs: dict[str, str], columns: int, *flags: str, tmp_path: Path | None = None):
    if name in NEEDS_TPU and importlib.util.find_spec("libtpu") is None:
        pytest.skip("the tpu extra: libtpu (CI installs it)")
    args = [a.format(**inputs) for a in COMMANDS[name]]
    if name == "model train":  # a fresh folder each time: train refuses one that holds a checkpoint
        assert tmp_path is not None
        args[args.index("{ckpt}".format(**inputs))] = str(tmp_path / f"ckpt-{columns}-{len(flags)}")
    result = cli([*args, "--no-color", *flags], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.stdout


def hidden_columns(out: str) -> list[str]:
    """The columns each `not shown: a, b (--wide shows them)` line names."""
    named = []
    for line in out.splitlines():
        if line.startswith("not shown: "):
            named += line.removeprefix("not shown: ").split(" (--wide shows", 1)[0].strip().split(", ")
    return named


# A unit that a figure printed before it (`0 B`, `12.5 ms`, `0.72x`), and the words a phrase never
# ends with (`within`, `of`, `by`): a line that ends in the first half of either was broken mid-phrase.
_UNIT = re.compile(r"^(B|KiB|MiB|GiB|TiB|ns|us|ms|s|[KMGTP]?B/s|[KMGTP]?FLOP(/s)?)\b")
_OPEN_WORD = re.compile(
    r"\b(a|an|and|as|at|by|for|from|in|into|of|on|or|over|per|than|the|to|with|within|=)$"
)
# Lines of a chart or a boxed picture, whose glyphs are not words.
_DRAWN = re.compile(r"[│┤└┌─·]")


def split_phrases(out: str) -> list[str]:
    """Each place where a line of `out` was broken mid-phrase: a figure parted from its unit, a line
    ending in a word that leads into the next, or a row of NumPy values wrapped by the terminal
    (NumPy indents a row's continuation; one wrapped by rich starts in column 0)."""
    split = []
    lines = [line.rstrip() for line in out.splitlines()]
    quoted = False  # in a paragraph quoting an exception's message (JAX's prose, wrapped at its words)
    for line, following in zip(lines, lines[1:], strict=False):
        head, tail = line.strip(), following.strip()
        quoted = bool(head) and (quoted or re.search(r"\w+Error: ", head) is not None)
        if not head or not tail or _DRAWN.search(line + following):
            continue
        if re.match(r" \S", line) and re.match(r" \S", following):
            continue  # two rows of a table (a header ending in its `from` column)
        figure_unit = re.search(r"\d$", head) and _UNIT.match(tail)
        values_row = re.match(r"^ ?\[", line) and not head.endswith("]") and re.match(r"^[-\d]", following)
        if figure_unit or values_row or (_OPEN_WORD.search(head) and not quoted):
            split.append(f"{line!r} / {following!r}")
    return split


# A table whose column is sentences (what each recipe shows), wrapped at their words as prose is.
PROSE = {"recipe list"}
# What a column left out looks like under --wide where it is not a table column of that name.
# A column --wide shows otherwise: the mesh coordinates in each cell; a group's op count as every op
# of it listed under "collectives the compiler inserted".
SHOWN_AS = {"mesh coords": "data=1 model=3", "ops": "collectives the compiler inserted"}


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("name", COMMANDS)
def test_every_default_view_fits_the_terminal(cli, inputs, tmp_path, name, columns):
    """No line wider than the terminal, no figure cut, no line broken mid-phrase; every column left
    out named under its table and shown by --wide."""
    out = run(cli, name, inputs, columns, tmp_path=tmp_path)
    too_wide = [line for line in out.splitlines() if len(line) > columns]
    assert too_wide == [], out
    # Off a terminal (here, as in a pipe or a CI log) no line ends in the spaces a table pads it with.
    assert [line for line in out.splitlines() if line.endswith(" ")] == [], out
    assert [line for line in out.splitlines() if "…" in line] == [], out
    if name not in PROSE:
        assert split_phrases(out) == [], "\n".join([*split_phrases(out), out])
    hidden = hidden_columns(out)
    if hidden:
        wide = run(cli, name, inputs, columns, "--wide", tmp_path=tmp_path)
        assert hidden_columns(wide) == []
        assert [line for line in wide.splitlines() if line.endswith(" ")] == [], wide
        for column in hidden:
            assert column in wide or SHOWN_AS.get(column, column) in wide, (column, wide)


@pytest.mark.parametrize(
    ("text", "split"),
    [
        pytest.param("memory  7.6 MiB (temporaries 0\n        B, code 2.1 MiB)", True, id="figure-and-unit"),
        pytest.param("verified: (max |err| 0, within\n0.0001 x max|ref|)", True, id="open-word"),
        pytest.param("[ 0.1257 -0.1321  0.6404\n-0.6233  0.0413]", True, id="values-row-wrapped-by-rich"),
        pytest.param("[ 0.1257 -0.1321  0.6404\n -0.6233  0.0413]", False, id="values-row-wrapped-by-numpy"),
        pytest.param("memory  7.6 MiB (arguments 3.5 MiB,\n        temporaries 0 B)", False, id="at-a-comma"),
    ],
)
def test_split_phrases_finds_a_line_broken_mid_phrase(text, split):
    assert bool(split_phrases(text)) is split


def timing_columns_hidden(out: str) -> list[str]:
    """The columns the `not shown` line under the timing table (the one headed `p50`) names."""
    lines = out.splitlines()
    header = next(n for n, line in enumerate(lines) if re.search(r"\bp50\b", line) and "#wrong" in line)
    for line in lines[header + 1 :]:
        if not line.strip():
            break
        if line.startswith("not shown: "):
            return hidden_columns(line)
    return []


# How many columns an 80-column terminal leaves out depends on the timings' widths ("516 us" or
# "21.2 ms" in every row), so each case names the order they go in (the spread first), and the
# lesson's columns, which never go.
@pytest.mark.parametrize(
    ("name", "columns", "order", "kept"),
    [
        pytest.param(
            "collective",
            80,
            ["stdev", "max", "min", "p90", "compile", "roofline %", "algbw (GB/s)"],
            ["placement", "p50", "busbw (GB/s)", "#wrong"],
            id="collective-timing",
        ),
        pytest.param(
            "matmul",
            80,
            ["p90", "min", "compile", "p50/bound", "max rel err", "achieved FLOP/s"],
            ["impl", "p50", "#wrong"],
            id="matmul-timing",
        ),
    ],
)  # fmt: skip
def test_low_priority_columns_go_first_and_are_named(cli, inputs, name, columns, order, kept):
    out = run(cli, name, inputs, columns)
    named = timing_columns_hidden(out)
    # its headers and row names alone are over 80 columns wide: one column at least goes, the first
    assert named, out
    assert sorted(named) == sorted(order[: len(named)]), out
    for column in kept:
        assert column not in named and column in out, out


def _table_lines(out: str, header: str) -> list[str]:
    """The lines of the table whose header line holds `header`, to the blank line after it."""
    lines = out.splitlines()
    start = next(n for n, line in enumerate(lines) if header in line)
    return lines[start : next((n for n in range(start, len(lines)) if not lines[n].strip()), len(lines))]


def test_the_mesh_says_when_its_cells_leave_out_their_coordinates(cli, inputs):
    """At 80 columns a 2x4 mesh is drawn with its row and column headers alone; the line under it
    says so, and --wide draws each cell's coordinates."""
    out = run(cli, "mesh", inputs, 80)
    assert "data=1 model=3" not in out and "model=3" in out and "data=1" in out
    assert hidden_columns(out) == ["mesh coords"], out
    wide = run(cli, "mesh", inputs, 80, "--wide")
    for coords in ("data=0 model=0", "data=1 model=3"):
        assert coords in wide, wide
    roomy = run(cli, "mesh", inputs, 120)  # wide enough: every cell has them, and no line says not
    assert roomy.count("data=1 model=3") == 1 and "not shown" not in roomy


def test_a_refused_row_keeps_the_status_that_explains_its_dashes(cli, inputs):
    """The matmul cases at 80 columns: `status` is kept (the illegal case's `-` are its refusal),
    the cost model's figures go first."""
    out = run(cli, "matmul cases", inputs, 80)
    table = _table_lines(out, "HLO collectives")
    assert "status" in table[0] and "p50" in table[0], out
    illegal = next(line for line in table if line.startswith(" illegal "))
    assert "refused*" in illegal, out
    assert "status" not in hidden_columns(out)


def test_a_compile_only_einsum_leaves_out_its_empty_timing_columns_first(cli, inputs):
    """Under --target nothing runs: p50 and #wrong are `-` in every row, so they go before the
    memory per device, which the compile is for."""
    out = run(cli, "einsum tpu", inputs, 80)
    table = _table_lines(out, "result spec")
    assert "memory/device" in table[0] and "status" in table[0], out
    assert "p50" not in table[0] and "#wrong" not in table[0]
    assert {"p50", "#wrong"} <= set(hidden_columns(out)), out


def test_data_table_leaves_out_a_column_of_dashes_first():
    table = DataTable(box=None)
    table.add_column("key")
    table.add_column("figure", priority=1, justify="right")
    table.add_column("timing")  # a key column, but `-` in every row of this run
    table.add_column("#wrong", justify="right")  # the same
    for k in range(3):
        table.add_row(f"row{k}", f"{k * 1234.5678:.4f}", "-", "-")
    lines = render(table, 30)  # one of them would do; both go, and the figure stays
    assert hidden_columns("\n".join(lines)) == ["timing", "#wrong"], lines
    assert "figure" in lines[0]
    assert hidden_columns("\n".join(render(table, 80))) == []  # where it fits, nothing goes


def test_wide_keeps_todays_full_tables(cli, inputs):
    """--wide prints every column at its natural width, however narrow the terminal (today's
    tables: one line per row, the terminal wraps them)."""
    out = run(cli, "collective", inputs, 80, "--wide")
    header = next(line for line in out.splitlines() if "stdev" in line and "placement" in line)
    for column in ("placement", "compile", "min", "p50", "p90", "max", "busbw (GB/s)"):
        assert column in header
    assert len(header) > 80 and "not shown" not in out


def test_header_is_short_and_verbose_has_the_provenance(cli, inputs):
    out = run(cli, "collective", inputs, 80)
    head = out.split("\n\n", 1)[0].splitlines()
    keys = [line.split()[0] for line in head if line[:1].strip()]
    # (a note says the in-process run uses 4 of the 8 devices the tests start)
    assert [key for key in keys if key != "note"] == [
        "platform",
        "compiler",
        "mesh",
        "collective",
        "groups",
        "input",
    ]
    for key in ("allocator", "buffers", "roofline", "verify", "timing ", "shardcli "):
        assert not any(line.startswith(key) for line in head), head
    for flag in ("-v", "--verbose"):
        verbose = run(cli, "collective", inputs, 80, flag)
        keys = {line.split()[0] for line in verbose.split("\n\n", 1)[0].splitlines() if line[:1].strip()}
        assert {"shardcli", "processes", "timing", "buffers", "verify", "roofline"} <= keys, verbose
        assert max(len(line) for line in verbose.splitlines()) <= 80


def test_json_keeps_the_provenance(cli):
    """The header's provenance is always in JSON, whatever the flags."""
    doc = json.loads(cli(["collective", "psum", "--mesh", "4", *FAST, "--format", "json"]).stdout)
    quiet = json.loads(cli(["collective", "psum", "--mesh", "4", *FAST, "--format", "json", "--wide"]).stdout)
    assert doc.keys() == quiet.keys()
    text = json.dumps(doc)
    for fact in ("tolerance", "allocator", "out_buffer"):
        assert fact in text


def test_a_figure_is_never_parted_from_its_unit(cli, inputs):
    """`each device sends 24 B` stays on one line in 80 columns (it wrapped before "B")."""
    out = run(cli, "collective", inputs, 80)
    assert re.search(r"each device sends [\d,]+ B\n", out), out


# --- the mechanism --------------------------------------------------------------------------------


def render(renderable, width: int, wide: bool = False) -> list[str]:
    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    console.wide = wide  # type: ignore[attr-defined]
    console.print(renderable, crop=False)
    return console.export_text().splitlines()


def figures_table() -> DataTable:
    table = DataTable(box=None)
    table.add_column("key")
    table.add_column("spread", priority=2, justify="right")
    table.add_column("rate", priority=1, justify="right")
    table.add_column("figure", justify="right")
    for k in range(3):
        table.add_row(f"row{k}", f"{k * 1234.5678:.4f}", f"{k / 7:.6e}", f"{k * 1e9:.3e}")
    return table


@pytest.mark.parametrize(
    ("width", "hidden"),
    [
        pytest.param(120, [], id="all-fit"),
        pytest.param(41, ["spread"], id="highest-first"),
        pytest.param(30, ["spread", "rate"], id="then-the-next"),
    ],
)
def test_data_table_leaves_out_the_highest_priority_first(width, hidden):
    lines = render(figures_table(), width)
    assert max(len(line) for line in lines) <= width
    assert hidden_columns("\n".join(lines)) == hidden
    assert any("row2" in line and "2.000e+09" in line for line in lines)


def test_data_table_prints_key_value_rows_when_its_key_columns_do_not_fit():
    table = DataTable(box=None)
    table.add_column("device")
    table.add_column("BEFORE (input block)")
    values = " ".join(f"{v}." for v in range(10, 22))
    for device in range(2):
        table.add_row(str(device), f"[{values}]")
    lines = [line.rstrip() for line in render(table, 30)]
    assert max(len(line) for line in lines) <= 30
    assert lines[0] == "device                0" and lines[1].startswith("BEFORE (input block)  [10.")
    assert "" in lines and "device                1" in lines
    # the values wrap at their spaces: every figure whole
    assert sorted(re.findall(r"\d+\.", "\n".join(lines))) == sorted(re.findall(r"\d+\.", values) * 2)


def test_data_table_wide_is_natural_width():
    lines = render(figures_table(), 20, wide=True)
    assert "spread" in lines[0] and "rate" in lines[0] and len(lines[0]) > 20


def test_a_prose_column_wraps_before_columns_go():
    table = DataTable(box=None)
    table.add_column("name")
    table.add_column("what it shows", prose=True)
    table.add_column("extra", priority=1)
    table.add_row(
        "reduce", "x.sum(axis=0) under jit: the sharding the compiler picks, then one forced", "yes"
    )
    lines = render(table, 60)
    assert max(len(line) for line in lines) <= 60
    assert "extra" in lines[0] and hidden_columns("\n".join(lines)) == []
    assert render(table, 20)[0].startswith("name")  # too narrow for prose of 24: key/value rows


def test_clauses_break_only_between_clauses():
    clauses = Clauses(
        ["16 B per device (4 elements)", "S = 16 B", "busbw factor 1.500", "each device sends 24 B"]
    )
    lines = render(clauses, 60)
    assert lines == ["16 B per device (4 elements); S = 16 B; busbw factor 1.500;", "each device sends 24 B"]
    assert render(Clauses([Text("a"), "b"]), 80) == ["a; b"]


# --- inspect's first screen for a program of thousands of leaves ------------------------------------

LAYER_KINDS, UNROLLED, SCALES, STACK, WIDTH = 14, 70, 30, 4, 16


def _large_program() -> str:
    """A model with a scanned stack and 42 unrolled layers of 14 kinds (each at its own line), its
    parameters and two optimizer moments: 6,730 argument leaves, over two hundred collectives."""
    layers = "".join(
        f"def layer_{k}(p, h):\n    return h + jnp.tanh(h @ p['wq']) @ p['wo']\n\n\n"
        for k in range(LAYER_KINDS)
    )
    order = ", ".join(f"layer_{i % LAYER_KINDS}" for i in range(UNROLLED))
    return f"""import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


{layers}LAYERS = [{order}]


def step(params, opt_state, x):
    h = x @ params["embed"]

    def body(h, w):
        return jnp.tanh(h @ w["up"]) @ w["down"], None

    h, _ = jax.lax.scan(body, h, params["stack"])
    for fn, p in zip(LAYERS, params["layers"]):
        h = fn(p, h)
    return jnp.mean(h**2)


def inputs(mesh):
    def arg(shape, *spec):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, P(*spec)))

    def params():
        return {{
            "embed": arg((64, {WIDTH}), None, "model"),
            "stack": {{
                "up": arg(({STACK}, {WIDTH}, {4 * WIDTH}), None, "data", "model"),
                "down": arg(({STACK}, {4 * WIDTH}, {WIDTH}), None, "model", "data"),
            }},
            "layers": [
                {{
                    "wq": arg(({WIDTH}, {WIDTH}), "data", "model"),
                    "wo": arg(({WIDTH}, {WIDTH}), "model", "data"),
                    "norm": {{f"scale_{{k}}": arg(({WIDTH},)) for k in range({SCALES})}},
                }}
                for _ in range({UNROLLED})
            ],
        }}

    return params(), {{"mu": params(), "nu": params()}}, arg((32, 64), "data", None)
"""


@pytest.fixture(scope="module")
def large(cli, tmp_path_factory):
    """The large program inspected once: its JSON document and its report (the same compile)."""
    path = tmp_path_factory.mktemp("large") / "large_model.py"
    path.write_text(_large_program())
    out = cli(["inspect", f"{path}:step", "--inputs", f"{path}:inputs", *MESH, "--format", "json"])
    assert out.exit_code == 0, out.output
    from shardcli.program.inspect import InspectRequest, run_inspect
    from shardcli.specs.meshes import parse_mesh

    request = InspectRequest(
        target=f"{path}:step", args=(), inputs=f"{path}:inputs", outs=(), mesh=parse_mesh("2x4", "data,model")
    )
    return json.loads(out.stdout), run_inspect(request)


def test_inspect_json_of_a_large_program_holds_everything(large):
    doc, _ = large
    leaves = 3 * (1 + 2 + UNROLLED * (2 + SCALES))  # params and two moments, and x
    assert len(doc["arguments"]) == leaves + 1 == 6730
    assert "opt_state['mu']['layers'][69]['norm']['scale_29']" in {a["name"] for a in doc["arguments"]}
    collectives, groups = doc["program"]["collectives"], doc["collective_groups"]
    assert len(collectives) >= 200 and len(groups) > 10
    assert sum(g["count"] for g in groups) == len(collectives)
    assert sum(g["sent_bytes"] for g in groups) == doc["program"]["sent_bytes_per_device"]
    assert [g["sent_bytes"] for g in groups] == sorted((g["sent_bytes"] for g in groups), reverse=True)
    # each group is one (kind, axes, line), counted by hand from the collectives
    for g in groups:
        members = [
            c
            for c in collectives
            if (c["kind"], c["mesh_axes"], c["source"], c["role"])
            == (g["kind"], g["mesh_axes"], g["source"], g["role"])
        ]
        assert g["count"] == len(members) and g["runs"] == sum(c["runs"] for c in members)
        assert g["sent_bytes"] == sum(c["sent_bytes"] * c["runs"] for c in members)


@pytest.mark.parametrize("columns", WIDTHS)
def test_inspect_first_screen_of_a_large_program(large, columns):
    """6,730 argument leaves and over two hundred collectives: the default view answers on one screen
    (at most 60 lines at 100 columns), no line too wide, no figure cut."""
    from shardcli.render.inspect import report_renderable

    doc, result = large
    lines = render(report_renderable(result, full=False), columns)
    assert max(len(line) for line in lines) <= columns, "\n".join(lines)
    assert [line for line in lines if "…" in line] == [], "\n".join(lines)
    if columns >= 100:
        assert len(lines) <= 60, "\n".join(lines)
    text = "\n".join(lines)
    body = text.split("\n\n", 1)[1].splitlines()  # after the header: the answer first
    assert body[0].startswith("memory"), text
    assert next(i for i, line in enumerate(body) if line.startswith("step time")) < 4, text
    groups = len(doc["collective_groups"])
    assert f"{len(doc['program']['collectives'])} ops in {groups} groups" in text.replace("\n", " ")
    assert f"and {groups - 10} more groups" in text
    assert "arguments: 6,730 leaves" in text and "and 6,722 more:" in text
    largest = sorted(doc["arguments"], key=lambda a: -a["bytes_per_device"])[:8]
    for a in largest:
        assert any(line.startswith(" " + shown_path(a["name"]) + " ") for line in lines), (a["name"], text)
    rows = [
        line for line in lines if re.match(r" (all-reduce|all-gather|all-to-all|collective-permute) ", line)
    ]
    assert len(rows) == 10, text


def test_inspect_wide_shows_every_argument_and_collective(large):
    from shardcli.render.inspect import report_renderable

    doc, result = large
    text = "\n".join(render(report_renderable(result, full=True, pictures=False), 100, wide=True))
    for a in doc["arguments"][:: len(doc["arguments"]) // 50]:
        assert f" {shown_path(a['name'])} " in text
    assert text.count("large_model.py:") >= len(doc["program"]["collectives"]) - 5


def test_paths_that_only_their_middles_tell_apart_are_broken_between_parts_not_stacked():
    """penzai's paths: rows told apart only deep inside; the table keeps them rows, each a few lines
    tall, broken between parts (never inside one), where it had stacked every row as a record."""
    from shardcli.render import human

    deep = "stateless_model.body.sublayers[{b}].sublayers[1].delta.sublayers[1].sublayers[0].branches[{r}]"
    paths = [deep.format(b=b, r=r) + ".sublayers[0].weights.value.data_array" for b in (3, 4) for r in (0, 1)]
    table = DataTable(box=None, header_style="bold")
    for name, priority in (("argument", 0), ("spec", 0), ("per device", 0), ("type", 1)):
        table.add_column(
            name, priority=priority, shorten=human.paths_in_cells if name == "argument" else None
        )
    for p in paths:
        table.add_row(p, "None,x", "64 KiB", "bfloat16[256,1024]")
    lines = render(table, 100)
    assert len(lines) <= 1 + 2 * len(paths) + 1, "\n".join(lines)  # header, two lines a row, a note
    assert all(len(line) <= 100 for line in lines)
    text = "\n".join(line.strip() for line in lines)
    for b, r in ((3, 0), (3, 1), (4, 0), (4, 1)):
        assert f"[{b}].sublayers[1].delta.sublayers[1].sublayers[0].branches[{r}]" in text, text
    assert "\n.sublayers[0].weights.value.data_array" in text  # the break falls between two parts


@pytest.mark.parametrize(
    ("paths", "width", "shown"),
    [
        pytest.param(["a['x']['y']"], 40, ["a.x.y"], id="string-keys-as-attributes"),
        pytest.param(["a[0]['1x']"], 4, ["a…['1x']"], id="a-key-that-is-no-name-stays-a-key"),
        pytest.param(
            ["state.opt.mu.layers.kernel", "state.opt.nu.layers.kernel"],
            16,
            ["state.mu….kernel", "state.nu….kernel"],
            id="left-out-as-far-as-told-apart-the-moment-kept",
        ),
        pytest.param(["state.opt.w.layers.kernel"], 12, ["state….kernel"], id="head-and-last-part-stay"),
        pytest.param(
            [
                "state.params['MlpBlock_0']['Dense_0']['kernel']",
                "state.opt_state[0].mu['MlpBlock_0']['Dense_0']['kernel']",
            ],
            24,
            ["state.params….kernel", "state.mu….Dense_0.kernel"],
            id="a-parameter-and-its-moment-read-apart",
        ),
    ],
)
def test_paths_are_shortened_at_their_parts_and_stay_distinct(paths, width, shown):
    from shardcli.render.human import shorten_paths

    assert shorten_paths(paths, width) == shown


@pytest.mark.parametrize(
    ("writes", "written"),
    [
        pytest.param(["a b   \n", "c\n"], "a b\nc\n", id="padded-line"),
        pytest.param(["ab  ", "  \n"], "ab\n", id="padding-split-over-writes"),
        pytest.param(["ab  ", "cd\n"], "ab  cd\n", id="spaces-inside-a-line-split-over-writes"),
        pytest.param(["\x1b[1mab  \x1b[0m\n"], "\x1b[1mab\x1b[0m\n", id="colour-codes-kept"),
        pytest.param(["a  \x1b[0m", " x\n"], "a  \x1b[0m x\n", id="codes-inside-a-line-kept"),
        pytest.param(["   \n\n  x  "], "\n\n  x", id="blank-lines-and-an-unended-one"),
    ],
)
def test_output_off_a_terminal_ends_no_line_in_spaces(monkeypatch, writes, written):
    from shardcli.runtime.line_ends import UnpaddedStream

    buffer = io.StringIO()
    monkeypatch.setattr("sys.stdout", buffer)
    stream = UnpaddedStream(stderr=False)
    for text in writes:
        stream.write(text)
    assert buffer.getvalue() == written


@pytest.mark.parametrize("args", [["--help"], ["inspect", "--help"], ["collective", "--help"], []], ids=str)
def test_help_off_a_terminal_ends_no_line_in_spaces(cli, args):
    out = cli(args)
    assert out.exit_code == 0, out.output
    assert out.stdout.strip()
    assert [line for line in out.stdout.splitlines() if line.endswith(" ")] == [], out.stdout


def test_help_in_a_fresh_process_ends_no_line_in_spaces_and_a_run_does_not_import_typers_help(
    shardcli_subprocess, python_subprocess
):
    """typer's help module is patched as it is imported (`line_ends.unpad_help_screens`), so a run that
    draws no help never imports it."""
    done = shardcli_subprocess("inspect", "--help", env={"COLUMNS": "100"})
    assert done.returncode == 0 and "--target" in done.stdout, done.stderr
    assert [line for line in done.stdout.splitlines() if line.endswith(" ")] == []
    probe = (
        "import sys; from shardcli.cli import app\n"
        "try:\n    app(['mesh', '--mesh', '2'], prog_name='shardcli')\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        "print('typer.rich_utils' in sys.modules)"
    )
    ran = python_subprocess("-c", probe)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip().splitlines()[-1] == "False"


def test_a_tables_natural_width_is_the_one_rich_measures():
    """`natural_width` adds up what rich measures cell by cell (fitting a 7,000-row table asks for it
    once per set of columns tried): the same number on tables of every shape rich draws."""
    import random

    from rich import box as boxes
    from rich.measure import Measurement
    from rich.table import Table

    from shardcli.render.layout import WIDEST_TABLE, MeasuredOnce, natural_width

    console = Console(width=80, file=io.StringIO())
    options = console.options
    rng = random.Random(7)
    words = ["", "-", "x", "4.78e-05", "[bold]bold[/bold] words", "日本語", "a\tb", "two\nlines", "a b c d e"]
    checked = 0
    for _ in range(300):
        table = Table(
            box=rng.choice([None, boxes.SIMPLE, boxes.ROUNDED]),
            show_edge=rng.random() < 0.5,
            pad_edge=rng.random() < 0.5,
            collapse_padding=rng.random() < 0.5,
            padding=rng.choice([(0, 1), (0, 2), (1, 1, 0, 3), 0]),
            show_header=rng.random() < 0.8,
            show_footer=rng.random() < 0.2,
            min_width=rng.choice([None, 10, 200]),
        )
        for c in range(rng.randint(1, 5)):
            table.add_column(
                rng.choice(words + [Text("head"), f"column {c}"]),
                footer=rng.choice(["", "sum", Text("total")]),
                width=rng.choice([None, None, None, 6]),
                min_width=rng.choice([None, None, 3, 12]),
                max_width=rng.choice([None, None, 4, 30]),
            )
        for _ in range(rng.randint(0, 4)):
            cells = [rng.choice(words + [Text(rng.choice(words))]) for _ in table.columns]
            table.add_row(*[MeasuredOnce(c) if rng.random() < 0.5 else c for c in cells])
        natural = natural_width(console, options, table)
        if natural is None:  # a column with no cells: rich measures it at the width it is given
            assert not table.show_header and not table.show_footer and not table.rows
            continue
        checked += 1
        assert natural == Measurement.get(console, options.update_width(WIDEST_TABLE), table).maximum
    assert checked > 250
