"""`shardcli compare`: outcomes, tolerance, every reason two files are not comparable, the JSON contract.

The inputs are real documents, made once per module by the in-process CLI with tiny sizes; each
case derives its variant by editing a copy of one in Python.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_cli_foundation import assert_one_line_error, has_color

from shardcli.errors import ShardcliError
from shardcli.results.compare.metrics import METRICS
from shardcli.results.compare.run import CompareRequest, compare_documents, judge
from shardcli.results.documents import SCHEMA_VERSION, document_problems
from shardcli.specs.values import parse_tolerance

FAST = ["--iters", "2", "--warmup", "1", "--format", "json"]
SOURCES = {
    # 2 sizes x 2 placements: rows (1K, out), (1K, in), (2K, out), (2K, in)
    "psum": ["collective", "psum", "--mesh", "4", "--sizes", "1K,2K", "--placement", "both", *FAST],
    # no busbw at all; the in-place form does not run (no timing either)
    "axis_index": ["collective", "axis_index", "--mesh", "4", "--size", "1K", "--placement", "both", *FAST],
    # rows: allreduce x (manual, auto, explicit), illegal x (manual refused, auto, explicit refused)
    "matmul": [
        "matmul",
        "--case",
        "allreduce,illegal",
        "--mesh",
        "2x2",
        "--impl",
        "all",
        "--dims",
        "32,64,32",
        "--peak-tflops",
        "1",
        "--link-gbps",
        "1",
        *FAST,
    ],
    "mesh": ["mesh", "--mesh", "4", "--format", "json"],
}


@pytest.fixture(scope="module")
def docs(cli) -> dict[str, dict[str, Any]]:
    out = {}
    for name, args in SOURCES.items():
        result = cli(args)
        assert result.exit_code == 0, result.output
        out[name] = json.loads(result.stdout)
    return out


Edit = Callable[[dict[str, Any]], object]


def edited(doc: dict[str, Any], edit: Edit | None) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    if edit is not None:
        edit(doc)
    return doc


def write(path: Path, content: dict[str, Any] | str) -> str:
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


# Edits ------------------------------------------------------------------------------------------


def placement(doc, size: int = 0, index: int = 0) -> dict[str, Any]:
    return doc["sizes"][size]["placements"][index]


def scale_busbw(factor: float, size: int = 0, index: int = 0) -> Edit:
    def edit(doc):
        placement(doc, size, index)["busbw_gbps"] *= factor

    return edit


def scale_p50(factor: float, size: int = 0, index: int = 0) -> Edit:
    def edit(doc):
        placement(doc, size, index)["timing"]["stats_s"]["p50"] *= factor

    return edit


def scale_matmul_p50(factor: float, run: int = 0, impl: int = 0) -> Edit:
    def edit(doc):
        doc["runs"][run]["impls"][impl]["timing"]["stats_s"]["p50"] *= factor

    return edit


def set_busbw(value: object, size: int = 0, index: int = 0) -> Edit:
    def edit(doc):
        placement(doc, size, index)["busbw_gbps"] = value

    return edit


def setitem(*path: str | int, value: object) -> Edit:
    def edit(doc):
        for key in path[:-1]:
            doc = doc[key]
        doc[path[-1]] = value

    return edit


def delitem(*path: str | int) -> Edit:
    def edit(doc):
        for key in path[:-1]:
            doc = doc[key]
        del doc[path[-1]]

    return edit


def both(*edits: Edit) -> Edit:
    def edit(doc):
        for e in edits:
            e(doc)

    return edit


def run_compare(cli, tmp_path, base: dict | str, new: dict | str, *args: str):
    b = write(tmp_path / "base.json", base)
    n = write(tmp_path / "new.json", new)
    return cli(["compare", b, n, *args]), b, n


# Outcomes ---------------------------------------------------------------------------------------

REFUSED = ["ok", "ok", "ok", "n/a", "ok", "n/a"]  # matmul rows: illegal's manual and explicit refuse

OUTCOMES = [
    pytest.param("psum", None, [], 0, ["ok"] * 4, id="identical"),
    pytest.param("psum", scale_busbw(0.8), [], 1, ["regression", "ok", "ok", "ok"], id="busbw-20%-down"),
    pytest.param(
        "psum", scale_busbw(0.8, size=1, index=1), [], 1, ["ok"] * 3 + ["regression"], id="in-place-down"
    ),
    pytest.param("psum", scale_busbw(0.95), [], 0, ["ok"] * 4, id="busbw-5%-down-within"),
    pytest.param("psum", scale_busbw(0.8), ["-t", "25%"], 0, ["ok"] * 4, id="within-wider-tolerance"),
    pytest.param("psum", scale_busbw(0.99), ["-t", "0"], 1, ["regression"] + ["ok"] * 3, id="tolerance-0"),
    pytest.param("psum", scale_busbw(1.5), [], 0, ["better"] + ["ok"] * 3, id="busbw-improved"),
    pytest.param("psum", scale_p50(1.2), [], 0, ["ok"] * 4, id="time-ignored-for-busbw"),
    pytest.param(
        "psum", scale_p50(1.2), ["--metric", "time"], 1, ["regression"] + ["ok"] * 3, id="time-20%-up"
    ),
    pytest.param("psum", scale_p50(0.5), ["--metric", "time"], 0, ["faster"] + ["ok"] * 3, id="time-halved"),
    pytest.param("psum", set_busbw(None), [], 0, ["n/a"] + ["ok"] * 3, id="busbw-missing-in-new"),
    pytest.param("psum", set_busbw(float("nan")), [], 0, ["n/a"] + ["ok"] * 3, id="busbw-nan-in-new"),
    pytest.param("axis_index", None, ["--metric", "time"], 0, ["ok", "n/a"], id="axis-index-time"),
    pytest.param("matmul", None, [], 0, REFUSED, id="matmul-same"),
    pytest.param(
        "matmul", scale_matmul_p50(1.3), [], 1, ["regression", *REFUSED[1:]], id="matmul-30%-slower"
    ),
    pytest.param(
        "matmul",
        scale_matmul_p50(0.5, run=1, impl=1),
        ["--metric", "time"],
        0,
        [*REFUSED[:4], "faster", "n/a"],
        id="matmul-faster",
    ),
]


@pytest.mark.parametrize(("source", "edit", "args", "exit_code", "statuses"), OUTCOMES)
def test_outcome(cli, docs, tmp_path, source, edit, args, exit_code, statuses):
    base = docs[source]
    result, _, _ = run_compare(cli, tmp_path, base, edited(base, edit), *args, "--format", "json")
    assert result.exit_code == exit_code, result.output
    assert result.stderr == ""
    out = json.loads(result.stdout)
    assert [r["status"] for r in out["rows"]] == statuses
    assert out["regressions"] == statuses.count("regression")
    assert out["compared"] == len(statuses) - statuses.count("n/a")
    for row in out["rows"]:
        if row["status"] == "n/a":
            assert row["ratio"] is None
        else:
            assert row["ratio"] == pytest.approx(row["new"] / row["base"])


def columns(line: str) -> list[str]:
    """A rich table line's cells (columns are two or more spaces apart)."""
    return re.split(r"\s{2,}", line.strip())


def test_regression_table_marks_the_row_and_sums_up(cli, docs, tmp_path):
    base = docs["psum"]
    b = write(tmp_path / "base.json", base)
    n = write(tmp_path / "new.json", edited(base, scale_busbw(0.8)))
    # wide enough that the temporary paths in the header do not wrap
    result = cli(["compare", b, n, "--no-color"], env={"COLUMNS": "300"})
    assert result.exit_code == 1, result.output
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["compare", "collective", "psum", "over", "x"]
    assert f"base     {b}: float32, cpu" in result.stdout
    assert f"new      {n}: float32, cpu" in result.stdout
    assert columns(lines[4]) == [
        "metric",
        "busbw (GB/s), higher is better; a regression is new worse than base by more than 10%",
    ]
    header = next(line for line in lines if "new/base" in line)
    assert columns(header) == [
        "size",
        "placement",
        "base busbw (GB/s)",
        "new busbw (GB/s)",
        "new/base",
        "status",
    ]
    rows = [line.split() for line in lines[lines.index(header) + 1 :] if line.strip()]
    assert [r[:2] for r in rows[:4]] == [["1K", "out"], ["1K", "in"], ["2K", "out"], ["2K", "in"]]
    assert rows[0][4:] == ["0.80x", "REGRESSION"]
    assert [r[-1] for r in rows[1:4]] == ["ok", "ok", "ok"]
    assert lines[-1] == "4 rows, 1 regression, worst new/base 0.80x (size 1K, placement out); tolerance 10%"


def test_matmul_table_shows_refused_rows_as_dashes(cli, docs, tmp_path):
    base = docs["matmul"]
    result, _, _ = run_compare(cli, tmp_path, base, base, "-q", "--no-color")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert columns(lines[0]) == [
        "I,J,K",
        "case",
        "impl",
        "base time p50 (us)",
        "new time p50 (us)",
        "new/base",
        "status",
    ]
    refused = [line.split() for line in lines if "illegal" in line and "n/a" in line]
    assert refused == [
        ["32,64,32", "illegal", "manual", "-", "-", "-", "n/a"],
        ["32,64,32", "illegal", "explicit", "-", "-", "-", "n/a"],
    ]
    # 126 characters: broken between two clauses in the 120 columns of a pipe
    assert " ".join(lines[-2:]) == (
        "6 rows, 0 regressions, worst new/base 1.00x (I,J,K 32,64,32, case allreduce, impl manual), "
        "2 without a value in both (-); tolerance 10%"
    )


@pytest.mark.parametrize(("flags", "colored"), [([], True), (["--no-color"], False)])
def test_color_follows_no_color(cli, docs, tmp_path, flags, colored):
    base = docs["psum"]
    b = write(tmp_path / "base.json", base)
    n = write(tmp_path / "new.json", edited(base, scale_busbw(0.5)))
    result = cli(["compare", b, n, *flags], env={"FORCE_COLOR": "1"})
    assert result.exit_code == 1, result.output
    assert has_color(result.stdout) is colored


# Tolerance ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("10%", 0.10, id="percent"),
        pytest.param("0.1", 0.10, id="fraction"),
        pytest.param(" 2.5 % ", 0.025, id="spaces"),
        pytest.param("0", 0.0, id="zero"),
        pytest.param("0%", 0.0, id="zero-percent"),
        pytest.param("1", 1.0, id="fraction-one"),
        pytest.param("150%", 1.5, id="above-100-percent"),
        pytest.param(".5", 0.5, id="leading-dot"),
    ],
)
def test_parse_tolerance(text, value):
    assert parse_tolerance(text) == pytest.approx(value)


BAD_TOLERANCES = [
    pytest.param(
        "-5%", "--tolerance '-5%' is negative; give 0 or more, such as 10% or 0.1", id="negative-percent"
    ),
    pytest.param(
        "-0.1", "--tolerance '-0.1' is negative; give 0 or more, such as 10% or 0.1", id="negative-fraction"
    ),
    pytest.param(
        "ten",
        "--tolerance 'ten' is not valid; give a percentage such as 10% or a fraction such as 0.1",
        id="word",
    ),
    pytest.param("", "--tolerance '' is not valid; give a percentage such as 10%", id="empty"),
    pytest.param("%", "--tolerance '%' is not valid", id="percent-sign-alone"),
    pytest.param("1e-1", "--tolerance '1e-1' is not valid", id="exponent"),
    pytest.param("nan", "--tolerance 'nan' is not valid", id="nan"),
    pytest.param("inf", "--tolerance 'inf' is not valid", id="inf"),
    pytest.param(
        "10",
        "--tolerance '10' is a fraction above 1 (1000%); write 10% for 10 percent, or a fraction such as 0.1",
        id="bare-ten",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD_TOLERANCES)
def test_bad_tolerance_is_one_line_exit_2(cli, docs, tmp_path, text, message):
    with pytest.raises(ShardcliError) as info:
        parse_tolerance(text)
    assert str(info.value).startswith(message)
    base = docs["psum"]
    result, _, _ = run_compare(cli, tmp_path, base, base, "--tolerance", text)
    assert assert_one_line_error(result).startswith(f"shardcli: error: {message}")


@pytest.mark.parametrize(
    ("metric", "base", "new", "status"),
    [
        pytest.param("busbw", 100.0, 90.0, "ok", id="busbw-at-the-edge"),
        pytest.param("busbw", 100.0, 89.9, "regression", id="busbw-past-the-edge"),
        pytest.param("busbw", 100.0, 110.1, "better", id="busbw-better"),
        pytest.param("time", 100.0, 110.0, "ok", id="time-at-the-edge"),
        pytest.param("time", 100.0, 110.1, "regression", id="time-past-the-edge"),
        pytest.param("time", 100.0, 89.9, "faster", id="time-faster"),
        pytest.param("time", None, 1.0, "n/a", id="no-base"),
        pytest.param("busbw", 1.0, None, "n/a", id="no-new"),
    ],
)
def test_judge_at_ten_percent(metric, base, new, status):
    assert judge(base, new, METRICS[metric], 0.1) == status


# Not comparable -----------------------------------------------------------------------------------


def bad(ident: str, source: str, base: Edit | str | None, new: Edit | str | None, message: str, args=()):
    """A not-comparable case: `source` edited into both files (a str names a document or is the text).

    `new` may also be "missing" (no file) or "directory"; {base} and {new} in `message` are the paths.
    """
    return pytest.param(source, base, new, list(args), message, id=ident)


MESH_2X2 = both(setitem("mesh", "shape", value=[2, 2]), setitem("mesh", "axes", value=["x", "y"]))

NOT_COMPARABLE = [
    bad(
        "nothing-to-compare",
        "axis_index",
        None,
        None,
        "no row of {base} and {new} has a busbw value in both, so nothing can be compared; use --metric time",
    ),
    bad(
        "several-collectives",
        "psum",
        None,
        json.dumps({"schema": SCHEMA_VERSION, "command": "collective", "collectives": []}),
        "{new} holds several collectives in one document; compare takes one collective per file: save each "
        "collective's run on its own",
    ),
    bad(
        "schema-differs",
        "psum",
        None,
        setitem("schema", value=1),
        f"{{base}} has schema version {SCHEMA_VERSION} but {{new}} has 1; "
        "compare needs files written by the same shardcli version",
    ),
    bad(
        "schema-unknown",
        "psum",
        setitem("schema", value=SCHEMA_VERSION + 1),
        setitem("schema", value=SCHEMA_VERSION + 1),
        f"{{base}} and {{new}} have schema version {SCHEMA_VERSION + 1}, but this shardcli reads schema "
        f"{SCHEMA_VERSION}; "
        "compare them with the shardcli that wrote them",
    ),
    bad(
        "schema-not-integer",
        "psum",
        None,
        setitem("schema", value="1"),
        "{new} has 'schema' as a string; it should be an integer",
    ),
    bad(
        "command-differs",
        "psum",
        None,
        "matmul",
        "{base} is a collective result but {new} is a matmul result; "
        "compare needs two results of the same command",
    ),
    bad(
        "unknown-command",
        "mesh",
        None,
        None,
        "{base} is a result of shardcli mesh; compare knows collective, matmul, einsum, reshard, inspect "
        "results",
    ),
    bad(
        "mesh-shape",
        "psum",
        None,
        MESH_2X2,
        "{base} ran on mesh 4 (x=4) but {new} on mesh 2x2 (x=2, y=2); "
        "compare needs the same --mesh and --axes",
    ),
    bad(
        "mesh-axes",
        "psum",
        None,
        setitem("mesh", "axes", value=["data"]),
        "{base} ran on mesh 4 (x=4) but {new} on mesh 4 (data=4); compare needs the same --mesh and --axes",
    ),
    bad(
        "collective-differs",
        "psum",
        None,
        setitem("config", "collective", value="all_gather"),
        "{base} ran collective psum but {new} ran all_gather; compare needs results of the same collective",
    ),
    bad(
        "params-differ",
        "psum",
        None,
        setitem("config", "params", "root", value=1),
        "{base} ran psum with axes=x but {new} with axes=x, root=1; compare needs the same collective flags",
    ),
    bad(
        "out-buffer-differs",
        "psum",
        None,
        setitem("config", "out_buffer", value="fresh"),
        "{base} timed out-of-place results into preallocated buffers but {new} into fresh ones; "
        "compare needs the same --out-buffer",
    ),
    bad(
        "out-buffer-missing-means-fresh",
        "psum",
        delitem("config", "out_buffer"),
        None,
        "{base} timed out-of-place results into fresh buffers but {new} into preallocated ones; "
        "compare needs the same --out-buffer",
    ),
    bad(
        "size-missing-in-new",
        "psum",
        None,
        delitem("sizes", 1),
        "size 2K is in {base} but not in {new}; compare needs the same --sizes and --placement in both",
    ),
    bad(
        "size-missing-in-base",
        "psum",
        delitem("sizes", 0),
        None,
        "size 1K is in {new} but not in {base}; compare needs the same --sizes and --placement in both",
    ),
    bad(
        "placement-missing",
        "psum",
        None,
        delitem("sizes", 0, "placements", 1),
        "size 1K, placement in is in {base} but not in {new}; "
        "compare needs the same --sizes and --placement in both",
    ),
    bad(
        "size-twice",
        "psum",
        None,
        setitem("sizes", 1, "bytes_per_device", value=1024),
        "{new} has size 1K, placement out twice",
    ),
    bad(
        "matmul-cases",
        "matmul",
        None,
        setitem("config", "cases", value=["allreduce"]),
        "{base} has matmul cases allreduce, illegal but {new} has allreduce; "
        "compare needs the same --case in both",
    ),
    bad(
        "matmul-impl-missing",
        "matmul",
        None,
        delitem("runs", 1, "impls", 1),
        "I,J,K 32,64,32, case illegal, impl auto is in {base} but not in {new}; "
        "compare needs the same --case, --impl, --dims and --sizes in both",
    ),
    bad(
        "matmul-dims",
        "matmul",
        None,
        both(*(setitem("runs", i, "dims", "I", value=64) for i in (0, 1))),
        "I,J,K 32,64,32 is in {base} but not in {new}; "
        "compare needs the same --case, --impl, --dims and --sizes in both",
    ),
    bad(
        "matmul-busbw",
        "matmul",
        None,
        None,
        "--metric busbw does not apply to matmul results; use --metric time",
        args=["--metric", "busbw"],
    ),
    bad(
        "unknown-metric",
        "psum",
        None,
        None,
        "--metric 'algbw' is not valid; choose one of busbw, time, memory, sent, collectives",
        args=["--metric", "algbw"],
    ),
    bad(
        "csv",
        "psum",
        None,
        None,
        "--format 'csv' is not valid; choose one of table, json",
        args=["--format", "csv"],
    ),
    bad("missing-file", "psum", None, "missing", "cannot read {new}: no such file"),
    bad("directory", "psum", None, "directory", "cannot read {new}: it is a directory; give a regular file"),
    bad(
        "garbage",
        "psum",
        "{not json",
        None,
        "{base} is not JSON: Expecting property name enclosed in double quotes at line 1 column 2",
    ),
    bad("empty-file", "psum", None, "", "{new} is not JSON: Expecting value at line 1 column 1"),
    bad(
        "json-list",
        "psum",
        None,
        "[1, 2]",
        "{new} holds a list, not a JSON object; compare reads the JSON of shardcli collective or matmul",
    ),
    bad(
        "no-sizes",
        "psum",
        None,
        delitem("sizes"),
        "{new} has no 'sizes'; compare reads the JSON of shardcli collective or matmul",
    ),
    bad(
        "no-mesh",
        "psum",
        None,
        delitem("mesh"),
        "{new} has no 'mesh'; compare reads the JSON of shardcli collective or matmul",
    ),
    bad(
        "no-busbw",
        "psum",
        None,
        delitem("sizes", 1, "placements", 0, "busbw_gbps"),
        "{new} has no 'sizes[1].placements[0].busbw_gbps'; "
        "compare reads the JSON of shardcli collective or matmul",
    ),
    bad(
        "busbw-string",
        "psum",
        None,
        set_busbw("fast"),
        "{new} has 'sizes[0].placements[0].busbw_gbps' as a string; it should be a number or null",
    ),
    bad(
        "no-stats",
        "matmul",
        None,
        delitem("runs", 0, "impls", 0, "timing", "stats_s"),
        "{new} has no 'runs[0].impls[0].timing.stats_s'; "
        "compare reads the JSON of shardcli collective or matmul",
    ),
    bad(
        "size-not-object",
        "psum",
        None,
        setitem("sizes", 0, value=7),
        "{new} has 'sizes[0]' as an integer; it should be an object",
    ),
]


@pytest.mark.parametrize(("source", "base_edit", "new_edit", "args", "message"), NOT_COMPARABLE)
def test_not_comparable_is_one_line_exit_2(cli, docs, tmp_path, source, base_edit, new_edit, args, message):
    def content(edit):
        if isinstance(edit, str):
            return docs.get(edit, edit)
        return edited(docs[source], edit)

    b = write(tmp_path / "base.json", content(base_edit))
    n = str(tmp_path / "new.json")
    if new_edit == "directory":
        Path(n).mkdir()
    elif new_edit != "missing":
        write(Path(n), content(new_edit))
    line = assert_one_line_error(cli(["compare", b, n, *args]))
    assert line == "shardcli: error: " + message.format(base=b, new=n)


def test_not_comparable_in_json_mode_writes_nothing_to_stdout(cli, docs, tmp_path):
    base = docs["psum"]
    result, b, n = run_compare(cli, tmp_path, base, edited(base, MESH_2X2), "--format", "json")
    assert assert_one_line_error(result).startswith(f"shardcli: error: {b} ran on mesh 4 (x=4) but {n}")


# The JSON contract --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "args", "metric", "unit", "better", "row_keys", "first_keys"),
    [
        pytest.param(
            "psum",
            ["-t", "0.2"],
            "busbw",
            "GB/s",
            "higher",
            {"bytes_per_device", "placement"},
            {"bytes_per_device": 1024, "placement": "out"},
            id="collective",
        ),
        pytest.param(
            "matmul",
            ["-t", "20%"],
            "time",
            "s",
            "lower",
            {"dims", "case", "impl"},
            {"dims": {"I": 32, "J": 64, "K": 32}, "case": "allreduce", "impl": "manual"},
            id="matmul",
        ),
    ],
)
def test_json_contract(cli, docs, tmp_path, source, args, metric, unit, better, row_keys, first_keys):
    base = docs[source]
    new = edited(base, scale_busbw(0.5) if source == "psum" else scale_matmul_p50(2.0))
    result, b, n = run_compare(cli, tmp_path, base, new, "--format", "json", *args)
    assert result.exit_code == 1, result.output
    assert result.stderr == ""
    out = json.loads(result.stdout)  # nothing else on stdout
    assert document_problems(out, "compare") == []  # exactly the keys shardcli/results/documents.py gives
    assert (out["base"]["file"], out["new"]["file"]) == (b, n)
    assert (out["schema"], out["command"], out["compared_command"]) == (
        SCHEMA_VERSION,
        "compare",
        base["command"],
    )
    assert (out["metric"], out["unit"], out["better"], out["tolerance"]) == (metric, unit, better, 0.2)
    assert all(set(row["keys"]) == row_keys for row in out["rows"])
    first = out["rows"][0]
    assert first["keys"] == first_keys
    assert first["status"] == "regression"
    assert first["ratio"] == pytest.approx(0.5 if metric == "busbw" else 2.0)
    assert out["worst_ratio"] == first["ratio"]
    assert out["regressions"] == 1


def test_core_reads_documents_without_files(docs):
    base = docs["matmul"]
    request = CompareRequest(base="a.json", new="b.json", metric=None, tolerance=0.1)
    result = compare_documents(base, edited(base, scale_matmul_p50(0.5, run=1, impl=1)), request)
    assert result.metric.name == "time"
    assert [result.describe_key(r.key) for r in result.rows][3:5] == [
        "I,J,K 32,64,32, case illegal, impl manual",
        "I,J,K 32,64,32, case illegal, impl auto",
    ]
    assert result.worst is not None and result.worst.ratio == pytest.approx(1.0)
    assert [r.key for r in result.rows if r.status == "faster"] == [((32, 64, 32), "illegal", "auto")]


@pytest.mark.slow
def test_compare_imports_neither_jax_nor_numpy(docs, tmp_path, python_subprocess):
    base = docs["psum"]
    b = write(tmp_path / "base.json", base)
    n = write(tmp_path / "new.json", edited(base, scale_busbw(0.5)))
    script = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "import shardcli.cli\n"
        "assert 'numpy' not in sys.modules, 'import'\n"
        "for fmt in ('table', 'json'):\n"
        f"    result = CliRunner().invoke(shardcli.cli.app, ['compare', {b!r}, {n!r}, '--format', fmt])\n"
        "    assert result.exit_code == 1, result.output\n"
        "    assert 'numpy' not in sys.modules and 'jax' not in sys.modules, fmt\n"
        "print('ok')\n"
    )
    proc = python_subprocess("-c", script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"
