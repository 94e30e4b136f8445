"""`shardcli plan`: candidates, the decoder's shapes, the analytic model against compiles, cache, exits."""

from __future__ import annotations

import json
import math
import os
import shlex
from dataclasses import replace
from pathlib import Path

import jax
import numpy as np
import pytest

from shardcli.errors import ShardcliError
from shardcli.plan.candidates import MeshChoice, _aligned, enumerate_candidates, mesh_choices
from shardcli.results import documents
from shardcli.specs.decoder import PRESETS, build_config, maxtext_scale, parameter_table, resolve_axes

# Compiles, processes or whole programs: left out of the quick subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

TINY = ["--preset", "tiny", "--target", "tpu-v5e:2x2", "--batch", "2"]


# --- pure: shapes, rules, candidates ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("scale", "layers", "d_model", "heads", "mlp"),
    [
        pytest.param(1, 16, 2560, 8, 8192, id="base"),
        pytest.param(32, 32, 10240, 32, 32768, id="32b"),
        pytest.param(64, 64, 10240, 32, 32768, id="64b"),
        pytest.param(128, 64, 10240, 64, 65536, id="128b"),
    ],
)
def test_maxtext_scale_follows_global_parameter_scale(scale, layers, d_model, heads, mlp):
    cfg = maxtext_scale(scale)
    assert (cfg.layers, cfg.d_model, cfg.heads, cfg.mlp_dim, cfg.head_dim, cfg.vocab) == (
        layers,
        d_model,
        heads,
        mlp,
        256,
        32768,
    )


@pytest.mark.parametrize("name", list(PRESETS))
def test_parameter_count_is_the_sum_of_the_parameter_table(name):
    cfg = PRESETS[name]
    assert cfg.parameters() == sum(p.size for p in parameter_table(cfg))


@pytest.mark.parametrize(
    ("name", "billions"),
    [
        pytest.param("llama2-7b", 6.74, id="llama2-7b"),
        pytest.param("llama2-13b", 13.0, id="llama2-13b"),
        pytest.param("llama2-70b", 69.0, id="llama2-70b"),
        pytest.param("llama3-8b", 8.03, id="llama3-8b"),
        pytest.param("gemma-7b", 8.54, id="gemma-7b"),
    ],
)
def test_presets_have_their_published_parameter_counts(name, billions):
    assert PRESETS[name].parameters() / 1e9 == pytest.approx(billions, rel=0.01)


def test_maxtext_flop_count_is_6n_plus_causal_attention():
    cfg = maxtext_scale(32)
    n = cfg.parameters()
    want = 6 * n + 12 * cfg.heads * cfg.layers * cfg.head_dim * cfg.seq / 2
    assert cfg.maxtext_train_flops_per_token() == want


@pytest.mark.parametrize(
    ("logical", "shape", "want"),
    [
        pytest.param(("embed", "mlp"), (64, 128), (("fsdp",), ("tensor",)), id="weight"),
        pytest.param(("batch", "length"), (8, 32), (("data", "fsdp"), ()), id="batch-over-two-axes"),
        pytest.param(("batch", "length"), (2, 32), (("data",), ()), id="fsdp-does-not-divide"),
        pytest.param(("embed", "embed"), (64, 64), (("fsdp",), ()), id="an-axis-once"),
        pytest.param(("norm",), (64,), ((),), id="unmapped"),
    ],
)
def test_resolve_axes(logical, shape, want):
    rules = (("embed", ("fsdp",)), ("mlp", ("tensor",)), ("batch", ("data", "fsdp")))
    sizes = {"data": 2, "fsdp": 2, "tensor": 2, "sequence": 1}
    assert resolve_axes(logical, rules, sizes, shape) == want


@pytest.mark.parametrize(
    ("sizes", "torus", "aligned"),
    [
        pytest.param((16, 4), (4, 4, 4), True, id="16x4-on-4x4x4"),
        pytest.param((8, 8), (4, 4, 4), False, id="8x8-splits-a-dim"),
        pytest.param((1, 64, 1), (4, 4, 4), True, id="all-fsdp"),
        pytest.param((2, 2), (2, 2), True, id="2x2"),
    ],
)
def test_torus_alignment(sizes, torus, aligned):
    assert _aligned(sizes, torus) is aligned


def test_meshes_over_a_4x4x4_torus_run_along_whole_dimensions():
    meshes = mesh_choices((4, 4, 4))
    # data x fsdp x tensor with each a product of whole 4-chip dimensions: 4^a 4^b 4^c, a+b+c = 3
    assert len(meshes) == math.comb(3 + 2, 2)
    assert all(math.prod(m.shape) == 64 and m.aligned for m in meshes)
    assert MeshChoice((("fsdp", 16), ("tensor", 4)), True) in meshes
    with_sequence = mesh_choices((4, 4, 4), sequence=True)
    assert len(with_sequence) == math.comb(3 + 3, 3)


def test_llama2_7b_on_v5p_128_has_at_least_24_candidates():
    cfg = PRESETS["llama2-7b"]
    candidates, pruned = enumerate_candidates(
        (4, 4, 4), global_batch=None, per_device_batch=None, seq_len=cfg.seq
    )
    assert len(candidates) >= 24
    assert pruned == []


def test_a_batch_that_does_not_split_is_pruned_with_the_reason():
    candidates, pruned = enumerate_candidates((2, 2), global_batch=2, per_device_batch=None, seq_len=32)
    assert {c.mesh.label for c in candidates} == {"tp4", "dp2 tp2", "fsdp2 tp2"}
    assert "global batch 2 does not split over data x fsdp = 4" in {p.why for p in pruned}


@pytest.mark.parametrize(
    ("preset", "shape", "message"),
    [
        pytest.param("nope", {}, "--preset 'nope' is not known; choose one of llama2-7b", id="preset"),
        pytest.param(
            None, {"layers": 2}, "give --preset NAME or every shape flag; missing --d-model", id="flags"
        ),
        pytest.param("tiny", {"kv_heads": 3}, "--kv-heads 3 must divide --heads 4", id="kv-heads"),
        pytest.param("tiny", {"layers": 0}, "--layers 0 must be a positive whole number", id="layers"),
        pytest.param("tiny", {"activation": "tanh"}, "--activation 'tanh' is not known", id="activation"),
    ],
)
def test_bad_model_flags_are_one_line(preset, shape, message):
    with pytest.raises(ShardcliError) as error:
        build_config(preset, **shape)
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


# --- the decoder compiled: per-layer extrapolation against a full compile -------------------------


def _cpu_mesh():
    return jax.make_mesh((2, 2), ("fsdp", "tensor"), axis_types=(jax.sharding.AxisType.Auto,) * 2)


@pytest.mark.parametrize("remat", ["minimal", "full"])
def test_one_and_two_layer_copies_extrapolate_to_the_full_program(remat):
    """c1 + (L - 1)(c2 - c1) of 1- and 2-layer copies against a 4-layer copy compiled whole."""
    from shardcli.analysis.program import analyze_compiled
    from shardcli.plan.candidates import RULE_SETS
    from shardcli.plan.compiles import _extrapolate
    from shardcli.plan.decoder import build_train_step

    cfg = PRESETS["tiny"]
    mesh = _cpu_mesh()

    def analysis(layers):
        program = build_train_step(
            cfg, RULE_SETS["fsdp-tp"], mesh, remat=remat, global_batch=8, unrolled=layers
        )
        with jax.set_mesh(mesh):
            return analyze_compiled(program.fn.lower(*program.args).compile(), mesh)

    one, two, four = analysis(1), analysis(2), analysis(4)
    flops, accessed, traffic = _extrapolate(one, two, 4)
    assert flops == pytest.approx(four.flops, rel=0.01)
    assert accessed == pytest.approx(four.bytes_accessed, rel=0.05)
    assert sum(t.sent_bytes for t in traffic) == pytest.approx(four.sent_bytes, rel=0.01)


def test_the_train_step_learns_on_cpu():
    """The step runs: with AdamW the loss on one fixed batch goes down."""
    from shardcli.plan.candidates import RULE_SETS
    from shardcli.plan.decoder import build_train_step

    cfg = PRESETS["tiny"]
    mesh = _cpu_mesh()
    program = build_train_step(cfg, RULE_SETS["fsdp-tp"], mesh, remat="full", global_batch=8)
    params_s, opt_s, batch_s = program.args
    key = jax.random.key(0)
    with jax.set_mesh(mesh):
        params = jax.tree.map(
            lambda s: jax.device_put(0.02 * jax.random.normal(key, s.shape, s.dtype), s.sharding), params_s
        )
        zeros = jax.tree.map(lambda s: jax.device_put(np.zeros(s.shape, s.dtype), s.sharding), opt_s)
        tokens = jax.device_put(
            np.arange(8 * cfg.seq, dtype=np.int32).reshape(8, cfg.seq) % cfg.vocab, batch_s[0].sharding
        )
        opt = zeros
        losses = []
        for _ in range(5):
            params, opt, loss = program.fn(params, opt, (tokens, tokens))
            losses.append(float(loss))
    assert losses[0] == pytest.approx(np.log(cfg.vocab), rel=0.05)  # a random model guesses uniformly
    assert losses[-1] < losses[0]


# --- through the TPU compiler ---------------------------------------------------------------------


def _json(cli, args, code=0):
    out = cli(
        ["plan", *args, "--format", "json"], env={"SHARDCLI_CACHE_DIR": os.environ["SHARDCLI_CACHE_DIR"]}
    )
    assert out.exit_code == code, out.output
    doc = json.loads(out.stdout)
    assert documents.document_problems(doc) == []
    return doc


@pytest.mark.once  # plan's own cache: the same verdict under any JAX
def test_a_second_plan_reads_the_cache_and_compiles_only_what_changed(cli, plan_cache):
    pytest.importorskip("libtpu")
    first = _json(cli, [*TINY, "--remat", "full", "-n", "1"])
    assert first["summary"]["compiled"] == 1 and first["summary"]["cached"] == 0
    assert len(list(plan_cache.glob("*.json"))) == 1
    again = _json(cli, [*TINY, "--remat", "full", "-n", "1"])
    assert again["summary"]["cached"] == 1
    ranked = [c for c in again["candidates"] if c["rank"] is not None]
    assert ranked == [c for c in first["candidates"] if c["rank"] is not None] or all(
        a["compiled"]["flops"] == b["compiled"]["flops"]
        for a, b in zip(ranked, first["candidates"], strict=False)
    )
    changed = _json(cli, [*TINY, "--remat", "minimal", "-n", "1"])
    assert changed["summary"]["cached"] == 0
    assert len(list(plan_cache.glob("*.json"))) == 2


def test_each_compile_goes_to_a_layout_not_yet_settled(cli, plan_cache):
    """Through the real compiler: every compiled row that fits is a different layout (mesh, rules,
    remat), a layout is compiled again only below a batch that did not fit, and every other
    candidate says why it was not compiled."""
    pytest.importorskip("libtpu")
    doc = _json(cli, ["--preset", "tiny", "--target", "tpu-v5e:2x2", "--batch", "2", "-n", "4"])
    compiled = [c for c in doc["candidates"] if c["compiled"] is not None]
    assert len(compiled) == doc["summary"]["compiled"] == 4
    layouts: dict[tuple, list[dict]] = {}
    for c in compiled:
        layouts.setdefault((c["layout"], c["rule_set"], c["remat"]), []).append(c)
    for rows in layouts.values():
        fitting = [r for r in rows if r["compiled"]["fits"]]
        assert len(fitting) <= 1
        if fitting:  # compiled again only below a batch that did not fit
            assert all(r["global_batch"] > fitting[0]["global_batch"] for r in rows if r is not fitting[0])
    assert all(c["why"] for c in doc["candidates"] if c["compiled"] is None)


@pytest.mark.parametrize("remat", ["none", "full"])
def test_the_analytic_model_against_a_compile(remat):
    """Parameters and AdamW's moments per chip counted by hand equal the compiled arguments; the
    analytic model's weights and FLOPs come close to the compiled program's (loops counted per trip)."""
    from shardcli.analysis.program import analyze_compiled
    from shardcli.plan.analytic import chip_figures, model_candidate
    from shardcli.plan.candidates import Candidate
    from shardcli.plan.decoder import build_train_step

    cfg = PRESETS["tiny"]
    mesh = _cpu_mesh()
    candidate = Candidate(MeshChoice((("fsdp", 2), ("tensor", 2)), True), "fsdp-tp", remat, 8, 4)
    program = build_train_step(cfg, candidate.rules, mesh, remat=remat, global_batch=8)
    with jax.set_mesh(mesh):
        analysis = analyze_compiled(program.fn.lower(*program.args).compile(), mesh)
    sizes = {"fsdp": 2, "tensor": 2}
    per_chip = 0
    for p in parameter_table(cfg):
        entries = resolve_axes(p.axes, candidate.rules, sizes, p.shape)
        per_chip += p.size * 4 // math.prod(sizes[a] for e in entries for a in e)
    tokens = 2 * 8 * cfg.seq * 4 // 2  # inputs and targets, int32, batch over fsdp
    assert analysis.memory.argument_bytes == 3 * per_chip + tokens + 4  # + the step count
    modelled = model_candidate(cfg, candidate, chip_figures("tpu-v5e", (2, 2)), 1.0)
    assert modelled.weights_bytes * 12 / 16 == pytest.approx(3 * per_chip, rel=0.05)
    assert modelled.flops == pytest.approx(analysis.flops, rel=0.5)


def test_no_layout_fits_exits_1(cli, plan_cache):
    pytest.importorskip("libtpu")
    big = [
        "--d-model",
        "8192",
        "--mlp-dim",
        "32768",
        "--heads",
        "64",
        "--kv-heads",
        "64",
        "--head-dim",
        "128",
    ]
    args = ["plan", *TINY, *big, "--layers", "8", "--vocab", "32000", "--remat", "full", "-n", "1"]
    out = cli(args, env={"SHARDCLI_CACHE_DIR": os.environ["SHARDCLI_CACHE_DIR"]})
    assert out.exit_code == 1, out.output
    assert "no compiled layout fits the chips' HBM" in out.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--preset", "nope"], "--preset 'nope' is not known", id="preset"),
        pytest.param(
            [*TINY, "--remat", "some"],
            "--remat 'some' is not a policy; choose from none, minimal, full",
            id="remat",
        ),
        pytest.param(
            [*TINY, "--remat", "minimal,custom:mlpwi=offload"],
            "--remat 'custom:mlpwi=offload': this model makes no mlpwi (its MLP is gated: mlpwi_0 (gate) and "
            "mlpwi_1 (up))",
            id="remat-custom-absent-name",
        ),
        pytest.param(
            [*TINY, "--remat", "custom:query_proj=host"],
            "--remat 'custom:query_proj=host': query_proj='host' is no place; write "
            "query_proj=device|offload|remat",
            id="remat-custom-place",
        ),
        pytest.param([*TINY, "--batch", "0"], "--batch 0 must be a positive whole number", id="batch"),
        pytest.param(
            [*TINY, "--global-batch", "8"], "give --global-batch or --batch (per chip), not both", id="both"
        ),
        pytest.param([*TINY, "--compile", "0"], "--compile 0 must be a positive whole number", id="compile"),
        pytest.param(
            ["--preset", "tiny", "--target", "tpu-v9:2x2"],
            "--target 'tpu-v9:2x2' is not a known target",
            id="target",
        ),
        pytest.param(
            ["--preset", "tiny", "--target", "gpu-h100:3x9"],
            "--target 'gpu-h100:3x9': a host has at most 8 H100 SXM GPUs",
            id="gpu-host",
        ),
        pytest.param(
            [*TINY, "--method", "guess"],
            "--method 'guess' is not known; choose one of scan, layers",
            id="method",
        ),
        pytest.param([*TINY, "--emit", "out.txt"], "--emit 'out.txt' must name a .py file", id="emit"),
        pytest.param(
            [*TINY, "--mesh", "fsdp=8"], "--mesh 'fsdp=8' names 8 chips; the target has 4", id="mesh-size"
        ),
        pytest.param(
            [*TINY, "--mesh", "model=4"],
            "--mesh 'model=4': 'model=4' is not AXIS=SIZE with AXIS one of data, fsdp, sequence, tensor",
            id="mesh-axis",
        ),
        pytest.param(
            [*TINY, "--mesh", "fsdp=2,fsdp=2"], "--mesh 'fsdp=2,fsdp=2': fsdp is given twice", id="mesh-twice"
        ),
        pytest.param(
            [*TINY, "--mesh", "fsdp=-4"],
            "--mesh 'fsdp=-4': the size of fsdp, '-4', is not a positive",
            id="mesh-neg",
        ),
        pytest.param(
            ["--preset", "tiny", "--target", "gpu-h100:2x4", "--mesh", "tensor=8"],
            "--mesh tensor=8: the tensor axis must stay within a host of 4 GPUs",
            id="mesh-tensor-across-hosts",
        ),
        pytest.param(
            ["--preset", "tiny", "--target", "gpu-h100:2", "--head-dim", "12", "--attention", "flash"],
            "--attention flash: cuDNN's flash attention takes a head width that is a multiple of 8",
            id="flash-head-width",
        ),
        pytest.param(
            [*TINY, "--attention", "splash"],
            "--attention 'splash' is not known; choose one of dot, flash",
            id="attention",
        ),
        pytest.param(
            ["--preset", "tiny", "--target", "tpu-v5e:2x2", "--attention", "flash"],
            "--attention flash: splash attention runs blocks of 512 (or the whole sequence, a multiple "
            "of 128), not 32 long; give --attention dot",
            id="flash-on-tpu-short-sequence",
        ),
        pytest.param(
            ["--preset", "tiny", "--target", "gpu-h100:4", "--attention", "flash", "--sequence"],
            "--attention flash: with a sequence axis (--sequence, or sequence in --mesh) cuDNN's flash",
            id="flash-sequence",
        ),
        pytest.param(
            [
                "--preset",
                "tiny",
                "--seq",
                "512",
                "--target",
                "tpu-v5e:2x2",
                "--attention",
                "flash",
                "--sequence",
            ],
            "--attention flash: with a sequence axis (--sequence, or sequence in --mesh) splash attention",
            id="splash-sequence",
        ),
    ],
)
def test_bad_flags_exit_2_with_one_line(cli, args, message):
    out = cli(["plan", *args])
    assert out.exit_code == 2, out.output
    assert out.stderr.startswith(f"shardcli plan: error: {message}") or out.stderr.startswith(
        f"shardcli: error: {message}"
    ), out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


# --- the user's own program -----------------------------------------------------------------------

LINEN = str(Path(__file__).parent / "programs" / "plan_linen.py")


def test_a_linen_program_with_logical_axis_names_is_laid_out(cli, plan_cache):
    """nn.with_partitioning names (embed, mlp) and a LOGICAL_AXES table (batch) become specs per layout."""
    pytest.importorskip("libtpu")
    pytest.importorskip("flax")
    args = [
        "plan",
        f"{LINEN}:train_step",
        "--inputs",
        f"{LINEN}:inputs",
        "--target",
        "tpu-v5e:2x2",
        "-n",
        "2",
    ]
    out = cli([*args, "--format", "json"], env={"SHARDCLI_CACHE_DIR": os.environ["SHARDCLI_CACHE_DIR"]})
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert documents.document_problems(doc, "plan-program") == []
    assert (doc["config"]["named_leaves"], doc["config"]["leaves"]) == (3, 3)
    compiled = [c for c in doc["candidates"] if c["compiled"] is not None]
    assert len(compiled) == 2 and doc["winner"] is not None
    # two f32 weights of 512 x 2048 and a 64 x 512 batch, split as each layout's rules say
    for c in doc["candidates"]:
        mesh = c["mesh"]
        fsdp, tensor, data = (mesh.get(a, 1) for a in ("fsdp", "tensor", "data"))
        weights = 2 * 512 * 2048 * 4 // (fsdp * tensor)
        assert c["argument_bytes"] == weights + 64 * 512 * 4 // (data * fsdp), c["layout"]


NNX = str(Path(__file__).parent / "programs" / "plan_nnx.py")
V5E = ["--target", "tpu-v5e:2x2"]


def _program_json(cli, program, args, code=0):
    """`plan FILE.py:train_step --inputs FILE.py:inputs ARGS --format json`, checked against the schema."""
    out = cli(
        ["plan", f"{program}:train_step", "--inputs", f"{program}:inputs", *args, "--format", "json"],
        env={"SHARDCLI_CACHE_DIR": os.environ["SHARDCLI_CACHE_DIR"]},
    )
    assert out.exit_code == code, out.output
    doc = json.loads(out.stdout)
    assert documents.document_problems(doc, "plan-program") == []
    return doc


def _winner(doc):
    return next(c for c in doc["candidates"] if c["layout"] == doc["winner"]["layout"])


def test_the_winner_is_reproduced_by_its_inspect_command(cli, plan_cache):
    """The command plan prints for its winner compiles the same program: inspect's memory per chip
    equals the plan's compiled figures for that layout."""
    pytest.importorskip("libtpu")
    pytest.importorskip("flax")
    doc = _program_json(cli, LINEN, [*V5E, "-n", "2"])
    command = doc["winner"]["inspect_command"]
    mesh = _winner(doc)["mesh"]
    assert command.startswith(
        f"shardcli inspect {LINEN}:train_step --inputs {LINEN}:inputs --target tpu-v5e:2x2"
    )
    assert f"--mesh {'x'.join(map(str, mesh.values()))} --axes {','.join(mesh)} --rules " in command
    words = shlex.split(command)
    assert words[:2] == ["shardcli", "inspect"]
    out = cli([*words[1:], "--format", "json"])
    assert out.exit_code == 0, out.output
    memory = json.loads(out.stdout)["program"]["memory"]
    compiled = _winner(doc)["compiled"]
    assert (memory["argument_bytes"], memory["temp_bytes"], memory["total_bytes"]) == (
        compiled["argument_bytes"],
        compiled["temp_bytes"],
        compiled["needed_bytes"],
    )
    assert memory["argument_bytes"] == _winner(doc)["argument_bytes"]  # as plan counted them


@pytest.mark.once  # plan's own cache: the same verdict under any JAX
def test_a_second_program_plan_compiles_nothing(cli, plan_cache, monkeypatch, tmp_path):
    """The second identical plan reads every layout from the cache (inspect is never called); --no-cache
    compiles them again; a changed program file is a new key."""
    pytest.importorskip("libtpu")
    pytest.importorskip("flax")
    import shardcli.program.inspect as core_inspect

    real = core_inspect.inspect_program
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(core_inspect, "inspect_program", counted)
    first = _program_json(cli, LINEN, [*V5E, "-n", "2"])
    assert (len(calls), first["summary"]["compiled"], first["summary"]["cached"]) == (2, 2, 0)
    assert len(list(plan_cache.glob("*.json"))) == 2
    again = _program_json(cli, LINEN, [*V5E, "-n", "2"])
    assert (len(calls), again["summary"]["cached"]) == (2, 2)
    ranked = [c for c in again["candidates"] if c["rank"] is not None]
    assert [c["status"] for c in ranked] == ["cached", "cached"]
    assert [c["compiled"] for c in ranked] == [c["compiled"] for c in first["candidates"][:2]]
    assert again["winner"] == first["winner"]
    fresh = _program_json(cli, LINEN, [*V5E, "-n", "2", "--no-cache"])
    assert (len(calls), fresh["summary"]["cached"], fresh["config"]["cache"]) == (4, 0, False)
    assert [c["status"] for c in fresh["candidates"][:2]] == ["compiled", "compiled"]
    edited = tmp_path / "plan_linen_edited.py"
    edited.write_text(Path(LINEN).read_text() + "\n# edited\n")
    changed = _program_json(cli, str(edited), [*V5E, "-n", "1"])
    assert (len(calls), changed["summary"]["cached"]) == (5, 0)


def test_an_nnx_program_matches_a_hand_written_compile(cli, plan_cache):
    """nnx.with_partitioning names under nnx.eval_shape / nnx.split: the winner's argument bytes and
    memory equal jax.jit(step, in_shardings=...) of the same layout compiled by hand for the same
    target mesh."""
    pytest.importorskip("libtpu")
    nnx = pytest.importorskip("flax.nnx")
    import importlib.util

    from jax.experimental import topologies
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from shardcli.analysis.target import quiet_native_logs

    doc = _program_json(cli, NNX, [*V5E, "-n", "2"])
    assert (doc["config"]["named_leaves"], doc["config"]["leaves"]) == (3, 5)  # the biases carry no names
    winner = _winner(doc)
    assert winner["layout"] == "fsdp2 tp2 fsdp-tp" and winner["mesh"] == {"fsdp": 2, "tensor": 2}
    assert (
        "--mesh 2x2 --axes fsdp,tensor --rules batch=fsdp,embed=fsdp,mlp=tensor"
        in (doc["winner"]["inspect_command"])
    )

    spec = importlib.util.spec_from_file_location("plan_nnx_by_hand", NNX)
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    with nnx.use_eager_sharding(False):  # flax 0.12 would shard the named variables as they are made
        state, batch = program.inputs()
    with quiet_native_logs():
        topology = topologies.get_topology_desc(topology_name="v5e:2x2", platform="tpu")
    mesh = topologies.make_mesh(topology, (2, 2), ("fsdp", "tensor"))
    by_hand = {
        "up": {"kernel": P("fsdp", "tensor"), "bias": P()},
        "down": {"kernel": P("tensor", "fsdp"), "bias": P()},
    }
    state_shardings = jax.tree.map(lambda s: NamedSharding(mesh, s), nnx.State(by_hand))
    batch_sharding = NamedSharding(mesh, P("fsdp", None))
    step = jax.jit(program.train_step, in_shardings=(state_shardings, batch_sharding))
    memory = step.lower(state, batch).compile().memory_analysis()
    compiled = winner["compiled"]
    assert compiled["argument_bytes"] == memory.argument_size_in_bytes
    assert compiled["temp_bytes"] == memory.temp_size_in_bytes
    assert compiled["needed_bytes"] == (
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        + memory.temp_size_in_bytes
        + memory.generated_code_size_in_bytes
        - memory.alias_size_in_bytes
    )
    # the arguments by hand: two f32 kernels of 512 x 2048 over fsdp x tensor, the biases
    # replicated, a 64 x 512 batch over fsdp
    assert winner["argument_bytes"] == 2 * 512 * 2048 * 4 // 4 + (2048 + 512) * 4 + 64 * 512 * 4 // 2


PLAIN = """
import jax
import jax.numpy as jnp


def step(x, w):
    return x @ w


def plain():
    return jax.ShapeDtypeStruct((8, 8), jnp.float32), jax.ShapeDtypeStruct((8, 8), jnp.float32)


def one():
    return jax.ShapeDtypeStruct((8, 8), jnp.float32)
"""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            [f"{LINEN}:train_step"],
            f"plan {LINEN}:train_step needs --inputs FILE.py:NAME (the arguments, with logical axis names)",
            id="no-inputs",
        ),
        pytest.param(
            [f"{LINEN}:train_step", "--inputs", f"{LINEN}:inputs", "--preset", "tiny"],
            "--preset describes the decoder",
            id="preset",
        ),
        pytest.param(
            [f"{LINEN}:train_step", "--inputs", f"{LINEN}:inputs", "--method", "layers"],
            "--method describes the decoder",
            id="method",
        ),
        pytest.param(
            ["--preset", "tiny", "--inputs", f"{LINEN}:inputs"],
            "--inputs goes with your own program",
            id="inputs",
        ),
        pytest.param(
            [f"{LINEN}:train_step", "--inputs", f"{LINEN}:inputs", *V5E, "--rules", "embed"],
            "--rules entry 'embed' is not LOGICAL=MESH_AXIS[+MESH_AXIS]; e.g. embed=fsdp,mlp=tensor",
            id="rules-malformed",
        ),
        pytest.param(
            [f"{LINEN}:train_step", "--inputs", f"{LINEN}:inputs", *V5E, "--rules", "embed=fsdp,mlp=model"],
            "--rules embed=fsdp,mlp=model names mesh axis 'model', which no layout on tpu-v5e:2x2 has; "
            "plan's meshes name data, fsdp, tensor",
            id="rules-axis",
        ),
        pytest.param(
            [f"{LINEN}:train_step", "--inputs", f"{LINEN}:inputs", *V5E, "--rules", "embed=fsdp,mpl=tensor"],
            "--rules embed=fsdp,mpl=tensor maps logical axis 'mpl', which no argument carries; the arguments "
            "carry batch, embed, mlp",
            id="rules-name",
        ),
        pytest.param(
            ["{path}:step", "--inputs", "{path}:plain", *V5E],
            "no argument of {path}:step carries logical axis names: box them with nn.with_partitioning",
            id="no-names",
        ),
        pytest.param(
            ["{rank}:step", "--inputs", "{rank}:plain", *V5E],
            "x has 2 dimension(s) (8, 8) but 3 logical axis name(s) ('batch', None, 'embed'); give one name",
            id="names-longer-than-rank",
        ),
        pytest.param(
            ["{key}:step", "--inputs", "{key}:plain", *V5E],
            "LOGICAL_AXES names 'y', which is no array argument's path; the paths are like x, w",
            id="table-key-unknown",
        ),
        pytest.param(
            [
                f"{LINEN}:train_step",
                "--inputs",
                f"{LINEN}:inputs",
                *V5E,
                "--rules",
                "embed=fsdp,embed=tensor",
            ],
            "--rules maps 'embed' twice; give each logical axis once",
            id="rules-twice",
        ),
        pytest.param(
            [f"{LINEN}:train_step", "--inputs", f"{LINEN}:inputs", *V5E, "--rules", ""],
            "--rules '' maps no logical axis; e.g. embed=fsdp,mlp=tensor",
            id="rules-empty",
        ),
        pytest.param(
            [f"{LINEN}:train_step", "--inputs", f"{LINEN}:inputs", *V5E, "--remat", "none,minimal,full"],
            "--remat describes the decoder",
            id="remat-default-given",
        ),
        pytest.param(
            ["{path}:step", "--inputs", "{path}:one", *V5E],
            "--inputs {path}:one returned a ShapeDtypeStruct; return the tuple of the function's positional",
            id="not-a-tuple",
        ),
    ],
)
def test_program_flags_exit_2(cli, tmp_path, args, message):
    if any("{" in a or a == "--rules" for a in args):
        pytest.importorskip("libtpu")
    paths = {}
    for name, table in (
        ("path", None),
        ("rank", '{"x": ("batch", None, "embed")}'),
        ("key", '{"y": ("batch", None)}'),
    ):
        paths[name] = tmp_path / f"{name}.py"
        paths[name].write_text(PLAIN + (f"\nLOGICAL_AXES = {table}\n" if table else ""))
    out = cli(["plan", *(a.format(**paths) for a in args)])
    assert out.exit_code == 2, out.output
    assert message.format(**paths) in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


@pytest.mark.once  # plan's own handling of Ctrl-C: the same verdict under any JAX
def test_ctrl_c_keeps_what_finished(monkeypatch, plan_cache):
    """The second compile is interrupted: the first stays in the result (and the cache), the one being
    compiled is marked interrupted, and the summary says the rest were not compiled."""
    pytest.importorskip("libtpu")
    from shardcli.hardware.targets import parse_target
    from shardcli.plan import compiles as plan_compile
    from shardcli.plan.search import PlanRequest, run_plan
    from shardcli.render.plan import summary_clauses

    real = plan_compile.compile_candidate
    calls = []

    def compile_then_interrupt(*args, **kwargs):
        calls.append(args[2].label)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(plan_compile, "compile_candidate", compile_then_interrupt)
    request = PlanRequest(
        model=PRESETS["tiny"],
        target=parse_target("tpu-v5e:2x2"),
        per_device_batch=2,
        remats=("full",),
        compile_n=3,
    )
    result = run_plan(request)
    assert result.interrupted
    assert [r.status for r in result.rows[:2]] == ["compiled", "interrupted"]
    stopped = [r for r in result.rows if r.status == "interrupted"]
    assert [r.candidate.label for r in stopped] == [calls[1]]  # the one being compiled
    assert "interrupted: the rest were not compiled" in " ".join(
        c.plain for c in summary_clauses(result).clauses
    )
    assert result.rows[0].compiled is not None and result.rows[0].estimate is not None
    assert len(list(plan_cache.glob("*.json"))) == 1


def test_a_compile_ctrl_c_leaves_counts_as_running_until_it_ends(monkeypatch):
    """Ctrl-C while the main thread waits on a compile: the compile is abandoned and counted as running
    (the CLI then leaves at once, never tearing the compile down under it) until it really ends. On
    Python 3.11 a `Thread.join` that Ctrl-C ended marked the running thread stopped, the process went
    through Python's exit, and about one plan in three printed a SIGSEGV report after its output."""
    import signal
    import sys
    import threading

    from shardcli.plan import compiles as plan_compile

    monkeypatch.setattr(plan_compile, "_ABANDONED", [])
    release = threading.Event()
    main = threading.main_thread()

    def waiting_in_interruptible() -> bool:
        frame = sys._current_frames().get(main.ident)
        names = []
        while frame is not None:
            names.append(frame.f_code.co_name)
            frame = frame.f_back
        return "interruptible" in names  # in Thread.start's wait, or in the wait for the compile

    def work():
        while not waiting_in_interruptible():  # the sign: the main thread waits on this compile
            release.wait(0.01)
        signal.pthread_kill(main.ident, signal.SIGINT)
        release.wait()
        return "done"

    with pytest.raises(KeyboardInterrupt):
        plan_compile.interruptible(work)
    try:
        assert plan_compile.abandoned_compiles()
    finally:
        release.set()
    plan_compile._ABANDONED[0].wait()
    assert not plan_compile.abandoned_compiles()


def test_fewer_compiles_than_asked_when_nothing_else_is_expected_to_fit(monkeypatch, plan_cache):
    """A 1.2B-parameter decoder on four 16 GiB chips: the model says the layouts with a data axis
    cannot hold it. With --compile 20 the planner compiles every other layout once (each compile,
    played here, fits) and says why it stopped short; the others are listed as not fitting."""
    pytest.importorskip("libtpu")

    from shardcli.hardware.targets import parse_target
    from shardcli.plan import compiles as plan_compile
    from shardcli.plan.compiled_figures import CompiledFigures
    from shardcli.plan.search import PlanRequest, run_plan
    from shardcli.render.plan import summary_clauses

    compiled = []

    def fits_without_compiling(session, cfg, c, target, method):
        compiled.append(c.label)
        return CompiledFigures(
            fits=True,
            needed_bytes=None,  # nothing to correct the model by
            capacity_bytes=target.generation.hbm_bytes,
            argument_bytes=None,
            temp_bytes=None,
            flops=1e12,
            bytes_accessed=1e9,
            traffic=(),
            method=method,
            compile_s=0.0,
            fit_text="fits",
        )

    monkeypatch.setattr(plan_compile, "compile_candidate", fits_without_compiling)
    model = replace(PRESETS["tiny"], d_model=2048, vocab=600_000)
    request = PlanRequest(
        model=model,
        target=parse_target("tpu-v5e:2x2"),
        per_device_batch=1,
        remats=("full",),
        compile_n=20,
        use_cache=False,
    )
    result = run_plan(request)
    done = [r for r in result.rows if r.status == "compiled"]
    left = [r for r in result.rows if r.status != "compiled"]
    assert len(done) == len(compiled) < 20 and left
    assert all(r.modelled.fits for r in done)  # each layout expected to fit, compiled once
    assert len({(r.candidate.mesh, r.candidate.rule_set) for r in done}) == len(done)
    assert all(r.status == "pruned" and r.why.startswith("does not fit") for r in left), left
    assert not any(r.modelled.fits for r in left)
    assert "dp4" in {r.candidate.label for r in left}
    text = " ".join(c.plain for c in summary_clauses(result).clauses)
    assert "fewer than --compile 20: every layout is settled or expected not to fit" in text


def test_no_short_of_compile_n_clause_when_the_budget_is_spent(monkeypatch, plan_cache):
    """--compile 2 on a model where many layouts fit: two compiles, no "fewer than" clause, and the
    best layouts left over say the budget was spent."""
    pytest.importorskip("libtpu")
    from shardcli.hardware.targets import parse_target
    from shardcli.plan.search import PlanRequest, run_plan
    from shardcli.render.plan import summary_clauses

    request = PlanRequest(
        model=PRESETS["tiny"], target=parse_target("tpu-v5e:2x2"), per_device_batch=2, compile_n=2
    )
    result = run_plan(request)
    assert sum(r.compiled is not None for r in result.rows) == 2 and not result.exhausted
    assert "fewer than" not in " ".join(c.plain for c in summary_clauses(result).clauses)
    assert any(r.why == "not compiled: --compile 2 was spent (model)" for r in result.rows)


# --- GPU hosts --------------------------------------------------------------------------------------


@pytest.fixture
def cuda_plugin():
    from shardcli.hardware.compilers import compiler_installed

    if not compiler_installed("cuda"):
        pytest.skip("the gpu extra: pip install -e '.[gpu]' or '.[gpu-cuda13]' (CI installs gpu)")


def test_gpu_meshes_keep_the_tensor_axis_within_a_host():
    from shardcli.plan.candidates import gpu_mesh_choices

    meshes = gpu_mesh_choices(2, 8)
    assert all(math.prod(m.shape) == 16 and 8 % m.size("tensor") == 0 for m in meshes)
    labels = {m.label for m in meshes}
    assert {"dp2 fsdp8", "fsdp16", "fsdp2 tp8", "dp16", "dp2 fsdp4 tp2"} <= labels
    assert not any(m.size("tensor") == 16 for m in meshes)
    # every ordered (data, fsdp, tensor) of 16 with tensor dividing 8: 15 in all, less tensor 16's one
    assert len(meshes) == 15 - 1


@pytest.mark.parametrize(
    ("environ", "fraction"),
    [
        pytest.param({}, 0.75, id="default"),
        pytest.param({"XLA_PYTHON_CLIENT_MEM_FRACTION": ".9"}, 0.9, id="90"),
    ],
)
def test_the_model_judges_a_gpu_layout_against_jax_s_pool(environ, fraction):
    from shardcli.hardware.chips import CHIPS
    from shardcli.plan.analytic import HEADROOM, chip_figures, model_candidate

    chip = chip_figures("gpu-h100", (2, 8), environ)
    hbm = int(CHIPS["gpu-h100"].hbm_bytes.value)
    assert chip.usable_bytes == int(hbm * fraction) and chip.torus == (2, 8)
    cfg = PRESETS["llama2-7b"]
    candidates, _ = enumerate_candidates(chip.torus, global_batch=None, per_device_batch=2,
                                         remats=("full",), seq_len=cfg.seq, gpu_hosts=True)  # fmt: skip
    modelled = [model_candidate(cfg, c, chip, 1.0) for c in candidates]
    assert all(m.fits == (m.memory_bytes <= HEADROOM * chip.usable_bytes) for m in modelled)
    between = [m for m in modelled if HEADROOM * chip.usable_bytes < m.memory_bytes <= HEADROOM * hbm]
    assert all(not m.fits for m in between)


def test_a_gpu_axis_moves_over_nvlink_within_a_host_and_the_network_across():
    from shardcli.hardware.chips import CHIPS
    from shardcli.plan.analytic import chip_figures

    chip, h100 = chip_figures("gpu-h100", (2, 8)), CHIPS["gpu-h100"]
    assert chip.axis_bytes_per_s(8, 1) == h100.link_bytes_per_s.value  # one host's 8
    assert chip.axis_bytes_per_s(4, 2) == h100.link_bytes_per_s.value  # 4 after a tensor 2
    assert h100.network_bytes_per_s is not None
    assert chip.axis_bytes_per_s(2, 8) == h100.network_bytes_per_s.value  # one per host
    # every GPU: the 8 GPUs of a host send over its 8 NICs at once (NCCL's rails), under NVLink's 450
    assert chip.axis_bytes_per_s(16, 1) == 8 * h100.network_bytes_per_s.value


def test_plan_lays_the_decoder_out_on_gpu_hosts(cli, plan_cache, cuda_plugin):
    """Compiled by XLA's GPU compiler without a GPU: each row judged against JAX's pool, estimated by
    the GPU's per-op roofline, an axis across hosts at the network's rate."""
    from shardcli.hardware.chips import CHIPS

    doc = _json(cli, ["--preset", "tiny", "--target", "gpu-h100:2x2", "--batch", "2", "--remat", "full",
                      "-n", "3"])  # fmt: skip
    compiled = [c for c in doc["candidates"] if c["compiled"] is not None]
    assert doc["winner"] is not None and len(compiled) == 3
    assert doc["chip"]["torus"] == [2, 2]
    assert all(c["mesh"].get("tensor", 1) <= 2 for c in doc["candidates"])
    net = CHIPS["gpu-h100"].network_bytes_per_s
    assert net is not None
    for c in compiled:
        assert "JAX's BFC pool: 75%" in c["compiled"]["fit_text"]
        assert c["estimate"]["efficiency_source"].startswith("per op:")
        traffic = {t["axes"]: t["sent_bytes"] for t in c["compiled"]["traffic"]}
        if c["mesh"].get("data") == 2 and "data" in traffic:  # data over the 2 hosts
            assert c["estimate"]["t_comm_s"]["data"] == pytest.approx(traffic["data"] / net.value)
    # the tiny step is bound by launching its kernels: the winner's line says so, beside the ops' rooflines
    assert all(c["estimate"]["bound"] == "launch" for c in compiled)
    text = cli(["plan", "--preset", "tiny", "--target", "gpu-h100:2x2", "--batch", "2", "--remat", "full",
                "-n", "3", "--no-color"]).stdout  # fmt: skip
    launches = next(line for line in text.splitlines() if line.startswith("launches "))
    assert "kernels), longer than the per-op roofline" in launches and "library kernel calls" in launches


def _plans_own_figures(plan_cache):
    """The figures of every layout plan compiled, as its cache keeps them (the test's own cache,
    `plan_cache`): what plan read of its compiles, not a second compile."""
    from shardcli.plan.compile_cache import read_cached

    figures = [read_cached(path.stem) for path in sorted(plan_cache.glob("*.json"))]
    assert figures and None not in figures, sorted(plan_cache.glob("*"))
    return figures


@pytest.mark.parametrize(
    ("flags", "attention", "fmha"),
    [
        pytest.param([], "flash", True, id="default-flash"),
        pytest.param(["--attention", "dot"], "dot", False, id="dot"),
        pytest.param(["--sequence", "-n", "1"], "dot", False, id="sequence-takes-dot"),
        pytest.param(["--head-dim", "12"], "dot", False, id="head-width-cudnn-refuses-takes-dot"),
    ],
)
def test_a_gpu_plan_compiles_flash_attention_unless_told(
    cli, plan_cache, cuda_plugin, flags, attention, fmha
):
    """On GPU hosts plan's decoder computes attention with cuDNN's flash kernel (the published MaxText
    GPU runs do), named in the header; the compiled step's estimate counts its `__cudnn$fmha` calls."""
    base = [
        "plan",
        "--preset",
        "tiny",
        "--target",
        "gpu-h100:2",
        "--batch",
        "2",
        "--remat",
        "full",
        "-n",
        "1",
    ]
    out = cli([*base, *flags])
    assert out.exit_code == 0, out.output
    assert f"seq 32, {attention} attention) on gpu-h100:2" in out.stdout.splitlines()[0]
    doc = _json(cli, base[1:] + flags)
    assert doc["config"]["model"]["attention"] == attention
    for figures in _plans_own_figures(plan_cache):
        kinds = {k.kind for k in figures.kernels}
        assert ("attention" in kinds) is fmha and "gemm" in kinds


@pytest.mark.parametrize(
    ("flags", "attention"),
    [
        pytest.param([], "flash", id="default-splash"),
        pytest.param(["--attention", "dot"], "dot", id="dot"),
    ],
)
def test_a_tpu_plan_compiles_splash_attention_unless_told(cli, plan_cache, flags, attention):
    """On TPUs plan's decoder computes attention with Pallas splash attention, as MaxText's TPU runs
    do (`--seq` a multiple of its blocks); each of its kernels is counted, none left unknown."""
    pytest.importorskip("libtpu", reason="the tpu extra: pip install -e '.[tpu]' (CI installs it)")
    base = ["--preset", "tiny", "--seq", "256", "--target", "tpu-v5e:2x2", "--mesh", "fsdp=2,tensor=2"]
    doc = _json(cli, [*base, "--batch", "2", "--remat", "full", *flags])
    assert doc["config"]["model"]["attention"] == attention
    from shardcli.hardware.targets import parse_target
    from shardcli.plan.candidates import Candidate
    from shardcli.plan.compile_cache import cache_key, read_cached

    cfg = replace(build_config("tiny", seq=256), attention=attention)
    candidate = Candidate(MeshChoice((("fsdp", 2), ("tensor", 2)), True), "fsdp-tp", "full", 8, 4)
    figures = read_cached(cache_key(cfg, candidate, parse_target("tpu-v5e:2x2"), "scan"))
    assert figures is not None  # plan's own compile of this layout, as its cache keeps it
    attention_flops = sum(k.flops * k.runs for k in figures.kernels if k.kind == "attention")
    # per device: 4 sequences (fsdp 2 of 8), 2 of the 4 query heads (tensor 2), one block of 256 (the
    # causal mask's one block is partial: computed); per query-key pair 4 D forward, twice (remat
    # full), 6 D for dq and 8 D for dkv
    pairs = 4 * 2 * 256 * 256
    expected = cfg.layers * pairs * cfg.head_dim * (4 + 4 + 6 + 8) if attention == "flash" else 0
    assert attention_flops == expected
    assert not [line for line in figures.notes if "custom call" in line]


def test_flash_attention_compiles_where_the_tensor_axis_is_wider_than_the_kv_heads(cuda_plugin, plan_cache):
    """tiny has 4 query heads and 2 key/value heads: a tensor axis of 4 splits only the queries, and
    cuDNN's kernel splits both alike, so the key/value heads are repeated to the queries' (the
    partitioner refused the call before)."""
    from shardcli.hardware.targets import parse_target
    from shardcli.plan import compiles as plan_compile
    from shardcli.plan.candidates import Candidate
    from shardcli.specs.runs import RunOptions

    target = parse_target("gpu-h100:2x4")
    cfg = replace(build_config("tiny"), attention="flash")
    assert (cfg.heads, cfg.kv_heads) == (4, 2)
    candidate = Candidate(MeshChoice((("fsdp", 2), ("tensor", 4)), True), "fsdp-tp", "full", 16, 8)
    session = plan_compile.target_session({}, target, candidate.mesh, RunOptions())
    figures = plan_compile.compile_candidate(session, cfg, candidate, target, "scan")
    assert "attention" in {k.kind for k in figures.kernels}


@pytest.mark.parametrize(
    ("target", "mesh", "label"),
    [
        pytest.param("tpu-v5e:2x2", "data=2,fsdp=2", "dp2 fsdp2", id="tpu"),
        pytest.param("tpu-v5e:2x2", "tensor=2,fsdp=2", "fsdp2 tp2", id="tpu-any-order"),
        pytest.param("gpu-h100:2x4", "data=2,fsdp=4", "dp2 fsdp4", id="gpu-across-hosts"),
    ],
)
def test_a_named_mesh_is_the_one_layout_compiled(cli, plan_cache, target, mesh, label):
    """`--mesh` with --batch and --remat: one published layout is compiled and estimated from the command
    line (its rule sets are the only candidates), and the document says which mesh was asked for."""
    pytest.importorskip("libtpu" if target.startswith("tpu") else "jax_cuda12_plugin")
    doc = _json(
        cli, ["--preset", "tiny", "--target", target, "--mesh", mesh, "--batch", "2", "--remat", "full"]
    )
    assert {c["layout"].removesuffix("+sp") for c in doc["candidates"]} == {label}
    assert doc["winner"]["layout"].removesuffix("+sp") == label
    assert doc["config"]["mesh"] == {k: int(v) for k, v in (p.split("=") for p in mesh.split(","))}
    assert all(c["compiled"] is not None for c in doc["candidates"])


def test_a_gpu_candidate_is_estimated_as_inspect_estimates_it(cuda_plugin, plan_cache):
    """plan keeps a compile's figures; estimated from them it is inspect's own estimate."""
    from shardcli.hardware.chips import CHIPS
    from shardcli.hardware.targets import parse_target
    from shardcli.plan import compiles as plan_compile
    from shardcli.plan.candidates import Candidate
    from shardcli.plan.estimate import estimate_of
    from shardcli.specs.runs import RunOptions

    target = parse_target("gpu-h100:2x4")
    cfg = build_config("tiny")
    candidate = Candidate(
        MeshChoice((("data", 2), ("fsdp", 2), ("tensor", 2)), True), "fsdp-tp", "full", 8, 8
    )
    session = plan_compile.target_session({}, target, candidate.mesh, RunOptions())
    result = plan_compile._inspect(session, cfg, candidate, target, None)
    figures = plan_compile.figures_of(result, target, "scan", 0.0)
    assert figures.kernels
    assert sum(k.runs for k in figures.kernels) == sum(c.runs for c in result.analysis.kernels.calls)
    ours = estimate_of(figures, session.mesh)
    assert ours is not None and ours.ops is not None and result.step is not None
    # plan keeps each axis's exposed bytes as a whole number of bytes: equal to that rounding
    assert ours.estimate_s == pytest.approx(result.step.estimate_s, rel=1e-6)
    assert {t.name: t.seconds for t in ours.comm} == pytest.approx(
        {t.name: t.seconds for t in result.step.comm}
    )
    h100 = CHIPS["gpu-h100"]
    rates = {t.name: t.rate for t in ours.comm}
    assert rates["data"] == h100.network_bytes_per_s.value  # the 2 hosts
    assert rates["fsdp"] == rates["tensor"] == h100.link_bytes_per_s.value  # within a host


def test_a_program_is_laid_out_on_gpu_hosts_as_inspect_compiles_it(cli, plan_cache, cuda_plugin):
    """`plan FILE.py:FN --target gpu-h100:HOSTSxGPUS`: the GPU hosts' meshes (the tensor axis within a
    host), fit judged against JAX's pool, and the winner's command compiles the same program: inspect's
    memory and step estimate equal the plan's row."""
    pytest.importorskip("flax")
    doc = _program_json(cli, LINEN, ["--target", "gpu-h100:2x2", "-n", "2"])
    compiled = [c for c in doc["candidates"] if c["compiled"] is not None]
    assert len(compiled) == 2 and all(c["mesh"].get("tensor", 1) <= 2 for c in doc["candidates"])
    winner = _winner(doc)
    assert winner["compiled"]["fits"] and "JAX" in winner["compiled"]["fit_text"], winner["compiled"]
    words = shlex.split(doc["winner"]["inspect_command"])
    assert words[:2] == ["shardcli", "inspect"] and words[words.index("--target") + 1] == "gpu-h100:2x2"
    out = cli([*words[1:], "--format", "json"])
    assert out.exit_code == 0, out.output
    inspected = json.loads(out.stdout)
    memory = inspected["program"]["memory"]
    assert (memory["argument_bytes"], memory["total_bytes"]) == (
        winner["compiled"]["argument_bytes"],
        winner["compiled"]["needed_bytes"],
    )
    # plan keeps each axis's exposed bytes as a whole number of bytes: equal to that rounding
    assert inspected["step_time"]["estimate_s"] == pytest.approx(winner["estimate"]["step_s"], rel=1e-6)


def test_a_gpu_pool_jax_refuses_is_one_line(cli):
    out = cli(
        ["plan", "--preset", "tiny", "--target", "gpu-h100:8"], env={"XLA_PYTHON_CLIENT_MEM_FRACTION": "2"}
    )
    assert out.exit_code == 2, out.output
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION='2': give a fraction" in out.stderr
    assert "Traceback" not in out.output


# --- a ranking people can read ---------------------------------------------------------------------


def _figures(needed: int | None, capacity: int, fits: bool = True):
    from shardcli.plan.compiled_figures import CompiledFigures

    return CompiledFigures(fits, needed, capacity, None, None, 1.0, 1.0, (), "scan", 0.0, "")


@pytest.mark.parametrize(
    ("needed", "fits", "word", "used"),
    [
        pytest.param(50, True, "yes", "50%", id="half"),
        pytest.param(90, True, "yes", "90%", id="at-the-line"),
        pytest.param(93, True, "at risk", "93%", id="above-90"),
        pytest.param(120, False, "no", "120%", id="no"),
    ],
)
def test_a_row_says_how_much_of_the_usable_memory_it_takes(needed, fits, word, used):
    from shardcli.render.plan import fit_word, used_share

    f = _figures(needed * GIB_, 100 * GIB_, fits)
    assert (fit_word(f).plain, used_share(f)) == (word, used)


GIB_ = 1 << 30


def test_the_table_names_its_order_and_prints_the_command_on_one_line(cli, plan_cache, cuda_plugin):
    """At 80 columns: the order in the header, the reproducing command whole on one line that
    pastes, progress lines on stderr (no terminal here); --rank step orders by the step."""
    args = [
        "plan",
        "--preset",
        "tiny",
        "--target",
        "gpu-h100:2",
        "--batch",
        "2",
        "--remat",
        "full",
        "-n",
        "2",
    ]
    env = {"SHARDCLI_CACHE_DIR": os.environ["SHARDCLI_CACHE_DIR"], "COLUMNS": "80"}
    out = cli([*args, "--rank", "step", "--no-color"], env=env)
    assert out.exit_code == 0, out.output
    assert (
        "ranked by estimated step time, shortest first (--rank throughput for the other order)"
        in " ".join(out.stdout.split())
    )
    command = next(line for line in out.stdout.splitlines() if line.startswith("shardcli inspect"))
    assert len(command) > 80 and command.endswith("--axes " + command.split("--axes ")[1].split()[0])
    words = shlex.split(command)
    assert words[words.index("--target") + 1] == "gpu-h100:2" and "--mesh" in words
    lines = [line for line in out.stderr.splitlines() if line.startswith("shardcli plan: compiling ")]
    assert [line.split(":")[1].strip()[len("compiling ") :] for line in lines][:2] == ["1/2", "2/2"]
    doc = _json(cli, [*args[1:], "--rank", "step"])
    assert doc["config"]["rank"] == "step"
    steps = [c["estimate"]["step_s"] for c in sorted(doc["candidates"], key=lambda c: c["rank"] or 99)
             if c["rank"] is not None and c["compiled"]["fits"]]  # fmt: skip
    assert steps == sorted(steps) and doc["summary"]["cached"] == 2


# --- user programs as users write them ------------------------------------------------------------

GUIDE = str(Path(__file__).parent / "programs" / "plan_flax_guide.py")


def test_a_program_as_flax_s_guide_writes_it_is_laid_out(cli, plan_cache):
    """`inputs` that make the model under jax.set_mesh with mesh-axis names ('model', 'data'): plan
    takes them, takes 'data' as its mesh axis and names 'model', which no rule maps, in a warning;
    with --rules model=tensor the kernels are split and inspect compiles the winner again."""
    pytest.importorskip("libtpu")
    pytest.importorskip("flax")
    env = {"SHARDCLI_CACHE_DIR": os.environ["SHARDCLI_CACHE_DIR"]}
    args = ["plan", f"{GUIDE}:train_step", "--inputs", f"{GUIDE}:inputs", *V5E, "-n", "1", "--format", "json"]
    out = cli(args, env=env)
    assert out.exit_code == 0, out.output
    warnings = [line for line in out.stderr.splitlines() if line.startswith("shardcli: warning: ")]
    assert any("'data', a mesh axis of plan's: taken as that axis (data=data)" in w for w in warnings)
    assert any(
        "no rule maps the arguments' logical axis 'model' to a mesh axis" in w and "model=tensor" in w
        for w in warnings
    ), warnings
    doc = _program_json(cli, GUIDE, [*V5E, "-n", "1", "--rules", "model=tensor,data=data"])
    command = doc["winner"]["inspect_command"]
    assert "model=tensor" in command
    again = cli([*shlex.split(command)[1:], "--format", "json"])
    assert again.exit_code == 0, again.output
    memory = json.loads(again.stdout)["program"]["memory"]
    assert memory["total_bytes"] == _winner(doc)["compiled"]["needed_bytes"]


# --- the plan cache's key holds the environment that changes a compile (issue 54) -------------------


def _tiny_key(target: str = "tpu-v5e:2x2") -> str:
    from shardcli.hardware.targets import parse_target
    from shardcli.plan.compile_cache import cache_key

    cfg = build_config("tiny")
    candidates, _ = enumerate_candidates((2, 2), global_batch=2, per_device_batch=None, seq_len=32)
    return cache_key(cfg, candidates[0], parse_target(target), "scan")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        pytest.param("XLA_FLAGS", "--xla_cpu_enable_fast_math=true", id="xla-flags"),
        pytest.param("LIBTPU_INIT_ARGS", "--xla_tpu_enable_latency_hiding_scheduler=false", id="libtpu-args"),
        pytest.param("JAX_DEFAULT_MATMUL_PRECISION", "highest", id="jax-matmul-precision"),
    ],
)
def test_a_variable_that_changes_the_compile_changes_the_cache_key(monkeypatch, variable, value):
    for name in ("XLA_FLAGS", "LIBTPU_INIT_ARGS", "JAX_DEFAULT_MATMUL_PRECISION"):
        monkeypatch.delenv(name, raising=False)
    plain = _tiny_key()
    monkeypatch.setenv(variable, value)
    assert _tiny_key() != plain


def test_plans_own_cost_flags_and_where_the_cache_is_do_not_change_the_key(monkeypatch, tmp_path):
    from shardcli.plan.compile_cache import COST_FLAGS

    monkeypatch.delenv("LIBTPU_INIT_ARGS", raising=False)
    plain = _tiny_key()
    monkeypatch.setenv("LIBTPU_INIT_ARGS", " ".join(COST_FLAGS))  # what set_cost_flags adds
    monkeypatch.setenv("SHARDCLI_CACHE_DIR", str(tmp_path))
    assert _tiny_key() == plain


@pytest.mark.once  # plan's own cache: the same verdict under any JAX
def test_a_flagged_no_cache_plan_keeps_the_unflagged_entry(cli, plan_cache):
    """Before, the key ignored XLA_FLAGS: a flagged run read the unflagged figures, and a flagged
    --no-cache run overwrote the entry unflagged runs then read."""
    pytest.importorskip("libtpu")
    args = [*TINY, "--remat", "full", "-n", "1"]
    first = _json(cli, args)
    assert first["summary"]["compiled"] == 1 and len(list(plan_cache.glob("*.json"))) == 1
    entry = next(plan_cache.glob("*.json"))
    before = entry.read_bytes()
    flagged = cli(
        ["plan", *args, "--no-cache", "--format", "json"],
        env={"SHARDCLI_CACHE_DIR": os.environ["SHARDCLI_CACHE_DIR"], "XLA_FLAGS": "--xla_dump_hlo_as_text"},
    )
    assert flagged.exit_code == 0, flagged.output
    assert len(list(plan_cache.glob("*.json"))) == 2 and entry.read_bytes() == before
    flagged_again = cli(
        ["plan", *args, "--format", "json"],
        env={"SHARDCLI_CACHE_DIR": os.environ["SHARDCLI_CACHE_DIR"], "XLA_FLAGS": "--xla_dump_hlo_as_text"},
    )
    assert json.loads(flagged_again.stdout)["summary"]["cached"] == 1  # its own entry


def test_a_tiny_gpu_pool_gets_the_advice_its_json_gives(cli, plan_cache, cuda_plugin):
    """Before, the screen advised remat, a smaller batch or more chips while the row's own fit text
    (in JSON) said which XLA_PYTHON_CLIENT_MEM_FRACTION fits: the pool was what was small."""
    env = {"SHARDCLI_CACHE_DIR": os.environ["SHARDCLI_CACHE_DIR"], "XLA_PYTHON_CLIENT_MEM_FRACTION": ".00001"}
    args = ["plan", "--preset", "tiny", "--target", "gpu-h100:8", "--compile", "1"]
    out = cli([*args, "--format", "json"], env=env)
    assert out.exit_code == 1, out.output
    (row,) = [c for c in json.loads(out.stdout)["candidates"] if c["compiled"] is not None]
    advice = row["compiled"]["fit_text"].rsplit("; ", 1)[1]
    assert advice.startswith("XLA_PYTHON_CLIENT_MEM_FRACTION=.05 makes it fit")
    screen = cli([*args, "--no-color"], env={**env, "COLUMNS": "200"})
    assert screen.exit_code == 1, screen.output
    text = " ".join(screen.stdout.split())
    assert f"to fit: {advice}" in text
    assert "--remat minimal_offloaded" not in text and "smaller --batch" not in text


def test_a_gpu_plan_says_its_compile_options_on_the_screen_and_in_json(cli, plan_cache, cuda_plugin):
    env = {"SHARDCLI_CACHE_DIR": os.environ["SHARDCLI_CACHE_DIR"]}
    args = ["plan", "--preset", "tiny", "--target", "gpu-h100:8", "--compile", "1"]
    doc = json.loads(cli([*args, "--format", "json"], env=env).stdout)
    assert doc["config"]["compile_options"] == {"xla_gpu_enable_triton_gemm": False}
    screen = cli([*args, "--no-color"], env={**env, "COLUMNS": "200"})
    assert screen.exit_code == 0, screen.output
    plugin = next(p for p in doc["config"]["compiler"] if p.startswith("jax-cuda"))
    assert (
        f"{plugin} {doc['config']['compiler'][plugin]} with xla_gpu_enable_triton_gemm=false (every dot a "
        "cuBLAS call, as XLA's autotuning chose on a real H200; no GPU here to autotune)"
    ) in " ".join(screen.stdout.split())


def test_a_tpu_plan_compiles_with_jax_s_own_options(cli, plan_cache):
    pytest.importorskip("libtpu")
    doc = _json(cli, [*TINY, "--remat", "full", "-n", "1"])
    assert doc["config"]["compile_options"] == {}
