"""Which candidate `plan` compiles next (`plan.selection`): pure Python, no compiler.

The compiles are played by hand: each case says what the compiler answered (fits, memory needed)
and checks what the selector does with it.
"""

from __future__ import annotations

import pytest

from shardcli.plan.analytic import HEADROOM, chip_figures
from shardcli.plan.candidates import enumerate_candidates
from shardcli.plan.search import model_candidates
from shardcli.plan.selection import CandidateSelector, layout_key
from shardcli.specs.decoder import PRESETS

GIB = 2**30


def _selector(preset: str = "llama2-7b", torus: tuple[int, ...] = (4, 4, 4), **batch):
    cfg = PRESETS[preset]
    chip = chip_figures("tpu-v5p", torus)
    candidates, _ = enumerate_candidates(
        torus,
        global_batch=batch.get("global_batch"),
        per_device_batch=batch.get("per_device_batch"),
        seq_len=cfg.seq,
    )
    modelled = model_candidates(cfg, candidates, chip, 0.72)
    return CandidateSelector(modelled, chip.hbm_bytes, cfg.seq), modelled, chip


def test_the_first_pick_is_the_best_ranked_layout_at_its_largest_fitting_batch():
    selector, modelled, chip = _selector()
    pick = selector.next()
    assert pick is not None
    fitting = [m for m in modelled if m.memory_bytes <= HEADROOM * chip.hbm_bytes]
    best = max(m.rank_tokens_per_s_per_chip(4096) for m in fitting)
    assert pick.rank_tokens_per_s_per_chip(4096) == best
    same = [m for m in fitting if layout_key(m) == layout_key(pick)]
    assert pick.candidate.global_batch == max(m.candidate.global_batch for m in same)


def test_a_layout_that_fits_is_settled():
    selector, _, _ = _selector()
    first = selector.next()
    assert first is not None
    selector.learn(first, True, first.memory_bytes)
    for _ in range(20):
        m = selector.next()
        if m is None:
            break
        assert layout_key(m) != layout_key(first)
        selector.learn(m, True, m.memory_bytes)


def _refused_then_retried(selector):
    """The first pick's compile needs twice what the model said (more than the chip has); every
    later pick fits as modelled, until the first pick's layout comes back. Returns (first pick, the
    retry of its layout), the retry not yet learned."""
    first = selector.next()
    assert first is not None
    selector.learn(first, False, 2 * first.memory_bytes)
    for _ in range(60):
        m = selector.next()
        if m is None or layout_key(m) == layout_key(first):
            return first, m
        selector.learn(m, True, m.memory_bytes)
    return first, None


def test_a_layout_that_does_not_fit_is_tried_again_below_that_batch():
    selector, _, chip = _selector()
    first, retry = _refused_then_retried(selector)
    batch = first.candidate.global_batch
    assert retry is not None, f"the layout of {first.candidate.label} was never tried below batch {batch}"
    assert retry.candidate.global_batch < batch
    assert selector.correction.memory(retry) <= HEADROOM * chip.hbm_bytes


def test_the_compiled_memory_corrects_the_model_for_its_remat_policy_only():
    selector, modelled, chip = _selector()
    first = selector.next()
    assert first is not None
    selector.learn(first, True, int(1.25 * first.memory_bytes))
    remat = first.candidate.remat
    assert selector.correction.factor(remat) == pytest.approx(1.25)
    others = {m.candidate.remat for m in modelled} - {remat}
    assert others and all(selector.correction.factor(r) == 1.0 for r in others)
    # a candidate of that policy the plain model calls a fit, but not once corrected, is never picked
    border = [
        m
        for m in modelled
        if m.candidate.remat == remat
        and m.memory_bytes <= HEADROOM * chip.hbm_bytes < 1.25 * m.memory_bytes
        and layout_key(m) != layout_key(first)
    ]
    assert border, "the case needs a candidate near the chip's memory"
    picked = []
    while (m := selector.next()) is not None:
        picked.append(m)
        selector.learn(m, True, int(1.25 * m.memory_bytes) if m.candidate.remat == remat else m.memory_bytes)
    assert not {id(m) for m in border} & {id(m) for m in picked}


def test_when_nothing_is_expected_to_fit_the_smallest_batches_are_tried_least_memory_first():
    # a 70B model at 32 sequences per chip on 8 chips: nothing fits
    selector, modelled, chip = _selector("llama2-70b", (2, 2, 2), per_device_batch=32)
    assert not any(selector.fits(m) for m in modelled)
    first = selector.next()
    assert first is not None
    assert first.memory_bytes == min(m.memory_bytes for m in modelled)


def test_every_candidate_is_accounted_for_once():
    selector, modelled, _ = _selector()
    compiled = []
    for _ in range(8):
        m = selector.next()
        assert m is not None
        compiled.append(m)
        selector.learn(m, m.memory_bytes < 80 * GIB, int(1.1 * m.memory_bytes))
    rest = selector.untried(8)
    ids = [id(m) for m in compiled] + [id(m) for m, _, _ in rest]
    assert sorted(ids) == sorted(id(m) for m in modelled)
    assert {status for _, status, _ in rest} <= {"modelled", "pruned"}
    # one row stands for each layout not compiled: the others are pruned in its favour
    standing = [layout_key(m) for m, status, _ in rest if status == "modelled"]
    assert len(standing) == len(set(standing))


def _row(name: str, step_s: float | None, sum_s: float | None, batch: int = 128, fits: bool = True):
    """What `plan.ranked` reads of a compiled row."""
    from types import SimpleNamespace

    estimate = None if step_s is None else SimpleNamespace(estimate_s=step_s, sum_s=sum_s)
    return SimpleNamespace(
        name=name, fits=fits, estimate=estimate, step_s=step_s, pipeline=None,
        candidate=SimpleNamespace(global_batch=batch),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("rows", "order"),
    [
        pytest.param(
            [_row("a", 1.000, 1.30), _row("b", 1.001, 0.95), _row("c", 1.002, 1.10)],
            ["b", "c", "a"],
            id="tied-estimates-least-exposed-first",
        ),
        pytest.param(
            [_row("slow", 1.10, 1.10), _row("fast", 1.00, 1.50)],
            ["fast", "slow"],
            id="a-real-difference-is-not-a-tie",
        ),
        pytest.param(
            [_row("big", 2.0, 2.0, batch=256), _row("small", 1.02, 1.02, batch=128)],
            ["big", "small"],
            id="per-token-not-per-step",
        ),
        pytest.param(
            [
                _row("nofit", 0.5, 0.5, fits=False),
                _row("none", None, None, fits=False),
                _row("fit", 1.0, 1.0),
            ],
            ["fit", "nofit", "none"],
            id="fitting-first",
        ),
    ],
)
def test_compiled_rows_rank_by_estimate_per_token_and_ties_by_exposed_communication(rows, order):
    from shardcli.plan.search import ranked

    assert [r.name for r in ranked(rows)] == order


@pytest.mark.parametrize(
    ("by", "order"),
    [
        pytest.param("throughput", ["big", "small"], id="throughput-per-token"),
        pytest.param("step", ["small", "big"], id="step-shortest-first"),
    ],
)
def test_the_rank_flag_chooses_the_order(by, order):
    """A batch twice as large whose step is 1.5x as long: more tokens per second, a slower step."""
    from shardcli.plan.search import ranked

    rows = [_row("big", 1.5, 1.5, batch=256), _row("small", 1.0, 1.0, batch=128)]
    assert [r.name for r in ranked(rows, by)] == order


def test_the_why_of_a_layout_compiled_twice_names_the_batch_that_fit():
    selector, _, _ = _selector()
    first, second = _refused_then_retried(selector)
    assert second is not None
    selector.learn(second, True, second.memory_bytes)
    batch = second.candidate.global_batch
    rows = [(m, status, why) for m, status, why in selector.untried(8) if layout_key(m) == layout_key(first)]
    assert rows
    assert all(
        (status, why) == ("pruned", f"batch {batch} of the same layout was compiled and fits")
        for _, status, why in rows
    )


def test_a_layout_that_did_not_fit_and_was_not_tried_again_says_so():
    selector, _, _ = _selector()
    first = selector.next()
    assert first is not None
    batch = first.candidate.global_batch
    selector.learn(first, False, 2 * first.memory_bytes)
    rows = {
        id(m): (status, why) for m, status, why in selector.untried(1) if layout_key(m) == layout_key(first)
    }
    above = [m for m in selector.layouts[layout_key(first)] if m.candidate.global_batch > batch]
    for m in above:
        assert rows[id(m)] == ("pruned", f"batch {batch} of the same layout did not fit (compiled)")
    # below it, one batch stands for the layout: expected to fit, or said not to
    below = [rows[id(m)] for m in selector.layouts[layout_key(first)] if m.candidate.global_batch < batch]
    leads = [r for r in below if r[0] == "modelled" or r[1].startswith("does not fit")]
    assert len(leads) == 1
