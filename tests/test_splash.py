"""Pallas splash attention on TPU targets: its kernels' FLOPs (XLA counts them as nothing) from their
shapes and the block mask's constant, followed through the loops XLA hoists it out of."""

from __future__ import annotations

import pytest

from shardcli.analysis.hlo.constants import constant_of, integer_values
from shardcli.analysis.hlo.module import parse_module
from shardcli.analysis.splash import splash_flops, splash_phase, visible_share

LOOP = """HloModule m

%cond (c: (s32[], s8[1,2,2])) -> pred[] {
  %c = (s32[], s8[1,2,2]) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%ci, %n), direction=LT
}

%body (p: (s32[], s8[1,2,2])) -> (s32[], s8[1,2,2]) {
  %p = (s32[], s8[1,2,2]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %m = s8[1,2,2]{2,1,0} get-tuple-element(%p), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  ROOT %t = (s32[], s8[1,2,2]) tuple(%next, %{returned})
}

ENTRY %main () -> s8[1,2,2] {
  %mask = s8[1,2,2]{2,1,0} constant({...})
  %cs = (s8[1,2,2], s8[1,2,2], u32[]) copy-start(%mask)
  %cd = s8[1,2,2]{2,1,0} copy-done(%cs)
  %zero = s32[] constant(0)
  %init = (s32[], s8[1,2,2]) tuple(%zero, %cd)
  %w = (s32[], s8[1,2,2]) while(%init), condition=%cond, body=%body
  ROOT %out = s8[1,2,2]{2,1,0} get-tuple-element(%w), index=1
}
"""


@pytest.mark.parametrize(
    ("returned", "found"),
    [
        pytest.param("m", True, id="passed-on"),
        pytest.param("twice", False, id="updated-by-the-loop"),
    ],
)
def test_a_constant_is_followed_into_a_loop_and_out_of_its_result(returned, found):
    """XLA hoists a scanned layer's constants out of the loop: inside the body the block mask is the
    loop parameter's element, after the loop the while's result element. Both are the constant only
    where the body passes the element on unchanged."""
    text = LOOP.replace("%{returned}", f"%{returned}")
    if returned == "twice":
        text = text.replace("  ROOT %t", "  %twice = s8[1,2,2]{2,1,0} add(%m, %m)\n  ROOT %t")
    module = parse_module(text)
    inside = constant_of(module, module.computations["body"], "m")
    after = constant_of(module, module.computations["main"], "out")
    assert (inside.name if inside else None) == ("mask" if found else None)
    assert (after.name if after else None) == ("mask" if found else None)
    assert constant_of(module, module.computations["main"], "next") is None  # no such instruction


@pytest.mark.parametrize(
    ("literal", "values"),
    [
        pytest.param("{ { { 1, 0 }, { 2, 1 } } }", [1, 0, 2, 1], id="block-mask"),
        pytest.param("{...}", None, id="elided"),
        pytest.param("{ 1.5, 2 }", None, id="not-integers"),
    ],
)
def test_a_constants_integers_are_read_unless_elided(literal, values):
    assert integer_values(literal) == values


def test_an_instruction_printed_on_several_lines_is_one_instruction():
    """libtpu prints a Pallas kernel's `kernel_metadata` over three lines: the parser joins them (the
    dq and dkv kernels were missing from the module before)."""
    text = (
        "HloModule m\n\nENTRY %main (a: f32[2]) -> f32[2] {\n"
        "  %a = f32[2]{0} parameter(0)\n"
        '  %k = f32[2]{0} custom-call(%a), custom_call_target="tpu_custom_call", '
        "frontend_attributes={kernel_metadata={\n"
        '"xprof_metadata":"{\\"block_q\\": 128}"\n'
        '}}, metadata={op_name="x"}\n'
        "  ROOT %b = f32[2]{0} negate(%k)\n}\n"
    )
    comp = parse_module(text).computations["main"]
    assert list(comp.instructions) == ["a", "k", "b"]
    assert comp.instructions["k"].operands == ("a",)
    assert 'op_name="x"' in comp.instructions["k"].attributes


@pytest.mark.parametrize(
    ("name", "phase"),
    [
        pytest.param("splash_mha_fwd_residuals.2", "fwd", id="fwd"),
        pytest.param("splash_mha_dq_no_residuals.1", "dq", id="dq"),
        pytest.param("splash_mqa_dkv_segmented_no_residuals", "dkv", id="dkv-mqa-segmented"),
        pytest.param("splash_attention.1", None, id="not-a-kernel"),
        pytest.param("flash_fwd.3", None, id="another-kernel"),
    ],
)
def test_a_splash_kernel_is_known_by_its_name(name, phase):
    assert splash_phase(name) == phase


B, H, KV, S, D = 2, 4, 2, 512, 128
Q = ("bf16", (B, H, S, D))
KEYS = ("bf16", (B, KV, S, D))
MASKS = [("s8", (1, 2, 2)), ("s8", (1, 2, 2))]
PAIRS = B * H * S * S


@pytest.mark.parametrize(
    ("phase", "results", "per_pair"),
    [
        pytest.param("fwd", [Q, ("f32", (B, H, S, D))], 4 * D, id="fwd-qk-pv"),
        pytest.param("dq", [Q], 6 * D, id="dq-three-products"),
        pytest.param("dkv", [KEYS, KEYS], 8 * D, id="dkv-four-products"),
        pytest.param("dkv", [("bf16", (2, B, H, S, D)), KEYS, KEYS], 10 * D, id="dkv-fused-with-dq"),
    ],
)
def test_each_splash_kernel_counts_its_products_on_the_visible_blocks(phase, results, per_pair):
    share = visible_share([1, 0, 2, 1])
    assert share == 0.75
    assert splash_flops(phase, [*MASKS, Q, KEYS, KEYS], results, share) == PAIRS * per_pair * 0.75


def test_operands_that_are_not_q_k_v_with_the_head_width_last_are_not_counted():
    seq_minor = ("bf16", (B, KV, D, S + 128))
    assert splash_flops("fwd", [*MASKS, Q, seq_minor, seq_minor], [Q], 1.0) is None
    assert splash_flops("fwd", [*MASKS, Q], [Q], 1.0) is None


def test_splash_attention_compiled_for_a_tpu_is_counted_kernel_by_kernel():
    """A scanned, rematerialised layer of splash attention under shard_map, compiled for a v5e slice
    here: each kernel's FLOPs are the hand count on the causal mask's visible blocks (3 of 4 at
    blocks of 256), run once per trip (the forward twice: remat), and nothing is left unknown."""
    pytest.importorskip("libtpu", reason="the tpu extra: pip install -e '.[tpu]' (CI installs it)")
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from shardcli.analysis.program import analyze_compiled
    from shardcli.analysis.target import open_target_session
    from shardcli.hardware.targets import parse_target
    from shardcli.specs.runs import RunOptions

    session = open_target_session(parse_target("tpu-v5e:2x2"), "4", "x", RunOptions())
    layers, block = 2, 256
    sizes = splash.BlockSizes(
        block_q=block,
        block_kv=block,
        block_kv_compute=block,
        block_q_dkv=block,
        block_kv_dkv=block,
        block_kv_dkv_compute=block,
        block_q_dq=block,
        block_kv_dq=block,
    )

    def attend(q, k, v):
        mask = masks.MultiHeadMask([masks.CausalMask((S, S)) for _ in range(H)])
        kernel = splash.make_splash_mha(mask, head_shards=1, q_seq_shards=1, block_sizes=sizes)
        return jax.vmap(kernel)(q, k, v)

    def layer(q, w):
        k = v = q[:, :KV] * w
        out = jax.shard_map(
            attend, mesh=session.mesh, in_specs=(P("x"),) * 3, out_specs=P("x"), check_vma=False
        )(q, k, v)
        return out, None

    def loss(q, ws):
        out, _ = jax.lax.scan(jax.checkpoint(layer), q, ws)
        return out.astype(jnp.float32).sum()

    q = jax.ShapeDtypeStruct((4 * B, H, S, D), jnp.bfloat16, sharding=NamedSharding(session.mesh, P("x")))
    ws = jax.ShapeDtypeStruct((layers,), jnp.bfloat16, sharding=NamedSharding(session.mesh, P()))
    compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(q, ws).compile()
    analysis = analyze_compiled(compiled, session.mesh)
    found = sorted(
        (splash_phase(c.name), c.flops, c.runs)
        for c in analysis.kernels.calls
        if c.target == "tpu_custom_call"
    )
    share = 3 / 4
    assert found == [
        ("dkv", PAIRS * 8 * D * share, layers),
        ("dq", PAIRS * 6 * D * share, layers),
        ("fwd", PAIRS * 4 * D * share, layers),
        ("fwd", PAIRS * 4 * D * share, layers),
    ]
    assert analysis.kernels.unknown == ()
    assert analysis.flops > analysis.kernels.flops > 0.9 * analysis.flops


SPLASH_PROGRAM = """
import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks


from jax.sharding import PartitionSpec as P


def attend(q, k, v):
    mask = masks.MultiHeadMask([masks.CausalMask((512, 512)) for _ in range(4)])
    kernel = splash.make_splash_mha(mask, head_shards=1, q_seq_shards=1)
    return jax.vmap(kernel)(q, k, v)


def step(q, k, v):
    def loss(q, k, v):
        out = jax.shard_map(attend, in_specs=(P("x"),) * 3, out_specs=P("x"), check_vma=False)(q, k, v)
        return out.astype(jnp.float32).sum()

    return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)


def inputs(mesh):
    split = jax.sharding.NamedSharding(mesh, P("x"))
    q = jax.ShapeDtypeStruct((8, 4, 512, 128), jnp.bfloat16, sharding=split)
    return q, q, q
"""


def test_your_splash_attention_is_inspected_for_a_tpu_target(cli, tmp_path):
    """A program of the user's that calls splash attention, inspected for a TPU it does not have:
    its kernels are library calls named as splash attention, and no FLOPs are left unknown."""
    pytest.importorskip("libtpu", reason="the tpu extra: pip install -e '.[tpu]' (CI installs it)")
    program = tmp_path / "splash_step.py"
    program.write_text(SPLASH_PROGRAM)
    out = cli(
        [
            "inspect",
            f"{program}:step",
            "--inputs",
            f"{program}:inputs",
            "--target",
            "tpu-v5e:2x2",
            "--mesh",
            "4",
            "--axes",
            "x",
        ]
    )
    assert out.exit_code == 0, out.output
    flops = " ".join(line for line in out.stdout.splitlines() if "library kernel call" in line)
    assert "in 3 library kernel calls (splash attention)" in flops
    assert "unknown" not in out.stdout


KERNEL_MODULE = """HloModule m

ENTRY %main (q: bf16[2,4,512,128], k: bf16[2,2,512,128]) -> bf16[2,4,512,128] {
  %q = bf16[2,4,512,128]{3,2,1,0} parameter(0)
  %k = bf16[2,2,512,128]{3,2,1,0} parameter(1)
  %next = s8[1,2,2]{2,1,0} constant({ { { 0, 0 }, { 0, 1 } } })
  %mask = s8[1,2,2]{2,1,0} constant(MASK)
  ROOT %splash_mha_fwd_residuals.1 = bf16[2,4,512,128]{3,2,1,0} custom-call(%next, %mask, %q, %k, %k), \
custom_call_target="tpu_custom_call"
}
"""


@pytest.mark.parametrize(
    ("literal", "counted"),
    [
        pytest.param("{ { { 1, 0 }, { 2, 1 } } }", True, id="mask-in-the-text"),
        pytest.param("{...}", False, id="mask-elided-named-unknown"),
    ],
)
def test_a_splash_kernel_whose_mask_is_elided_is_named_never_zero(literal, counted):
    from shardcli.analysis.kernels import kernel_calls
    from shardcli.analysis.loops import runs_per_computation

    module = parse_module(KERNEL_MODULE.replace("MASK", literal))
    found = kernel_calls(module, runs_per_computation(module))
    assert [c.flops for c in found.calls] == ([PAIRS * 4 * D * 0.75] if counted else [])
    assert [t for t, _ in found.unknown] == (
        [] if counted else ["tpu_custom_call splash_mha_fwd_residuals (its block mask is not in the text)"]
    )
    # the elided literal, given by the caller (as read_elided_constants does), is read as well
    given = kernel_calls(module, runs_per_computation(module), {"mask": "{ { { 1, 0 }, { 2, 1 } } }"})
    assert [c.flops for c in given.calls] == [PAIRS * 4 * D * 0.75]
