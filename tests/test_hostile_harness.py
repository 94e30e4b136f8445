"""The hostile harness: generated combinations of hostile flags and files for the newer commands.

`plan` (the decoder and a user's program), `run`, `inspect --inputs/--rules` and the checkpoints of
`model train`/`model restore` each get every value of a table of near-valid and hostile values,
crossed with the output formats, and `run --arg` gets a deterministic sample of its grammar
(dtype x shape x spec x values). Every case must end by the contract: exit 0, 1, 2, 130 or 143,
never 3; no traceback of shardcli's and no "internal error"; bad input in one line on stderr; with
`--format json` and exit 0, stdout holds one JSON document.

Cheap by design: in-process (typer's CliRunner), and the tables hold values refused while the flags
are checked, before any compile; the few that are valid (a good `--arg`, a good rule set) compile
an eight-element program. `pytest -m hostile` runs the harness alone (about a minute with one
core); the generator's size is pinned below so it cannot shrink silently.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import pytest
from conftest import error_lines
from test_fuzz import RULES_TABLES, USERS_FRAMES, hostile_files, with_files  # noqa: F401 - a fixture

pytestmark = [pytest.mark.hostile, pytest.mark.slow, pytest.mark.once]

FORMATS: tuple[list[str], ...] = ([], ["-f", "json"], ["-q"])

PLAN_BASE = ["plan", "--preset", "tiny", "--target", "tpu-v5e:2x2", "--compile", "1"]
# Values every plan validates before it builds a candidate. Sizes beyond what JAX takes (issue 41
# item 2: --batch 10**15 aborts the process) are another branch's and are left out: an abort would
# end this in-process harness.
PLAN_FLAGS = {
    "--preset": ["nosuch", "", "TINY", "llama2-7b,tiny"],
    "--target": ["tpu-v9:2x2", "", "tpu-v5e:0x2", "gpu-h100:8", "tpu-v5e:2x2x2x2", "tpu-v5e", "cpu:8"],
    "--layers": ["0", "-1", "x", "1.5"],
    "--d-model": ["0", "-8", "x", ""],
    "--heads": ["0", "-2", "x"],
    "--kv-heads": ["0", "-1", "x"],
    "--head-dim": ["0", "-1", "x"],
    "--mlp-dim": ["0", "-1", "x"],
    "--vocab": ["0", "-1", "x"],
    "--seq": ["0", "-1", "x"],
    "--activation": ["bogus", "", "SWIGLU"],
    "--global-batch": ["0", "-1", "x"],
    "--batch": ["0", "-1", "x"],
    "--remat": ["bogus", "", ",", "none,bogus"],
    "--mesh": [
        *("fsdp=8", "model=4", "fsdp=2,fsdp=2", "fsdp=-4", "fsdp=x", "", ",", "fsdp=2,,data=2", "fsdp"),
        *("data=\u00b2", "fsdp=" + "1" * 5000),  # a digit int() refuses; past int()'s 4300 digits
    ],
    "--attention": ["bogus", "", "flash", "FLASH"],
    "--compile": ["0", "-1", "x"],
    "--method": ["bogus", ""],
    "--emit": ["/nonexistent/step.py", "step.txt"],
    "--format": ["xml", "", "csv"],
    "--save": ["out.png", "/nonexistent/out.svg"],
}
PLAN_PROGRAM = ["plan", "{rules_good}:f", "--target", "tpu-v5e:2x2", "--compile", "1"]
PLAN_PROGRAM_FLAGS = {
    "--inputs": [
        "{prog}:as_type",
        "{prog}:floats",
        "{prog}:nosuch",
        "{prog}:CONSTANT",
        "{prog}:two_args",
        "{prog}:not_a_list",
        "{missing}:inputs",
        "{not_py}:inputs",
        "{syntax}:inputs",
        "{raises}:inputs",
        "{exits}:inputs",
        *[f"{{{name}}}:inputs" for name in RULES_TABLES if name != "rules_good"],
    ],
    "--rules": ["embed=x+x", "=", "bogus", "embed=", ",,", "embed=data,embed=fsdp"],
}
USER_FILES = ["{missing}", "{folder}", "{fifo}", "{syntax}", "{raises}", "{exits}", "/dev/zero"]

RUN_BASE = ["run", "{prog}:f", "--mesh", "2"]
ARG_DTYPES = ["f32", "i32", "f16", "bf16", "bool", "f64", "key<fry>", "f99", "", "c64", "u8"]
ARG_SHAPES = ["[8]", "[7]", "[]", "[0]", "[-1]", "[8", "[a]", "[999999999999,999999999999]", "[2,4]"]
ARG_SPECS = ["", "@x", "@y", "@x,x", "@None", "@", "@x,None", "@None,x"]
ARG_FILLS = [
    "",
    "=arange",
    "=random",
    "=bogus",
    "=",
    "={int64_2_40}",
    "={f64_1e10}",
    "={empty_npy}",
    "={npz}",
    "={eq_npy}",
    "={missing}.npy",
    "={fifo}",
    "=/dev/zero",
]
RUN_FLAGS = {
    "--inputs": [
        "{prog}:as_type",
        "{prog}:floats",
        "{prog}:strings",
        "{prog}:keys",
        "{prog}:indivisible",
        "{prog}:not_a_list",
        "{prog}:two_args",
        "{prog}:nosuch",
        "builtins:tuple",
        "{exits}:inputs",
        "{raises}:inputs",
    ],
    "--init": ["bogus", "", "ARANGE"],
    "--mesh": ["0", "-2", "2x", "99999", "1.5", ""],
    "--axes": ["x,x", "1a", "", "a,b"],
    "--format": ["csv", "xml"],
    "--save": ["out.png", "/nonexistent/out.svg"],
}

INSPECT_RULES = [
    "inspect",
    "{rules_good}:f",
    "--inputs",
    "{rules_good}:inputs",
    "--mesh",
    "2x4",
    "--axes",
    "x,y",
    "--rules",
]
RULE_NAMES = ["embed", "mlp", "nosuch", "", "EMBED"]
RULE_AXES = ["x", "y", "x+y", "x+x", "z", "None", "", "y+x+y"]
INSPECT_FLAGS = {
    "--inputs": [
        *RUN_FLAGS["--inputs"],
        *[f"{{{name}}}:inputs" for name in RULES_TABLES if name != "rules_good"],
    ],
    "--target": ["tpu-v9:2x2", "", "tpu-v5e:0x2", "gpu-nosuch:8"],
    "--out": ["nosuch", "x,x", ","],
}

TRAIN = ["model", "train", "--depth", "32", "--steps", "2"]
CHECKPOINT_TARGETS = [
    "",
    " ",
    "{ck_good}",
    "{ck_half_written}",
    "{ck_locked}",
    "{fifo}",
    "{missing}/ck",
    "/dev/null",
    "/proc/self/ck",
    "{good}",
]
DAMAGED = [
    "{ck_truncated}",
    "{ck_corrupted}",
    "{ck_missing}",
    "{ck_directory}",
    "{ck_fifo}",
    "{ck_symlink_out}",
    "{ck_locked}",
    "{ck_meta_fifo}",
    "{ck_half_written}",
    "{folder}",
    "{fifo}",
    "{missing}",
    "{good}",
    "",
]
RESTORE_FLAGS = {
    "--mesh": ["3", "bogus", "0"],
    "--depth": ["0", "x", "31"],
    "--rules": ["bogus", "=", "batch=nosuch"],
}


def _flag_rows(name: str, base: list[str], flags: dict[str, list[str]]) -> Iterator[tuple[str, list[str]]]:
    for flag, values in flags.items():
        for value in values:
            for fmt in FORMATS:
                tag = ascii(value)[1:-1] or "empty"
                yield f"{name}{flag}={tag}{''.join(fmt)}", [*base, flag, value, *fmt]


def _run_args(rng: random.Random, count: int) -> Iterator[tuple[str, list[str]]]:
    """`count` distinct --arg texts drawn from the grammar's near-valid and hostile parts."""
    seen: set[str] = set()
    while len(seen) < count:
        text = "".join(rng.choice(part) for part in (ARG_DTYPES, ARG_SHAPES, ARG_SPECS, ARG_FILLS))
        if text in seen:
            continue
        seen.add(text)
        fmt = rng.choice(FORMATS)
        yield f"run--arg={ascii(text)[1:-1] or 'empty'}{''.join(fmt)}", [*RUN_BASE, "--arg", text, *fmt]


def hostile_cases() -> list[tuple[str, list[str]]]:
    """Every generated case: (id, args), the same on every run (a fixed seed)."""
    rng = random.Random(41)
    cases = [
        *_flag_rows("plan", PLAN_BASE, PLAN_FLAGS),
        *_flag_rows("plan-program", PLAN_PROGRAM + ["--inputs", "{rules_good}:inputs"], PLAN_PROGRAM_FLAGS),
        *(
            (
                f"plan-program-file={ascii(f)[1:-1]}{''.join(fmt)}",
                ["plan", f"{f}:f", "--inputs", f"{f}:inputs", "--target", "tpu-v5e:2x2", *fmt],
            )
            for f in USER_FILES
            for fmt in FORMATS
        ),
        *_run_args(rng, 160),
        *_flag_rows("run", RUN_BASE, RUN_FLAGS),
        *(
            (f"run-file={ascii(f)[1:-1]}", ["run", f"{f}:f", "--mesh", "2", "--arg", "f32[8]"])
            for f in USER_FILES
        ),
        *(
            (f"inspect--rules={ascii(rule)[1:-1] or 'empty'}{''.join(fmt)}", [*INSPECT_RULES, rule, *fmt])
            for rule in sorted(
                {f"{n}={a}" for n in RULE_NAMES for a in RULE_AXES}
                | {f"embed={a},mlp={b}" for a in RULE_AXES[:4] for b in RULE_AXES[:4]}
            )
            for fmt in rng.sample(FORMATS, 1)
        ),
        *_flag_rows("inspect", ["inspect", "{prog}:f"], INSPECT_FLAGS),
        *(
            (
                f"train--checkpoint={ascii(t)[1:-1] or 'empty'}{''.join(fmt)}",
                [*TRAIN, "--checkpoint", t, *fmt],
            )
            for t in CHECKPOINT_TARGETS
            for fmt in FORMATS
        ),
        *(
            (f"restore={ascii(d)[1:-1] or 'empty'}{''.join(fmt)}", ["model", "restore", d, *fmt])
            for d in DAMAGED
            for fmt in FORMATS[:2]
        ),
        *_flag_rows("restore", ["model", "restore", "{ck_good}"], RESTORE_FLAGS),
    ]
    return cases


CASES = hostile_cases()


def test_the_harness_generates_at_least_500_distinct_cases_over_the_new_commands():
    ids = [case_id for case_id, _ in CASES]
    assert len(ids) >= 500, len(ids)
    assert len(set(ids)) == len(ids), sorted(i for i in ids if ids.count(i) > 1)[:10]
    by_command = {args[0] if args[0] != "model" else f"model {args[1]}" for _, args in CASES}
    assert by_command == {"plan", "run", "inspect", "model train", "model restore"}, by_command


# Rows whose fix lands on another branch (issue 41's other items): on this branch alone they may
# fail; merged, every case passes.
ELSEWHERE: set[str] = set()


@pytest.mark.parametrize("args", [pytest.param(args, id=case_id) for case_id, args in CASES])
def test_every_generated_case_ends_by_the_contract(cli, hostile_files, tmp_path, monkeypatch, args):  # noqa: F811
    monkeypatch.chdir(tmp_path)  # --emit and --save of relative names land here
    given = with_files(args, hostile_files)
    result = cli(given)
    shown = f"{given}: exit {result.exit_code}\n{result.output[-2000:]}"
    assert result.exit_code in (0, 1, 2, 130, 143), shown
    assert "Traceback (most recent call last):" not in result.output, shown
    assert "internal error" not in result.output, shown
    if result.exit_code == 2:
        lines = error_lines(result.stderr)
        users = bool(lines) and lines[0].startswith(USERS_FRAMES)
        assert lines and (len(lines) == 1 or users) and lines[-1].startswith("shardcli"), shown
    if result.exit_code == 0 and "json" in given:
        json.loads(result.stdout)
