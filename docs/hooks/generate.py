"""MkDocs hook: the pages made from the app itself while the site builds.

- `reference/commands.md`: `shardcli --help` and `shardcli COMMAND [SUBCOMMAND] --help` for every
  command registered in the Typer app (found in the app, not listed here), and the exit codes of
  `shardcli.errors.ExitCode`.
- `reference/json-schema.md`: the keys of every document kind in `shardcli.results.documents.DOCUMENTS`,
  the module that the writers, `compare` and the contract tests use too.

Each page is hand-written prose with a marker (`<!-- shardcli:commands -->`,
`<!-- shardcli:json-schema -->`) that this hook replaces. The help text comes from fresh processes,
100 columns wide without color, exactly as bench/gen_cli_reference.py renders it.
"""

from __future__ import annotations

import importlib.util
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
COMMANDS_MARKER = "<!-- shardcli:commands -->"
SCHEMA_MARKER = "<!-- shardcli:json-schema -->"


def _generator() -> Any:
    """bench/gen_cli_reference.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location(
        "gen_cli_reference", ROOT / "bench" / "gen_cli_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_cli_reference", module)
    spec.loader.exec_module(module)
    return module


def commands_reference() -> str:
    """Every command's `--help` under its own heading, then the exit codes."""
    gen = _generator()
    paths: list[list[str]] = [[], *gen.command_paths()]
    with ThreadPoolExecutor(max_workers=4) as pool:
        helps = list(pool.map(lambda args: gen.run_shardcli([*args, "--help"]), paths))
    parts = []
    for args, text in zip(paths, helps, strict=True):
        level = "##" if len(args) <= 1 else "###"
        title = " ".join(["shardcli", *args])
        parts.append(f"{level} `{title}`\n\n```text\n$ {title} --help\n{text}\n```")
    from shardcli.errors import ExitCode

    rows = "\n".join(f"| `{code.value}` | `{code.name}` |" for code in ExitCode)
    parts.append(
        "## Exit codes\n\nFrom `shardcli.errors.ExitCode`; what each one means is in "
        "[Exit codes](../explanation/exit-codes.md).\n\n| code | name |\n| --- | --- |\n" + rows
    )
    return "\n\n".join(parts)


def _describe(shape: Any, named: dict[int, str], kinds: dict[tuple[str, ...], str], depth: int) -> list[str]:
    """Markdown list lines for the keys of `shape` (a Record), nested shapes indented under them."""
    from shardcli.results import shapes

    lines: list[str] = []
    pad = "    " * depth
    for key, sub in shape.fields.items():
        what, inner = _shape_words(sub, named, kinds)
        lines.append(f"{pad}- `{key}`{': ' + what if what else ''}")
        if inner is not None:
            if isinstance(inner, shapes.Tagged):
                for tag, record in inner.variants.items():
                    lines.append(f"{pad}    - `{inner.tag}` = `{tag}`:")
                    lines.extend(_describe(record, named, kinds, depth + 2))
            else:
                lines.extend(_describe(inner, named, kinds, depth + 1))
    return lines


def _shape_words(shape: Any, named: dict[int, str], kinds: dict[tuple[str, ...], str]) -> tuple[str, Any]:
    """How a key's value reads in words, and the record to list under it (or None)."""
    from shardcli.results import shapes

    if shape is None:
        return "", None
    if isinstance(shape, shapes.Maybe):
        what, inner = _shape_words(shape.shape, named, kinds)
        return f"{what or 'a value'}, or `null`", inner
    if isinstance(shape, shapes.ListOf):
        what, inner = _shape_words(shape.item, named, kinds)
        return f"a list, each item {what or 'a value'}", inner
    if isinstance(shape, shapes.MapOf):
        what, inner = _shape_words(shape.value, named, kinds)
        return f"an object with free keys, each value {what or 'a value'}", inner
    if isinstance(shape, shapes.Tagged):
        return f"an object whose `{shape.tag}` says which of these it is", shape
    if shape.keys in kinds:
        return f"a whole [`{kinds[shape.keys]}` document](#{kinds[shape.keys]})", None
    if id(shape) in named:
        name = named[id(shape)]
        return f"a [{name}](#record-{name.lower()}) object", None
    return "an object", shape


def _records(shape: Any, kinds: dict[tuple[str, ...], str]) -> list[Any]:
    """Every Record reachable from `shape`, once per place it is used (a whole document: not entered)."""
    from shardcli.results import shapes

    if shape is None:
        return []
    if isinstance(shape, shapes.Maybe):
        return _records(shape.shape, kinds)
    if isinstance(shape, shapes.ListOf):
        return _records(shape.item, kinds)
    if isinstance(shape, shapes.MapOf):
        return _records(shape.value, kinds)
    if isinstance(shape, shapes.Tagged):
        return [r for record in shape.variants.values() for r in _records(record, kinds)]
    if shape.keys in kinds:
        return []
    return [shape, *(r for sub in shape.fields.values() for r in _records(sub, kinds))]


def json_schema_reference() -> str:
    """The envelope, every document kind's keys, and the records several kinds share."""
    from shardcli.results import bodies, documents, records, shapes

    kinds = {kind.record.keys: name for name, kind in documents.DOCUMENTS.items()}
    named = {**vars(records), **vars(bodies)}  # every record by its name
    globals_by_id = {id(v): k for k, v in named.items() if isinstance(v, shapes.Record) and k.isupper()}
    uses: dict[int, int] = {}
    for kind in documents.DOCUMENTS.values():
        for record in [r for sub in kind.body.fields.values() for r in _records(sub, kinds)]:
            uses[id(record)] = uses.get(id(record), 0) + 1
    # A record used in more than one place is described once, in its own section.
    shared = {i: globals_by_id[i] for i, n in uses.items() if n > 1 and i in globals_by_id}
    parts = [
        f"## The envelope\n\nSchema version **{documents.SCHEMA_VERSION}** "
        "(`shardcli.results.documents.SCHEMA_VERSION`). "
        "Every document starts with these keys; every run on devices (all kinds but `compare`) "
        "goes on with `runtime` and `mesh`:",
        "\n".join(_describe(records.RUN, shared, {}, 0)),
    ]
    for name, kind in documents.DOCUMENTS.items():
        writers = ", ".join(f"`shardcli {c} --format json`" for c in kind.commands)
        after = "after the envelope, `runtime` and `mesh`" if kind.on_devices else "after the envelope"
        body = (
            "\n".join(_describe(kind.body, shared, kinds, 0)) or "Nothing more: the envelope is the document."
        )
        parts.append(f"## `{name}` {{#{name}}}\n\nWritten by {writers}. Its keys {after}:\n\n{body}")
    parts.append("## Shared records\n\nRecords that several documents (or several places) hold.")
    for name in sorted(shared.values()):
        record = named[name]
        lines = "\n".join(_describe(record, shared, kinds, 0))
        parts.append(f"### {name.lower()} {{#record-{name.lower()}}}\n\n{lines}")
    return "\n\n".join(parts)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill the generated parts of the reference pages."""
    if COMMANDS_MARKER in markdown:
        markdown = markdown.replace(COMMANDS_MARKER, commands_reference())
    if SCHEMA_MARKER in markdown:
        markdown = markdown.replace(SCHEMA_MARKER, json_schema_reference())
    return markdown
