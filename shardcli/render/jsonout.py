"""JSON documents for scripts. Nothing but the document goes to stdout in json mode."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from shardcli.results import documents, records
from shardcli.runtime.cluster import coordinator_bind
from shardcli.runtime.mesh import MeshLayout
from shardcli.runtime.session import Session
from shardcli.runtime.timing import Timing
from shardcli.specs.runs import RunOptions
from shardcli.tile_math import Index, Tile

if TYPE_CHECKING:
    from shardcli.analysis.program import HloCollective
    from shardcli.analysis.report import Check
    from shardcli.runtime.arrays import ShownValues


def values_json(values: np.ndarray | None) -> Any:
    """Nested lists of Python numbers (bfloat16 and friends as floats)."""
    if values is None:
        return None
    arr = np.asarray(values)
    if arr.dtype.kind == "V" or arr.dtype.name == "bfloat16" or arr.dtype.kind == "f":
        return arr.astype(np.float64).tolist()
    return arr.tolist()


def shown_values_json(shown: ShownValues | None) -> dict[str, Any] | None:
    """A small result's global values and every device's block; None where values are not shown."""
    if shown is None:
        return None
    return records.RESULT_VALUES(
        global_values=values_json(shown.global_values),
        blocks=[
            records.VALUE_BLOCK(
                device_id=b.device_id, index=index_json(b.index), values=values_json(b.values)
            )
            for b in shown.blocks
        ],
    )


def timing_json(timing: Timing | None) -> dict[str, Any] | None:
    """Compile time, the raw per-iteration samples and their stats, in seconds.

    With several processes, `samples_s` combine theirs per iteration (`across_processes`: max or
    avg) and `processes` holds each one's own.
    """
    if timing is None:
        return None
    return records.TIMING(
        **_samples_json(timing),
        compile_cached=timing.compile_cached,
        blocking="each iteration waits for its result (block_until_ready)",
        across_processes=timing.across_processes,
        processes=[
            records.PROCESS_SAMPLES(process_index=k, **_samples_json(t))
            for k, t in enumerate(timing.per_process)
        ]
        or None,
    )


def _samples_json(timing: Timing) -> dict[str, Any]:
    s = timing.stats
    return records.SAMPLES(
        compile_s=timing.compile_s,
        warmup=timing.warmup,
        samples_s=list(timing.samples),
        stats_s=records.STATS(min=s.min, p50=s.p50, p90=s.p90, max=s.max, mean=s.mean, stdev=s.stdev),
    )


def spec_json(entries: Sequence[Sequence[str]] | None) -> list[list[str] | None] | None:
    """A spec as JSON: per dim the list of its mesh axes, or null for a dim not split (null for none)."""
    return None if entries is None else [list(e) if e else None for e in entries]


def index_json(index: Index) -> list[list[int]]:
    return [[a, b] for a, b in index]


def tiles_json(tiles: Iterable[Tile]) -> list[dict[str, Any]]:
    """Each tile's global index ranges and the devices that hold it."""
    return [records.TILE(index=index_json(t.index), device_ids=list(t.device_ids)) for t in tiles]


def hlo_json(ops: Iterable[HloCollective]) -> list[dict[str, Any]]:
    """The collectives the compiled program holds: op, how many, and their result bytes."""
    return [records.HLO_OP(op=h.op, count=h.count, result_bytes=h.result_bytes) for h in ops]


def checks_json(checks: Iterable[Check]) -> list[dict[str, Any]]:
    """What a run asserted: each property, whether it held, and what was measured."""
    return [records.CHECK(what=c.what, ok=c.ok, detail=c.detail) for c in checks]


def runtime_json(session: Session) -> dict[str, Any]:
    rt = session.runtime
    return records.RUNTIME(
        platform=rt.platform,
        device_kind=rt.device_kind,
        device_count=rt.device_count,
        devices_present=rt.devices_present,
        faked=rt.faked,
        note=rt.note,
        process_count=rt.process_count,
        process_index=rt.process_index,
        distributed=None
        if rt.distributed is None
        else records.DISTRIBUTED(
            coordinator=rt.distributed.coordinator,
            auto=rt.distributed.auto,
            coordinator_bind=coordinator_bind(rt.distributed).listens_on,
        ),
        process_timing=rt.process_timing,
        compile_cache=rt.compile_cache,
        jax_version=rt.jax_version,
        compiler=dict(rt.compiler),
    )


def mesh_json(layout: MeshLayout, mode: str) -> dict[str, Any]:
    return records.MESH(
        shape=list(layout.shape),
        axes=list(layout.axes),
        axis_types=list(layout.axis_types),
        mode=mode,
        devices=[
            records.MESH_DEVICE(
                id=cell.device_id,
                coords=dict(zip(layout.axes, cell.coords, strict=True)),
                process_index=cell.process_index,
                platform=cell.platform,
                device_kind=cell.device_kind,
            )
            for cell in layout.cells
        ],
    )


def document(command: str, session: Session, body: dict[str, Any]) -> dict[str, Any]:
    """A run's document: the envelope, the runtime and mesh every run on devices shares, then `body`.

    Raises:
        SchemaError: `body` does not hold the keys shardcli/results/documents.py gives the command's kind.
    """
    return documents.document(
        command, runtime=runtime_json(session), mesh=mesh_json(session.layout, session.mode), **body
    )


def write_json(doc: dict[str, Any], options: RunOptions) -> None:
    """The one JSON document of a run, on stdout (and in --save's file when asked)."""
    from shardcli.render.console import emit

    emit(json.dumps(doc, indent=2) + "\n", options)
