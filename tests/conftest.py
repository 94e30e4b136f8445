"""Shared fixtures: eight simulated CPU devices, the app in-process, and the app in a subprocess.

JAX fixes its device count when the backend starts, so the config is set (and the backend started)
when this module is imported, before any test can touch JAX. Every in-process CLI run then shares
these eight devices; subprocess runs are the honest check of the real start-up path, where
shardcli fakes as many devices as the mesh needs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from functools import cache

import typer.testing
from typer.testing import CliRunner, Result

# Variables that would change how a process picks or draws its devices, or lays out its screen: the
# caller's are not the tests' (a terminal's COLUMNS, a user's XLA_FLAGS), so none reaches any test,
# however it runs the app (conftest's `cli`, a CliRunner of its own, a subprocess).
_ENV_TO_CLEAR = (
    "XLA_FLAGS",
    "JAX_PLATFORMS",
    "JAX_NUM_CPU_DEVICES",
    "JAX_ENABLE_X64",
    "COLUMNS",
    "NO_COLOR",
    "FORCE_COLOR",
    "SHARDCLI_TRACEBACK",
    "SHARDCLI_COORDINATOR",
    "SHARDCLI_COORDINATOR_BIND",
    "JAX_COORDINATOR_BIND_ADDRESS",
    "SHARDCLI_NUM_PROCESSES",
    "SHARDCLI_PROCESS_ID",
    "SHARDCLI_DISTRIBUTED",
    "SHARDCLI_DEVICES",
    "SHARDCLI_JOIN_TIMEOUT",
    "SHARDCLI_LAUNCHER_PID",
    # JAX's GPU allocator: a GPU target's fit verdict reads them (shardcli/hardware/gpu_memory.py)
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    # JAX's other GPU client settings: checked before the CUDA plugin starts, on every run
    "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB",
    "XLA_PYTHON_CLIENT_ABORT_COLLECTIVES_ON_FAILURE",
    "XLA_PYTHON_CLIENT_USE_TFRT_GPU_CLIENT",
)
for _name in _ENV_TO_CLEAR:
    os.environ.pop(_name, None)

import jax  # noqa: E402 - after the environment is cleared: JAX reads XLA_FLAGS when its backend starts
import pytest  # noqa: E402

IN_PROCESS_DEVICES = 8

# A suite started in the background of a script (`.ci/run` runs both at once with `&`) inherits SIGINT
# ignored, and so would every shardcli it starts, which then keeps an ignored Ctrl-C ignored as any
# background job does: the tests that press Ctrl-C need a terminal's SIGINT. Python's own handler
# here means a child gets the default disposition at exec, as from a shell prompt.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# In-process CPU compiles skip LLVM's optimizations of the machine code: XLA's HLO passes, and so every
# figure shardcli reads (the optimized module, its memory and cost analyses), are the same, while a
# compile takes about a third less time (tests compile hundreds of programs and time none of them).
# The code it makes may round a float32 differently in its last digit: tests that compare a
# tutorial's printed digits run shardcli in a fresh process (tests/test_lessons_run.py).
# XLA reads XLA_FLAGS once, when its CPU client starts below; the variable is gone again before any
# test runs, so no run sees it. tests/test_ci.py checks that a report is the same either way.
FAST_CPU_CODEGEN = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true")
jax.config.update("jax_num_cpu_devices", IN_PROCESS_DEVICES)
jax.config.update("jax_platforms", "cpu")
os.environ["XLA_FLAGS"] = " ".join(FAST_CPU_CODEGEN)
# Start the backend now: otherwise the first in-process run would size it from its own mesh.
try:
    assert len(jax.devices()) == IN_PROCESS_DEVICES
finally:
    del os.environ["XLA_FLAGS"]

from shardcli.cli import app  # noqa: E402 - after the JAX config on purpose

# The persistent compile cache is on by default; tests keep it out of the user's cache directory
# (subprocesses inherit this too).
os.environ["SHARDCLI_CACHE_DIR"] = tempfile.mkdtemp(prefix="shardcli-test-cache-")

RunCli = Callable[..., Result]

# typer's CliRunner builds the app's click command anew on every `invoke` (its 35 commands'
# parameters read from their signatures: about 80 ms a run, a third of the quick subset's time);
# the tests build each app's command once. Where a typer has no such name, each run builds its own.
if hasattr(typer.testing, "_get_command"):
    typer.testing._get_command = cache(typer.testing._get_command)


@pytest.fixture(scope="session")
def cli() -> RunCli:
    """Run the app in-process: `cli(["mesh", "--mesh", "2x4"])` -> typer's Result.

    `result.stdout` and `result.stderr` are captured separately (`result.output` mixes them).
    """
    runner = CliRunner()

    def run(args: Sequence[str], env: Mapping[str, str | None] | None = None) -> Result:
        clean: dict[str, str | None] = {name: None for name in _ENV_TO_CLEAR}
        clean.update(env or {})
        # A run with 64-bit values (--dtype int64, an f64 --arg) turns jax_enable_x64 on for its
        # process, which a real run leaves on exit; here the next in-process run must not inherit it
        # (it would trace every later program's Python floats as float64).
        x64 = bool(jax.config.read("jax_enable_x64"))
        try:
            return runner.invoke(app, list(args), env=clean)
        finally:
            jax.config.update("jax_enable_x64", x64)

    return run


def json_of(cli: RunCli, *args: str, code: int = 0) -> dict:
    """`cli(ARGS --format json)`: the document, after checking the exit code and the schema's keys."""
    from shardcli.results.documents import document_problems

    out = cli([*args, "--format", "json"])
    assert out.exit_code == code, out.output
    doc = json.loads(out.stdout)
    assert document_problems(doc) == []
    return doc


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without the variables that change how JAX or shardcli start."""
    env = {k: v for k, v in os.environ.items() if k not in _ENV_TO_CLEAR}
    env.update(extra or {})
    return env


def pythonpath_first(folder: os.PathLike[str] | str) -> dict[str, str]:
    """PYTHONPATH with FOLDER first and the rest of this process's PYTHONPATH kept.

    Replacing it would hide a checkout that is not installed (run with PYTHONPATH=.).
    """
    rest = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join([str(folder), *([rest] if rest else [])])}


def run_python(
    *args: str, timeout: float = 60, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python ARGS` in a fresh interpreter with a clean JAX environment (plus `env`)."""
    env = clean_env(env)
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


def run_shardcli(
    *args: str, timeout: float = 60, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python -m shardcli ARGS` in a fresh process (the real device start-up path)."""
    return run_python("-m", "shardcli", *args, timeout=timeout, env=env)


@pytest.fixture(scope="session")
def shardcli_subprocess() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_shardcli


@pytest.fixture(scope="session")
def python_subprocess() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_python


# A long command's progress on a stderr that is no terminal (`shardcli plan: compiling 2/8: ...`):
# progress, not an error line, whatever follows it.
_PROGRESS_LINE = re.compile(r"^shardcli \w+: compiling \d+/\d+")


def error_lines(stderr: str) -> list[str]:
    """stderr's lines less the progress lines a command writes where stderr is no terminal."""
    return [line for line in stderr.splitlines() if not _PROGRESS_LINE.match(line)]


@pytest.fixture
def plan_cache(tmp_path, monkeypatch):
    """A cache directory of the test's own (plan's is `plan/` beside JAX's)."""
    monkeypatch.setenv("SHARDCLI_CACHE_DIR", str(tmp_path / "jax"))
    return tmp_path / "plan"


# Tests marked `once` give the same verdict under any JAX of the window (they check the repository's
# own text and scripts, or input refused before JAX runs): `.ci/run` runs each of them in one of its
# two suites, each given a range of the shares (`--share A-B/N`), by a hash of the test's id, or of
# the name `once("NAME")` gives tests of one expensive fixture (the same under both Pythons, so the two
# shares cover every such test exactly once).
# A slow test's parametrized variants are one check over several inputs: its first variant runs in
# every share (the check itself), each of the others in one share, by the same hash. Where the variants
# are what differs between the JAX versions (one per framework, whose versions differ between the
# suites), the test is marked `every_variant` and each variant runs in every share. `--share A-B/N`
# takes several shares at once (.ci/run gives the oldest suite the larger part), and `--slow-share K/N`
# runs only the K-th of N shares of the slow tests every share runs otherwise (.ci/run: a third of
# them under the oldest JAX, all under the newest).
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--share",
        default=None,
        metavar="K/N",
        help="run only the K-th of N shares of the tests marked `once`, and of the slow tests' "
        "parametrized variants after each test's first (all of them without it); K may be a range "
        "A-B, shares A to B",
    )
    parser.addoption(
        "--slow-share",
        default=None,
        metavar="K/N",
        help="run only the K-th of N shares of the slow tests that every suite runs otherwise (each "
        "slow test, or a parametrized one's first variant, that is neither `once` nor "
        "`every_variant`)",
    )


def once_share(key: str, shares: int) -> int:
    """Which of `shares` shares (1-based) a shared test falls in: a hash of its key (its id, or the
    name its `once` marker gives)."""
    return zlib.crc32(key.encode("utf-8")) % shares + 1


def _parse_share(text: str, option: str = "--share") -> tuple[range, int]:
    """`K/N` or `A-B/N`: the shares (1-based) a suite runs, and how many there are."""
    k, _, n = text.partition("/")
    a, dash, b = k.partition("-")
    b = b if dash else a
    if not (a.isdigit() and b.isdigit() and n.isdigit() and 1 <= int(a) <= int(b) <= int(n)):
        raise pytest.UsageError(
            f"{option} {text} is not valid; give K/N with 1 <= K <= N, or A-B/N with A <= B <= N, "
            "e.g. 1/2 or 1-13/20"
        )
    return range(int(a), int(b) + 1), int(n)


def shared_keys(items: Sequence[pytest.Item]) -> dict[str, str]:
    """The tests a share of N runs only in one share, each id with what it is hashed by: those marked
    `once` (by their id, or by the name the marker gives, so that tests of one expensive fixture,
    `once("docs-site")`: the site built once, fall in one share), and each slow parametrized test's
    variants after its first (by their id; none of a test marked `every_variant`)."""
    keys: dict[str, str] = {}
    seen: set[str] = set()
    for item in items:
        once = item.get_closest_marker("once")
        if once is not None:
            keys[item.nodeid] = str(once.args[0]) if once.args else item.nodeid
            continue
        if getattr(item, "callspec", None) is None or item.get_closest_marker("slow") is None:
            continue
        if item.get_closest_marker("every_variant") is not None:
            continue
        function = item.nodeid.partition("[")[0]
        if function in seen:
            keys[item.nodeid] = item.nodeid
        seen.add(function)
    return keys


def slow_share_ids(items: Sequence[pytest.Item], shared: Mapping[str, str]) -> set[str]:
    """The slow tests every share runs: each slow test, or a parametrized one's first variant, that is
    neither `once` nor `every_variant` nor among the `shared` ones (what `--slow-share` divides)."""
    return {
        item.nodeid
        for item in items
        if item.nodeid not in shared
        and item.get_closest_marker("slow") is not None
        and item.get_closest_marker("every_variant") is None
    }


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    text, slow_text = config.getoption("--share"), config.getoption("--slow-share")
    if text is None and slow_text is None:
        return
    share, shares = _parse_share(text) if text is not None else (range(1, 2), 1)
    slow_share, slow_shares = (
        _parse_share(slow_text, "--slow-share") if slow_text is not None else (range(1, 2), 1)
    )
    keys = shared_keys(items)
    slow = slow_share_ids(items, keys) if slow_text is not None else set()
    kept: list[pytest.Item] = []
    left: list[pytest.Item] = []
    for item in items:
        key = keys.get(item.nodeid)
        if item.nodeid in slow:  # hashed apart from the shares above: "slow:" before the id
            mine = once_share(f"slow:{item.nodeid}", slow_shares) in slow_share
        else:
            mine = key is None or once_share(key, shares) in share
        (kept if mine else left).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept
