"""The results `shardcli compare` lines up: per command, how its rows are keyed, read and checked.

A `ResultKind` (one per command in `KINDS`) names the fields of a row's key, reads every row of a
document with one metric, and refuses two documents whose flags make different rows (another
collective, other matmul cases, another einsum or move, another program).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from shardcli.errors import ShardcliError
from shardcli.results.bodies import DIMS
from shardcli.results.compare.metrics import Metric
from shardcli.results.compare.reading import Doc, Files, read_field, read_objects, same_in_both, schema_key
from shardcli.specs.values import format_bytes

# Every key the rows and the checks read, looked up in the schema when this module loads.
_CONFIG = schema_key("config")
_COLLECTIVE = schema_key("config", "collective", kinds=("collective",))
_PARAMS = schema_key("config", "params", kinds=("collective",))
_OUT_BUFFER = schema_key("config", "out_buffer", kinds=("collective",))
_PLACEMENT_FLAG = schema_key("config", "placement", kinds=("collective",))
_SIZES = schema_key("sizes", kinds=("collective",))
_BYTES_PER_DEVICE = schema_key("sizes", "bytes_per_device", kinds=("collective",))
_PLACEMENTS = schema_key("sizes", "placements", kinds=("collective",))
_PLACEMENT = schema_key("sizes", "placements", "placement", kinds=("collective",))
_CASES = schema_key("config", "cases", kinds=("matmul",))
_RUNS = schema_key("runs", kinds=("matmul",))
_CASE = schema_key("runs", "case", kinds=("matmul",))
_DIMS = schema_key("runs", "dims", kinds=("matmul",))
_IMPLS = schema_key("runs", "impls", kinds=("matmul",))
_IMPL = schema_key("runs", "impls", "impl", kinds=("matmul",))
_STATUS = schema_key("runs", "impls", "status", kinds=("matmul",))
_CANONICAL = schema_key("config", "canonical", kinds=("einsum",))
_IN_SPECS = schema_key("config", "in_specs", kinds=("einsum",))
_OUT_SPEC = schema_key("config", "out_spec", kinds=("einsum",))
_EINSUM_SIZES = schema_key("sizes", kinds=("einsum",))
_SCALE = schema_key("sizes", "scale", kinds=("einsum",))
_SIZE_SHAPES = schema_key("sizes", "subscripts", kinds=("einsum",))
_SIZE_OPERANDS = schema_key("sizes", "operands", kinds=("einsum",))
_OPERAND_SHAPE = schema_key("sizes", "operands", "shape", kinds=("einsum",))
_RESHARD_SHAPE = schema_key("config", "shape", kinds=("reshard",))
_FROM = schema_key("config", "from_spec", kinds=("reshard",))
_TO = schema_key("config", "to_spec", kinds=("reshard",))
# an einsum or reshard impl's name and status, and the program inspect read
_WAYS = schema_key("impls", kinds=("reshard",))
_WAY = schema_key("impls", "impl", kinds=("reshard",))
_WAY_STATUS = schema_key("impls", "status", kinds=("reshard",))
_EINSUM_IMPLS = schema_key("sizes", "impls", kinds=("einsum",))
_TARGET = schema_key("target", kinds=("inspect",))


@dataclass(frozen=True)
class KeyField:
    """One column of a row's key: its JSON name, its heading, and how people read its value."""

    name: str
    title: str
    text: Callable[[Any], str] = str
    to_json: Callable[[Any], Any] = lambda value: value


def describe_key(fields: tuple[KeyField, ...], key: tuple[Hashable, ...]) -> str:
    return ", ".join(f"{f.title} {f.text(v)}" for f, v in zip(fields, key, strict=False))


Row = tuple[tuple[Hashable, ...], float | None]


def _collective_rows(doc: Doc, metric: Metric, file: str) -> list[Row]:
    rows: list[Row] = []
    for where, size in read_objects(doc, _SIZES, "", file):
        nbytes = read_field(size, _BYTES_PER_DEVICE, int, where, file)
        for p_where, placement in read_objects(size, _PLACEMENTS, where, file):
            name = read_field(placement, _PLACEMENT, str, p_where, file)
            rows.append(((nbytes, name), metric.read(placement, p_where, file)))
    return rows


def _matmul_rows(doc: Doc, metric: Metric, file: str) -> list[Row]:
    rows: list[Row] = []
    for where, run in read_objects(doc, _RUNS, "", file):
        case = read_field(run, _CASE, str, where, file)
        dims_doc = read_field(run, _DIMS, dict, where, file)
        dims = tuple(read_field(dims_doc, d, int, f"{where}.{_DIMS}", file) for d in DIMS.keys)
        for i_where, impl in read_objects(run, _IMPLS, where, file):
            name = read_field(impl, _IMPL, str, i_where, file)
            status = read_field(impl, _STATUS, str, i_where, file)
            value = metric.read(impl, i_where, file) if status == "ok" else None
            rows.append(((dims, case, name), value))
    return rows


def _einsum_rows(doc: Doc, metric: Metric, file: str) -> list[Row]:
    rows = []
    for where, size in read_objects(doc, _EINSUM_SIZES, "", file):
        shapes = tuple(
            tuple(read_field(op, _OPERAND_SHAPE, list, o_where, file))
            for o_where, op in read_objects(size, _SIZE_OPERANDS, where, file)
        )
        rows.extend(_impl_rows(size, _EINSUM_IMPLS, where, metric, file, (_shapes_text(shapes),)))
    return rows


def _inspect_rows(doc: Doc, metric: Metric, file: str) -> list[Row]:
    return [((read_field(doc, _TARGET, str, "", file),), metric.read(doc, "", file))]


def _check_inspects(base: Doc, new: Doc, files: Files) -> str:
    return same_in_both(
        (base, new),
        files,
        lambda doc, file: read_field(doc, _TARGET, str, "", file),
        "{base} inspected {b} but {new} inspected {n}; compare needs the same program in both",
    )


def _reshard_rows(doc: Doc, metric: Metric, file: str) -> list[Row]:
    return _impl_rows(doc, _WAYS, "", metric, file, ())


def _impl_rows(
    parent: Doc, key: str, where: str, metric: Metric, file: str, lead: tuple[Hashable, ...]
) -> list[Row]:
    rows = []
    for i_where, impl in read_objects(parent, key, where, file):
        name = read_field(impl, _WAY, str, i_where, file)
        status = read_field(impl, _WAY_STATUS, str, i_where, file)
        rows.append(((*lead, name), metric.read(impl, i_where, file) if status == "ok" else None))
    return rows


def _shapes_text(shapes: tuple[tuple[int, ...], ...]) -> str:
    return " ".join("x".join(map(str, s)) for s in shapes)


def _config_fact(*keys: str) -> Callable[[Doc, str], Any]:
    def read(doc: Doc, file: str) -> Any:
        config = read_field(doc, _CONFIG, dict, "", file)
        return tuple(json.dumps(config.get(k)) for k in keys)

    return read


def _check_einsums(base: Doc, new: Doc, files: Files) -> str:
    subscripts = same_in_both(
        (base, new),
        files,
        _config_fact(_CANONICAL, _IN_SPECS, _OUT_SPEC),
        "{base} has einsum {b} but {new} has {n}; compare needs the same subscripts, --in and --out in both",
        show=" ".join,
    )
    return json.loads(subscripts[0])


def _check_reshards(base: Doc, new: Doc, files: Files) -> str:
    move = same_in_both(
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
    config = read_field(doc, _CONFIG, dict, "", file)
    name = read_field(config, _COLLECTIVE, str, _CONFIG, file)
    return name, read_field(config, _PARAMS, dict, _CONFIG, file)


def _check_collectives(base: Doc, new: Doc, files: Files) -> str:
    docs = (base, new)
    name = same_in_both(
        docs,
        files,
        lambda d, f: _collective_config(d, f)[0],
        "{base} ran collective {b} but {new} ran {n}; compare needs results of the same collective",
    )
    params = same_in_both(
        docs,
        files,
        lambda d, f: _collective_config(d, f)[1],
        "{base} ran {name} with {b} but {new} with {n}; compare needs the same collective flags",
        show=_params_text,
        name=name,
    )
    same_in_both(
        docs,
        files,
        _out_buffer,
        "{base} timed out-of-place results into {b} buffers but {new} into {n} ones; "
        "compare needs the same --out-buffer",
    )
    return f"{name} over {'+'.join(map(str, params.get('axes', [])))}"


def _out_buffer(doc: Doc, file: str) -> str | None:
    """config.out_buffer; documents from before --out-buffer existed timed fresh outputs."""
    config = read_field(doc, _CONFIG, dict, "", file)
    if _OUT_BUFFER not in config:
        return None if config.get(_PLACEMENT_FLAG) == "in" else "fresh"
    value = config[_OUT_BUFFER]
    if value is not None and not isinstance(value, str):
        raise ShardcliError(f"{file} has '{_CONFIG}.{_OUT_BUFFER}' that is not a string")
    return value


def _matmul_cases(doc: Doc, file: str) -> list[str]:
    config = read_field(doc, _CONFIG, dict, "", file)
    cases = read_field(config, _CASES, list, _CONFIG, file)
    if not all(isinstance(c, str) for c in cases):
        raise ShardcliError(f"{file} has '{_CONFIG}.{_CASES}' with an entry that is not a string")
    return cases


def _check_matmuls(base: Doc, new: Doc, files: Files) -> str:
    cases = same_in_both(
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
