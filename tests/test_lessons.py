"""The tutorials' lessons, replayed: each row is a shardcli command and the numbers the tutorial prints.

The five tutorials shardcli teaches from are in docs/tutorials/lessons.md (and /work/shared/tutorials
where the project started). Each row runs its command in-process with `--format json`, reads the
numbers out of the document and compares them with the tutorial's printed output exactly (floats
as float32, as JAX printed them). A row's id names the tutorial and the lesson:

- `mintext-*`: MinText tutorial 1, "Parallelization basics" (003_009d55e65f8cf46d.txt)
- `projax-*`: ProJAX, "Introduction to sharded computation" (004_f0a070c98ba3a87c.txt)
- `intro-*`: learn_jax's intro_to_distributed.py (000_fa8795ce7cc27eeb.txt): it prints no output, so
  its rows check the shapes and values its code states (inputs, sizes) and the result NumPy gives
- `flax-*`: the Flax NNX "scaling across devices" guide (001_2e0322b1952ec454.txt)

`shardcli run`, MPMD and the recipes runcmd rewrote have their rows in tests/test_lessons_run.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

# The tutorials' own inputs.
PI_16 = "3,1,4,1,5,9,2,6,5,3,5,8,9,7,1,2"  # MinText's x (and intro's x_exmp, row-major)
FAST = ("--iters", "1", "--warmup", "0")
MINTEXT_MESH = ("--mesh", "2x2", "--axes", "x,y")
MESH_1D = ("--mesh", "4", "--axes", "i")

Extract = Callable[[dict[str, Any]], Any]


def blocks(doc: dict[str, Any]) -> list[tuple[Any, Any]]:
    """collective: each device's (BEFORE, AFTER) block."""
    return [(d["input"], d["output"]) for d in doc["sizes"][0]["values"]["devices"]]


def global_result(doc: dict[str, Any]) -> Any:
    """collective: the global result (the tutorials' FINAL RESULT)."""
    return doc["sizes"][0]["values"]["global_output"]


def matmul_c(doc: dict[str, Any]) -> Any:
    """matmul: C as the first implementation computed it (every one is verified against NumPy)."""
    return doc["runs"][0]["impls"][0]["values"]["global_values"]


def c_top_left(doc: dict[str, Any]) -> Any:
    """matmul: C[:2, :2], what MinText prints as "First few elements of result"."""
    return [row[:2] for row in matmul_c(doc)[:2]]


def einsum_c(doc: dict[str, Any]) -> Any:
    return doc["sizes"][0]["impls"][0]["values"]["global_values"]


def einsum_blocks(doc: dict[str, Any]) -> list[Any]:
    return [b["values"] for b in doc["sizes"][0]["impls"][0]["values"]["blocks"]]


def shards(field: str) -> Extract:
    """shard: one field of every device's block, in device order."""
    return lambda doc: [s[field] for s in doc["shards"]]


def tiles(doc: dict[str, Any]) -> list[list[int]]:
    """shard: the devices that hold each distinct tile (the labels of visualize_array_sharding)."""
    return [t["device_ids"] for t in doc["tiles"]]


def table_rows(title: str, column: int | slice) -> Extract:
    """recipe: one column of the table section called `title`, in device order."""

    def extract(doc: dict[str, Any]) -> list[Any]:
        (section,) = [s for s in doc["sections"] if s["title"] == title]
        return [row[column] for row in section["rows"]]

    return extract


def flat_float32(extract: Extract) -> Extract:
    """The values as float32, flattened: what JAX printed for a float32 array."""
    return lambda doc: np.asarray(extract(doc), dtype=np.float32).ravel().tolist()


def matmul_local_shapes(doc: dict[str, Any]) -> dict[str, list[int]]:
    run = doc["runs"][0]
    return {a["name"]: a["local_shape"] for a in (*run["operands"], run["result"])}


def matmul_hlo(doc: dict[str, Any]) -> list[str]:
    return [h["op"] for h in doc["runs"][0]["impls"][0]["hlo_collectives"]]


def float32(text: str) -> list[float]:
    """A float32 array as the tutorial printed it, e.g. `1.        ,  2.682942`."""
    return np.array([float(v) for v in text.split(",")], dtype=np.float32).tolist()


PROJAX_SIN = float32(
    "1.        ,  2.682942  ,  2.818595  ,  1.28224   , -0.513605  , -0.9178486 ,  0.44116902,  2.3139732 ,"
    "2.9787164 ,  1.824237  , -0.08804226, -0.99998045, -0.07314587,  1.840334  ,  2.9812148 , 2.3005757 ,"
    "0.42419338, -0.92279494, -0.50197446,  1.2997544 , 2.8258905 ,  2.6733112 ,  0.98229736, -0.69244087,"
    "-0.81115675, 0.7352965 ,  2.525117  ,  2.912752  ,  1.5418116 , -0.32726777, -0.97606325,  0.19192469"
)
ARANGE_4X8 = np.arange(32.0).reshape(4, 8).tolist()
SUM_AXIS0 = [48.0, 52.0, 56.0, 60.0, 64.0, 68.0, 72.0, 76.0]
TUTORIAL_C = [[152.0, 158.0], [504.0, 526.0]]
INTRO_X = np.array([int(v) for v in PI_16.split(",")]).reshape(4, 4)

LESSONS = [
    # --- MinText tutorial 1, "Parallelization basics" ----------------------------------------------------
    pytest.param(
        ["mesh", *MINTEXT_MESH],
        lambda doc: [d["id"] for d in doc["mesh"]["devices"]],
        [0, 1, 2, 3],
        id="mintext-1.1-mesh-2x2-devices-0-1-2-3",
    ),
    pytest.param(
        [
            "shard",
            *MINTEXT_MESH,
            "--shape",
            "8192x8192",
            "--spec",
            "x,y",
            "--dtype",
            "int8",
            "--no-show-values",
        ],
        lambda doc: [(s["index"], s["local_shape"]) for s in doc["shards"]],
        [
            ([[0, 4096], [0, 4096]], [4096, 4096]),
            ([[0, 4096], [4096, 8192]], [4096, 4096]),
            ([[4096, 8192], [0, 4096]], [4096, 4096]),
            ([[4096, 8192], [4096, 8192]], [4096, 4096]),
        ],
        id="mintext-2.2-shards-of-8192x8192-are-4096x4096",
    ),
    pytest.param(
        ["shard", *MINTEXT_MESH, "--shape", "8x8", "--spec", "x,None"],
        tiles,
        [[0, 1], [2, 3]],
        id="mintext-2.4-P(x,None)-TPU-0,1-over-2,3",
    ),
    pytest.param(
        ["shard", *MINTEXT_MESH, "--shape", "8x8", "--spec", "None,y"],
        tiles,
        [[0, 2], [1, 3]],
        id="mintext-2.4-P(None,y)-TPU-0,2-beside-1,3",
    ),
    pytest.param(
        ["shard", *MINTEXT_MESH, "--shape", "4x4", "--spec", "None,x"],
        lambda doc: [doc["shards"][0]["values"], doc["shards"][2]["values"]],
        [
            [[0.0, 1.0], [4.0, 5.0], [8.0, 9.0], [12.0, 13.0]],
            [[2.0, 3.0], [6.0, 7.0], [10.0, 11.0], [14.0, 15.0]],
        ],
        id="mintext-3.3-case2-device-0-and-2-hold-A-columns",
    ),
    pytest.param(
        ["collective", "all_gather", *MESH_1D, "--values", "3,9,5,2", "--dtype", "int32", *FAST],
        blocks,
        [([3], [3, 9, 5, 2]), ([9], [3, 9, 5, 2]), ([5], [3, 9, 5, 2]), ([2], [3, 9, 5, 2])],
        id="mintext-3.3-all_gather-BEFORE-3-9-5-2-AFTER-3,9,5,2",
    ),
    pytest.param(
        ["matmul", "--case", "allgather", *MINTEXT_MESH, "--dims", "4,4,4", "--init", "arange", *FAST],
        c_top_left,
        TUTORIAL_C,
        id="mintext-3.3-case2-allgather-C[:2,:2]-152-158-504-526",
    ),
    pytest.param(
        ["matmul", "--case", "allgather", *MINTEXT_MESH, "--dims", "4,4,4", *FAST],
        matmul_hlo,
        ["all-gather"],
        id="mintext-3.3-case2-allgather-is-one-all-gather",
    ),
    pytest.param(
        ["collective", "psum", *MESH_1D, "--values", PI_16, "--dtype", "int32", *FAST],
        blocks,
        [
            ([3, 1, 4, 1], [22, 20, 12, 17]),
            ([5, 9, 2, 6], [22, 20, 12, 17]),
            ([5, 3, 5, 8], [22, 20, 12, 17]),
            ([9, 7, 1, 2], [22, 20, 12, 17]),
        ],
        id="mintext-3.4-psum-AFTER-22-20-12-17-on-every-device",
    ),
    pytest.param(
        ["collective", "psum", *MESH_1D, "--values", PI_16, "--dtype", "int32", *FAST],
        global_result,
        [22, 20, 12, 17],
        id="mintext-3.4-psum-FINAL-RESULT-22-20-12-17",
    ),
    pytest.param(
        ["matmul", "--case", "allreduce", *MINTEXT_MESH, "--dims", "4,4,4", "--init", "arange", *FAST],
        c_top_left,
        TUTORIAL_C,
        id="mintext-3.4-case3-allreduce-C[:2,:2]-152-158-504-526",
    ),
    pytest.param(
        ["matmul", "--case", "allreduce", *MINTEXT_MESH, "--dims", "4,4,4", "--init", "arange", *FAST],
        matmul_c,
        (np.arange(16.0).reshape(4, 4) @ np.arange(16.0, 32.0).reshape(4, 4)).tolist(),
        id="mintext-3.4-case3-allreduce-C-equals-A@B",
    ),
    pytest.param(
        ["matmul", "--case", "allreduce", *MINTEXT_MESH, "--dims", "4,4,4", *FAST],
        matmul_local_shapes,
        {"A": [4, 2], "B": [2, 4], "C": [4, 4]},
        id="mintext-3.4-case3-local-shapes-A(4,2)-B(2,4)-C(4,4)",
    ),
    pytest.param(
        ["matmul", "--case", "allreduce", *MINTEXT_MESH, "--dims", "4,4,4", *FAST],
        matmul_hlo,
        ["all-reduce"],
        id="mintext-3.4-case3-allreduce-is-one-all-reduce",
    ),
    pytest.param(
        ["collective", "psum_scatter", *MESH_1D, "--values", PI_16, "--dtype", "int32", *FAST],
        blocks,
        [([3, 1, 4, 1], [22]), ([5, 9, 2, 6], [20]), ([5, 3, 5, 8], [12]), ([9, 7, 1, 2], [17])],
        id="mintext-3.4.1-psum_scatter-AFTER-22|20|12|17",
    ),
    pytest.param(
        ["collective", "psum_scatter", *MESH_1D, "--values", PI_16, "--dtype", "int32", *FAST],
        global_result,
        [22, 20, 12, 17],
        id="mintext-3.4.1-psum_scatter-FINAL-RESULT-22-20-12-17",
    ),
    pytest.param(
        ["matmul", "--case", "gather-b", *MINTEXT_MESH, "--dims", "4,4,4", *FAST],
        matmul_local_shapes,
        {"A": [2, 4], "B": [4, 2], "C": [2, 4]},
        id="mintext-3.5-case4-gather-b-A(2,4)-B(4,2)-result(2,4)",
    ),
    pytest.param(
        ["matmul", "--case", "gather-b", *MINTEXT_MESH, "--dims", "4,4,4", "--init", "arange", *FAST],
        matmul_c,
        (np.arange(16.0).reshape(4, 4) @ np.arange(16.0, 32.0).reshape(4, 4)).tolist(),
        id="mintext-3.5-case4-gather-b-correct-result",
    ),
    pytest.param(
        ["matmul", "--case", "illegal", *MINTEXT_MESH, "--dims", "4,4,4", *FAST],
        lambda doc: [(i["status"], i["expected_refusal"]) for i in doc["runs"][0]["impls"]],
        [("refused", True)],
        id="mintext-3.5-case4-A[I_X,J].B[J,K_X]-cannot-be-computed",
    ),
    pytest.param(
        ["collective", "all_to_all", *MESH_1D, "--values", PI_16, "--dtype", "int32", *FAST],
        blocks,
        [
            ([3, 1, 4, 1], [3, 5, 5, 9]),
            ([5, 9, 2, 6], [1, 9, 3, 7]),
            ([5, 3, 5, 8], [4, 2, 5, 1]),
            ([9, 7, 1, 2], [1, 6, 8, 2]),
        ],
        id="mintext-3.6.2-all_to_all-AFTER-3559|1937|4251|1682",
    ),
    pytest.param(
        ["collective", "all_to_all", *MESH_1D, "--values", PI_16, "--dtype", "int32", *FAST],
        global_result,
        [3, 5, 5, 9, 1, 9, 3, 7, 4, 2, 5, 1, 1, 6, 8, 2],
        id="mintext-3.6.2-all_to_all-FINAL-RESULT",
    ),
    # --- ProJAX, "Introduction to sharded computation" -----------------------------------------------------
    pytest.param(
        ["shard", "--mesh", "2x4", "--axes", "x,y", "--shape", "4x8", "--spec", "x,y"],
        lambda doc: doc["array"]["values"],
        ARANGE_4X8,
        id="projax-In44-arange(32.0).reshape(4,8)-on-2x4",
    ),
    pytest.param(
        ["shard", "--mesh", "2x4", "--axes", "x,y", "--shape", "4x8", "--spec", "x,y"],
        shards("local_shape"),
        [[2, 2]] * 8,
        id="projax-In44-each-device-holds-2x2",
    ),
    pytest.param(
        ["einsum", "ij->j", "--shape", "4x8", "--in", "x,y", "--mesh", "2x4", "--axes", "x,y"]
        + ["--init", "arange", *FAST],
        einsum_c,
        SUM_AXIS0,
        id="projax-In46-f_contract-sum(axis=0)-48..76",
    ),
    pytest.param(
        ["recipe", "reduce", "--mesh", "2x4", "--axes", "x,y", "--shape", "4x8", "--init", "arange"],
        lambda doc: [v for row in table_rows("per device: forced output block", 2)(doc) for v in row],
        SUM_AXIS0,
        id="projax-In47-with_sharding_constraint-sum-48..76",
    ),
    pytest.param(
        ["recipe", "reduce", "--mesh", "2x4", "--axes", "x,y", "--shape", "4x8", "--init", "arange"],
        lambda doc: [s["spec"] for s in doc["sections"] if s["kind"] == "sharding"][-1],
        "P(('x', 'y'),)",
        id="projax-In47-constraint-shards-the-sum-over-all-8",
    ),
    pytest.param(
        ["recipe", "elementwise", "--mesh", "8", "--axes", "x", "--shape", "32", "--init", "arange"],
        flat_float32(table_rows("per device: output block", 2)),
        PROJAX_SIN,
        id="projax-In48-shard_map-2sin(x)+1-over-arange(32)",
    ),
    pytest.param(
        ["recipe", "elementwise", "--mesh", "8", "--axes", "x", "--shape", "32", "--init", "arange"],
        lambda doc: [c["ok"] for c in doc["checks"] if "sharding" in c["what"]],
        [True],
        id="projax-In45-shardings-match-True",
    ),
    pytest.param(
        ["shard", "--mesh", "8", "--axes", "x", "--shape", "32", "--spec", "x"],
        shards("local_shape"),
        [[4]] * 8,
        id="projax-In49-global-(32,)-device-local-(4,)",
    ),
    pytest.param(
        ["einsum", "ij->i", "--shape", "8x4", "--in", "x,None", "--mesh", "8", "--axes", "x"]
        + ["--init", "arange", *FAST],
        einsum_c,
        [6.0, 22.0, 38.0, 54.0, 70.0, 86.0, 102.0, 118.0],
        id="projax-In50-per-shard-sums-6-22-38-..-118",
    ),
    pytest.param(
        [
            "einsum",
            "i->",
            "--shape",
            "32",
            "--in",
            "x",
            "--mesh",
            "8",
            "--axes",
            "x",
            "--init",
            "arange",
            *FAST,
        ],
        einsum_c,
        496.0,
        id="projax-In51-psum-of-the-shard-sums-496",
    ),
    pytest.param(
        [
            "einsum",
            "i->",
            "--shape",
            "32",
            "--in",
            "x",
            "--mesh",
            "8",
            "--axes",
            "x",
            "--init",
            "arange",
            *FAST,
        ],
        lambda doc: [c["kind"] for c in doc["sizes"][0]["impls"][0]["program"]["collectives"]],
        ["all-reduce"],
        id="projax-In51-the-sum-across-shards-is-an-all-reduce",
    ),
    # --- the Flax NNX guide, "Scaling across devices" -------------------------------------------------
    pytest.param(
        ["mesh", "--mesh", "2x4", "--axes", "data,model"],
        lambda doc: dict(zip(doc["mesh"]["axes"], doc["mesh"]["shape"], strict=True)),
        {"data": 2, "model": 4},
        id="flax-mesh-Mesh('data':2,'model':4)",
    ),
    pytest.param(
        ["shard", "--mesh", "2x4", "--axes", "data,model", "--shape", "1024x1024", "--spec", "None,model"]
        + ["--no-show-values"],
        tiles,
        [[0, 4], [1, 5], [2, 6], [3, 7]],
        id="flax-dot1.kernel-(None,model)-CPU-0,4|1,5|2,6|3,7",
    ),
    pytest.param(
        ["shard", "--mesh", "2x4", "--axes", "data,model", "--shape", "1024x1024", "--spec", "model,None"]
        + ["--no-show-values"],
        tiles,
        [[0, 4], [1, 5], [2, 6], [3, 7]],
        id="flax-w2-(model,None)-CPU-0,4|1,5|2,6|3,7",
    ),
    pytest.param(
        ["einsum", "bd,df->bf", "--shape", "8x1024", "--shape", "1024x1024", "--in", "data,model"]
        + ["--in", "model,None", "--impl", "auto", "--mesh", "2x4", "--axes", "data,model", *FAST],
        lambda doc: (doc["sizes"][0]["result"]["shape"], doc["sizes"][0]["impls"][0]["out_spec"]),
        ([8, 1024], [["data"], None]),
        id="flax-output-(8,1024)-sharded-(data,None)",
    ),
    # --- learn_jax intro_to_distributed.py (its code's inputs; it prints no output) --------------------
    pytest.param(
        ["shard", "--mesh", "8", "--axes", "i", "--shape", "8", "--spec", "i", "--dtype", "int32"],
        shards("values"),
        [[k] for k in range(8)],
        id="intro-single-axis-mesh-arange(8)-one-element-per-device",
    ),
    pytest.param(
        ["shard", "--mesh", "4x2", "--axes", "i,j", "--shape", "192x64", "--spec", "i,None"],
        lambda doc: doc["shards"][0]["local_shape"],
        [48, 64],
        id="intro-sharded-MAC-local-x-(48,64)",
    ),
    pytest.param(
        ["shard", "--mesh", "4x2", "--axes", "i,j", "--shape", "64x128", "--spec", "None,j"],
        lambda doc: doc["shards"][0]["local_shape"],
        [64, 64],
        id="intro-sharded-MAC-local-w-(64,64)",
    ),
    pytest.param(
        ["shard", "--mesh", "4x2", "--axes", "i,j", "--shape", "128", "--spec", "j"],
        lambda doc: doc["shards"][0]["local_shape"],
        [64],
        id="intro-sharded-MAC-local-b-(64,)",
    ),
    pytest.param(
        ["collective", "psum_scatter", "--mesh", "4x2", "--axes", "i,j", "--axis", "i", "--shape", "4x4"]
        + ["--values", PI_16, "--spec", "i,None", "--scatter-dim", "1", "--dtype", "int32", *FAST],
        lambda doc: [d["output"] for d in doc["sizes"][0]["values"]["devices"]],
        [[[int(s)]] for s in INTRO_X.sum(axis=0) for _ in range(2)],
        id="intro-scatter_example-x_exmp-column-sums-22|20|12|17",
    ),
    pytest.param(
        ["collective", "ppermute", *MESH_1D, "--values", "0,1,2,3", "--dtype", "int32", *FAST],
        global_result,
        np.roll(np.arange(4), 1).tolist(),
        id="intro-ppermute_example-arange(4)-rolls-to-3-0-1-2",
    ),
    pytest.param(
        ["recipe", "pipeline-ring", "--mesh", "4", "--axes", "i", "--shape", "4", "--init", "arange"]
        + ["--steps", "1"],
        lambda doc: table_rows("each device's block after every step", slice(1, None))(doc),
        [[[0.0], [1.0], [2.0], [3.0]], [[3.0], [0.0], [1.0], [2.0]]],
        id="intro-ppermute_example-BEFORE-0-1-2-3-AFTER-3-0-1-2",
    ),
    pytest.param(
        ["recipe", "axis-index", "--mesh", "4x2", "--axes", "i,j"],
        lambda doc: [row[:3] for row in [s for s in doc["sections"] if s["kind"] == "table"][0]["rows"]],
        [[k, k // 2, k % 2] for k in range(8)],
        id="intro-axis_idx_fn-device-k-has-i=k//2-j=k%2",
    ),
]


@pytest.mark.parametrize(("args", "extract", "expected"), LESSONS)
def test_the_tutorials_numbers(cli, args: list[str], extract: Extract, expected: Any) -> None:
    result = cli([*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert extract(doc) == expected


def test_there_are_rows_for_every_tutorial_with_numbers() -> None:
    """Every tutorial whose lessons print numbers has rows here (the others: tests/test_lessons_run.py)."""
    prefixes = {str(p.id).split("-", 1)[0] for p in LESSONS}
    assert prefixes == {"mintext", "projax", "intro", "flax"}
    assert len(LESSONS) >= 30
