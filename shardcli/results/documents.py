"""The JSON documents shardcli writes: their schema version, and the kinds of document with their keys.

One owner for the shape of `--format json`. The records are declared in shardcli/results/records.py
(the envelope and what several documents share) and shardcli/results/bodies.py (each command's body),
of the shapes in shardcli/results/shapes.py. The writers (shardcli/render) build each record through
the `Record` that names its keys, `shardcli compare` names the keys it reads through `DocumentKind.key`,
and the contract tests check real documents with `document_problems`. (Reading a JSON file safely is
another job: shardcli/specs/files.py.) Pure Python, without NumPy or JAX, so `compare` imports it for free.

A document kind is one entry in `DOCUMENTS`: its name, the `command` values its documents carry,
and the record of its body (the keys after the envelope). A new command's document is its records
(in bodies.py) and that entry:

    INSPECT_BODY = Record(("config", INSPECT_CONFIG), ("program", PROGRAM), ("summary", ...))
    DocumentKind("inspect", ("inspect",), INSPECT_BODY)  # in the tuple that builds DOCUMENTS

Its writer calls `render.jsonout.document("inspect", session, {"config": INSPECT_CONFIG(...), ...})`,
and tests/test_json_schema.py runs it once (REAL_DOCUMENTS) and pins its keys (PINNED_KEYS).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from shardcli.results.bodies import (
    COLLECTIVE_BODY,
    COLLECTIVES_SUMMARY,
    COMPARE_BODY,
    EINSUM_BODY,
    INSPECT_BODY,
    MATMUL_BODY,
    MODEL_BODY,
    PIPELINE_BODY,
    PLAN_BODY,
    PLAN_PROGRAM_BODY,
    RECIPE_BODY,
    RESHARD_BODY,
    RUN_BODY,
    SHARD_BODY,
)
from shardcli.results.records import ENVELOPE, RUN
from shardcli.results.shapes import ListOf, Record, SchemaError, problems

# Raise it when a key of a document kind scripts already read is renamed, added or removed.
# 2: matmul's config has compile_target and each impl its fit (--target); einsum, reshard and inspect
# documents are new (and, before any release of them, a program's loops, XLA's once-counted figures
# and what is missing; inspect's step-time estimate). 3: each matmul, einsum and reshard impl has its
# result's `values` (global and per device, null for results over 256 elements; reshard's
# `values_before` too); before any release of 3, a program's collective names the argument it moves
# (operand), inspect's findings carry count, paths and source, and its collectives come grouped by
# (kind, mesh axes, line) too (collective_groups). 4: a program's library kernels (cuBLAS, cuDNN) and
# the step-time estimate's method and per-op roofline (a GPU); inspect's module (inspect PATH.hlo.txt);
# a fit verdict (matmul, einsum, reshard, inspect) has its status ("at risk" on a GPU), margin_bytes,
# advice and gpu_pool; inspect --run's donation; every run's runtime names the compiler that judged it
# (runtime.compiler: jax, jaxlib, and libtpu or a CUDA plugin for a --target). 5: a program's
# collective carries the user's frames that led to it (stack, innermost first; source is the first);
# a GPU's per-op estimate has the least its launches take (step_time.ops.launch_s and its counts);
# plan's config.rank (its order), its chip's usable_bytes and network_bytes_per_s. 6: plan's
# config.model.attention (dot or flash) and config.mesh (--mesh). 7: a program's memory has
# host_bytes and host_transfer_bytes (remat's activations offloaded to the host), the step-time
# estimate its host term (T_host); plan's compiled figures host_bytes and host_transfer_bytes, its
# estimate t_host_s, its model t_host_s. 8: a program's collective and inspect's collective groups
# carry their role (analysis.roles); inspect's findings their fix (the change, the command that
# applies it, and the figures before and after a compile with it), or null. 9: inspect's
# compile_options and plan's config.compile_options (a GPU target's xla_gpu_enable_triton_gemm=false).
# 10: inspect's step_time.t_exposed_s (the communication the compiled schedule leaves exposed:
# analysis/exposed.py) and each collective group's exposed_s and hidden_s; before any release of 10,
# plan's config.slices (--slices) and each candidate's crosses_slices (the axes across TPU slices);
# plan's config.pipeline (--pipeline) and each candidate's pipeline (stages, microbatches, bubble_s).
SCHEMA_VERSION = 10


@dataclass(frozen=True)
class DocumentKind:
    """One kind of JSON document: the commands that write it and the keys of its body.

    Attributes:
        name: the kind's name in DOCUMENTS.
        commands: the `command` values its documents carry (`model train`, `model restore`).
        body: the keys after the envelope (and after runtime and mesh, for a run on devices).
        on_devices: whether it carries the run's `runtime` and `mesh` (compare's does not).
    """

    name: str
    commands: tuple[str, ...]
    body: Record
    on_devices: bool = True

    @property
    def record(self) -> Record:
        """Every key of the document, the envelope's first."""
        return (RUN if self.on_devices else ENVELOPE).extended(*self.body.fields.items())

    def key(self, *path: str) -> str:
        """The last key of `path` from the document's top (`key("sizes", "placements", "placement")`).

        Raises:
            SchemaError: a key on the path is not in this kind's schema.
        """
        return self.record.key(*path)


COLLECTIVE = DocumentKind("collective", ("collective",), COLLECTIVE_BODY)
DOCUMENTS: dict[str, DocumentKind] = {
    kind.name: kind
    for kind in (
        DocumentKind("mesh", ("mesh",), Record()),
        DocumentKind("shard", ("shard",), SHARD_BODY),
        COLLECTIVE,
        # several collectives in one run: each one's document, in order
        DocumentKind(
            "collectives",
            ("collective",),
            Record(("collectives", ListOf(COLLECTIVE.record)), ("summary", COLLECTIVES_SUMMARY)),
        ),
        DocumentKind("matmul", ("matmul",), MATMUL_BODY),
        DocumentKind("einsum", ("einsum",), EINSUM_BODY),
        DocumentKind("reshard", ("reshard",), RESHARD_BODY),
        DocumentKind("inspect", ("inspect",), INSPECT_BODY),
        DocumentKind("run", ("run",), RUN_BODY),
        DocumentKind("recipe", ("recipe",), RECIPE_BODY),
        DocumentKind("model", ("model train", "model restore"), MODEL_BODY),
        DocumentKind("pipeline", ("pipeline",), PIPELINE_BODY),
        DocumentKind("compare", ("compare",), COMPARE_BODY, on_devices=False),
        DocumentKind("plan", ("plan",), PLAN_BODY, on_devices=False),  # compile-only, one mesh per layout
        DocumentKind("plan-program", ("plan",), PLAN_PROGRAM_BODY, on_devices=False),  # the user's program
    )
}


def kinds_of(command: str) -> list[DocumentKind]:
    """The document kinds whose documents carry this `command`."""
    return [kind for kind in DOCUMENTS.values() if command in kind.commands]


def _kind_for(command: Any, keys: Iterable[str]) -> DocumentKind | None:
    """The kind of a document with this command and these top-level keys (the first, if none fits)."""
    kinds = kinds_of(command) if isinstance(command, str) else []
    keys = set(keys)
    return next((k for k in kinds if set(k.record.fields) == keys), kinds[0] if kinds else None)


def document(command: str, **parts: Any) -> dict[str, Any]:
    """A whole document: the envelope (schema version, command, shardcli version), then `parts`.

    Args:
        command: what the document's `command` says (`collective`, `model train`).
        parts: every other top-level key of the document's kind (`runtime`, `mesh`, `config`, ...).

    Raises:
        SchemaError: no kind has this command, or the parts are not its keys.
    """
    from shardcli import __version__

    values = {"schema": SCHEMA_VERSION, "command": command, "shardcli_version": __version__, **parts}
    kind = _kind_for(command, values)
    if kind is None:
        raise SchemaError(f"no document kind is written by command {command!r}; add one to DOCUMENTS")
    return kind.record(**values)


def document_problems(doc: Any, kind: str | None = None) -> list[str]:
    """Where a document differs from its kind's schema (empty when it fits exactly).

    Args:
        doc: a parsed document.
        kind: a name in DOCUMENTS; by default the kind its `command` and top-level keys name.
    """
    if not isinstance(doc, dict):  # "the document: a list where an object should be"
        return problems(doc, ENVELOPE)
    found = DOCUMENTS[kind] if kind is not None else _kind_for(doc.get("command"), doc)
    if found is None:
        return [f"command: no document kind is written by {doc.get('command')!r}"]
    if doc.get("schema") != SCHEMA_VERSION:
        return [f"schema: {doc.get('schema')!r}, not {SCHEMA_VERSION}"]
    return problems(doc, found.record)


def check_document(doc: Any, kind: str | None = None) -> None:
    """Raise unless the document has exactly the keys of its kind's schema.

    Raises:
        SchemaError: with every problem `document_problems` finds, one per line.
    """
    found = document_problems(doc, kind)
    if found:
        raise SchemaError("\n".join(found))
