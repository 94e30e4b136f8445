"""The command line that applies a finding's fix: `shardcli inspect` as the user ran it, with the
change's `--spec`s (or, for an `--arg` program, its changed `--arg`s).

`program.inspect.run_inspect` fills each checked fix (`program.fix_check`) with it, knowing the flags
the user typed (`InspectRequest`, handed in as it is: this module imports nothing of inspect's).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from shardcli.analysis.arguments import shown_path
from shardcli.analysis.fixes import Change, spec_text
from shardcli.program.inputs import argument_trees


def with_fix_commands(result: Any, request: Any, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """Each fix with the shardcli command line that applies it: this one, with the change's
    `--spec`s (or, for --arg programs, the changed `--arg`s)."""
    if not any(f.fix is not None for f in result.findings):
        return result
    names = [n for n, _ in argument_trees(getattr(fn, "__wrapped__", fn), args, kwargs)]
    findings = tuple(
        replace(f, fix=replace(f.fix, **fix_command(request, f.fix.change, names)))
        if f.fix is not None
        else f
        for f in result.findings
    )
    return replace(result, findings=findings)


def fix_command(request: Any, change: Change, names: list[str]) -> dict[str, Any]:
    """`shardcli inspect ...` as the user ran it, with `change` applied (`command`), and the flags
    that carry the change (`flags`).

    Args:
        names: the program's arguments' names (`argument_trees`), for --arg programs.
    """
    from shardcli.specs.arguments import AbstractArg
    from shardcli.specs.meshes import ShardingSpec

    words = ["shardcli", "inspect", request.target]
    changed = dict(change.specs)
    flags = []
    if request.inputs is not None:
        words += ["--inputs", request.inputs]
    for i, a in enumerate(request.args):
        name = names[i] if i < len(names) else f"arg{i}"
        given = AbstractArg(a.dtype, a.shape, ShardingSpec(changed.pop(name))) if name in changed else a
        words += ["--arg", given.describe()]
        if given is not a:
            flags.append(f"--arg {shlex.quote(given.describe())}")
    if request.rules is not None:
        from shardcli.specs.decoder import rules_text

        words += ["--rules", rules_text(request.rules)]
    for flag, value in (
        ("--target", request.compile_target.name if request.compile_target else None),
        ("--mesh", request.mesh_text),
        ("--axes", request.axes_text),
    ):
        if value is not None:
            words += [flag, value]
    specs = {**dict(request.specs), **changed}
    for name, entries in specs.items():
        words += ["--spec", f"{shown_path(name)}={spec_text(entries)}"]
    flags += [f"--spec {shlex.quote(f'{shown_path(n)}={spec_text(e)}')}" for n, e in changed.items()]
    return {"command": " ".join(shlex.quote(w) for w in words), "flags": tuple(flags)}
