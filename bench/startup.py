"""Start-up benchmark: `shardcli --help` against `import typer, rich.console` (and `import jax`).

`--help` needs typer and rich and the commands' flags, nothing else: no JAX, no NumPy, no command's
core or renderer. So `shardcli --help` is held against `python -c "import typer, rich.console"`,
the floor any Typer + rich app pays; the target is `--target` (default 2.5 times that). `import jax`,
`import ml_dtypes` (JAX's dtypes: with NumPy 2.4, 0.7.0 took 0.9-1.2 s to import here, 0.6.0 6 ms,
so pyproject.toml leaves 0.7.0 out on Python 3.11) and `shardcli mesh --mesh 8` (a command that
starts JAX) are timed alongside for scale. Each command runs once to warm the OS caches, then N times,
interleaved round by round so that machine noise hits all of them alike; ratios compare medians.
It also lists the shardcli modules `--help` loads and fails if JAX, NumPy or any `core`, `render`
or runtime module is among them.

Usage: python bench/startup.py [--runs 7] [--target 2.5] [--quick]

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
DTYPES_IMPORT = "import ml_dtypes"
FLOOR_IMPORT = "import typer, rich.console"
# Prints the modules `shardcli --help` loads that it must not: JAX, NumPy, what runs a command or
# renders it, JAX's start (one per line), after running --help in this interpreter. The registries
# (their names are --help's choices), standard output, its line ends and signals are light and allowed.
HELP_MODULES = (
    "import sys\n"
    "sys.argv = ['shardcli', '--help']\n"
    "from shardcli.cli import main\n"
    "try:\n    main()\nexcept SystemExit:\n    pass\n"
    "light = {'shardcli', 'shardcli.cli', 'shardcli.errors', 'shardcli.commands', 'shardcli.runtime',\n"
    "         'shardcli.runtime.stdout', 'shardcli.runtime.interrupts', 'shardcli.runtime.line_ends',\n"
    "         'shardcli.playground',\n"
    "         'shardcli.playground.collective.cases', 'shardcli.playground.collective.entries',\n"
    "         'shardcli.playground.collective.layouts', 'shardcli.playground.collective.references',\n"
    "         'shardcli.playground.collective.bodies', 'shardcli.playground.matmul.cases',\n"
    "         'shardcli.playground.recipe.cases', 'shardcli.playground.collective',\n"
    "         'shardcli.playground.matmul', 'shardcli.playground.recipe'}\n"
    "bad = [m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'numpy')\n"
    "       or m.startswith('shardcli') and m not in light and not m.startswith('shardcli.commands.')]\n"
    "sys.stderr.write('\\n'.join(sorted(bad)))\n"
)


def commands() -> dict[str, list[str]]:
    """The commands to time: shardcli's help (module and console script), `import jax`, a floor."""
    cmds = {"shardcli --help (python -m shardcli)": [PY, "-m", "shardcli", "--help"]}
    script = Path(PY).parent / ("shardcli.exe" if os.name == "nt" else "shardcli")
    if script.exists():
        cmds["shardcli --help (console script)"] = [str(script), "--help"]
    cmds[f'python -c "{FLOOR_IMPORT}"'] = [PY, "-c", FLOOR_IMPORT]
    cmds["shardcli mesh --mesh 8 (starts JAX)"] = [PY, "-m", "shardcli", "mesh", "--mesh", "8"]
    cmds[f'python -c "{JAX_IMPORT}"'] = [PY, "-c", JAX_IMPORT]
    cmds[f'python -c "{DTYPES_IMPORT}"'] = [PY, "-c", DTYPES_IMPORT]
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


def modules_help_must_not_load() -> list[str]:
    """JAX, NumPy and the shardcli modules past the flags that `shardcli --help` loads (fresh process)."""
    out = subprocess.run([PY, "-c", HELP_MODULES], capture_output=True, text=True, check=True)
    return [line for line in out.stderr.splitlines() if line]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per command (default 7)")
    parser.add_argument(
        "--target", type=float, default=2.5, help=f"max ratio of help to {FLOOR_IMPORT} (default 2.5)"
    )
    parser.add_argument("--quick", action="store_true", help="one timed run each (seconds; for CI)")
    args = parser.parse_args()
    if args.quick:
        args.runs = 1

    cmds = commands()
    try:
        times = time_interleaved(cmds, args.runs)
    except RuntimeError as e:
        print(f"FAIL: {e}")
        return 0
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    floor_median = medians[f'python -c "{FLOOR_IMPORT}"']

    from importlib.metadata import version

    versions = ", ".join(f"{p} {version(p)}" for p in ("jax", "ml_dtypes"))
    print(f"python {sys.version.split()[0]} at {PY} ({versions}); {args.runs} runs each after 1 warm-up")
    width = max(map(len, medians))
    print(f"{'command':<{width}}  {'median':>8}  {'min':>8}  {'max':>8}  {'vs typer+rich':>13}")
    for name, ts in times.items():
        print(
            f"{name:<{width}}  {medians[name] * 1e3:6.0f}ms  {min(ts) * 1e3:6.0f}ms  "
            f"{max(ts) * 1e3:6.0f}ms  {medians[name] / floor_median:13.2f}"
        )

    ok = True
    for name in (n for n in cmds if n.startswith("shardcli --help")):
        ratio = medians[name] / floor_median
        verdict = "PASS" if ratio <= args.target else "FAIL"
        ok = ok and verdict == "PASS"
        print(f"{verdict}: {name} / {FLOOR_IMPORT} = {ratio:.2f} (target <= {args.target})")

    leaked = modules_help_must_not_load()
    if leaked:
        ok = False
        print(f"FAIL: shardcli --help loads {len(leaked)} modules it does not need: {', '.join(leaked[:8])}")
    else:
        print("PASS: shardcli --help loads no JAX, NumPy, core, renderer or runtime module")
    print("PASS" if ok else "FAIL")
    return 0


if __name__ == "__main__":
    sys.exit(main())
