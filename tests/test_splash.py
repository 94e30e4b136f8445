"""Pallas splash attention on TPU targets: its kernels' FLOPs (XLA counts them as nothing) from their
shapes and the block mask's constant, followed through the loops XLA hoists it out of."""

from __future__ import annotations

import pytest

from shardcli.analysis.hlo.constants import constant_of, integer_values
from shardcli.analysis.hlo.module import parse_module
from shardcli.analysis.splash import block_sizes, splash_flops, splash_phase

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


def test_a_body_two_loops_share_gives_a_constant_only_where_both_hand_it_the_same():
    """XLA may run one body from two loops (layers of two kinds in two scans): inside it, the block
    mask is a constant only where both loops pass the same one."""
    two = LOOP.replace("%{returned}", "%m").replace(
        "  ROOT %out = s8[1,2,2]{2,1,0} get-tuple-element(%w), index=1",
        "  %other = s8[1,2,2]{2,1,0} constant({ { { 1, 1 }, { 1, 1 } } })\n"
        "  %init2 = (s32[], s8[1,2,2]) tuple(%zero, %OTHER)\n"
        "  %w2 = (s32[], s8[1,2,2]) while(%init2), condition=%cond, body=%body\n"
        "  ROOT %out = s8[1,2,2]{2,1,0} get-tuple-element(%w), index=1",
    )
    for other, same in (("other", False), ("cd", True)):
        module = parse_module(two.replace("%OTHER", f"%{other}"))
        inside = constant_of(module, module.computations["body"], "m")
        assert (inside.name if inside else None) == ("mask" if same else None)


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


def test_a_line_whose_brackets_never_close_is_read_alone_and_swallows_nothing():
    text = (
        "HloModule m\n\nENTRY %main (a: f32[2]) -> f32[2] {\n"
        "  %a = f32[2]{0} parameter(0)\n"
        '  %k = f32[2]{0} custom-call(%a), custom_call_target="x", frontend_attributes={broken={\n'
        "  %n = f32[2]{0} negate(%k)\n"
        '  ROOT %b = f32[2]{0} negate(%n), metadata={op_name="}"}\n}\n\n'
        "%after (p: f32[2]) -> f32[2] {\n  ROOT %p = f32[2]{0} parameter(0)\n}\n"
    )
    module = parse_module(text)
    main = module.computations["main"]
    assert list(main.instructions) == ["a", "k", "n", "b"]
    assert main.root == "b"
    assert list(module.computations["after"].instructions) == ["p"]


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
        # the fused kernel's dq_unreduced: one Q per key block, after the batch vmap puts first
        pytest.param("dkv", [("bf16", (B, 2, H, S, D)), KEYS, KEYS], 10 * D, id="dkv-fused-with-dq"),
    ],
)
def test_each_splash_kernel_counts_its_products_on_the_visible_blocks(phase, results, per_pair):
    flops = splash_flops(phase, [*MASKS, Q, KEYS, KEYS], results, [1, 0, 2, 1], 1, (256, 256))
    assert flops == PAIRS * per_pair * 0.75


def test_a_shrunk_block_mask_is_a_share_of_the_whole_grid():
    """Splash drops the key blocks no query row uses: a window of 256 over 2048 with blocks of 256
    leaves a mask of 8 x 2 with 15 blocks computed, 15 of the grid's 64 (not 15 of 16)."""
    q = ("bf16", (H, 2048, D))
    window = [1, 0] + [1, 1] * 7
    assert sum(window) == 15
    assert (
        splash_flops("fwd", [*MASKS, q, q, q], [q], window, 1, (256, 256))
        == H * 2048 * 2048 * 4 * D * 15 / 64
    )


@pytest.mark.parametrize(
    ("operands", "blocks", "reason"),
    [
        pytest.param(
            [*MASKS, Q, ("bf16", (B, KV, D, S + 128)), ("bf16", (B, KV, D, S + 128))],
            (256, 256),
            "its Q, K and V are not [..., sequence, head width]",
            id="sequence-minor",
        ),
        pytest.param([*MASKS, Q], (256, 256), "its operands are not Q, K and V", id="no-k-v"),
        pytest.param(
            [*MASKS, Q, KEYS, KEYS], (384, 256), "its blocks (384 x 256) do not divide", id="blocks"
        ),
    ],
)
def test_what_cannot_be_counted_says_why(operands, blocks, reason):
    assert splash_flops("fwd", operands, [Q], [1, 0, 2, 1], 1, blocks).startswith(reason)


@pytest.mark.parametrize(
    ("phase", "blocks"),
    [
        pytest.param("fwd", (1024, 512), id="fwd"),
        pytest.param("dq", (256, 128), id="dq"),
        pytest.param("dkv", (2048, 512), id="dkv"),
    ],
)
def test_each_kernels_block_sizes_come_from_its_metadata(phase, blocks):
    """libtpu prints splash's `xprof_metadata` with escaped quotes inside the kernel's attributes."""
    meta = {"block_q": 1024, "block_kv": 512, "block_q_dq": 256, "block_kv_dq": 128, "block_q_dkv": 2048}
    meta["block_kv_dkv"] = 512
    text = ", ".join(f'\\"{k}\\": {v}' for k, v in meta.items())
    attributes = f'frontend_attributes={{kernel_metadata={{ "xprof_metadata":"{{{text}}}" }}}}'
    assert block_sizes(phase, attributes) == blocks
    assert block_sizes(phase, "metadata={}") is None


@pytest.mark.slow  # compiles whole programs
@pytest.mark.parametrize(
    ("mask_kind", "fused", "seq"),
    [
        pytest.param("causal", False, S, id="causal"),
        pytest.param("window", False, 1024, id="sliding-window-shrunk-mask"),
        pytest.param("window", True, 1024, id="sliding-window-fused-backward"),
    ],
)
def test_splash_attention_compiled_for_a_tpu_is_counted_kernel_by_kernel(mask_kind, fused, seq):
    """A scanned, rematerialised layer of splash attention under shard_map, compiled for a v5e slice
    here: each kernel's FLOPs are the hand count on the blocks its mask leaves visible (counted here
    from the dense mask, blocks of 256), run once per trip (the forward twice: remat), and nothing
    is left unknown. A sliding window's block mask is shrunk by splash (unused columns dropped); the
    fused backward's dkv kernel also computes dQ."""
    pytest.importorskip("libtpu", reason="the tpu extra: pip install -e '.[tpu]' (CI installs it)")
    import jax
    import jax.numpy as jnp
    import numpy as np
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
        block_q_dq=None if fused else block,
        block_kv_dq=None if fused else block,
        use_fused_bwd_kernel=fused,
    )

    def one_mask():
        if mask_kind == "causal":
            return masks.CausalMask((seq, seq))
        return masks.LocalMask((seq, seq), (256, 0), 0)

    def attend(q, k, v):
        mask = masks.MultiHeadMask([one_mask() for _ in range(H)])
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

    q = jax.ShapeDtypeStruct((4 * B, H, seq, D), jnp.bfloat16, sharding=NamedSharding(session.mesh, P("x")))
    ws = jax.ShapeDtypeStruct((layers,), jnp.bfloat16, sharding=NamedSharding(session.mesh, P()))
    compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(q, ws).compile()
    analysis = analyze_compiled(compiled, session.mesh)
    found = sorted(
        (splash_phase(c.name), c.flops, c.runs)
        for c in analysis.kernels.calls
        if c.target == "tpu_custom_call"
    )
    n = seq // block
    dense = np.asarray(one_mask()[:, :])
    share = dense.reshape(n, block, n, block).any(axis=(1, 3)).sum() / n**2  # blocks with a visible score
    pairs = B * H * seq * seq
    backward = (
        [("dkv", pairs * 10 * D * share, layers)]
        if fused
        else [
            ("dkv", pairs * 8 * D * share, layers),
            ("dq", pairs * 6 * D * share, layers),
        ]
    )
    assert found == sorted(
        [*backward, ("fwd", pairs * 4 * D * share, layers), ("fwd", pairs * 4 * D * share, layers)]
    )
    assert analysis.kernels.unknown == ()
    assert analysis.flops > analysis.kernels.flops > 0.5 * analysis.flops
    # each kernel's matmuls are as narrow as its head dim (what a TPU's matrix unit pads)
    assert {c.narrowest for c in analysis.kernels.calls if c.target == "tpu_custom_call"} == {D}


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
custom_call_target="tpu_custom_call", frontend_attributes={kernel_metadata={
"xprof_metadata":"{\\"block_q\\": 256, \\"block_kv\\": 256}"
}}
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
