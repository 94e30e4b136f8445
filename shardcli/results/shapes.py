"""The shapes JSON values have (Record, ListOf, MapOf, Maybe, Tagged), and checking a value against one.

A `Record` names a JSON object's keys in order and builds one when called; the others wrap the shapes
inside lists, free-keyed objects, nulls and tagged objects. `problems` lists every place a parsed value
differs from its shape. Pure Python: shardcli/results/records.py and bodies.py declare the records,
shardcli/results/documents.py the document kinds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class SchemaError(ValueError):
    """A document or record does not have the keys the schema gives it: a bug in shardcli."""


class Record:
    """A JSON object with a fixed set of keys, in order; some keys hold a nested shape.

    `Record("op", "count", ("stats_s", STATS))`: a plain key holds any JSON value, a (key, shape)
    pair holds a value of that shape. Calling a record builds one, as a TypedDict does:
    `HLO_OP(op="all-reduce", count=1, result_bytes=64)`, in the record's key order.
    """

    def __init__(self, *fields: str | tuple[str, Shape]) -> None:
        self.fields: dict[str, Shape] = dict((f, None) if isinstance(f, str) else f for f in fields)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self.fields)

    def key(self, *path: str) -> str:
        """The last key of `path`, once every key on it is found here (through lists and maps).

        Raises:
            SchemaError: a key on the path is not in the schema.
        """
        shape: Shape = self
        for i, name in enumerate(path):
            record = _record_in(shape)
            if record is None or name not in record.fields:
                raise SchemaError(f"the schema has no '{'.'.join(path[: i + 1])}'")
            shape = record.fields[name]
        return path[-1]

    def extended(self, *fields: str | tuple[str, Shape]) -> Record:
        """This record's keys followed by more."""
        return Record(*self.fields.items(), *fields)

    def __call__(self, **values: Any) -> dict[str, Any]:
        """One record with exactly these keys, in the schema's order.

        Raises:
            SchemaError: a key is missing or is not in the schema.
        """
        problem = _key_problem("a record", self, values)
        if problem is not None:
            raise SchemaError(problem)
        return {k: values[k] for k in self.fields}

    def __repr__(self) -> str:
        return f"Record{self.keys}"


@dataclass(frozen=True)
class ListOf:
    """A JSON list whose items all have one shape."""

    item: Shape


@dataclass(frozen=True)
class MapOf:
    """A JSON object with free keys (axis names, placements) whose values all have one shape."""

    value: Shape


@dataclass(frozen=True)
class Maybe:
    """A shape, or null where there is none (a run not run, no roofline)."""

    shape: Shape


@dataclass(frozen=True)
class Tagged:
    """A JSON object whose `tag` key names which record it is (`{"kind": "table", ...}`)."""

    tag: str
    variants: Mapping[str, Record]


# A nested value's shape; None is a plain value (number, string, bool, null, or a free list or map).
Shape = Record | ListOf | MapOf | Maybe | Tagged | None


def _inside(shape: ListOf | MapOf | Maybe) -> Shape:
    if isinstance(shape, ListOf):
        return shape.item
    return shape.value if isinstance(shape, MapOf) else shape.shape


def _record_in(shape: Shape) -> Record | None:
    """The record a path steps into: through lists, maps and nulls."""
    while isinstance(shape, ListOf | MapOf | Maybe):
        shape = _inside(shape)
    return shape if isinstance(shape, Record) else None


def _key_problem(where: str, record: Record, value: Mapping[str, Any]) -> str | None:
    missing = [k for k in record.fields if k not in value]
    extra = [k for k in value if k not in record.fields]
    parts = [f"missing {', '.join(map(repr, missing))}"] if missing else []
    parts += [f"unexpected {', '.join(map(repr, extra))}"] if extra else []
    return f"{where}: {'; '.join(parts)}" if parts else None


_KINDS: dict[type, str] = {dict: "an object", list: "a list"}


def _kind_of(value: Any) -> str:
    return "null" if value is None else _KINDS.get(type(value), "a value")


def problems(value: Any, shape: Shape, where: str = "") -> list[str]:
    """Every place `value` differs from `shape`: a key missing or unexpected, or no object or list.

    Args:
        value: parsed JSON.
        shape: what it should be.
        where: the path of `value`, for the messages (`sizes[0].placements[1]`).

    Returns:
        One line per problem, each starting with its path; empty when the value fits.
    """
    here = where or "the document"
    if shape is None:
        return []
    if isinstance(shape, Maybe):
        return [] if value is None else problems(value, shape.shape, where)
    if isinstance(shape, ListOf):
        if not isinstance(value, list):
            return [f"{here}: {_kind_of(value)} where a list should be"]
        return [p for i, item in enumerate(value) for p in problems(item, shape.item, f"{where}[{i}]")]
    if not isinstance(value, dict):
        return [f"{here}: {_kind_of(value)} where an object should be"]
    if isinstance(shape, MapOf):
        return [p for k, v in value.items() for p in problems(v, shape.value, f"{where}.{k}" if where else k)]
    if isinstance(shape, Tagged):
        tag = value.get(shape.tag)
        record = shape.variants.get(tag) if isinstance(tag, str) else None
        if record is None:
            return [f"{here}: '{shape.tag}' is {tag!r}, not one of {', '.join(shape.variants)}"]
        shape = record
    found = _key_problem(here, shape, value)
    nested = [
        p
        for k, sub in shape.fields.items()
        if sub is not None and k in value
        for p in problems(value[k], sub, f"{where}.{k}" if where else k)
    ]
    return ([found] if found else []) + nested
