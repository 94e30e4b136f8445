"""What `shardcli compare` measures: each metric, and how one measurement's value is read.

A `Metric` reads one value (busbw, time p50, memory, bytes sent, collectives run) from one
measurement of a document: a collective's placement, a matmul, einsum or reshard impl, an inspect.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from shardcli.results.compare.reading import (
    Doc,
    measurement_key,
    read_field,
    read_number,
    read_objects,
    schema_key,
)

# Every key a metric reads, looked up in the schema when this module loads.
_TIMING = measurement_key("timing")
_STATS = measurement_key("timing", "stats_s")
_P50 = measurement_key("timing", "stats_s", "p50")
_BUSBW = schema_key("sizes", "placements", "busbw_gbps", kinds=("collective",))
# a compiled program's facts (program_analysis), where einsum's and reshard's impls keep them
_PROGRAM = schema_key("sizes", "impls", "program", kinds=("einsum",))
_MEMORY = schema_key("impls", "program", "memory", kinds=("reshard",))
_MEMORY_TOTAL = schema_key("sizes", "impls", "program", "memory", "total_bytes", kinds=("einsum",))
_SENT = schema_key("impls", "program", "sent_bytes_per_device", kinds=("reshard",))
_PROGRAM_COLLECTIVES = schema_key("program", "collectives", kinds=("inspect",))
_RUNS_OF = schema_key("program", "collectives", "runs", kinds=("inspect",))


def _busbw(entry: Doc, where: str, file: str) -> float | None:
    return read_number(entry, _BUSBW, where, file)


def _p50(entry: Doc, where: str, file: str) -> float | None:
    timing = read_field(entry, _TIMING, (dict, type(None)), where, file)
    if timing is None:  # not run: the in-place form that does not fit, a refused impl
        return None
    stats = read_field(timing, _STATS, dict, f"{where}.{_TIMING}", file)
    return read_number(stats, _P50, f"{where}.{_TIMING}.{_STATS}", file)


def _program(entry: Doc, where: str, file: str) -> Doc | None:
    """The compiled program's facts of one impl; None where it has none (refused, device_put)."""
    return read_field(entry, _PROGRAM, (dict, type(None)), where, file)


def _memory(entry: Doc, where: str, file: str) -> float | None:
    program = _program(entry, where, file)
    if program is None:
        return None
    memory = read_field(program, _MEMORY, (dict, type(None)), f"{where}.{_PROGRAM}", file)
    if memory is None:
        return None
    return read_number(memory, _MEMORY_TOTAL, f"{where}.{_PROGRAM}.{_MEMORY}", file)


def _sent(entry: Doc, where: str, file: str) -> float | None:
    program = _program(entry, where, file)
    return None if program is None else read_number(program, _SENT, f"{where}.{_PROGRAM}", file)


def _collective_runs(entry: Doc, where: str, file: str) -> float | None:
    """How many collectives one execution runs (each op times its loop trips)."""
    program = _program(entry, where, file)
    if program is None:
        return None
    at = f"{where}.{_PROGRAM}"
    return sum(
        read_number(c, _RUNS_OF, w, file) or 0
        for w, c in read_objects(program, _PROGRAM_COLLECTIVES, at, file)
    )


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
