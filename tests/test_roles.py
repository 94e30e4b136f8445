"""Each collective's role, the findings that follow from the roles, and the fixes checked by a compile.

The programs are written in the patterns of real training steps (tests/programs/fsdp_scanned.py:
MaxText's and lm1b's scanned FSDP decoder with remat, bf16 casts inside the layer and an argmax over
vocab-sharded logits); the two false findings real programs showed (FSDP's in-scan weight gathers
warned as reshards; an argmax's candidates warned as a reshard) are checked gone, on the CPU and on
a TPU target, whose compiler moves the stacked weights through the loop tuples and its async
collective fusions.
"""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from pathlib import Path

import pytest

from shardcli.analysis.arguments import ArrayFact
from shardcli.analysis.collectives import CollectiveOp, parse_collectives
from shardcli.analysis.fixes import Figures, helps, partition_spec_text, proposals, spec_text
from shardcli.analysis.roles import ROLES, Batch, find_batch, role_of
from shardcli.results import documents
from shardcli.tile_math import group_tiles

ROOT = Path(__file__).resolve().parents[1]
FSDP = str(ROOT / "tests" / "programs" / "fsdp_scanned.py")
MISTAKES = str(ROOT / "examples" / "mistakes.py")
FSDP_MESH = ("--mesh", "2x2x2", "--axes", "data,fsdp,tensor")


def op(kind: str, axes: tuple[str, ...], op_name: str | None, **more) -> CollectiveOp:
    return CollectiveOp(
        kind=kind,
        shape="f32[8,8]",
        result_bytes=256,
        mesh_axes=axes,
        group_size=2,
        runs=1,
        runs_known=True,
        op_name=op_name,
        source=None,
        is_async=False,
        **more,
    )


def fact(name: str, dtype: str, shape: tuple[int, ...], entries) -> ArrayFact:
    layout = group_tiles(shape, {0: tuple((0, n) for n in shape)})
    return ArrayFact(name, dtype, shape, entries, "", layout, 4, 4)


WEIGHT = fact("params['w']", "float32", (8, 8), (("fsdp",), ()))
TOKENS = fact("tokens", "int32", (8, 16), (("data", "fsdp"), ()))
BATCH = Batch(data=frozenset({"tokens"}), axes=frozenset({"data", "fsdp"}))
MU = fact("mu", "float32", (8, 8), (("fsdp",), ()))
TP_WEIGHT = fact("params['wo']", "float32", (8, 8), ((), ("tensor",)))
NU = fact("nu", "float32", (8, 8), (("fsdp",), ()))
BACKWARD = "jit(step)/transpose(jvp(dot_general))"


@pytest.mark.parametrize(
    ("collective", "moved", "role"),
    [
        pytest.param(
            op("all-gather", ("fsdp",), "jit(step)/convert_element_type"), WEIGHT, "fsdp-gather", id="fsdp"
        ),
        pytest.param(
            op(
                "all-gather",
                ("fsdp",),
                "jit(step)/transpose(jvp())/while/body/checkpoint/rematted_computation/x",
            ),
            WEIGHT,
            "fsdp-gather",
            id="fsdp-in-the-rematerialised-backward",
        ),
        pytest.param(
            op("all-gather", ("tensor",), "jit(step)/dot_general"), TP_WEIGHT, "weight-gather", id="tp-weight"
        ),
        pytest.param(
            op("collective-permute", ("fsdp", "tensor"), "jit(step)/dot_general"),
            WEIGHT,
            "fsdp-gather",
            id="fsdp-weight-gathered-in-steps-on-a-tpu",
        ),
        pytest.param(
            op("all-gather", ("tensor",), "jit(step)/dot_general"),
            WEIGHT,
            "fsdp-gather",
            id="fsdp-weight-gathered-over-another-axis",
        ),
        pytest.param(
            op("all-gather", ("data",), "jit(step)/dot_general"), TOKENS, "matmul-operand", id="data-arg"
        ),
        pytest.param(
            op("all-gather", ("tensor",), "jit(step)/argmax/reduce"),
            None,
            "cross-shard-reduction",
            id="argmax",
        ),
        pytest.param(
            op("all-gather", ("tensor",), "jit(step)/top_k"), None, "cross-shard-reduction", id="top-k"
        ),
        pytest.param(
            op("all-reduce", ("tensor",), "jit(step)/reduce_max"), None, "cross-shard-reduction", id="max"
        ),
        pytest.param(
            op("all-reduce", ("tensor",), "jit(step)/dot_general"), None, "partial-sum", id="tp-sum"
        ),
        pytest.param(op("all-reduce", ("data",), BACKWARD), None, "gradient-reduction", id="dp-grads"),
        pytest.param(op("all-reduce", ("fsdp",), None), None, "gradient-reduction", id="grads-no-op"),
        pytest.param(op("all-reduce", ("tensor",), BACKWARD), None, "partial-sum", id="tp-backward"),
        pytest.param(
            replace(
                op("all-reduce", ("tensor",), "jit(step)/jvp()/reduce_sum"), shape="(f32[16,128,1024], f32[])"
            ),
            None,
            "partial-sum",
            id="combined-all-reduce-not-by-its-scalar",
        ),
        pytest.param(
            replace(
                op("all-reduce", ("data",), "jit(step)/reduce_sum"), shape="(f32[256,4,64], f32[16,128])"
            ),
            None,
            "gradient-reduction",
            id="combined-gradients-over-the-batch",
        ),
        pytest.param(
            replace(
                op("all-reduce", ("tensor",), "jit(step)/reduce_sum"), shape="(f32[16,128], f32[16,128])"
            ),
            None,
            "cross-shard-reduction",
            id="combined-norm-mean-and-variance",
        ),
        pytest.param(
            replace(op("all-reduce", ("data",), "jit(step)/reduce_sum"), shape="(f32[], f32[], f32[])"),
            None,
            "cross-shard-reduction",
            id="combined-metric-scalars-over-the-batch",
        ),
        pytest.param(
            replace(op("all-reduce", ("data",), "jit(step)/dot_general"), shape="(f32[64,256], f32[64,256])"),
            None,
            "gradient-reduction",
            id="combined-gradients-of-one-shape-under-a-forward-name",
        ),
        pytest.param(
            replace(op("all-reduce", ("tensor",), "jit(step)/reduce_sum"), shape="(f32[16,64], f32[16])"),
            None,
            "partial-sum",
            id="combined-partial-sums-under-a-reductions-name",
        ),
        pytest.param(
            op("all-reduce", ("tensor",), "jit(step)/Embed_0/jit(_take)/gather"),
            None,
            "table-lookup",
            id="rows-of-a-vocab-sharded-table",
        ),
        pytest.param(
            op("collective-permute", ("fsdp", "tensor"), "jit(step)/dot_general"), None, "reshard", id="swap"
        ),
        pytest.param(
            op("reduce-scatter", ("fsdp",), BACKWARD), None, "gradient-reduce-scatter", id="fsdp-grads"
        ),
        pytest.param(
            op("reduce-scatter", ("tensor",), "jit(step)/dot_general"), None, "partial-sum", id="sp-sum"
        ),
        pytest.param(
            op("all-gather", ("tensor",), "jit(step)/dot_general"), None, "matmul-operand", id="sp-gather"
        ),
        pytest.param(op("all-to-all", ("fsdp",), "jit(step)/mul"), None, "reshard", id="all-to-all"),
        pytest.param(
            op("all-to-all", ("fsdp",), "jit(step)/jvp()/gather"), None, "table-lookup", id="embedding-lookup"
        ),
        pytest.param(
            op("all-to-all", ("fsdp",), "jit(step)/transpose(jvp())/scatter-add"),
            None,
            "table-lookup",
            id="embedding-gradient",
        ),
        pytest.param(
            replace(op("all-gather", ("fsdp",), "jit(step)/jvp()/broadcast_in_dim"), shape="s32[8,128,1]"),
            None,
            "table-lookup",
            id="lookup-ids",
        ),
        pytest.param(
            op("all-gather", ("data",), "jit(step)/embed/jit(_take)/reduce_and"),
            None,
            "table-lookup",
            id="take",
        ),
        pytest.param(op("all-gather", ("data",), "jit(step)/mul"), None, "reshard", id="gather-for-mul"),
        pytest.param(
            op("collective-permute", ("stage",), "jit(step)/shard_map/ppermute"),
            None,
            "pipeline-transfer",
            id="stage",
        ),
        pytest.param(
            op("all-reduce", ("data",), "jit(step)/shard_map/psum"), None, "program", id="shard-map"
        ),
    ],
)
def test_each_collective_has_the_role_of_what_it_does(collective, moved, role):
    assert role_of(collective, moved, BATCH) == role


def test_a_weight_of_a_step_whose_data_come_in_replicated_is_gathered_for_fsdp():
    """nanodo hands its batch in replicated and lays it out inside the step: no batch axes show."""
    state = Batch(data=frozenset({"tokens"}), axes=frozenset(), state=frozenset({"params['w']"}))
    gather = op("all-gather", ("data",), "jit(step)/convert_element_type")
    assert role_of(gather, WEIGHT, state) == "fsdp-gather"
    assert role_of(gather, WEIGHT, Batch(frozenset(), frozenset())) == "weight-gather"  # a plain function


def test_an_array_a_wrapped_step_is_handed_is_its_argument():
    """A haliax named_jit (Levanter's) or equinox step is handed its arrays as `arrays[i]`."""
    from shardcli.analysis.arguments import moved_argument

    gathered = op("all-gather", ("fsdp",), "jit(step)/while/body/squeeze", operand="arrays[1]")
    assert moved_argument(gathered, [TOKENS, WEIGHT]) is WEIGHT
    assert moved_argument(replace(gathered, operand="arrays[2]"), [TOKENS, WEIGHT]) is None
    assert moved_argument(replace(gathered, operand="tokens"), [TOKENS, WEIGHT]) is TOKENS


def test_only_a_reshard_is_actionable():
    assert [name for name, r in ROLES.items() if r.actionable] == ["reshard"]


@pytest.mark.parametrize(
    ("arguments", "results", "batch"),
    [
        pytest.param(
            (WEIGHT, MU, NU, TOKENS),
            (WEIGHT, MU, NU),
            Batch(frozenset({"tokens"}), frozenset({"data", "fsdp"}), frozenset({"params['w']", "mu", "nu"})),
            id="train-step-state-returned",
        ),
        pytest.param(
            (WEIGHT, TOKENS), (), Batch(frozenset({"tokens"}), frozenset({"data", "fsdp"})), id="token-ids"
        ),
        pytest.param(
            (
                fact("x", "float32", (2, 8, 16), ((), ("data",), ())),
                fact("w", "float32", (8, 8), ((), ("data",))),
                fact("m", "float32", (8, 8), ((), ("data",))),
                fact("v", "float32", (8, 8), ((), ("data",))),
            ),
            tuple(fact(n, "float32", (8, 8), ((), ("data",))) for n in "wmv"),
            Batch(frozenset({"x"}), frozenset({"data"}), frozenset({"w", "m", "v"})),
            id="microbatches-second-dimension",
        ),
        pytest.param(
            (fact("x", "float32", (8, 8), (("data",), ())), fact("w", "float32", (8, 8), (("data",), ()))),
            (fact("y", "float32", (8, 8), (("data",), ())),),
            Batch(frozenset(), frozenset()),
            id="a-plain-function-has-no-batch",
        ),
        pytest.param(
            (
                fact("x", "float32", (32, 8), (("data",), ())),
                fact("w", "float32", (8, 8), (("data",), ())),
                fact("m", "float32", (8, 8), (("data",), ())),
            ),
            (fact("y", "float32", (32, 8), (("data",), ())), fact("m2", "float32", (8, 8), (("data",), ()))),
            Batch(frozenset(), frozenset()),
            id="two-results-shaped-like-arguments-are-no-state",
        ),
    ],
)
def test_the_batch_is_what_the_step_consumes(arguments, results, batch):
    assert find_batch(arguments, results) == batch


# --- following a stacked weight to its argument, as a TPU's compiler moves it ---------------------

# The backward loop takes the forward loop's result, whose element 1 the forward body hands on; in
# the backward body an async collective fusion gathers a slice of it, and a second gather takes the
# first one's operand back from the fusion's tuple.
THROUGH_LOOPS = """\
HloModule jit_step, is_scheduled=true

%fwd_body (p: (s32[], f32[3,4,8])) -> (s32[], f32[3,4,8]) {
  %p = (s32[], f32[3,4,8]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %w = f32[3,4,8] get-tuple-element(%p), index=1
  ROOT %t = (s32[], f32[3,4,8]) tuple(%i, %w)
}

%slice (param_0: f32[3,4,8], param_1: s32[]) -> f32[4,8] {
  %param_0 = f32[3,4,8] parameter(0)
  %param_1 = s32[] parameter(1)
  %c = s32[] constant(0)
  %ds = f32[1,4,8] dynamic-slice(%param_0, %param_1, %c, %c), dynamic_slice_sizes={1,4,8}
  ROOT %b = f32[4,8] bitcast(%ds)
}

%async_gather (param_0.1: f32[4,8]) -> (f32[4,8], f32[8,8], u32[]) {
  %param_0.1 = f32[4,8] parameter(0)
  %all-gather.1 = f32[8,8] all-gather(%param_0.1), replica_groups={{0,1}}, metadata={op_name="x"}
  ROOT %cc = (f32[4,8], f32[8,8], u32[]) custom-call(%all-gather.1), custom_call_target="AsyncCollectiveStart"
}

%bwd_body (q: (s32[], f32[3,4,8])) -> (s32[], f32[3,4,8]) {
  %q = (s32[], f32[3,4,8]) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %v = f32[3,4,8] get-tuple-element(%q), index=1
  %s = f32[4,8] fusion(%v, %j), kind=kLoop, calls=%slice
  %start = (f32[4,8], f32[8,8], u32[]) fusion(%s), kind=kCustom, calls=%async_gather
  %operand = f32[4,8] get-tuple-element(%start), index=0
  %all-gather.2 = f32[8,8] all-gather(%operand), replica_groups={{0,1}}, dimensions={0}
  ROOT %u = (s32[], f32[3,4,8]) tuple(%j, %v)
}

ENTRY %main (w.1: f32[3,4,8]) -> f32[3,4,8] {
  %w.1 = f32[3,4,8] parameter(0), metadata={op_name="params['layers']"}
  %zero = s32[] constant(0)
  %init = (s32[], f32[3,4,8]) tuple(%zero, %w.1)
  %fwd = (s32[], f32[3,4,8]) while(%init), condition=%fwd_body, body=%fwd_body
  %i2 = s32[] get-tuple-element(%fwd), index=0
  %carried = f32[3,4,8] get-tuple-element(%fwd), index=1
  %init2 = (s32[], f32[3,4,8]) tuple(%i2, %carried)
  %bwd = (s32[], f32[3,4,8]) while(%init2), condition=%bwd_body, body=%bwd_body
  ROOT %out = f32[3,4,8] get-tuple-element(%bwd), index=1
}
"""


def test_a_stacked_weight_is_followed_through_loop_results_and_async_collective_fusions():
    found = parse_collectives(THROUGH_LOOPS, (2,), ("fsdp",))
    assert [(c.kind, c.operand, c.operand_parameter) for c in found] == [
        ("all-gather", "params['layers']", 0),
        ("all-gather", "params['layers']", 0),
    ]


def test_a_loop_that_computes_its_element_is_not_followed():
    computed = THROUGH_LOOPS.replace(
        "  ROOT %t = (s32[], f32[3,4,8]) tuple(%i, %w)",
        "  %w2 = f32[3,4,8] add(%w, %w)\n  ROOT %t = (s32[], f32[3,4,8]) tuple(%i, %w2)",
    )
    assert [c.operand for c in parse_collectives(computed, (2,), ("fsdp",))] == [None, None]


# --- a scanned FSDP decoder with remat, as MaxText and lm1b write one --------------------------------


def _line(text: str) -> int:
    lines = Path(FSDP).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


@functools.cache
def _fsdp_doc(*extra: str) -> str:
    from typer.testing import CliRunner

    from shardcli.cli import app

    out = CliRunner().invoke(
        app,
        [
            "inspect",
            f"{FSDP}:train_step",
            "--inputs",
            f"{FSDP}:inputs",
            *FSDP_MESH,
            *extra,
            "--format",
            "json",
        ],
    )
    assert out.exit_code == 0, out.output
    return out.stdout


@pytest.mark.slow  # compiles whole programs
@pytest.mark.parametrize(
    "target", [pytest.param((), id="cpu"), pytest.param(("--target", "tpu-v5e:2x4"), id="tpu")]
)
def test_fsdp_gathers_and_the_argmax_are_not_findings(target):
    if target:
        pytest.importorskip("libtpu", reason="the tpu extra: pip install -e '.[tpu]' (CI installs it)")
    doc = json.loads(_fsdp_doc(*target))
    assert documents.document_problems(doc) == []
    collectives = doc["program"]["collectives"]
    layer = {f"fsdp_scanned.py:{_line(t)}" for t in ('"bse,em->bsm"', '"bsm,me->bse"')}
    argmax = f"fsdp_scanned.py:{_line('jnp.argmax')}"
    gathers = [
        c
        for c in collectives
        if c["kind"] == "all-gather" and c["source"] and c["source"].split("/")[-1] in layer
    ]
    assert gathers and {c["role"] for c in gathers} == {"fsdp-gather"}
    assert all(c["operand"] and c["operand"].startswith("state.params.w_") for c in gathers), gathers
    at_argmax = [c for c in collectives if c["source"] and c["source"].endswith(argmax)]
    assert at_argmax and {c["role"] for c in at_argmax} == {"cross-shard-reduction"}
    assert {c["role"] for c in collectives} >= {"fsdp-gather", "gradient-reduction", "cross-shard-reduction"}
    flagged = {f["source"].split("/")[-1] for f in doc["findings"] if f["source"]}
    assert not flagged & (layer | {argmax}), doc["findings"]
    assert {g["role"] for g in doc["collective_groups"]} == {c["role"] for c in collectives}


def test_the_screen_names_each_groups_role():
    from typer.testing import CliRunner

    from shardcli.cli import app

    out = CliRunner().invoke(
        app,
        ["inspect", f"{FSDP}:train_step", "--inputs", f"{FSDP}:inputs", *FSDP_MESH],
        env={"COLUMNS": "100"},
    )
    assert out.exit_code == 0, out.output
    assert "(kind, mesh axes, role, line)" in out.stdout
    assert "FSDP gather" in out.stdout and "grad reduction" in out.stdout


# --- fixes, checked by a compile --------------------------------------------------------------------


def json_doc(cli, *args: str) -> dict:
    out = cli(["inspect", *args, "--format", "json"])
    assert out.exit_code in (0, 1), out.output
    doc = json.loads(out.stdout)
    assert documents.document_problems(doc) == []
    return doc


def memory_total(doc: dict) -> int:
    m = doc["program"]["memory"]
    return m["argument_bytes"] + m["output_bytes"] + m["temp_bytes"] + m["code_bytes"] - m["alias_bytes"]


@pytest.mark.slow  # compiles whole programs
@pytest.mark.parametrize(
    ("args", "kind", "change"),
    [
        pytest.param(
            (f"{FSDP}:train_step", "--inputs", f"{FSDP}:replicated_inputs", *FSDP_MESH),
            "replicated",
            "shard 12 arguments over data+fsdp",
            id="replicated-weights",
        ),
        pytest.param(
            (
                f"{MISTAKES}:matmul",
                "--mesh",
                "8",
                "--axes",
                "data",
                "--arg",
                "f32[64,1024]@data,None",
                "--arg",
                "f32[1024,1024]@data,None",
            ),
            "gathered-whole",
            "lay w out as None,data",
            id="weight-gathered-whole",
        ),
        pytest.param(
            (
                f"{MISTAKES}:layout_change",
                "--mesh",
                "2x4",
                "--axes",
                "data,model",
                "--arg",
                "f32[64,64]@data,None",
            ),
            "reshard",
            "lay x out as None,data",
            id="reshard-of-an-argument",
        ),
    ],
)
def test_each_fix_is_checked_by_a_compile_and_its_command_gives_the_checked_figures(cli, args, kind, change):
    import shlex

    doc = json_doc(cli, *args)
    (finding,) = [f for f in doc["findings"] if f["kind"] == kind]
    fix = finding["fix"]
    assert fix is not None and fix["change"] == change, finding
    before, after = fix["before"], fix["checked"]
    assert (
        before["total_bytes"] == memory_total(doc)
        and before["sent_bytes"] == doc["program"]["sent_bytes_per_device"]
    )
    if kind == "replicated":
        assert after["total_bytes"] < before["total_bytes"]
    else:
        assert after["sent_bytes"] < before["sent_bytes"] and after["total_bytes"] <= before["total_bytes"]
    assert len(fix["jax"]) == len(fix["arguments"]) and fix["jax"][0].startswith(
        fix["arguments"][0]["path"] + ": NamedSharding(mesh, P("
    )
    words = shlex.split(fix["command"])
    assert words[:2] == ["shardcli", "inspect"]
    again = json_doc(cli, *words[2:])
    assert memory_total(again) == after["total_bytes"]
    assert again["program"]["sent_bytes_per_device"] == after["sent_bytes"]
    # what the finding named is mended (another argument may now be the one moved: the figures say
    # what that costs)
    assert [f for f in again["findings"] if f["kind"] == kind and f["paths"] == finding["paths"]] == []


def test_a_fix_makes_a_program_fit_the_target(cli):
    pytest.importorskip("libtpu", reason="the tpu extra: pip install -e '.[tpu]' (CI installs it)")
    out = cli(
        [
            "inspect",
            f"{MISTAKES}:matmul",
            "--inputs",
            f"{MISTAKES}:replicated",
            "--target",
            "tpu-v5e:4x4",
            "--axes",
            "data,model",
        ],
        env={"COLUMNS": "100"},
    )
    assert out.exit_code == 1, out.output  # it does not fit as it is
    assert "fix: shard w over data: --spec w=None,data" in out.stdout
    assert "memory does not fit (needs 16.5 GiB) -> 5.3 GiB per device, fits" in out.stdout


def test_no_fixes_leaves_the_findings_alone(cli):
    doc = json_doc(
        cli,
        f"{MISTAKES}:layout_change",
        "--mesh",
        "2x4",
        "--axes",
        "data,model",
        "--arg",
        "f32[64,64]@data,None",
        "--no-fixes",
    )
    assert [(f["kind"], f["fix"]) for f in doc["findings"]] == [("reshard", None)]
    assert (
        doc["findings"][0]["message"].endswith("at mul (examples/mistakes.py:23)")
        or "to reshard" in doc["findings"][0]["message"]
    )


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        pytest.param(
            "state.params.w_inn=None,fsdp",
            "--spec names 'state.params.w_inn', which is no argument of the program; its arguments are named "
            "like state.params.w_in",
            id="unknown-path",
        ),
        pytest.param(
            "state.params.w_in=data,None",
            "--spec state.params.w_in=data,None: dim 0 of state.params.w_in (float32[3, 128, 256]) is 3, "
            "which data (2 devices) does not divide",
            id="does-not-divide",
        ),
        pytest.param(
            "state.params.w_in=None,model",
            "--spec state.params.w_in=None,model: mesh axis 'model' is not in the mesh (data, fsdp, tensor)",
            id="unknown-axis",
        ),
        pytest.param("state.params.w_in", "--spec 'state.params.w_in' is not PATH=SPEC", id="no-equals"),
        pytest.param("state.params.w_in=None,,fsdp", "has no mesh axis at position 1", id="empty-entry"),
    ],
)
def test_a_bad_spec_is_one_line(cli, spec, words):
    out = cli(["inspect", f"{FSDP}:train_step", "--inputs", f"{FSDP}:inputs", *FSDP_MESH, "--spec", spec])
    assert out.exit_code == 2, out.output
    assert words in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


@pytest.mark.slow  # compiles whole programs
def test_a_spec_lays_the_argument_out(cli):
    doc = json_doc(
        cli,
        f"{FSDP}:train_step",
        "--inputs",
        f"{FSDP}:inputs",
        *FSDP_MESH,
        "--spec",
        "state.mu.embed=fsdp,tensor",
        "--no-fixes",
    )
    by_name = {a["name"]: a for a in doc["arguments"]}
    assert by_name["state.mu.embed"]["spec"] == [["fsdp"], ["tensor"]]
    assert by_name["state.params.embed"]["spec"] == [["tensor"], ["fsdp"]]  # the others as --inputs gave them


# --- the proposals, without a compile ---------------------------------------------------------------

SIZES = {"data": 2, "fsdp": 2, "tensor": 2}


def test_a_replicated_weight_is_sharded_over_the_batch_axes_then_the_largest():
    w = fact("w", "float32", (3, 64, 128), ((), (), ()))
    changes = proposals("replicated", ["w"], (), [w], SIZES, ["data", "fsdp"])
    assert [(c.what, c.specs) for c in changes] == [
        ("shard w over data+fsdp", (("w", ((), (), ("data", "fsdp"))),)),
        ("shard w over data", (("w", ((), (), ("data",))),)),
    ]


def test_a_reshard_moves_the_axes_before_it_drops_them():
    x = fact("x", "float32", (64, 64), (("data",), ()))
    changes = proposals("reshard", ["x"], ("data",), [x], SIZES, [])
    assert [c.specs for c in changes] == [(("x", ((), ("data",))),), (("x", ((), ())),)]
    assert [c.what for c in changes] == ["lay x out as None,data", "replicate x"]


@pytest.mark.parametrize(
    ("kind", "before", "after", "helped"),
    [
        pytest.param("replicated", (100, 0, 0), (60, 50, 0), True, id="replicated-less-memory"),
        pytest.param("replicated", (100, 0, 0), (100, 0, 0), False, id="replicated-same"),
        pytest.param("gathered-whole", (100, 50, 0), (100, 10, 0), True, id="gather-less-sent"),
        pytest.param("gathered-whole", (100, 50, 0), (200, 10, 0), False, id="gather-more-memory"),
        pytest.param("reshard", (100, 50, 50), (100, 40, 0), True, id="reshard-gone"),
        pytest.param("reshard", (100, 50, 50), (100, 60, 0), False, id="reshard-gone-more-sent"),
        pytest.param("result-sharding", (100, 50, 0), (10, 0, 0), False, id="no-fix-kind"),
    ],
)
def test_a_change_helps_only_where_it_should(kind, before, after, helped):
    def figures(total, sent, resharded):
        return Figures(total, None, None, 1, sent, resharded, None)

    assert helps(kind, figures(*before), figures(*after)) is helped


def test_specs_as_text_and_as_jax_writes_them():
    entries = ((), ("fsdp",), ("data", "tensor"))
    assert spec_text(entries) == "None,fsdp,data+tensor"
    assert partition_spec_text(entries) == "P(None, 'fsdp', ('data', 'tensor'))"
