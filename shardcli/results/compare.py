"""`shardcli compare`: line up two JSON results of the same command and find the regressions.

Pure Python on purpose: it reads the documents that `shardcli collective` and `shardcli matmul`
print with `--format json`, and imports neither JAX nor NumPy, so comparing two files in CI costs
no device start-up.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from shardcli.errors import ShardcliError
from shardcli.results.schema import DIMS, DOCUMENTS, SCHEMA_VERSION
from shardcli.specs.files import read_json
from shardcli.specs.values import format_bytes

Doc = dict[str, Any]
Files = tuple[str, str]


def _key(*path: str, kinds: tuple[str, ...] = ("collective", "matmul")) -> str:
    """The last key of `path`, once each kind's schema has it there."""
    return [DOCUMENTS[kind].key(*path) for kind in kinds][-1]


def _measured(*path: str) -> str:
    """A key of one measurement, which a collective's placement and a matmul's impl both have."""
    _key("sizes", "placements", *path, kinds=("collective",))
    return _key("runs", "impls", *path, kinds=("matmul",))


# Every key compare reads, named once and looked up in shardcli/results/schema.py when this module
# loads: a key renamed there fails here, at import, rather than in someone's comparison.
_SCHEMA = _key("schema")
_COMMAND = _key("command")
_SHARDCLI_VERSION = _key("shardcli_version")
_RUNTIME = _key("runtime")
_PLATFORM = _key("runtime", "platform")
_DEVICE_KIND = _key("runtime", "device_kind")
_MESH = _key("mesh")
_MESH_SHAPE = _key("mesh", "shape")
_MESH_AXES = _key("mesh", "axes")
_CONFIG = _key("config")
_DTYPE = _key("config", "dtype")
_TIMING = _measured("timing")
_STATS = _measured("timing", "stats_s")
_P50 = _measured("timing", "stats_s", "p50")
_SEVERAL = _key("collectives", kinds=("collectives",))  # several collectives in one document
_COLLECTIVE = _key("config", "collective", kinds=("collective",))
_PARAMS = _key("config", "params", kinds=("collective",))
_OUT_BUFFER = _key("config", "out_buffer", kinds=("collective",))
_PLACEMENT_FLAG = _key("config", "placement", kinds=("collective",))
_SIZES = _key("sizes", kinds=("collective",))
_BYTES_PER_DEVICE = _key("sizes", "bytes_per_device", kinds=("collective",))
_PLACEMENTS = _key("sizes", "placements", kinds=("collective",))
_PLACEMENT = _key("sizes", "placements", "placement", kinds=("collective",))
_BUSBW = _key("sizes", "placements", "busbw_gbps", kinds=("collective",))
_CASES = _key("config", "cases", kinds=("matmul",))
_RUNS = _key("runs", kinds=("matmul",))
_CASE = _key("runs", "case", kinds=("matmul",))
_DIMS = _key("runs", "dims", kinds=("matmul",))
_IMPLS = _key("runs", "impls", kinds=("matmul",))
_IMPL = _key("runs", "impls", "impl", kinds=("matmul",))
_CANONICAL = _key("config", "canonical", kinds=("einsum",))
_IN_SPECS = _key("config", "in_specs", kinds=("einsum",))
_OUT_SPEC = _key("config", "out_spec", kinds=("einsum",))
_EINSUM_SIZES = _key("sizes", kinds=("einsum",))
_SCALE = _key("sizes", "scale", kinds=("einsum",))
_SIZE_SHAPES = _key("sizes", "subscripts", kinds=("einsum",))
_SIZE_OPERANDS = _key("sizes", "operands", kinds=("einsum",))
_OPERAND_SHAPE = _key("sizes", "operands", "shape", kinds=("einsum",))
_RESHARD_SHAPE = _key("config", "shape", kinds=("reshard",))
_FROM = _key("config", "from_spec", kinds=("reshard",))
_TO = _key("config", "to_spec", kinds=("reshard",))
# a compiled program's facts (program_analysis), where einsum's and reshard's impls keep them
_WAYS = _key("impls", kinds=("reshard",))
_WAY = _key("impls", "impl", kinds=("reshard",))
_WAY_STATUS = _key("impls", "status", kinds=("reshard",))
_EINSUM_IMPLS = _key("sizes", "impls", kinds=("einsum",))
_PROGRAM = _key("sizes", "impls", "program", kinds=("einsum",))
_MEMORY = _key("impls", "program", "memory", kinds=("reshard",))
_MEMORY_TOTAL = _key("sizes", "impls", "program", "memory", "total_bytes", kinds=("einsum",))
_SENT = _key("impls", "program", "sent_bytes_per_device", kinds=("reshard",))
_PROGRAM_COLLECTIVES = _key("program", "collectives", kinds=("inspect",))
_RUNS_OF = _key("program", "collectives", "runs", kinds=("inspect",))
_TARGET = _key("target", kinds=("inspect",))
_STATUS = _key("runs", "impls", "status", kinds=("matmul",))


def _same(
    docs: tuple[Doc, Doc],
    files: Files,
    read: Callable[[Doc, str], Any],
    differ: str,
    show: Callable[[Any], str] = str,
    same: Callable[[Any, Any], bool] = lambda b, n: b == n,
    **fields: str,
) -> Any:
    """What `read` finds in the base document, once it found the same in the new one.

    `differ` is the one-line error when it does not, with {base} and {new} for the two files,
    {b} and {n} for what each holds as `show` writes it, and any other `fields` by name (values
    are substituted, never parsed, so braces in them are safe).
    """
    b, n = (read(d, f) for d, f in zip(docs, files, strict=True))
    if not same(b, n):
        raise ShardcliError(differ.format(base=files[0], new=files[1], b=show(b), n=show(n), **fields))
    return b


# --- metrics --------------------------------------------------------------------------------------


def _busbw(entry: Doc, where: str, file: str) -> float | None:
    return _number(entry, _BUSBW, where, file)


def _p50(entry: Doc, where: str, file: str) -> float | None:
    timing = _field(entry, _TIMING, (dict, type(None)), where, file)
    if timing is None:  # not run: the in-place form that does not fit, a refused impl
        return None
    stats = _field(timing, _STATS, dict, f"{where}.{_TIMING}", file)
    return _number(stats, _P50, f"{where}.{_TIMING}.{_STATS}", file)


def _program(entry: Doc, where: str, file: str) -> Doc | None:
    """The compiled program's facts of one impl; None where it has none (refused, device_put)."""
    return _field(entry, _PROGRAM, (dict, type(None)), where, file)


def _memory(entry: Doc, where: str, file: str) -> float | None:
    program = _program(entry, where, file)
    if program is None:
        return None
    memory = _field(program, _MEMORY, (dict, type(None)), f"{where}.{_PROGRAM}", file)
    return None if memory is None else _number(memory, _MEMORY_TOTAL, f"{where}.{_PROGRAM}.{_MEMORY}", file)


def _sent(entry: Doc, where: str, file: str) -> float | None:
    program = _program(entry, where, file)
    return None if program is None else _number(program, _SENT, f"{where}.{_PROGRAM}", file)


def _collective_runs(entry: Doc, where: str, file: str) -> float | None:
    """How many collectives one execution runs (each op times its loop trips)."""
    program = _program(entry, where, file)
    if program is None:
        return None
    at = f"{where}.{_PROGRAM}"
    return sum(_number(c, _RUNS_OF, w, file) or 0 for w, c in _items(program, _PROGRAM_COLLECTIVES, at, file))


@dataclass(frozen=True)
class Metric:
    """What compare lines up: read from one measurement (a placement or an impl) of a document."""

    name: str
    title: str  # what the values are, for headings
    unit: str  # of the values as read and written to JSON
    higher_is_better: bool
    improved: str  # the status of a row that got better beyond the tolerance
    read: Callable[[Doc, str, str], float | None]  # (entry, where, file) -> value or None

    @property
    def better(self) -> str:
        return "higher" if self.higher_is_better else "lower"


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("busbw", "busbw", "GB/s", higher_is_better=True, improved="better", read=_busbw),
        Metric("time", "time p50", "s", higher_is_better=False, improved="faster", read=_p50),
        Metric("memory", "memory per device", "B", higher_is_better=False, improved="smaller", read=_memory),
        Metric("sent", "bytes sent per device", "B", higher_is_better=False, improved="fewer", read=_sent),
        Metric(
            "collectives",
            "collectives run",
            "ops",
            higher_is_better=False,
            improved="fewer",
            read=_collective_runs,
        ),
    )
}

# --- results --------------------------------------------------------------------------------------


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
class KeyField:
    """One column of a row's key: its JSON name, its heading, and how people read its value."""

    name: str
    title: str
    text: Callable[[Any], str] = str
    to_json: Callable[[Any], Any] = lambda value: value


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


def describe_key(fields: tuple[KeyField, ...], key: tuple[Hashable, ...]) -> str:
    return ", ".join(f"{f.title} {f.text(v)}" for f, v in zip(fields, key, strict=False))


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


# --- reading documents ----------------------------------------------------------------------------

_JSON_TYPES = {
    dict: "an object",
    list: "a list",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def _type_name(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _field(obj: Doc, key: str, types: type | tuple[type, ...], where: str, file: str) -> Any:
    """`obj[key]`, checked: a missing key or a wrong type names the file and the key's path."""
    path = f"{where}.{key}" if where else key
    if key not in obj:
        raise ShardcliError(
            f"{file} has no '{path}'; compare reads the JSON of shardcli collective or matmul"
        )
    value = obj[key]
    wanted = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted):
        shown = [t for t in wanted if not (t is int and float in wanted)]  # a number covers integers
        names = " or ".join(_JSON_TYPES.get(t, t.__name__) for t in shown)
        raise ShardcliError(f"{file} has '{path}' as {_type_name(value)}; it should be {names}")
    return value


def _number(obj: Doc, key: str, where: str, file: str) -> float | None:
    """A measured value: a number, or None where there is none (NaN and infinities count as none).

    Raises:
        ShardcliError: a negative value (a time, a bandwidth, bytes or a count below zero would
            read as an improvement it is not).
    """
    value = _field(obj, key, (int, float, type(None)), where, file)
    if value is None or not math.isfinite(value):
        return None
    if value < 0:
        path = f"{where}.{key}" if where else key
        raise ShardcliError(f"{file} has '{path}' = {value:g}; a measured value cannot be negative")
    return float(value)


def _items(obj: Doc, key: str, where: str, file: str) -> list[tuple[str, Doc]]:
    """The objects of a list field, each with its path (`sizes[2]`)."""
    values = _field(obj, key, list, where, file)
    path = f"{where}.{key}" if where else key
    out = []
    for i, item in enumerate(values):
        if not isinstance(item, dict):
            raise ShardcliError(f"{file} has '{path}[{i}]' as {_type_name(item)}; it should be an object")
        out.append((f"{path}[{i}]", item))
    return out


def load_document(path: str) -> Doc:
    """Read one JSON document from a file.

    Raises:
        ShardcliError: the file cannot be read, is not JSON, or is not a JSON object.
    """
    doc = read_json(path)
    if not isinstance(doc, dict):
        raise ShardcliError(
            f"{path} holds {_type_name(doc)}, not a JSON object; "
            "compare reads the JSON of shardcli collective or matmul"
        )
    if _SEVERAL in doc and _CONFIG not in doc:
        raise ShardcliError(
            f"{path} holds several collectives in one document; compare takes one collective per file: "
            "save each collective's run on its own"
        )
    return doc


# --- the two kinds of result ----------------------------------------------------------------------

Row = tuple[tuple[Hashable, ...], float | None]


def _collective_rows(doc: Doc, metric: Metric, file: str) -> list[Row]:
    rows: list[Row] = []
    for where, size in _items(doc, _SIZES, "", file):
        nbytes = _field(size, _BYTES_PER_DEVICE, int, where, file)
        for p_where, placement in _items(size, _PLACEMENTS, where, file):
            name = _field(placement, _PLACEMENT, str, p_where, file)
            rows.append(((nbytes, name), metric.read(placement, p_where, file)))
    return rows


def _matmul_rows(doc: Doc, metric: Metric, file: str) -> list[Row]:
    rows: list[Row] = []
    for where, run in _items(doc, _RUNS, "", file):
        case = _field(run, _CASE, str, where, file)
        dims_doc = _field(run, _DIMS, dict, where, file)
        dims = tuple(_field(dims_doc, d, int, f"{where}.{_DIMS}", file) for d in DIMS.keys)
        for i_where, impl in _items(run, _IMPLS, where, file):
            name = _field(impl, _IMPL, str, i_where, file)
            status = _field(impl, _STATUS, str, i_where, file)
            value = metric.read(impl, i_where, file) if status == "ok" else None
            rows.append(((dims, case, name), value))
    return rows


def _einsum_rows(doc: Doc, metric: Metric, file: str) -> list[Row]:
    rows = []
    for where, size in _items(doc, _EINSUM_SIZES, "", file):
        shapes = tuple(
            tuple(_field(op, _OPERAND_SHAPE, list, o_where, file))
            for o_where, op in _items(size, _SIZE_OPERANDS, where, file)
        )
        rows.extend(_impl_rows(size, _EINSUM_IMPLS, where, metric, file, (_shapes_text(shapes),)))
    return rows


def _inspect_rows(doc: Doc, metric: Metric, file: str) -> list[Row]:
    return [((_field(doc, _TARGET, str, "", file),), metric.read(doc, "", file))]


def _check_inspects(base: Doc, new: Doc, files: Files) -> str:
    return _same(
        (base, new),
        files,
        lambda doc, file: _field(doc, _TARGET, str, "", file),
        "{base} inspected {b} but {new} inspected {n}; compare needs the same program in both",
    )


def _reshard_rows(doc: Doc, metric: Metric, file: str) -> list[Row]:
    return _impl_rows(doc, _WAYS, "", metric, file, ())


def _impl_rows(
    parent: Doc, key: str, where: str, metric: Metric, file: str, lead: tuple[Hashable, ...]
) -> list[Row]:
    rows = []
    for i_where, impl in _items(parent, key, where, file):
        name = _field(impl, _WAY, str, i_where, file)
        status = _field(impl, _WAY_STATUS, str, i_where, file)
        rows.append(((*lead, name), metric.read(impl, i_where, file) if status == "ok" else None))
    return rows


def _shapes_text(shapes: tuple[tuple[int, ...], ...]) -> str:
    return " ".join("x".join(map(str, s)) for s in shapes)


def _config_fact(*keys: str) -> Callable[[Doc, str], Any]:
    def read(doc: Doc, file: str) -> Any:
        config = _field(doc, _CONFIG, dict, "", file)
        return tuple(json.dumps(config.get(k)) for k in keys)

    return read


def _check_einsums(base: Doc, new: Doc, files: Files) -> str:
    subscripts = _same(
        (base, new),
        files,
        _config_fact(_CANONICAL, _IN_SPECS, _OUT_SPEC),
        "{base} has einsum {b} but {new} has {n}; compare needs the same subscripts, --in and --out in both",
        show=" ".join,
    )
    return json.loads(subscripts[0])


def _check_reshards(base: Doc, new: Doc, files: Files) -> str:
    move = _same(
        (base, new),
        files,
        _config_fact(_RESHARD_SHAPE, _FROM, _TO),
        "{base} has reshard {b} but {new} has {n}; compare needs the same --shape, --from and --to in both",
        show=" ".join,
    )
    shape, source, target = (json.loads(m) for m in move)
    return f"{'x'.join(map(str, shape))} from {_spec_text(source)} to {_spec_text(target)}"


def _spec_text(entries: list[list[str] | None]) -> str:
    return ",".join("+".join(e) if e else "None" for e in entries) or "replicated"


def _params_text(params: Doc) -> str:
    """`axes=x, tiled=True`: a collective's parameters as flags people recognise."""
    return ", ".join(
        f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in sorted(params.items())
    )


def _collective_config(doc: Doc, file: str) -> tuple[str, Doc]:
    config = _field(doc, _CONFIG, dict, "", file)
    return _field(config, _COLLECTIVE, str, _CONFIG, file), _field(config, _PARAMS, dict, _CONFIG, file)


def _check_collectives(base: Doc, new: Doc, files: Files) -> str:
    docs = (base, new)
    name = _same(
        docs,
        files,
        lambda d, f: _collective_config(d, f)[0],
        "{base} ran collective {b} but {new} ran {n}; compare needs results of the same collective",
    )
    params = _same(
        docs,
        files,
        lambda d, f: _collective_config(d, f)[1],
        "{base} ran {name} with {b} but {new} with {n}; compare needs the same collective flags",
        show=_params_text,
        name=name,
    )
    _same(
        docs,
        files,
        _out_buffer,
        "{base} timed out-of-place results into {b} buffers but {new} into {n} ones; "
        "compare needs the same --out-buffer",
    )
    return f"{name} over {'+'.join(map(str, params.get('axes', [])))}"


def _out_buffer(doc: Doc, file: str) -> str | None:
    """config.out_buffer; documents from before --out-buffer existed timed fresh outputs."""
    config = _field(doc, _CONFIG, dict, "", file)
    if _OUT_BUFFER not in config:
        return None if config.get(_PLACEMENT_FLAG) == "in" else "fresh"
    value = config[_OUT_BUFFER]
    if value is not None and not isinstance(value, str):
        raise ShardcliError(f"{file} has '{_CONFIG}.{_OUT_BUFFER}' that is not a string")
    return value


def _matmul_cases(doc: Doc, file: str) -> list[str]:
    config = _field(doc, _CONFIG, dict, "", file)
    cases = _field(config, _CASES, list, _CONFIG, file)
    if not all(isinstance(c, str) for c in cases):
        raise ShardcliError(f"{file} has '{_CONFIG}.{_CASES}' with an entry that is not a string")
    return cases


def _check_matmuls(base: Doc, new: Doc, files: Files) -> str:
    cases = _same(
        (base, new),
        files,
        _matmul_cases,
        "{base} has matmul cases {b} but {new} has {n}; compare needs the same --case in both",
        show=", ".join,
        same=lambda b, n: set(b) == set(n),
    )
    return f"cases {', '.join(cases)}"


def _dims_text(dims: tuple[int, int, int]) -> str:
    return ",".join(map(str, dims))


def _dims_json(dims: tuple[int, int, int]) -> dict[str, int]:
    return dict(zip(DIMS.keys, dims, strict=True))


@dataclass(frozen=True)
class ResultKind:
    """A command whose JSON compare reads: how its rows are keyed, read and checked."""

    command: str
    metrics: tuple[str, ...]  # the first is the default
    key_fields: tuple[KeyField, ...]
    row_flags: str  # the flags that choose the rows, for "compare needs the same ..."
    check_config: Callable[[Doc, Doc, Files], str]  # raises when not comparable; -> what
    read_rows: Callable[[Doc, Metric, str], list[Row]]


KINDS: dict[str, ResultKind] = {
    k.command: k
    for k in (
        ResultKind(
            command="collective",
            metrics=("busbw", "time"),
            key_fields=(
                KeyField(_BYTES_PER_DEVICE, "size", text=lambda size: format_bytes(size, short=True)),
                KeyField(_PLACEMENT, "placement"),
            ),
            row_flags="--sizes and --placement",
            check_config=_check_collectives,
            read_rows=_collective_rows,
        ),
        ResultKind(
            command="matmul",
            metrics=("time",),
            key_fields=(
                KeyField(_DIMS, ",".join(DIMS.keys), text=_dims_text, to_json=_dims_json),
                KeyField(_CASE, "case"),
                KeyField(_IMPL, "impl"),
            ),
            row_flags="--case, --impl, --dims and --sizes",
            check_config=_check_matmuls,
            read_rows=_matmul_rows,
        ),
        ResultKind(
            command="einsum",
            metrics=("time", "memory", "sent", "collectives"),
            key_fields=(KeyField(_SIZE_SHAPES, "shapes"), KeyField(_WAY, "impl")),
            row_flags="--impl, --shape and --sizes",
            check_config=_check_einsums,
            read_rows=_einsum_rows,
        ),
        ResultKind(
            command="reshard",
            metrics=("time", "memory", "sent", "collectives"),
            key_fields=(KeyField(_WAY, "impl"),),
            row_flags="--impl",
            check_config=_check_reshards,
            read_rows=_reshard_rows,
        ),
        ResultKind(
            command="inspect",
            metrics=("memory", "sent", "collectives"),
            key_fields=(KeyField(_TARGET, "program"),),
            row_flags="the program",
            check_config=_check_inspects,
            read_rows=_inspect_rows,
        ),
    )
}


# --- comparing ------------------------------------------------------------------------------------


def _command(doc: Doc, file: str) -> str:
    command = _field(doc, _COMMAND, str, "", file)
    if command not in KINDS:
        raise ShardcliError(
            f"{file} is a result of shardcli {command}; compare knows {', '.join(KINDS)} results"
        )
    return command


def _mesh(doc: Doc, file: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    mesh = _field(doc, _MESH, dict, "", file)
    shape = _field(mesh, _MESH_SHAPE, list, _MESH, file)
    axes = _field(mesh, _MESH_AXES, list, _MESH, file)
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
    schema = _same(
        docs,
        files,
        lambda d, f: _field(d, _SCHEMA, int, "", f),
        "{base} has schema version {b} but {new} has {n}; compare needs files written by the same "
        "shardcli version",
    )
    if schema != SCHEMA_VERSION:
        raise ShardcliError(
            f"{files[0]} and {files[1]} have schema version {schema}, but this shardcli reads "
            f"schema {SCHEMA_VERSION}; compare them with the shardcli that wrote them"
        )
    command = _same(
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
    mesh = _same(
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
