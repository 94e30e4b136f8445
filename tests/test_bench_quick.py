"""Every bench/ script runs: `python bench/X.py --quick` exits 0 in seconds, with no traceback.

The scripts are found, not listed: a new one is run as soon as it lands, and one that lacks
`--quick` fails here. Their figures are not judged (a loaded CI machine times nothing well); what
is checked is that a benchmark cannot rot silently (a flag a command no longer has, an import that
moved), as bench/inspect_overhead.py once did.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clean_env, pythonpath_first

# Compiles, processes or whole programs: left out of the quick subset (pytest -m "not slow").
pytestmark = [pytest.mark.slow, pytest.mark.once]

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_"))
QUICK_TIMEOUT_S = 300  # each; a quick run takes seconds on an idle machine, and CI is not idle


def test_the_bench_folder_has_scripts():
    assert len(SCRIPTS) >= 10, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_every_bench_script_runs_quick(script: Path, tmp_path: Path):
    assert '"--quick"' in script.read_text(encoding="utf-8"), f"{script.name} has no --quick mode"
    env = clean_env({**pythonpath_first(ROOT), "SHARDCLI_CACHE_DIR": str(tmp_path / "cache")})
    env.pop("CI", None)  # gen_cli_reference --quick checks one block, not the docs extra's presence
    done = subprocess.run(
        [sys.executable, str(script), "--quick"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=QUICK_TIMEOUT_S,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{script.name} --quick exited {done.returncode}:\n{output[-3000:]}"
    assert "Traceback" not in output, output[-3000:]
