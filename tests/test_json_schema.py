"""The JSON contract: every kind of document a real run writes has exactly the keys of its schema.

shardcli/results/documents.py owns the keys (its kinds join the records of records.py and bodies.py);
this file checks real documents against it, checks that the check can fail, and pins each kind's keys
to the schema version, so a script that parses the JSON cannot break without the version saying so.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shardcli.results import bodies, records, shapes
from shardcli.results.documents import (
    DOCUMENTS,
    SCHEMA_VERSION,
    check_document,
    document,
    document_problems,
)
from shardcli.results.shapes import SchemaError

FAST = ["--iters", "2", "--warmup", "1", "--format", "json"]
COLLECTIVE = ["collective", "all_gather", "--mesh", "4", "--sizes", "1K,2K,4K", "--placement", "both", *FAST]
MATMUL = [
    "matmul", "--case", "allreduce,illegal", "--impl", "all", "--mesh", "2x2", "--dims", "32,64,32",
    "--sizes", "1,2", "--peak-tflops", "1", "--link-gbps", "1", *FAST,
]  # fmt: skip
MODEL = ["model", "train", "--mesh", "2x4", "--depth", "32", "--batch", "8", "--steps", "2", *FAST[-2:]]
PIPELINE = [
    "pipeline", "--mesh", "4x2", "--layers", "4", "--width", "16", "--batch", "8", "--microbatches", "4",
    "--impl", "both", "--format", "json",
]  # fmt: skip


def run_json(cli, args: list[str], exit_code: int = 0) -> dict[str, Any]:
    result = cli(args)
    assert result.exit_code == exit_code, result.output
    return json.loads(result.stdout)


def _compare(cli, tmp_path) -> list[dict[str, Any]]:
    base = tmp_path / "base.json"
    base.write_text(json.dumps(run_json(cli, COLLECTIVE)))
    return [run_json(cli, ["compare", str(base), str(base), "--format", "json"])]


def _model(cli, tmp_path) -> list[dict[str, Any]]:
    folder = str(tmp_path / "ckpt")
    return [
        run_json(cli, [*MODEL, "--checkpoint", folder]),
        run_json(cli, ["model", "restore", folder, *FAST[-2:]]),
    ]


# Each kind of document, as real runs write it. A new kind in DOCUMENTS needs its entry here.
EXAMPLES = str(Path(__file__).resolve().parent.parent / "examples")
_LINEN = str(Path(__file__).parent / "programs" / "plan_linen.py")
PLAN_LINEN = [
    "plan",
    f"{_LINEN}:train_step",
    "--inputs",
    f"{_LINEN}:inputs",
    "--target",
    "tpu-v5e:2x2",
    "-n",
    "1",
]
REAL_DOCUMENTS: dict[str, Callable[[Any, Any], list[dict[str, Any]]]] = {
    "mesh": lambda cli, _: [run_json(cli, ["mesh", "--mesh", "2x4", "--format", "json"])],
    "shard": lambda cli, _: [
        run_json(cli, ["shard", "--mesh", "2x4", "--shape", "8x8", "--spec", "x,y", "--format", "json"])
    ],
    "collective": lambda cli, _: [run_json(cli, COLLECTIVE)],
    "collectives": lambda cli, _: [run_json(cli, ["collective", "psum,all_gather", "--mesh", "4", *FAST])],
    "matmul": lambda cli, _: [run_json(cli, MATMUL)],
    "einsum": lambda cli, _: [
        run_json(
            cli,
            [
                "einsum",
                "ij,jk->ik",
                "--shape",
                "8x16",
                "--shape",
                "16x8",
                "--in",
                "x,None",
                "--in",
                "None,y",
                "--mesh",
                "2x2",
                *FAST,
            ],
        )
    ],
    "reshard": lambda cli, _: [
        run_json(cli, ["reshard", "--mesh", "2x2", "--shape", "8x8", "--from", "x,y", "--to", "y,x", *FAST])
    ],
    "inspect": lambda cli, _: [
        run_json(
            cli,
            [
                "inspect",
                f"{EXAMPLES}/mlp.py:train_step",
                "--mesh",
                "2x2",
                "--arg",
                "f32[8,16]@x,None",
                "--arg",
                "f32[16,32]@None,y",
                "--arg",
                "f32[32,16]@y,None",
                "--format",
                "json",
            ],
        )
    ],
    "run": lambda cli, _: [
        run_json(
            cli,
            [
                "run",
                f"{EXAMPLES}/lessons.py:sum_then_psum",
                "--mesh",
                "8",
                "--arg",
                "i32[32]@x",
                "--format",
                "json",
            ],
        )
    ],
    # elementwise has a section of each kind: sharding, table and text
    "recipe": lambda cli, _: [run_json(cli, ["recipe", "elementwise", "--format", "json"])],
    "model": _model,
    "pipeline": lambda cli, _: [run_json(cli, PIPELINE)],
    "compare": _compare,
    # compile-only through libtpu (the tpu extra), a tiny decoder and a linen program on 4 chips
    "plan": lambda cli, _: [
        run_json(
            cli,
            [
                "plan",
                "--preset",
                "tiny",
                "--target",
                "tpu-v5e:2x2",
                "--batch",
                "2",
                "-n",
                "1",
                "--format",
                "json",
            ],
        )
    ],
    "plan-program": lambda cli, _: [run_json(cli, [*PLAN_LINEN, "--format", "json"])],
}

# Each kind's keys, digested (see `key_tree`), per SCHEMA_VERSION. A kind whose keys change breaks
# the scripts that read it: raise SCHEMA_VERSION and record the new digests under it.
PINNED_KEYS = {
    1: {
        "mesh": "de3af678d1033ecc",
        "shard": "d661276611ead749",
        "collective": "8563d3ab0490d6eb",
        "collectives": "b9bffef9a3aac720",
        "matmul": "5920abcbd8407311",
        "recipe": "1bec5160fc75c434",
        "model": "bd734e2164339f19",
        "pipeline": "624ff9ba959f3e42",
        "compare": "53b1ec01214a6068",
    },
    # 2: matmul's --target (config.compile_target, each impl's fit); einsum, reshard and inspect are new
    # (with, before any release, a program's loops and once-counted XLA figures and inspect's step_time)
    2: {
        "mesh": "de3af678d1033ecc",
        "shard": "d661276611ead749",
        "collective": "8563d3ab0490d6eb",
        "collectives": "b9bffef9a3aac720",
        "matmul": "1c618194e425b23a",
        "einsum": "c6213b4d128b4c28",
        "reshard": "8b00d559b9f3f9a8",
        "inspect": "dd4ec87107ac9cc4",
        "recipe": "1bec5160fc75c434",
        "model": "bd734e2164339f19",
        "pipeline": "624ff9ba959f3e42",
        "compare": "53b1ec01214a6068",
    },
    # 3: each matmul and einsum impl has its result's values (null over 256 elements); with 2's program
    # loops, once-counted XLA figures, subgroup slices and inspect's step_time; before any release of
    # 3, a program's collectives name the argument they move (operand: einsum, reshard, inspect), and
    # inspect's findings carry count, paths and source beside its collective_groups
    3: {
        "mesh": "de3af678d1033ecc",
        "shard": "d661276611ead749",
        "collective": "8563d3ab0490d6eb",
        "collectives": "b9bffef9a3aac720",
        "matmul": "5100a47dbdb9dcd0",
        "einsum": "3a6a63d1c567abb4",
        "reshard": "a43a5a39945a07dc",
        "inspect": "4e248b9a5fdaf3be",
        "run": "fe2bd841fa0a4ee2",  # new (shardcli run): adding a kind changes no other's keys
        "recipe": "1bec5160fc75c434",
        "model": "bd734e2164339f19",
        "pipeline": "624ff9ba959f3e42",
        "compare": "53b1ec01214a6068",
        "plan": "16c1fd929d96515d",  # new (shardcli plan)
        # new (shardcli plan FILE.py:FN); before any release of 3: config.cache, winner.inspect_command
        # (the command that reproduces it) and summary.cached
        "plan-program": "4f5f7273fd9feb3b",
    },
    # 4: a program's library kernels (einsum, reshard, inspect: program.kernels) and inspect's
    # step_time method and per-op roofline (ops, on a GPU), inspect's module (inspect PATH.hlo.txt);
    # every fit verdict its status, margin_bytes, advice and gpu_pool (matmul, einsum, reshard, inspect);
    # inspect --run's donation (how a donating step's arrays were given to each call); every run's runtime
    # names the compiler that judged it (runtime.compiler; plan's config.compiler); added in 4: plan's
    # config.rank (--rank) and chip.usable_bytes and chip.network_bytes_per_s (GPU hosts)
    4: {
        "mesh": "8e142fb6bec51a4c",
        "shard": "606eab0ec5ca858b",
        "collective": "2abe7347e8c41cc5",
        "collectives": "9475a2fa522822e8",
        "matmul": "9f4fc5604f676221",
        "einsum": "f75470445831e98a",
        "reshard": "d0654305a3b35b1b",
        "inspect": "e8606622868a35bb",
        "run": "b96544291abc8b0b",
        "recipe": "c50f58fd467c0a00",
        "model": "e7d913623526ef37",
        "pipeline": "00e642b1573f23de",
        "compare": "53b1ec01214a6068",
        "plan": "aeca68b114be92c6",
        "plan-program": "1e466772574394a6",
    },
    # 5: a program's collective carries the user's frames that led to it (stack; einsum, reshard,
    # inspect); a GPU's per-op estimate the least its launches take (step_time.ops.launch_s, counts);
    # plan's config.rank, and its chip's usable_bytes (JAX's pool on a GPU) and network_bytes_per_s
    5: {
        "mesh": "8e142fb6bec51a4c",
        "shard": "606eab0ec5ca858b",
        "collective": "2abe7347e8c41cc5",
        "collectives": "9475a2fa522822e8",
        "matmul": "9f4fc5604f676221",
        "einsum": "d1d8af0efaf34689",
        "reshard": "7791647bd63d2556",
        "inspect": "6aacc16e52ee7959",
        "run": "b96544291abc8b0b",
        "recipe": "c50f58fd467c0a00",
        "model": "e7d913623526ef37",
        "pipeline": "00e642b1573f23de",
        "compare": "53b1ec01214a6068",
        "plan": "fc4aee0db5328711",
        "plan-program": "1e466772574394a6",
    },
}
# 6: plan's config.model.attention (dot, or flash: cuDNN's fused kernel on GPU targets), config.mesh;
# every other kind's keys as in 5
PINNED_KEYS[6] = {**PINNED_KEYS[5], "plan": "0926e87d87839fba"}
# 7: a program's memory has host_bytes and host_transfer_bytes, its step_time a host term (einsum,
# reshard, inspect, plan --program's inspect); plan's compiled figures host_bytes and
# host_transfer_bytes, its estimate and its model t_host_s
PINNED_KEYS[7] = {
    **PINNED_KEYS[6],
    "einsum": "873994b5e09024e5",
    "reshard": "55fbb93c5231a3c8",
    "inspect": "e1b28a0bb61d01ff",
    "plan": "4ee130c9d586b637",
    "plan-program": "b2aedc0dea157506",
}
# 8: a program's collective and inspect's collective groups carry their role; inspect's findings
# their checked fix (einsum and reshard list a program's collectives)
PINNED_KEYS[8] = {
    **PINNED_KEYS[7],
    "einsum": "d75a169ff9ea122e",
    "reshard": "8ac8895e19004c7f",
    "inspect": "566c6b7eb07dd814",
}
# 9: inspect's compile_options and plan's config.compile_options (what a compile changed from JAX's
# defaults: a GPU target's xla_gpu_enable_triton_gemm=false)
PINNED_KEYS[9] = {
    **PINNED_KEYS[8],
    "inspect": "f892854df08fd412",
    "plan": "0118ac672487fe76",
    "plan-program": "effbd9f16620d686",
}
# 10: inspect's step_time.t_exposed_s (the communication the compiled schedule does not hide) and
# each collective group's exposed_s and hidden_s; before any release of 10, plan's config.slices
# (--slices: TPU slices joined over the data-center network) and each candidate's crosses_slices;
# plan's config.pipeline (--pipeline) and each candidate's pipeline (stages, microbatches, bubble)
PINNED_KEYS[10] = {**PINNED_KEYS[9], "inspect": "86f10127d61d63e2", "plan": "d1a3aacdaceb9546"}


def key_tree(shape: shapes.Shape) -> Any:
    """A shape's keys and nesting as plain JSON, in order."""
    if isinstance(shape, shapes.Record):
        return [[key, key_tree(sub)] for key, sub in shape.fields.items()]
    if isinstance(shape, shapes.ListOf):
        return ["list of", key_tree(shape.item)]
    if isinstance(shape, shapes.MapOf):
        return ["map of", key_tree(shape.value)]
    if isinstance(shape, shapes.Maybe):
        return ["or null", key_tree(shape.shape)]
    if isinstance(shape, shapes.Tagged):
        return ["tagged by", shape.tag, [[name, key_tree(r)] for name, r in shape.variants.items()]]
    return "value"


def digest(kind: str) -> str:
    text = json.dumps(key_tree(DOCUMENTS[kind].record))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# Real documents ---------------------------------------------------------------------------------


def test_every_kind_has_a_real_document_and_pinned_keys():
    assert set(REAL_DOCUMENTS) == set(DOCUMENTS)
    assert set(PINNED_KEYS[SCHEMA_VERSION]) == set(DOCUMENTS)


@pytest.mark.parametrize("kind", list(DOCUMENTS))
def test_real_documents_have_exactly_the_schemas_keys(cli, tmp_path, kind):
    docs = REAL_DOCUMENTS[kind](cli, tmp_path)
    for doc in docs:
        assert doc["command"] in DOCUMENTS[kind].commands
        assert document_problems(doc, kind) == []
        assert document_problems(doc) == []  # its command and keys name its kind
        check_document(doc)


def test_recipe_list_has_exactly_the_schemas_keys(cli):
    doc = run_json(cli, ["recipe", "list", "--format", "json"])
    assert doc["recipes"]
    assert shapes.problems(doc, bodies.RECIPE_LIST) == []


@pytest.mark.parametrize("kind", list(DOCUMENTS))
def test_keys_are_pinned_to_the_schema_version(kind):
    assert digest(kind) == PINNED_KEYS[SCHEMA_VERSION][kind], (
        f"the keys of the {kind} document changed (digest {digest(kind)}): scripts that read it break, so "
        "raise SCHEMA_VERSION in shardcli/results/documents.py and record the digests under the new version"
    )


# The check can fail ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def collective_doc(cli) -> dict[str, Any]:
    return run_json(cli, COLLECTIVE)


def _delete(*path: str | int) -> Callable[[dict[str, Any]], None]:
    def edit(doc):
        for key in path[:-1]:
            doc = doc[key]
        del doc[path[-1]]

    return edit


def _set(*path: str | int, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc):
        for key in path[:-1]:
            doc = doc[key]
        doc[path[-1]] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        pytest.param(_delete("summary"), ["the document: missing 'summary'"], id="missing-top"),
        pytest.param(_set("extra", value=1), ["the document: unexpected 'extra'"], id="extra-top"),
        pytest.param(
            _delete("sizes", 1, "placements", 0, "timing", "stats_s", "p50"),
            ["sizes[1].placements[0].timing.stats_s: missing 'p50'"],
            id="missing-deep",
        ),
        pytest.param(_set("runtime", "gpu", value=1), ["runtime: unexpected 'gpu'"], id="extra-nested"),
        pytest.param(
            _set("config", value=None), ["config: null where an object should be"], id="null-record"
        ),
        pytest.param(_set("sizes", value={}), ["sizes: an object where a list should be"], id="not-a-list"),
        pytest.param(
            _set("summary", "fit", "out", value={"r2": 1.0}),
            ["summary.fit.out: missing 'model', 'alpha_us', 'beta_gbps', 'max_rel_residual', 'points'"],
            id="map-value",
        ),
        pytest.param(_set("schema", value=1), [f"schema: 1, not {SCHEMA_VERSION}"], id="schema-version"),
        pytest.param(
            _set("command", value="frobnicate"),
            ["command: no document kind is written by 'frobnicate'"],
            id="command",
        ),
    ],
)
def test_the_check_refuses_a_document_that_differs(collective_doc, edit, expected):
    doc = copy.deepcopy(collective_doc)
    edit(doc)
    assert document_problems(doc) == expected
    with pytest.raises(SchemaError) as error:
        check_document(doc)
    assert str(error.value) == "\n".join(expected)


def test_a_null_is_refused_where_the_schema_has_no_maybe():
    assert shapes.problems({"op": "x", "count": 1, "result_bytes": 2}, shapes.ListOf(records.HLO_OP)) == [
        "the document: an object where a list should be"
    ]
    placement = {k: None for k in bodies.COLLECTIVE_PLACEMENT.keys}
    assert shapes.problems(placement, bodies.COLLECTIVE_PLACEMENT) == [
        "hlo_collectives: null where a list should be"
    ]


def test_a_section_of_an_unknown_kind_is_refused():
    section = {"kind": "chart", "title": "t"}
    assert shapes.problems([section], shapes.ListOf(bodies.SECTION), "sections") == [
        "sections[0]: 'kind' is 'chart', not one of sharding, table, text"
    ]
    text = {"kind": "text", "title": "t", "lines": [], "rows": []}
    assert shapes.problems(text, bodies.SECTION) == ["the document: unexpected 'rows'"]


# Writers build through the schema -----------------------------------------------------------------


def test_a_record_is_built_with_exactly_its_keys_in_its_order():
    assert list(records.HLO_OP(result_bytes=8, count=1, op="all-gather")) == ["op", "count", "result_bytes"]
    with pytest.raises(SchemaError, match=r"^a record: missing 'result_bytes'$"):
        records.HLO_OP(op="all-gather", count=1)
    with pytest.raises(SchemaError, match=r"^a record: unexpected 'bytes'$"):
        records.HLO_OP(op="all-gather", count=1, result_bytes=8, bytes=8)


def test_document_stamps_the_envelope_and_checks_the_parts():
    doc = document("mesh", runtime={}, mesh={})
    assert list(doc)[:3] == ["schema", "command", "shardcli_version"]
    assert (doc["schema"], doc["command"]) == (SCHEMA_VERSION, "mesh")
    with pytest.raises(SchemaError, match="no document kind is written by command 'frobnicate'"):
        document("frobnicate", runtime={}, mesh={})
    with pytest.raises(SchemaError, match=r"^a record: missing 'mesh'; unexpected 'layout'$"):
        document("mesh", runtime={}, layout={})


def test_key_follows_a_path_through_lists_and_refuses_an_unknown_one():
    kind = DOCUMENTS["collective"]
    assert kind.key("sizes", "placements", "timing", "stats_s", "p50") == "p50"
    with pytest.raises(SchemaError, match=r"^the schema has no 'sizes.placements.busbw'$"):
        kind.key("sizes", "placements", "busbw")
    with pytest.raises(SchemaError, match=r"^the schema has no 'config.params.axes'$"):
        kind.key("config", "params", "axes")  # params is a plain value, not a record
