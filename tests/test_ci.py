"""How `.ci/run` divides the suite: every quick test, and every variant of a test marked
`every_variant`, runs under both Pythons; those marked `once` and a slow test's parametrized variants
after its first are shared out between the two suites by `--share` (tests/conftest.py), the oldest
taking the larger part (`.ci/run` says how much); the other slow tests (each, or its first variant)
run in the newest, a third of them in the oldest too (`--slow-share 1/3`); and what the suite's
faster in-process CPU compiles leave as it was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import _parse_share, clean_env, once_share, run_shardcli

ROOT = Path(__file__).resolve().parent.parent
IDS = [f"tests/test_docs.py::test_console_example_is_up_to_date[block-{i}]" for i in range(60)]


@pytest.mark.parametrize("shares", [1, 2, 3])
def test_every_once_test_falls_in_exactly_one_share(shares):
    placed = {nodeid: once_share(nodeid, shares) for nodeid in IDS}
    assert set(placed.values()) <= set(range(1, shares + 1))
    # the same id, the same share, whichever Python asks (crc32, not hash(), which is salted)
    assert placed == {nodeid: once_share(nodeid, shares) for nodeid in IDS}
    if shares > 1:
        assert len(set(placed.values())) == shares  # no share left empty by 60 ids


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1/2", (range(1, 2), 2)),
        ("2/2", (range(2, 3), 2)),
        ("1/1", (range(1, 2), 1)),
        ("3/5", (range(3, 4), 5)),
        ("1-13/20", (range(1, 14), 20)),
        ("14-20/20", (range(14, 21), 20)),
        ("2-2/3", (range(2, 3), 3)),
    ],
)
def test_a_share_is_k_of_n_or_a_range_of_them(text, expected):
    assert _parse_share(text) == expected


@pytest.mark.parametrize(
    "text",
    ["0/2", "3/2", "1", "x/2", "1/0", "-1/2", "", "1/2/3", "3-2/5", "1-/2", "0-1/2", "1-21/20", "1-2-3/4"],
)
def test_a_bad_share_is_a_usage_error(text):
    with pytest.raises(pytest.UsageError, match=r"--share .* is not valid; give K/N with 1 <= K <= N"):
        _parse_share(text)


def _ci_suite_args() -> dict[str, list[str]]:
    """Each suite's pytest arguments as `.ci/run` gives them (`suite NAME ARGS... "$@"`)."""
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    args = {}
    for line in script.splitlines():
        words = line.split()
        if words[:1] == ["suite"] and words[-1] == '"$@"':
            args[words[1]] = words[2:-1]
    return args


def test_ci_gives_its_two_suites_shares_that_cover_each_shared_test_once():
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    args = _ci_suite_args()
    assert set(args) == {"oldest", "newest"}
    (old, old_n), (new, new_n) = (_parse_share(a[a.index("--share") + 1]) for a in args.values())
    assert old_n == new_n and sorted([*old, *new]) == list(range(1, old_n + 1))  # no share twice, none left
    assert "--slow-share" in args["oldest"] and "--slow-share" not in args["newest"]
    assert 'oldest_run "$@" &' in script and 'newest_run "$@" &' in script  # side by side


def test_python_311_gets_no_ml_dtypes_that_takes_a_second_to_import():
    """pyproject.toml leaves ml_dtypes 0.7.0 out on Python 3.11: beside the NumPy 2.4 that Python 3.11
    gets, it took 0.9-1.2 s to import (bench/startup.py), a second of every process's start."""
    from importlib.metadata import version

    assert sys.version_info >= (3, 12) or version("ml_dtypes") != "0.7.0", version("numpy")


def _collected(*args: str) -> set[str]:
    return set(_collected_in_order(*args))


def _collected_in_order(*args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=clean_env(),
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


# The two tests below read how pytest collects, the same under any JAX: `once`.
@pytest.mark.slow
@pytest.mark.once
def test_the_two_suites_run_each_test_somewhere_and_every_quick_test_in_both():
    """With `.ci/run`'s own arguments: `once` tests in one suite; a slow test's variants after its
    first in one suite; each other slow test (or its first variant) in the newest, a third of them in
    the oldest too; every variant of a test marked `every_variant`, and every quick test, in both."""
    files = ["tests/test_ci.py", "tests/test_bench_quick.py", "tests/test_target.py"]
    in_order = _collected_in_order(*files)
    everything = set(in_order)
    quick = _collected(*files, "-m", "not slow")
    args = _ci_suite_args()
    oldest, newest = _collected(*files, *args["oldest"]), _collected(*files, *args["newest"])
    assert (oldest | newest) == everything  # nothing left out
    assert quick <= oldest & newest
    plain = "tests/test_ci.py::test_ci_gives_its_two_suites_shares_that_cover_each_shared_test_once"
    assert plain in oldest & newest  # quick, not marked once, not parametrized: in both
    ours = {t for t in everything if "::test_the_two_suites" in t or "::test_the_tests_of_the_built" in t}
    assert len(ours) == 2 and not ours & oldest & newest  # marked once: in one suite
    bench = {t for t in everything if t.startswith("tests/test_bench_quick.py")}
    assert not bench & oldest & newest and bench & oldest and bench & newest  # once: in one suite each
    either_jax = {t for t in everything if "either_jax[" in t}
    assert len(either_jax) == 4 and either_jax <= oldest & newest  # every_variant: all in both
    names = [t for t in in_order if t.startswith("tests/test_target.py::test_target_names[")]
    assert len(names) > 2
    assert names[0] in newest and not set(names[1:]) & oldest & newest  # later variants: in one suite
    slow = {t for t in everything - quick if t.startswith("tests/test_target.py") and "[" not in t}
    assert len(slow) > 6 and slow <= newest  # the slow tests: all in the newest,
    assert 0 < len(slow & oldest) < len(slow)  # some of them in the oldest too


@pytest.mark.slow
@pytest.mark.once
def test_the_tests_of_the_built_site_fall_in_one_share():
    """`once("docs-site")`: the four tests of the built site hash by that name, so one suite builds it."""
    first = _collected("tests/test_docs.py", "--share", "1/2", "-m", "not slow")
    second = _collected("tests/test_docs.py", "--share", "2/2", "-m", "not slow")
    site = {
        f"tests/test_docs.py::test_{name}"
        for name in (
            "site_builds_with_every_page",
            "reference_has_every_command_and_option",
            "reference_has_every_exit_code",
            "json_schema_page_has_every_kind_and_key",
        )
    }
    ours = [share & site for share in (first, second)]
    assert sorted(len(s) for s in ours) == [0, 4], ours


def _without_timings(doc):
    if isinstance(doc, dict):
        return {k: _without_timings(v) for k, v in doc.items() if not k.endswith("_s")}
    if isinstance(doc, list):
        return [_without_timings(v) for v in doc]
    return doc


@pytest.mark.slow
def test_the_suites_fast_cpu_codegen_leaves_every_figure_as_it_was(cli):
    """In-process compiles skip LLVM's optimizations (conftest's FAST_CPU_CODEGEN); a report of a
    scanned transformer's train step is the same, timings aside, as a process with XLA's defaults."""
    args = ["inspect", "examples/llama.py:train_step", "--inputs", "examples/llama.py:inputs"]
    args += ["--mesh", "2x4", "--axes", "data,model", "--format", "json"]
    here = cli(args)
    assert here.exit_code == 0, here.output
    default = run_shardcli(*args, timeout=300)
    assert default.returncode == 0, default.stderr
    # the runtime section describes the process (its plugins, caches and notes), not the compile
    here_doc, default_doc = json.loads(here.stdout), json.loads(default.stdout)
    assert here_doc.pop("runtime")["platform"] == default_doc.pop("runtime")["platform"] == "cpu"
    assert _without_timings(here_doc) == _without_timings(default_doc)
