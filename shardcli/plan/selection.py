"""Which candidate `plan` compiles next, learning from each compile. Pure Python.

The analytic model (`plan_model`) ranks every candidate; the compiler's word on memory is better.
After each compile the selector keeps compiled / modelled memory per remat policy (the model's
activation counts are simplest for remat `full` and furthest off for `none`), and judges the fit of
every candidate not yet compiled by the model's memory times that ratio. The next compile is then
the best-ranked layout (mesh, rule set, remat) not yet settled, at the largest batch that fits by
the corrected model:

- a layout compiled and found to fit is settled (a smaller batch of it only runs fewer sequences);
- a layout compiled and found not to fit stays open below that batch;
- while no compile has fit and no candidate is expected to, the smallest batch of each untried
  layout is compiled, the least memory first, so that a plan where nothing fits says so from
  compiles; once something fits, layouts expected not to are left uncompiled (and say why).

So the compile budget (`--compile N`) goes to layouts expected to fit, and a model that was wrong
about one layout's memory costs one compile, not N.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from shardcli.plan.analytic import HEADROOM, Modelled

LayoutKey = tuple[Any, ...]


def layout_key(m: Modelled) -> LayoutKey:
    c = m.candidate
    return (c.mesh, c.rule_set, c.remat, c.pipeline)


@dataclass
class MemoryCorrection:
    """Compiled / modelled memory per chip, per remat policy, from this plan's compiles."""

    ratios: dict[str, list[float]] = field(default_factory=dict)

    def learn(self, m: Modelled, needed_bytes: int | None) -> None:
        if needed_bytes and m.memory_bytes > 0:
            self.ratios.setdefault(m.candidate.remat, []).append(needed_bytes / m.memory_bytes)

    def factor(self, remat: str) -> float:
        seen = self.ratios.get(remat)
        return statistics.mean(seen) if seen else 1.0

    def memory(self, m: Modelled) -> float:
        return m.memory_bytes * self.factor(m.candidate.remat)

    def note(self, remat: str) -> str:
        seen = self.ratios.get(remat)
        if not seen:
            return "model"
        return f"model x{self.factor(remat):.2f}, the compiled/modelled memory of {len(seen)} compile(s)"


class CandidateSelector:
    """Hands out candidates to compile, best first, and learns memory from what each compile says.

    Args:
        modelled: every candidate, modelled.
        hbm_bytes: one chip's HBM.
        seq: the model's sequence length (the ranking is tokens per second per chip).
    """

    def __init__(self, modelled: list[Modelled], hbm_bytes: int, seq: int) -> None:
        self.hbm_bytes = hbm_bytes
        self.seq = seq
        self.layouts: dict[LayoutKey, list[Modelled]] = {}
        for m in modelled:
            self.layouts.setdefault(layout_key(m), []).append(m)
        for group in self.layouts.values():
            group.sort(key=lambda m: -m.candidate.global_batch)
        self.correction = MemoryCorrection()
        self.tried: set[int] = set()
        self.fitting: dict[LayoutKey, int] = {}  # layouts compiled and found to fit: at which batch
        self.too_big: dict[LayoutKey, int] = {}  # the smallest batch compiled that did not fit

    def fits(self, m: Modelled) -> bool:
        """Whether the model, corrected by this plan's compiles, expects `m` to fit."""
        return self.correction.memory(m) <= HEADROOM * self.hbm_bytes

    def _open(self, key: LayoutKey) -> list[Modelled]:
        """The layout's batches not yet tried, below any batch compiled that did not fit."""
        if key in self.fitting:
            return []
        limit = self.too_big.get(key)
        return [
            m
            for m in self.layouts[key]
            if id(m) not in self.tried and (limit is None or m.candidate.global_batch < limit)
        ]

    def next(self) -> Modelled | None:
        """The candidate to compile next (None when every layout is settled or tried)."""
        expected = []
        for key in self.layouts:
            fitting = [m for m in self._open(key) if self.fits(m)]
            if fitting:
                expected.append(fitting[0])  # the largest batch expected to fit
        if expected:
            return max(expected, key=lambda m: m.rank_tokens_per_s_per_chip(self.seq))
        if self.fitting:
            return None  # what is left is expected not to fit, and something compiled does
        untried = [
            group[-1]
            for key, group in self.layouts.items()
            if not any(id(m) in self.tried for m in group) and self._open(key)
        ]
        return min(untried, key=self.correction.memory, default=None)

    def learn(self, m: Modelled, fits: bool, needed_bytes: int | None) -> None:
        """What the compile of `m` said: whether it fits, and the memory it needs."""
        self.tried.add(id(m))
        self.correction.learn(m, needed_bytes)
        key = layout_key(m)
        if fits:
            self.fitting[key] = m.candidate.global_batch
        else:
            batch = m.candidate.global_batch
            self.too_big[key] = min(batch, self.too_big.get(key, batch))

    def untried(self, compile_n: int) -> list[tuple[Modelled, str, str]]:
        """(candidate, status, why) for every candidate not compiled: per layout one stands for it
        ("modelled" where a batch of it is expected to fit, else "pruned"), its other batches are
        pruned in its favour. Best ranked first."""
        out: list[tuple[Modelled, str, str]] = []
        for key, group in self.layouts.items():
            rest = [m for m in group if id(m) not in self.tried]
            if not rest:
                continue
            if key in self.fitting:
                why = f"batch {self.fitting[key]} of the same layout was compiled and fits"
                out += [(m, "pruned", why) for m in rest]
                continue
            limit = self.too_big.get(key)
            above = [m for m in rest if limit is not None and m.candidate.global_batch >= limit]
            out += [(m, "pruned", f"batch {limit} of the same layout did not fit (compiled)") for m in above]
            rest = [m for m in rest if m not in above]
            if not rest:
                continue
            fitting = [m for m in rest if self.fits(m)]
            lead = fitting[0] if fitting else rest[-1]
            if fitting:
                out.append((lead, "modelled", f"not compiled: --compile {compile_n} was spent (model)"))
            else:
                why = f"does not fit ({self.correction.note(lead.candidate.remat)})"
                out.append((lead, "pruned", why))
            out += [
                (m, "pruned", f"batch {lead.candidate.global_batch} of the same layout ranks higher (model)")
                for m in rest
                if m is not lead
            ]
        status_order = {"modelled": 0, "pruned": 1}
        out.sort(
            key=lambda x: (
                status_order[x[1]],
                not x[2].startswith("does not fit") and x[1] == "pruned",
                -x[0].rank_tokens_per_s_per_chip(self.seq),
            )
        )
        return out
