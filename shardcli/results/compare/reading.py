"""Reading result documents for `shardcli compare`: each key found in the schema, each value checked.

`schema_key` names a key only once the schema has it (a key renamed in shardcli/results/bodies.py
fails where compare names it, at import); `read_field`, `read_number` and `read_objects` read one
value and name the file and the key's path when it is missing or of the wrong type; `load_document`
reads one file. Pure Python, with no JAX or NumPy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from shardcli.errors import ShardcliError
from shardcli.results.documents import DOCUMENTS
from shardcli.specs.files import read_json

Doc = dict[str, Any]
Files = tuple[str, str]


def schema_key(*path: str, kinds: tuple[str, ...] = ("collective", "matmul")) -> str:
    """The last key of `path`, once each kind's schema has it there."""
    return [DOCUMENTS[kind].key(*path) for kind in kinds][-1]


def measurement_key(*path: str) -> str:
    """A key of one measurement, which a collective's placement and a matmul's impl both have."""
    schema_key("sizes", "placements", *path, kinds=("collective",))
    return schema_key("runs", "impls", *path, kinds=("matmul",))


def same_in_both(
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


def read_field(obj: Doc, key: str, types: type | tuple[type, ...], where: str, file: str) -> Any:
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


def read_number(obj: Doc, key: str, where: str, file: str) -> float | None:
    """A measured value: a number, or None where there is none (NaN and infinities count as none).

    Raises:
        ShardcliError: a negative value (a time, a bandwidth, bytes or a count below zero would
            read as an improvement it is not).
    """
    value = read_field(obj, key, (int, float, type(None)), where, file)
    path = f"{where}.{key}" if where else key
    if isinstance(value, int):  # JSON's integers have no bound; a float's range does
        try:
            value = float(value)
        except OverflowError:
            raise ShardcliError(
                f"{file} has '{path}' as an integer of {value.bit_length()} bits, beyond any measured "
                f"value (a float's range)"
            ) from None
    if value is None or not math.isfinite(value):
        return None
    if value < 0:
        raise ShardcliError(f"{file} has '{path}' = {value:g}; a measured value cannot be negative")
    return float(value)


def read_objects(obj: Doc, key: str, where: str, file: str) -> list[tuple[str, Doc]]:
    """The objects of a list field, each with its path (`sizes[2]`)."""
    values = read_field(obj, key, list, where, file)
    path = f"{where}.{key}" if where else key
    out = []
    for i, item in enumerate(values):
        if not isinstance(item, dict):
            raise ShardcliError(f"{file} has '{path}[{i}]' as {_type_name(item)}; it should be an object")
        out.append((f"{path}[{i}]", item))
    return out


# the keys load_document reads
_SEVERAL = schema_key("collectives", kinds=("collectives",))  # several collectives in one document
_CONFIG = schema_key("config")


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
