"""Pipeline schedules and one pipelined layout's choice of them (`plan.pipeline` does the arithmetic).

Pure Python, importing nothing of the planner, so that a `Candidate` can carry its `PipelineChoice`.
GPipe: Huang et al. 2019, arXiv:1811.06965; 1F1B: Narayanan et al. 2021 (Megatron-LM),
arXiv:2104.04473; MaxText's circular pipeline: its `num_pipeline_repeats`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Schedule:
    """One pipeline schedule: its bubble and the microbatches whose activations the first stage holds."""

    name: str
    words: str
    circular: bool  # R repeats of layers/S/R layers a stage (MaxText's num_pipeline_repeats)
    holds_all: bool  # the first stage holds every microbatch's activations (else min(S, M))
    source: str


SCHEDULES: dict[str, Schedule] = {
    s.name: s
    for s in (
        Schedule("1f1b", "1F1B", False, False, "Narayanan et al. 2021 (Megatron-LM), arXiv:2104.04473"),
        Schedule("gpipe", "GPipe", False, True, "Huang et al. 2019, arXiv:1811.06965"),
        Schedule(
            "circular",
            "MaxText's circular pipeline",
            True,
            True,
            "MaxText's pipeline (num_pipeline_repeats; one layer a stage a repeat by default)",
        ),
    )
}


@dataclass(frozen=True)
class PipelineChoice:
    """S stages, M microbatches, a schedule (and its repeats)."""

    stages: int
    microbatches: int
    schedule: str = "1f1b"
    repeats: int = 1

    @property
    def bubble_fraction(self) -> float:
        """The bubble's share of the step: (S - 1)/(R x M + S - 1)."""
        s, m, r = self.stages, self.microbatches, self.repeats
        return (s - 1) / (r * m + s - 1)

    @property
    def in_flight(self) -> int:
        """Microbatches whose activations the first stage holds at once."""
        if SCHEDULES[self.schedule].holds_all:
            return self.microbatches
        return min(self.stages, self.microbatches)

    @property
    def key(self) -> str:
        s, m, r = self.stages, self.microbatches, self.repeats
        return f"pp[stages={s},microbatches={m},{self.schedule},repeats={r}]"
