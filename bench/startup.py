"""Start-up benchmark: `shardcli --help` against `import jax`.

Nothing on the `--help` path may import JAX (importing it costs about a second), so
`shardcli --help` should take a small fraction of `python -c "import jax"`. Each command runs once
to warm the OS caches, then N times, interleaved round by round so that machine noise hits all of
them alike.
The ratio compares medians; the target is `--target` (default 0.35).

Usage: python bench/startup.py [--runs 7] [--target 0.35]

Run it with the interpreter of the environment shardcli is installed in. It always exits 0 and
prints PASS or FAIL against the target (and FAIL when a command itself fails).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

PY = sys.executable
JAX_IMPORT = "import jax"
# Prints the JAX modules loaded by importing the CLI module, one per line.
IMPORT_CHECK = (
    "import sys, shardcli.cli; "
    "print('\\n'.join(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib'))))"
)


def commands() -> dict[str, list[str]]:
    """The commands to time: shardcli's help (module and console script), `import jax`, a floor."""
    cmds = {"shardcli --help (python -m shardcli)": [PY, "-m", "shardcli", "--help"]}
    script = Path(PY).parent / ("shardcli.exe" if os.name == "nt" else "shardcli")
    if script.exists():
        cmds["shardcli --help (console script)"] = [str(script), "--help"]
    cmds[f'python -c "{JAX_IMPORT}"'] = [PY, "-c", JAX_IMPORT]
    cmds['python -c "pass"'] = [PY, "-c", "pass"]
    return cmds


def run_once(cmd: list[str]) -> float:
    """Wall time of one run in seconds.

    Raises:
        RuntimeError: when the command fails, so a broken install is not timed as fast.
    """
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        tail = proc.stderr.strip()[-500:]
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {tail}")
    return elapsed


def time_interleaved(cmds: dict[str, list[str]], runs: int) -> dict[str, list[float]]:
    """One warm-up per command, then `runs` rounds, each running every command once."""
    for cmd in cmds.values():
        run_once(cmd)
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(runs):
        for name, cmd in cmds.items():
            times[name].append(run_once(cmd))
    return times


def jax_modules_from_cli_import() -> list[str]:
    """JAX modules that `import shardcli.cli` loads, in a fresh interpreter."""
    out = subprocess.run([PY, "-c", IMPORT_CHECK], capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if line]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per command (default 7)")
    parser.add_argument(
        "--target", type=float, default=0.35, help="max ratio of help to import jax (default 0.35)"
    )
    args = parser.parse_args()

    cmds = commands()
    try:
        times = time_interleaved(cmds, args.runs)
    except RuntimeError as e:
        print(f"FAIL: {e}")
        return 0
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    jax_median = medians[f'python -c "{JAX_IMPORT}"']

    print(f"python {sys.version.split()[0]} at {PY}; {args.runs} runs each after 1 warm-up")
    width = max(map(len, medians))
    print(f"{'command':<{width}}  {'median':>8}  {'min':>8}  {'max':>8}  {'vs import jax':>13}")
    for name, ts in times.items():
        print(
            f"{name:<{width}}  {medians[name] * 1e3:6.0f}ms  {min(ts) * 1e3:6.0f}ms  "
            f"{max(ts) * 1e3:6.0f}ms  {medians[name] / jax_median:13.2f}"
        )

    ok = True
    for name in (n for n in cmds if n.startswith("shardcli")):
        ratio = medians[name] / jax_median
        verdict = "PASS" if ratio <= args.target else "FAIL"
        ok = ok and verdict == "PASS"
        print(f"{verdict}: {name} / import jax = {ratio:.2f} (target <= {args.target})")

    leaked = jax_modules_from_cli_import()
    if leaked:
        ok = False
        print(f"FAIL: import shardcli.cli imports jax ({len(leaked)} modules, e.g. {leaked[0]})")
    else:
        print("PASS: import shardcli.cli does not import jax")
    print("PASS" if ok else "FAIL")
    return 0


if __name__ == "__main__":
    sys.exit(main())
