"""`shardcli inspect --run`: training steps timed as their training loop runs them.

Each step of tests/programs/training_steps.py runs through the executable inspect compiled, and its
report is the report without --run plus the timing and how the donated arrays were given to each
call: fed back from the results of the call before, or copied afresh before it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_inspect import inspect_json
from test_run import OUTPUT_CASES, OUTPUT_FORMATS, check_the_users_output
from test_run import user_output as user_output  # a fixture

# Compiles, processes or whole programs: left out of the quick subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
STEPS = str(ROOT / "tests" / "programs" / "training_steps.py")
LLAMA = str(ROOT / "examples" / "llama.py")
RUN = ("--run", "--iters", "2", "--warmup", "1")


def donation(method: str, donated: int, fed_back: int, copied: int, by: str = "shardcli") -> dict:
    return {
        "method": method,
        "donated_arrays": donated,
        "fed_back_arrays": fed_back,
        "fed_back_by": by if fed_back else None,
        "copied_arrays": copied,
    }


# The params dict holds 3 arrays (w1, b1, w2); nnx's MLP and Adam state hold 14.
@pytest.mark.parametrize(
    ("step", "inputs", "expected"),
    [
        pytest.param("by_argnums", "params_and_batch", donation("fed back", 3, 3, 0), id="donate-argnums"),
        pytest.param("by_argnames", "params_and_batch", donation("fed back", 3, 3, 0), id="donate-argnames"),
        # the new params come back as a tuple: no result has the dict's structure
        pytest.param("renamed", "params_and_batch", donation("copied", 3, 0, 3), id="other-structure-copies"),
        pytest.param("with_static", "static_call", donation("none", 0, 0, 0), id="static-args"),
        pytest.param("keywords", "keyword_call", donation("none", 0, 0, 0), id="kwargs-from-inputs"),
        pytest.param("jitted_here", "jitted_here", donation("fed back", 3, 3, 0), id="pre-jitted"),
        # donate="all" donates the batch too; no result can take its buffer, so XLA leaves it
        pytest.param("equinox_all", "equinox_all", donation("fed back", 4, 3, 0), id="equinox-donate-all"),
        pytest.param("nnx_step", "nnx_step", donation("fed back", 14, 14, 0, "nnx.jit"), id="nnx-jit"),
        pytest.param("nnx_static", "nnx_static", donation("fed back", 14, 14, 0, "nnx.jit"), id="nnx-static"),
    ],
)  # fmt: skip
def test_run_times_the_step_and_says_how_its_donated_arrays_were_given(cli, step, inputs, expected):
    flags = (f"{STEPS}:{step}", "--inputs", f"{STEPS}:{inputs}", "--axes", "data,model")
    doc = inspect_json(cli, *flags, *RUN)
    assert len(doc["timing"]["samples_s"]) == 2 and doc["timing"]["stats_s"]["p50"] > 0
    assert doc["donation"] == expected
    plain = inspect_json(cli, *flags)
    assert plain["timing"] is None and plain["donation"] is None
    # running changes nothing of what was compiled: the same memory, FLOPs, bytes and collectives
    assert doc["program"] == plain["program"]
    assert doc["program"]["memory"]["argument_bytes"] > 0 and doc["program"]["flops_per_device"] > 0


@pytest.mark.parametrize(
    ("step", "inputs", "clause"),
    [
        pytest.param(
            "by_argnums",
            "params_and_batch",
            "3 donated arrays fed back from the results of the call before, as a training loop does",
            id="fed-back",
        ),
        pytest.param(
            "renamed",
            "params_and_batch",
            "3 donated arrays copied afresh before each call, untimed",
            id="copies",
        ),
        pytest.param(
            "nnx_step",
            "nnx_step",
            "14 donated arrays written back into its objects by nnx.jit, as a training loop does",
            id="nnx",
        ),
    ],
)
def test_the_screen_says_how_the_donated_arrays_were_given(cli, step, inputs, clause):
    out = cli(
        ["inspect", f"{STEPS}:{step}", "--inputs", f"{STEPS}:{inputs}", "--axes", "data,model", *RUN],
        env={"COLUMNS": "200"},
    )
    assert out.exit_code == 0, out.output
    assert clause in " ".join(out.stdout.split())


def test_a_call_missing_a_keyword_only_value_is_refused_before_compiling(cli, monkeypatch):
    import shardcli.program.inspect as core

    def compiled(*args, **kwargs):
        raise AssertionError("compiled a call that cannot run")

    monkeypatch.setattr(core, "compile_program", compiled)
    out = cli(
        ["inspect", f"{STEPS}:keywords", "--inputs", f"{STEPS}:keyword_missing", "--axes", "data,model", *RUN]
    )
    assert out.exit_code == 2, out.output
    assert out.stderr.strip().splitlines() == [
        f"shardcli: error: --run cannot call {STEPS}:keywords: its keyword-only argument 'lr' has no "
        'default and no value; return {"args": (...), "kwargs": {\'lr\': ...}} from --inputs FILE.py:NAME'
    ]


def test_the_llama_train_step_runs_at_toy_size_with_its_state_fed_back(cli):
    doc = inspect_json(
        cli, f"{LLAMA}:train_step", "--inputs", f"{LLAMA}:tiny_inputs", "--axes", "data,model", *RUN
    )
    assert doc["timing"]["stats_s"]["p50"] > 0
    # params and the Adam state (count, mu, nu): 1 + 3 x 11 arrays donated. The compiler gives the 9
    # norm scales' results another sharding than their arguments (P(None, 'data') for P()): no call
    # can take those back. It consumes 3 of their arguments (copied afresh) and leaves 6.
    assert doc["donation"] == donation("fed back and copied", 34, 25, 3)


@pytest.mark.parametrize(("fn", "fmt"), OUTPUT_CASES)
def test_what_the_step_prints_while_it_runs_is_the_users(cli, user_output, fn, fmt):
    """As `run`: prints, jax.debug.print and callbacks go to stderr (under JSON the document alone is
    on stdout); a callback that raises or calls sys.exit is the user's error, exit 2 (issue 54)."""
    argv = ["inspect", f"{user_output}:{fn}", "--mesh", "2", "--axes", "x", "--arg", "f32[8]@x", *RUN]
    check_the_users_output(cli([*argv, *OUTPUT_FORMATS[fmt]]), user_output, fn, fmt)
