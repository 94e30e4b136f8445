"""`shardcli inspect` on real public training programs, beside a hand-written AOT compile of each.

The programs' code never enters this repository: `--sources DIR` is a folder of fetched sources,
one subfolder per repository (maxtext, flax, penzai, nanodo, midGPT, ...), and each thin wrapper in
`--wrappers DIR` (default bench/real_programs/) imports the modules that define its program's model
and train step from there (the folder reaches it as CORPUS_SRC) and builds the step and its abstract
arguments as that project builds them. A wrapper names, at top level and without being imported,
`SOURCE, MESH, AXES = "maxtext", "8", "fsdp"`: the subfolder it needs and the mesh it runs on
(and `MODE = "explicit"` where the program makes an Explicit-axes mesh: inspect gets `--mode explicit`).

For each wrapper, in fresh subprocesses:
- shardcli: `python -m shardcli inspect W.py:step --inputs W.py:inputs --mesh M --axes A --format json`;
- the hand compile (this file's `--hand-run`): fake 8 CPU devices, an Auto mesh M over axes A,
  `inputs(mesh)` (or the wrapper's own `hand_compile(mesh)`, e.g. MaxText's train_compile path),
  `jit(step).lower(*args).compile()`, then `memory_analysis()` and `cost_analysis()['flops']`.
The table: program, memory equal (argument, output, temp and alias bytes), XLA's FLOPs equal
(shardcli's `xla_flops_per_device` against the hand compile's raw figure; shardcli's own FLOPs
multiply loop bodies by their trip counts), and shardcli's findings as kind x count; --json also
keeps each finding's message and fix (change, command, before, checked) and the collectives' roles.

`--quick` (CI, where no sources exist): with no --sources folder, runs bench/real_programs/_quick_mlp.py
(examples/mlp.py's step) through the same path, and exits 0.

Usage: python bench/real_programs.py --sources /work/corpus/src [--only NAME] [--json FILE] [--quick]
Run it with the interpreter of the environment shardcli (and the programs' dependencies) is installed in.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WRAPPERS = os.path.join(ROOT, "bench", "real_programs")
QUICK = "_quick_mlp"
MEMORY_KEYS = ("argument_bytes", "output_bytes", "temp_bytes", "alias_bytes")
TIMEOUT_S = 1800


def hand_run(path: str, shape: str, axes: str) -> None:
    """The hand-written AOT compile of one wrapper: prints its memory and FLOPs as one JSON line."""
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    import contextlib
    import importlib.util

    import jax
    from jax.sharding import AxisType

    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec = importlib.util.spec_from_file_location("wrapped_program", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["wrapped_program"] = module
    with contextlib.redirect_stdout(sys.stderr):  # programs print notices; stdout is this JSON alone
        spec.loader.exec_module(module)
        sizes = tuple(int(s) for s in shape.split("x"))
        names = tuple(axes.split(","))
        mesh = jax.make_mesh(sizes, names, axis_types=(AxisType.Auto,) * len(sizes))
        if hasattr(module, "hand_compile"):  # the program's own AOT path (MaxText's train_compile)
            compiled = module.hand_compile(mesh)
        else:
            got = module.inputs(mesh)
            fn, args, kwargs = module.step, got, {}
            if isinstance(got, dict):
                fn = got.get("fn", fn)
                args, kwargs = tuple(got.get("args", ())), dict(got.get("kwargs", {}))
            elif isinstance(got, tuple) and len(got) == 2 and callable(got[0]):
                fn, args = got
            jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
            compiled = jitted.lower(*args, **kwargs).compile()
        memory = compiled.memory_analysis()
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
    print(
        json.dumps(
            {
                "argument_bytes": memory.argument_size_in_bytes,
                "output_bytes": memory.output_size_in_bytes,
                "temp_bytes": memory.temp_size_in_bytes,
                "alias_bytes": memory.alias_size_in_bytes,
                "flops": (cost or {}).get("flops"),
            }
        )
    )


def wrapper_meta(path: str) -> tuple[str, str, str] | None:
    """SOURCE, MESH, AXES as the wrapper writes them, read from its text (nothing imported)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    found = re.search(r'^SOURCE, MESH, AXES = "([^"]*)", "([^"]+)", "([^"]+)"', text, re.M)
    return found.groups() if found else None  # type: ignore[return-value]


def wrapper_mode(path: str) -> str | None:
    """MODE = "explicit" where the program makes its mesh with Explicit axes (flax gemma)."""
    with open(path, encoding="utf-8") as f:
        found = re.search(r'^MODE = "([a-z]+)"', f.read(), re.M)
    return found.group(1) if found else None


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def run(cmd: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {TIMEOUT_S} s"
    return done.returncode, done.stdout, done.stderr


def parse_json(text: str) -> dict | None:
    """The JSON document in a command's stdout (a program may print notices before it)."""
    start = text.find("{")
    while start != -1:
        try:
            return json.loads(text[start:])
        except json.JSONDecodeError:
            start = text.find("\n{", start + 1)
            start = start + 1 if start != -1 else -1
    return None


def compare(name: str, path: str, mesh: str, axes: str, sources: str | None) -> dict:
    env = dict(os.environ)
    if sources:
        env["CORPUS_SRC"] = os.path.abspath(sources)
    env.pop("JAX_PLATFORMS", None)
    row: dict = {"program": name, "mesh": f"{mesh} ({axes})"}
    target = f"{path}:step"
    mode = wrapper_mode(path)
    rc, out, err = run(
        [sys.executable, "-m", "shardcli", "inspect", target, "--inputs", f"{path}:inputs"]
        + ["--mesh", mesh, "--axes", axes, "--format", "json"]
        + (["--mode", mode] if mode else []),
        env,
    )
    report = parse_json(out) if rc == 0 else None
    if report is None:
        row["error"] = f"shardcli exited {rc}: {last_line(err) or last_line(out)}"
        return row
    rc, out, err = run([sys.executable, os.path.abspath(__file__), "--hand-run", path, mesh, axes], env)
    hand = parse_json(out) if rc == 0 else None
    if hand is None:
        row["error"] = f"hand compile exited {rc}: {last_line(err)}"
        return row
    program = report.get("program", {})
    memory = program.get("memory", {})
    row["memory_equal"] = all(memory.get(k) == hand[k] for k in MEMORY_KEYS)
    row["flops_equal"] = program.get("xla_flops_per_device") == hand["flops"]
    row["memory"] = {k: (memory.get(k), hand[k]) for k in MEMORY_KEYS}
    row["flops"] = (program.get("xla_flops_per_device"), hand["flops"], program.get("flops_per_device"))
    kinds: collections.Counter = collections.Counter()
    for finding in report.get("findings", []):
        kinds[finding.get("kind", "?")] += int(finding.get("count", 1) or 1)
    row["findings"] = dict(kinds)
    row["finding_messages"] = [
        {
            "kind": f.get("kind"),
            "message": f.get("message"),
            "source": f.get("source"),
            "fix": {k: (f.get("fix") or {}).get(k) for k in ("change", "command", "before", "checked")}
            if f.get("fix")
            else None,
        }
        for f in report.get("findings", [])
    ]
    roles: collections.Counter = collections.Counter()
    for group in report.get("collective_groups", []):
        roles[group.get("role", "?")] += int(group.get("count", 1) or 1)
    row["roles"] = dict(roles)
    return row


def print_table(rows: list[dict]) -> None:
    print(f"{'program':<20} {'mesh':<26} {'memory':<7} {'flops':<7} findings")
    for row in rows:
        if "error" in row:
            print(f"{row['program']:<20} {row['mesh']:<26} {'-':<7} {'-':<7} {row['error']}")
            continue
        findings = ", ".join(f"{k} x{v}" for k, v in sorted(row["findings"].items())) or "none"
        mem = "equal" if row["memory_equal"] else "DIFFER"
        flops = "equal" if row["flops_equal"] else "DIFFER"
        print(f"{row['program']:<20} {row['mesh']:<26} {mem:<7} {flops:<7} {findings}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", help="folder of fetched sources, one subfolder per repository")
    parser.add_argument("--wrappers", default=WRAPPERS, help="folder of thin wrappers (default: %(default)s)")
    parser.add_argument("--only", action="append", help="run only this wrapper (repeatable)")
    parser.add_argument("--json", help="also write every row (with the findings' messages) to this file")
    parser.add_argument("--quick", action="store_true", help="without sources: one tiny program of its own")
    parser.add_argument("--hand-run", nargs=3, metavar=("WRAPPER", "MESH", "AXES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hand_run:
        hand_run(*args.hand_run)
        return

    have_sources = bool(args.sources) and os.path.isdir(args.sources)
    if args.sources and not have_sources:
        print(f"no sources folder at {args.sources}")
    names = sorted(f[:-3] for f in os.listdir(args.wrappers) if f.endswith(".py") and not f.startswith("_"))
    if args.only:
        names = [n for n in names if n in args.only]
    if args.quick and not have_sources:
        names, wrappers = [QUICK], WRAPPERS
        print("--quick with no sources: examples/mlp.py through the same path")
    else:
        wrappers = args.wrappers
    rows = []
    for name in names:
        path = os.path.join(wrappers, f"{name}.py")
        meta = wrapper_meta(path)
        if meta is None:
            rows.append({"program": name, "mesh": "?", "error": "no SOURCE, MESH, AXES line"})
            continue
        source, mesh, axes = meta
        if source and not (have_sources and os.path.isdir(os.path.join(args.sources, source))):
            rows.append(
                {"program": name, "mesh": f"{mesh} ({axes})", "error": f"no {source}/ under --sources"}
            )
            continue
        print(f"{name}: inspecting and compiling by hand ...", flush=True)
        rows.append(compare(name, path, mesh, axes, args.sources if have_sources else None))
        if args.quick:
            break
    print_table(rows)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
