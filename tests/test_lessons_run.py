"""The tutorials' lessons that `shardcli run`, the recipes and MPMD replay: each row is the command
(as docs/tutorials/lessons.md shows it) and the numbers the tutorial printed, compared exactly.

Floats are compared as NumPy prints a float32 array (`np.array2string`, what the tutorials' `print`
and `Array(...)` show), token by token; integers as they are.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import run_shardcli

# Compiles, processes or whole programs: left out of the quick subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
LESSONS = str(ROOT / "examples" / "lessons.py")
X = ("--mesh", "8", "--axes", "x")

# ProJAX "Introduction to sharded computation", In [48]: shard_map(f_elementwise) over arange(32)
SIN_PRINTED = """
 1.        ,  2.682942  ,  2.818595  ,  1.28224   ,  -0.513605  ,
-0.9178486 ,  0.44116902,  2.3139732 ,  2.9787164 ,  1.824237  ,
-0.08804226, -0.99998045, -0.07314587,  1.840334  ,  2.9812148 ,
 2.3005757 ,  0.42419338, -0.92279494, -0.50197446,  1.2997544 ,
 2.8258905 ,  2.6733112 ,  0.98229736, -0.69244087, -0.81115675,
 0.7352965 ,  2.525117  ,  2.912752  ,  1.5418116 , -0.32726777,
-0.97606325,  0.19192469
"""
# In [52]-[56]: layer, layer on sharded inputs, layer_auto, layer_sharded: all four print this
LAYER_PRINTED = "0.02138916, 0.8931118 , 0.5989196 , 0.9774251"


def tokens(text: str) -> list[str]:
    return [t for t in re.split(r"[\s,\[\]]+", text) if t]


def printed(values: list) -> list[str]:
    """The tokens NumPy prints for these float32 values (the tutorials' own formatting)."""
    return tokens(np.array2string(np.asarray(values, dtype=np.float32), separator=", ", threshold=10_000))


def run_doc(cli, *args: str) -> dict:
    result = cli([*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def section(doc: dict, title_start: str) -> dict:
    (found,) = [s for s in doc["sections"] if s["title"].startswith(title_start)]
    return found


# (id, command, what to read from its JSON, the tutorial's numbers)
RUN_ROWS = [
    pytest.param(
        ("run", f"{LESSONS}:sin_per_shard", *X, "--arg", "i32[32]@x=arange"),
        lambda doc: printed(doc["results"][0]["values"]),
        tokens(SIN_PRINTED),
        id="projax-48-shard_map-of-sin-over-arange32",
    ),
    pytest.param(
        ("run", f"{LESSONS}:sin_per_shard", *X, "--arg", "i32[32]@x=arange"),
        lambda doc: [printed(b["values"]) for b in doc["results"][0]["blocks"]],
        [tokens(SIN_PRINTED)[4 * d : 4 * d + 4] for d in range(8)],
        id="projax-48-each-devices-block",
    ),
    pytest.param(
        ("run", f"{LESSONS}:times_two", *X, "--arg", "i32[32]@x=arange"),
        lambda doc: [len(b["values"]) for b in doc["inputs"][0]["blocks"]],
        [4] * 8,  # In [49]: "device local shape: (4,)"
        id="projax-49-device-local-shape",
    ),
    pytest.param(
        ("run", f"{LESSONS}:sum_per_shard", *X, "--arg", "i32[32]@x=arange"),
        lambda doc: doc["results"][0]["values"],
        [6, 22, 38, 54, 70, 86, 102, 118],  # In [50]
        id="projax-50-sum-per-shard",
    ),
    pytest.param(
        ("run", f"{LESSONS}:sum_then_psum", *X, "--arg", "i32[32]@x=arange"),
        lambda doc: doc["results"][0]["values"],
        496,  # In [51]
        id="projax-51-psum-of-per-shard-sums",
    ),
    pytest.param(
        ("run", f"{LESSONS}:sum_then_psum", *X, "--arg", "i32[32]@x=arange"),
        lambda doc: [b["values"] for b in doc["probes"][0]["blocks"]],
        [6, 22, 38, 54, 70, 86, 102, 118],  # the per-shard sums before the psum (In [50]'s numbers)
        id="projax-51-per-shard-sums-before-the-psum",
    ),
    pytest.param(
        ("run", f"{LESSONS}:layer", *X, "--inputs", f"{LESSONS}:layer_inputs"),
        lambda doc: printed(doc["results"][0]["values"]),
        tokens(LAYER_PRINTED),
        id="projax-53-layer-on-one-device",
    ),
    pytest.param(
        ("run", f"{LESSONS}:layer", *X, "--inputs", f"{LESSONS}:layer_inputs_sharded"),
        lambda doc: printed(doc["results"][0]["values"]),
        tokens(LAYER_PRINTED),
        id="projax-54-automatic-sharding",
    ),
    pytest.param(
        ("run", f"{LESSONS}:layer_auto", *X, "--inputs", f"{LESSONS}:layer_inputs"),
        lambda doc: printed(doc["results"][0]["values"]),
        tokens(LAYER_PRINTED),
        id="projax-55-with_sharding_constraint",
    ),
    pytest.param(
        ("run", f"{LESSONS}:layer_sharded", *X, "--inputs", f"{LESSONS}:layer_inputs"),
        lambda doc: printed(doc["results"][0]["values"]),
        tokens(LAYER_PRINTED),
        id="projax-56-shard_map-and-psum",
    ),
    pytest.param(
        ("recipe", "three-ways", *X),
        lambda doc: tokens(section(doc, "the result (manual)")["lines"][0]),
        tokens(LAYER_PRINTED),
        id="projax-52-56-recipe-three-ways-1d",
    ),
    pytest.param(
        ("recipe", "reduce"),
        lambda doc: [row[2] for row in section(doc, "per device: forced output block")["rows"]],
        [[48.0], [52.0], [56.0], [60.0], [64.0], [68.0], [72.0], [76.0]],  # In [46]-[47]
        id="projax-46-47-recipe-reduce-f_contract",
    ),
    pytest.param(
        ("recipe", "pipeline-ring", "--steps", "1"),
        lambda doc: section(doc, "each device's block after every step")["rows"][1][1:],
        [[3], [0], [1], [2]],  # intro_to_distributed, ppermute_example: "Output [3 0 1 2]", a block each
        id="intro-ppermute-recipe-pipeline-ring",
    ),
    pytest.param(
        ("recipe", "normalize"),
        lambda doc: section(doc, "out = parallel_normalize(x)")["lines"][:1] + [doc["ok"]],
        ["(192, 64)", True],  # intro_to_distributed, parallel_normalize: print(out.shape)
        id="intro-parallel_normalize-recipe-normalize",
    ),
    pytest.param(
        ("recipe", "axis-index", "--mesh", "4x2", "--axes", "i,j"),
        lambda doc: [row[:3] for row in section(doc, "axis_index per device")["rows"]],
        [[k, k // 2, k % 2] for k in range(8)],  # "Device k: i-axis=k//2, j-axis=k%2"
        id="intro-axis-index-recipe",
    ),
]


def _printed_floats(expected) -> bool:
    """Whether the tutorial's numbers include a float as printed text ("0.8931118")."""
    if isinstance(expected, list):
        return any(_printed_floats(e) for e in expected)
    return isinstance(expected, str) and re.fullmatch(r"-?\d+\.\d*(e[-+]?\d+)?", expected) is not None


@pytest.mark.parametrize(("command", "read", "expected"), RUN_ROWS)
def test_lesson(cli, command, read, expected):
    # A float's printed digits are the tutorial's under XLA's default CPU code: the suite's in-process
    # compiles skip LLVM's optimizations (conftest's FAST_CPU_CODEGEN), which moved the last digit of
    # one (0.8931117 for the tutorial's 0.8931118), so rows of printed floats run in a fresh process.
    if _printed_floats(expected):
        done = run_shardcli(*command, "--format", "json", timeout=300)
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
    else:
        doc = run_doc(cli, *command)
    assert read(doc) == expected


def test_poor_mans_mpmd_stages_on_their_own_processes():
    """Poor-man's MPMD (tutorials/002): stages on sub-meshes owned by different processes, arrays
    remote to a process sent and received between them; verified against one device."""
    from conftest import run_shardcli

    proc = run_shardcli(
        "launch", "-n", "2", "--", "pipeline", "--mesh", "4x2", "--axes", "stage,model",
        "--layers", "4", "--width", "16", "--batch", "8", "--microbatches", "4", "--no-color",
        timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (
        "stage 0 on process 0, stage 1 on process 0, stage 2 on process 1, stage 3 on process 1; "
        "between processes an activation moves by a ppermute" in " ".join(proc.stdout.split())
    )
    assert "verified: every check passed (each of the 2 processes checked its own devices" in proc.stdout
