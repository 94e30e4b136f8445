"""What a compiled module's text says of itself: the compiler that wrote it (CUDA, TPU or CPU), how
many devices it was partitioned over, whether it is optimized HLO at all, and its entry's arrays."""

from __future__ import annotations

import re

from shardcli.analysis.hlo.arrays import array_bytes, array_types

# What each compiler writes that the others do not (checked on jax 0.10-0.12 texts): the GPU's library
# calls and its backend config's fields; the TPU's tiled layouts (`{1,0:T(8,128)(2,1)}`) and memory
# spaces; the CPU's fusion config (`__ynn_fusion`, `outer_dimension_partitions`) and oneDNN calls.
PLATFORM_MARKS = {
    "cuda": ("__cublas$", "__cudnn$", "__triton", '"operation_queue_id"', '"force_earliest_schedule"'),
    "tpu": (":T(", "tpu_custom_call"),
    "cpu": ('"outer_dimension_partitions"', "__ynn_fusion", "__onednn$"),
}
_PARTITIONS_RE = re.compile(r"\bnum_partitions=(?P<n>\d+)")
_ENTRY_LAYOUT_RE = re.compile(r"entry_computation_layout=\{\((?P<params>.*?)\)->(?P<results>.*?)\}(?:, |$)")


def module_platform(hlo_text: str) -> str | None:
    """The platform whose compiler wrote the optimized module ("cuda", "tpu" or "cpu"), from marks
    only one of them writes; None where the text carries none (or marks of several)."""
    found = [p for p, marks in PLATFORM_MARKS.items() if any(m in hlo_text for m in marks)]
    return found[0] if len(found) == 1 else None


def module_partitions(hlo_text: str) -> int:
    """How many devices the module was partitioned over (`num_partitions`; 1 where the header has none)."""
    header = hlo_text.lstrip().split("\n", 1)[0]
    found = _PARTITIONS_RE.search(header)
    return int(found.group("n")) if found else 1


def module_problem(hlo_text: str) -> str | None:
    """Why the text is no optimized HLO module (one clause), or None where it is one."""
    head = hlo_text.lstrip()[:200]
    if head.startswith("module @") or head.startswith("#loc"):
        return "it is StableHLO (lowered.as_text()), before XLA compiled it"
    if not head.startswith("HloModule "):
        return "its first line does not start with 'HloModule'"
    header = hlo_text.lstrip().split("\n", 1)[0]
    if "is_scheduled=true" not in header:
        return "it is HLO before XLA's optimizations (no is_scheduled=true in its header)"
    if "ENTRY " not in hlo_text:
        return "it has no ENTRY computation"
    return None


def entry_array_counts(hlo_text: str) -> tuple[int, int]:
    """(arrays the entry computation takes, arrays it returns), from the header's
    `entry_computation_layout`; (0, 0) where the header has none."""
    header = hlo_text.lstrip().split("\n", 1)[0]
    found = _ENTRY_LAYOUT_RE.search(header)
    if found is None:
        return 0, 0
    taken = array_types(re.sub(r"\{[^{}]*\}", "", found.group("params")))
    returned = array_types(re.sub(r"\{[^{}]*\}", "", found.group("results")))
    return len(taken), len(returned)


def entry_parameter_bytes(hlo_text: str) -> tuple[int, int]:
    """(how many arrays the entry computation takes, their bytes per device), from the header's
    `entry_computation_layout` (the shapes after partitioning)."""
    header = hlo_text.lstrip().split("\n", 1)[0]
    found = _ENTRY_LAYOUT_RE.search(header)
    if found is None:
        return 0, 0
    arrays = array_types(re.sub(r"\{[^{}]*\}", "", found.group("params")))
    total = sum(array_bytes(a) for a in arrays)
    return len(arrays), total
