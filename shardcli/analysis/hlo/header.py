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
_ENTRY_LAYOUT = "entry_computation_layout={"
_LAYOUT_RE = re.compile(r"\{[^{}]*\}")  # an array's layout, `{1,0}`: no backtracking
# More devices than one module is partitioned over (XLA's device assignment holds an int32 per device).
MAX_PARTITIONS = 2**31 - 1


def module_platform(hlo_text: str) -> str | None:
    """The platform whose compiler wrote the optimized module ("cuda", "tpu" or "cpu"), from marks
    only one of them writes; None where the text carries none (or marks of several)."""
    found = [p for p, marks in PLATFORM_MARKS.items() if any(m in hlo_text for m in marks)]
    return found[0] if len(found) == 1 else None


def module_partitions(hlo_text: str) -> int:
    """How many devices the module was partitioned over (`num_partitions`; 1 where the header has none)."""
    found = _PARTITIONS_RE.search(_header(hlo_text))
    return _count(found.group("n")) if found else 1


def _count(digits: str) -> int:
    """A count of the header's, MAX_PARTITIONS + 1 where it has more digits than any count has."""
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= 10 else MAX_PARTITIONS + 1


def _header(hlo_text: str) -> str:
    """The module's first line."""
    return hlo_text.lstrip().split("\n", 1)[0]


def entry_layout(header: str) -> tuple[str, str] | None:
    """(parameters, results) of the header's `entry_computation_layout={(P...)->R...}`, read in one
    pass with brackets balanced (a backtracking regex took minutes on 200 KB of `)->}`); None where
    the header has none or it is not closed."""
    start = header.find(_ENTRY_LAYOUT)
    if start < 0 or header[start + len(_ENTRY_LAYOUT) : start + len(_ENTRY_LAYOUT) + 1] != "(":
        return None
    at = start + len(_ENTRY_LAYOUT)
    depth = 0
    arrow = end = -1
    for i in range(at, len(header)):
        ch = header[i]
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
            if depth == 0 and arrow < 0:
                if ch != ")" or header[i + 1 : i + 3] != "->":
                    return None
                arrow = i
            elif depth < 0:
                end = i
                break
    if arrow < 0 or end < 0:
        return None
    return header[at + 1 : arrow], header[arrow + 2 : end]


def module_problem(hlo_text: str) -> str | None:
    """Why the text is no optimized HLO module (one clause), or None where it is one."""
    head = hlo_text.lstrip()[:200]
    if head.startswith("module @") or head.startswith("#loc"):
        return "it is StableHLO (lowered.as_text()), before XLA compiled it"
    if not head.startswith("HloModule "):
        return "its first line does not start with 'HloModule'"
    header = _header(hlo_text)
    if "is_scheduled=true" not in header:
        return "it is HLO before XLA's optimizations (no is_scheduled=true in its header)"
    if "ENTRY " not in hlo_text:
        return "it has no ENTRY computation"
    partitions = _PARTITIONS_RE.search(header)
    if partitions is not None and not 1 <= _count(partitions.group("n")) <= MAX_PARTITIONS:
        count = partitions.group("n")
        shown = count if len(count) <= 20 else f"a number of {len(count)} digits"
        return (
            f"its header says num_partitions={shown}: a module is partitioned over 1 device or more, "
            f"and at most {MAX_PARTITIONS:,}"
        )
    return None


def entry_array_counts(hlo_text: str) -> tuple[int, int]:
    """(arrays the entry computation takes, arrays it returns), from the header's
    `entry_computation_layout`; (0, 0) where the header has none."""
    found = entry_layout(_header(hlo_text))
    if found is None:
        return 0, 0
    taken = array_types(_LAYOUT_RE.sub("", found[0]))
    returned = array_types(_LAYOUT_RE.sub("", found[1]))
    return len(taken), len(returned)


def entry_parameter_bytes(hlo_text: str) -> tuple[int, int]:
    """(how many arrays the entry computation takes, their bytes per device), from the header's
    `entry_computation_layout` (the shapes after partitioning)."""
    found = entry_layout(_header(hlo_text))
    if found is None:
        return 0, 0
    arrays = array_types(_LAYOUT_RE.sub("", found[0]))
    total = sum(array_bytes(a) for a in arrays)
    return len(arrays), total
