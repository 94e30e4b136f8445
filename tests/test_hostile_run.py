"""The hostile harness for what a user's program does while shardcli runs it (issue 54 item 2).

`run` and `inspect --run` of small programs (written to tmp_path) that print in every way a JAX
program can (Python `print` and `sys.stdout.write` while traced, `jax.debug.print`,
`jax.debug.callback`, `io_callback` and `pure_callback` that print, `os.write(1, ...)` while traced
and in a callback, output of 64 KiB, a debug.print whose format names no value) and whose callbacks
fail in every way (raise, raise a BaseException, `sys.exit` with a code, with a message or with 0,
`os._exit`, a pure_callback that returns the wrong shape), under `--format json` and the default
table. Every case must end by the contract (docs/explanation/exit-codes.md): exit 0, 1 or 2, never
an internal error, no Python traceback but the user's own frames, no "Exception ignored" at exit;
with --format json, stdout holds nothing of the program's (one JSON document on exit 0, nothing on
exit 2); exit 2 ends in one `shardcli: error:` line.

In-process (typer's CliRunner) on a two-device mesh with eight-element arrays; the case count is
pinned so the generator cannot shrink silently. `pytest -m hostile` runs it with the other harness.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from conftest import error_lines
from test_fuzz import USERS_FRAMES

pytestmark = [pytest.mark.hostile, pytest.mark.slow]

HEADER = """\
import os
import sys

import jax
import jax.numpy as jnp
from jax.experimental import io_callback


def f(x):
"""

# name -> the body of f(x) (its last line returns), and whether the run may fail (exit 2)
BODIES: dict[str, tuple[str, bool]] = {
    "print": ('print("MARK-print")', False),
    "stdout-write": ('sys.stdout.write("MARK-write\\n")', False),
    "print-stderr": ('print("MARK-stderr", file=sys.stderr)', False),
    "debug-print": ('jax.debug.print("MARK-debug {s}", s=x.sum())', False),
    # JAX refuses ordered effects over more than one device: its one line, exit 2
    "debug-print-ordered": ('jax.debug.print("MARK-debug {s}", s=x.sum(), ordered=True)', True),
    "debug-callback": ('jax.debug.callback(lambda s: print("MARK-cb", s), x.sum())', False),
    "io-callback": (
        'x = x + 0 * io_callback(lambda s: (print("MARK-io"), s)[1], jax.ShapeDtypeStruct((), x.dtype), '
        "x.sum())",
        False,
    ),
    # ordered effects: one device (JAX refuses them over more); inspect read its results from
    # `out_info`, which fails on their tokens (an internal error)
    "io-callback-ordered": (
        'x = x + 0 * io_callback(lambda s: (print("MARK-io"), s)[1], jax.ShapeDtypeStruct((), x.dtype), '
        "x.sum(), ordered=True)",
        False,
    ),
    "pure-callback": (
        'x = x + 0 * jax.pure_callback(lambda s: (print("MARK-pure"), s)[1], '
        "jax.ShapeDtypeStruct((), x.dtype), x.sum())",
        False,
    ),
    "os-write": ('os.write(1, b"MARK-fd1\\n")', False),
    "os-write-callback": ('jax.debug.callback(lambda s: os.write(1, b"MARK-fd1cb\\n"), x.sum())', False),
    "big-output": ('jax.debug.callback(lambda s: print("MARK-" + "x" * 65536), x.sum())', False),
    "debug-print-bad-format": ('jax.debug.print("MARK {nosuch}", s=x.sum())', True),
    "raise": ("jax.debug.callback(lambda s: [][1], x.sum())", True),
    "raise-base": ("jax.debug.callback(lambda s: (_ for _ in ()).throw(KeyboardInterrupt), x.sum())", True),
    "raise-io": (
        "x = x + 0 * io_callback(lambda s: 1 / 0, jax.ShapeDtypeStruct((), x.dtype), x.sum())",
        True,
    ),
    "raise-pure": (
        "x = x + 0 * jax.pure_callback(lambda s: {}['k'], jax.ShapeDtypeStruct((), x.dtype), x.sum())",
        True,
    ),
    "exit-5": ("jax.debug.callback(lambda s: sys.exit(5), x.sum())", True),
    "exit-0": ("jax.debug.callback(lambda s: sys.exit(0), x.sum())", True),
    "exit-text": ('jax.debug.callback(lambda s: sys.exit("MARK-bye"), x.sum())', True),
    "os-exit": ("jax.debug.callback(lambda s: os._exit(3), x.sum())", True),
    "pure-wrong-shape": (
        "x = x + 0 * jax.pure_callback(lambda s: s.reshape(1), jax.ShapeDtypeStruct((), x.dtype), x.sum())",
        True,
    ),
}
COMMANDS = {
    "run": ["run", "--arg", "f32[8]@x=arange"],
    "inspect": ["inspect", "--arg", "f32[8]@x", "--run", "--iters", "1", "--warmup", "0"],
}
FORMATS = {"json": ["--format", "json"], "table": []}
CASES = [
    pytest.param(body, command, fmt, id=f"{command}-{body}-{fmt}")
    for body in BODIES
    for command in COMMANDS
    for fmt in FORMATS
]


def test_the_harness_generates_its_cases():
    assert len(CASES) == 88
    assert len({c.id for c in CASES}) == len(CASES)


# A callback whose result the program waits for, failing on a mesh of two, leaves the other device
# waiting in its next collective until XLA aborts the process (40 s): the console script ends at
# once with the user's error (test_a_failing_io_callback_on_two_devices_ends_at_once), but a
# process of another's (this in-process harness) cannot; these run on one device here.
ONE_DEVICE = {"raise-io", "raise-pure", "pure-wrong-shape", "io-callback-ordered"}


def program(tmp_path, body: str) -> str:
    path = tmp_path / "hostile_prog.py"
    path.write_text(HEADER + textwrap.indent(f"{BODIES[body][0]}\nreturn x * 2\n", "    "))
    return str(path)


@pytest.mark.parametrize(("body", "command", "fmt"), CASES)
def test_every_print_and_callback_ends_by_the_contract(cli, tmp_path, body, command, fmt):
    verb, *flags = COMMANDS[command]
    mesh = "1" if body in ONE_DEVICE else "2"
    given = [verb, f"{program(tmp_path, body)}:f", "--mesh", mesh, "--axes", "x", *flags, *FORMATS[fmt]]
    result = cli(given)
    shown = f"{given}: exit {result.exit_code}\n{result.output[-3000:]}"
    assert result.exit_code in ((0, 2) if BODIES[body][1] else (0,)), shown
    assert "internal error" not in result.output and "Exception ignored" not in result.output, shown
    assert "Traceback (most recent call last):" not in result.output, shown
    if fmt == "json":
        assert "MARK" not in result.stdout, shown
        if result.exit_code == 0:
            json.loads(result.stdout)
    if result.exit_code == 2:
        assert result.stdout == "", shown
        lines = error_lines(result.stderr)
        users = bool(lines) and lines[0].startswith(USERS_FRAMES)
        assert lines and (len(lines) == 1 or users) and lines[-1].startswith("shardcli: error: "), shown


@pytest.mark.parametrize("command", COMMANDS)
def test_a_failing_io_callback_on_two_devices_ends_at_once(shardcli_subprocess, tmp_path, command):
    """The user's error, exit 2, within seconds: not XLA's abort after 40 s of waiting (exit 134)."""
    verb, *flags = COMMANDS[command]
    path = program(tmp_path, "raise-io")
    done = shardcli_subprocess(
        verb, f"{path}:f", "--mesh", "2", "--axes", "x", *flags, "-f", "json", timeout=35
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0].startswith(USERS_FRAMES) and lines[-1] == (
        f"shardcli: error: {path}:f raised while it ran (in its jax.io_callback): "
        "ZeroDivisionError: division by zero"
    ), done.stderr
