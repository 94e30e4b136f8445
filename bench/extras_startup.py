"""Does installing the compile-only extras (tpu: libtpu; gpu, gpu-cuda13: a CUDA plugin) slow plain runs?

Runs `shardcli collective psum --mesh 4 --iters 5 -q` (a non-target command) as fresh processes,
round by round, in the environment this script runs in (with the extras) and in a fresh virtual
environment it makes beside it with `pip install -e .` alone (without them; the same JAX from pip's
cache). Prints the median wall time of each, their ratio, and whether anything reached stderr.

Usage: python bench/extras_startup.py [--rounds 7]
Run it with the interpreter of an environment where shardcli is installed with the tpu and gpu extras.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COMMAND = ["-m", "shardcli", "collective", "psum", "--mesh", "4", "--iters", "5", "-q", "--no-compile-cache"]


def run(python: str, env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run([python, *COMMAND], capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"shardcli failed ({proc.returncode}): {proc.stderr}")
    return seconds, proc.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="one run with this interpreter only (no second venv to install): checks the command runs "
        "and prints nothing on stderr (CI)",
    )
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
    if args.quick:
        t, err = run(sys.executable, env)
        print(f"  with the extras: {t:.2f} s; stderr empty: {not err.strip()}")
        if err.strip():
            raise SystemExit(f"stderr was not empty: {err.strip()[:500]}")
        return
    modules = ("libtpu", "jax_cuda12_plugin", "jax_cuda13_plugin")
    installed = [m for m in modules if importlib.util.find_spec(m) is not None]
    print(f"extras installed here: {', '.join(installed) or 'none (the comparison means nothing)'}")
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS", "PYTHONPATH")}
    with tempfile.TemporaryDirectory() as folder:
        bare = os.path.join(folder, "venv")
        subprocess.run([sys.executable, "-m", "venv", bare], check=True)
        python = os.path.join(bare, "bin", "python")
        subprocess.run([python, "-m", "pip", "install", "-q", "-e", ROOT], check=True)
        with_extras, without, noise = [], [], []
        for _ in range(args.rounds):
            t, err = run(sys.executable, env)
            with_extras.append(t)
            noise.append(err)
            t, err = run(python, env)
            without.append(t)
            noise.append(err)
    a, b = statistics.median(with_extras), statistics.median(without)
    print(f"  with the extras:    {a:.2f} s median ({', '.join(f'{t:.2f}' for t in with_extras)})")
    print(f"  without the extras: {b:.2f} s median ({', '.join(f'{t:.2f}' for t in without)})")
    print(f"  ratio {a / b:.2f}; stderr empty in every run: {all(not e.strip() for e in noise)}")


if __name__ == "__main__":
    main()
