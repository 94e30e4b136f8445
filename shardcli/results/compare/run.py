"""`shardcli compare`: line up two JSON results of the same command and find the regressions.

Pure Python on purpose: it reads the documents that `shardcli collective` and `shardcli matmul`
print with `--format json`, and imports neither JAX nor NumPy, so comparing two files in CI costs
no device start-up. Reading a document is shardcli/results/compare/reading.py, the metrics
compare/metrics.py and each command's rows compare/kinds.py; this module checks that two documents
are comparable and judges every row.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from shardcli.errors import ShardcliError
from shardcli.results.compare.kinds import KINDS, KeyField, ResultKind, Row, describe_key
from shardcli.results.compare.metrics import METRICS, Metric
from shardcli.results.compare.reading import Doc, load_document, read_field, same_in_both, schema_key
from shardcli.results.documents import SCHEMA_VERSION

# Every key compare reads here, looked up in the schema when this module loads.
_SCHEMA = schema_key("schema")
_COMMAND = schema_key("command")
_SHARDCLI_VERSION = schema_key("shardcli_version")
_RUNTIME = schema_key("runtime")
_PLATFORM = schema_key("runtime", "platform")
_DEVICE_KIND = schema_key("runtime", "device_kind")
_MESH = schema_key("mesh")
_MESH_SHAPE = schema_key("mesh", "shape")
_MESH_AXES = schema_key("mesh", "axes")
_CONFIG = schema_key("config")
_DTYPE = schema_key("config", "dtype")


@dataclass(frozen=True)
class CompareRequest:
    """Two result files and how to judge them.

    Attributes:
        base: path of the baseline JSON document, as the user gave it.
        new: path of the JSON document to judge against it.
        metric: a name in METRICS, or None for the command's default (busbw, or time for matmul).
        tolerance: how much worse than base a value may be, as a fraction (0.1 is 10%).
    """

    base: str
    new: str
    metric: str | None = None
    tolerance: float = 0.1


@dataclass(frozen=True)
class CompareRow:
    """One measurement in both files: its key, both values, new/base, and the verdict."""

    key: tuple[Hashable, ...]  # one value per KeyField of the kind
    base: float | None
    new: float | None
    ratio: float | None  # new / base; None when either value is missing or base is 0
    status: str  # ok, regression, better (busbw) or faster (time) beyond the tolerance, or n/a


@dataclass(frozen=True)
class DocFacts:
    """What people want to know about one input file besides its rows (informative only)."""

    file: str
    shardcli_version: str | None
    platform: str | None
    device_kind: str | None
    dtype: str | None


@dataclass(frozen=True)
class CompareResult:
    """Every row of two comparable results, judged with one metric and tolerance."""

    request: CompareRequest
    command: str  # "collective" or "matmul"
    what: str  # "psum over x", "cases allreduce, allgather"
    mesh: str  # "2x2 (x=2, y=2)"
    key_fields: tuple[KeyField, ...]
    metric: Metric
    tolerance: float
    base: DocFacts
    new: DocFacts
    rows: tuple[CompareRow, ...]

    @property
    def regressions(self) -> tuple[CompareRow, ...]:
        return tuple(r for r in self.rows if r.status == "regression")

    @property
    def compared(self) -> int:
        """Rows with a value in both files."""
        return sum(1 for r in self.rows if r.ratio is not None)

    @property
    def worst(self) -> CompareRow | None:
        """The row whose new/base ratio is the worst for the metric (lowest busbw, highest time)."""
        rated = [(r.ratio, r) for r in self.rows if r.ratio is not None]
        if not rated:
            return None
        pick = min if self.metric.higher_is_better else max
        return pick(rated, key=lambda pair: pair[0])[1]

    def describe_key(self, key: tuple[Hashable, ...]) -> str:
        """`size 4K, placement out`."""
        return describe_key(self.key_fields, key)


def judge(base: float | None, new: float | None, metric: Metric, tolerance: float) -> str:
    """The status of one row: regression when new is worse than base by more than the tolerance."""
    if base is None or new is None:
        return "n/a"
    if metric.higher_is_better:
        if new < base * (1 - tolerance):
            return "regression"
        return metric.improved if new > base * (1 + tolerance) else "ok"
    if new > base * (1 + tolerance):
        return "regression"
    return metric.improved if new < base * (1 - tolerance) else "ok"


# --- comparing ------------------------------------------------------------------------------------


def _command(doc: Doc, file: str) -> str:
    command = read_field(doc, _COMMAND, str, "", file)
    if command not in KINDS:
        raise ShardcliError(
            f"{file} is a result of shardcli {command}; compare knows {', '.join(KINDS)} results"
        )
    return command


def _mesh(doc: Doc, file: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    mesh = read_field(doc, _MESH, dict, "", file)
    shape = read_field(mesh, _MESH_SHAPE, list, _MESH, file)
    axes = read_field(mesh, _MESH_AXES, list, _MESH, file)
    return tuple(shape), tuple(axes)


def _mesh_text(mesh: tuple[tuple[int, ...], tuple[str, ...]]) -> str:
    """`2x4 (data=2, model=4)`, as MeshSpec.describe writes it."""
    shape, axes = mesh
    if len(shape) != len(axes):
        return f"{'x'.join(map(str, shape))} ({', '.join(map(str, axes))})"
    return f"{'x'.join(map(str, shape))} ({', '.join(f'{a}={n}' for a, n in zip(axes, shape, strict=True))})"


def _facts(doc: Doc, file: str) -> DocFacts:
    """Informative facts; absent or odd ones are left out rather than refused."""

    def text(obj: Any, key: str) -> str | None:
        value = obj.get(key) if isinstance(obj, dict) else None
        return value if isinstance(value, str) else None

    runtime = doc.get(_RUNTIME)
    return DocFacts(
        file=file,
        shardcli_version=text(doc, _SHARDCLI_VERSION),
        platform=text(runtime, _PLATFORM),
        device_kind=text(runtime, _DEVICE_KIND),
        dtype=text(doc.get(_CONFIG), _DTYPE),
    )


def _keyed(rows: list[Row], kind: ResultKind, file: str) -> dict[tuple[Hashable, ...], float | None]:
    out: dict[tuple[Hashable, ...], float | None] = {}
    for key, value in rows:
        if key in out:
            raise ShardcliError(f"{file} has {describe_key(kind.key_fields, key)} twice")
        out[key] = value
    return out


def _missing_row(
    have: dict[tuple[Hashable, ...], Any], lack: dict[tuple[Hashable, ...], Any]
) -> tuple[Hashable, ...] | None:
    """The shortest key prefix of a row in `have` that `lack` has no row under (`size 4K`), if any."""
    for key in have:
        if key in lack:
            continue
        for n in range(1, len(key) + 1):
            if not any(other[:n] == key[:n] for other in lack):
                return key[:n]
    return None


def compare_documents(base: Doc, new: Doc, request: CompareRequest) -> CompareResult:
    """Check that two result documents are comparable, and judge every row.

    Args:
        base: the baseline document (`shardcli collective|matmul --format json`).
        new: the document to judge.
        request: the file names (for messages), the metric and the tolerance.

    Returns:
        One row per measurement, in the base document's order.

    Raises:
        ShardcliError: the documents are malformed or not comparable (the message says why).
    """
    files, docs = (request.base, request.new), (base, new)
    schema = same_in_both(
        docs,
        files,
        lambda d, f: read_field(d, _SCHEMA, int, "", f),
        "{base} has schema version {b} but {new} has {n}; compare needs files written by the same "
        "shardcli version",
    )
    if schema != SCHEMA_VERSION:
        raise ShardcliError(
            f"{files[0]} and {files[1]} have schema version {schema}, but this shardcli reads "
            f"schema {SCHEMA_VERSION}; compare them with the shardcli that wrote them"
        )
    command = same_in_both(
        docs,
        files,
        _command,
        "{base} is a {b} result but {new} is a {n} result; compare needs two results of the same command",
    )
    kind = KINDS[command]
    metric_name = request.metric or kind.metrics[0]
    if metric_name not in kind.metrics:
        raise ShardcliError(
            f"--metric {metric_name} does not apply to {kind.command} results; "
            f"use --metric {' or '.join(kind.metrics)}"
        )
    if not 0 <= request.tolerance < math.inf:
        raise ShardcliError(f"--tolerance {request.tolerance!r} is not valid; give 0 or more")
    metric = METRICS[metric_name]
    mesh = same_in_both(
        docs,
        files,
        _mesh,
        "{base} ran on mesh {b} but {new} on mesh {n}; compare needs the same --mesh and --axes",
        show=_mesh_text,
    )
    what = kind.check_config(base, new, files)
    b_rows, n_rows = (
        _keyed(kind.read_rows(d, metric, f), kind, f) for d, f in zip((base, new), files, strict=True)
    )
    for have, lack, (here, there) in ((b_rows, n_rows, files), (n_rows, b_rows, files[::-1])):
        missing = _missing_row(have, lack)
        if missing is not None:
            raise ShardcliError(
                f"{describe_key(kind.key_fields, missing)} is in {here} but not in {there}; "
                f"compare needs the same {kind.row_flags} in both"
            )
    rows = []
    for key, b_value in b_rows.items():
        n_value = n_rows[key]
        ratio = n_value / b_value if b_value and n_value is not None else None
        rows.append(
            CompareRow(key, b_value, n_value, ratio, judge(b_value, n_value, metric, request.tolerance))
        )
    if rows and all(r.base is None or r.new is None for r in rows):
        other = "time" if metric.name == "busbw" else "busbw"
        raise ShardcliError(
            f"no row of {files[0]} and {files[1]} has a {metric.name} value in both, so nothing can be "
            f"compared; use --metric {other}"
        )
    return CompareResult(
        request=request,
        command=kind.command,
        what=what,
        mesh=_mesh_text(mesh),
        key_fields=kind.key_fields,
        metric=metric,
        tolerance=request.tolerance,
        base=_facts(base, files[0]),
        new=_facts(new, files[1]),
        rows=tuple(rows),
    )


def run_compare(request: CompareRequest) -> CompareResult:
    """Load both files named in the request and compare them (see `compare_documents`)."""
    base = load_document(request.base)
    new = load_document(request.new)
    return compare_documents(base, new, request)
