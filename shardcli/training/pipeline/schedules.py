"""Pipeline schedules as plain data: for each stage, the order of its forward and backward steps.

A step is ("F", m) or ("B", m) for microbatch m. The schedules are pure Python so they can be
checked without devices: every microbatch passes every stage forward in order, and backward in
reverse order, and no stage holds more than its share of activations (1F1B).
"""

from __future__ import annotations

from collections.abc import Callable

Step = tuple[str, int]
Schedule = tuple[tuple[Step, ...], ...]  # per stage


def gpipe(stages: int, microbatches: int, forward_only: bool = False) -> Schedule:
    """GPipe: every stage runs all its forwards, then (training) all its backwards, last first."""
    forward = tuple(("F", m) for m in range(microbatches))
    backward = () if forward_only else tuple(("B", m) for m in reversed(range(microbatches)))
    return tuple(forward + backward for _ in range(stages))


def one_f_one_b(stages: int, microbatches: int, forward_only: bool = False) -> Schedule:
    """1F1B (PipeDream-flush): stage s warms up with S-s-1 forwards, then alternates one forward and
    one backward, then drains its backwards. At most S-s microbatches are in flight on stage s.

    Forward-only, there is nothing to interleave, and it is the same as GPipe.
    """
    if forward_only:
        return gpipe(stages, microbatches, forward_only=True)
    out = []
    for s in range(stages):
        warmup = min(stages - s - 1, microbatches)
        steps: list[Step] = [("F", m) for m in range(warmup)]
        next_f, next_b = warmup, 0
        while next_f < microbatches:
            steps.append(("F", next_f))
            next_f += 1
            steps.append(("B", next_b))
            next_b += 1
        steps += [("B", m) for m in range(next_b, microbatches)]
        out.append(tuple(steps))
    return tuple(out)


SCHEDULES: dict[str, Callable[[int, int, bool], Schedule]] = {"gpipe": gpipe, "1f1b": one_f_one_b}


def textbook_bubble(stages: int, microbatches: int) -> float:
    """The idle fraction of a pipeline with equal steps: (S - 1) / (M + S - 1)."""
    return (stages - 1) / (microbatches + stages - 1)


def max_in_flight(schedule: Schedule) -> list[int]:
    """Per stage: the most microbatches whose forward ran but backward did not, at any point."""
    peaks = []
    for steps in schedule:
        live, peak = 0, 0
        for kind, _ in steps:
            live += 1 if kind == "F" else -1
            peak = max(peak, live)
        peaks.append(peak)
    return peaks
