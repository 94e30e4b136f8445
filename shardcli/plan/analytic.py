"""The analytic model that ranks every candidate layout before anything is compiled. Pure Python.

For one decoder, one candidate and one target: bytes per chip (parameters, AdamW's two moments,
gradients, saved activations by remat policy, logits), FLOPs per chip (remat's recomputation
included), and bytes each chip sends over each mesh axis (FSDP's weight all-gathers and gradient
reduce-scatters, tensor parallelism's activation all-reduces, data parallelism's gradient
all-reduce, sequence parallelism's key/value all-gathers). Each axis's bandwidth is the ICI links
it runs along (both directions of every torus ring it spans, one where there is no wraparound), a
chip's share of the data-center network where it crosses TPU slices; on GPU hosts NVLink where the
axis stays within a host, the network where it crosses hosts. A layout
fits where its memory is under HEADROOM of what one program may use: the HBM of a TPU chip, the
pool JAX's GPU client makes on a GPU (`shardcli.hardware.gpu_memory`, 75% by default). The ranking figure
is max(T_math, the axes' T_comm summed), over the calibrated efficiency of the step-time estimate
(`analysis.step_time` bounds a compiled step the same way); the table `plan` prints comes from
compiles, never from here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shardcli.analysis.kernels import causal_share
from shardcli.hardware.hosts import axis_network_bytes_per_s
from shardcli.plan.candidates import Candidate
from shardcli.specs.decoder import SPLASH_BLOCK, DecoderConfig
from shardcli.specs.remat import RematPolicy, mlp_names, parse_policy

if TYPE_CHECKING:
    from shardcli.hardware.chips import Figure

HEADROOM = 0.95  # a modelled layout needing more than this share of usable memory is called a no-fit


@dataclass(frozen=True)
class ChipFigures:
    """What the model divides by: one chip's figures and its torus."""

    peak_flops: float  # bf16 FLOP/s
    hbm_bytes_per_s: float
    hbm_bytes: int
    link_bytes_per_s: float  # one ICI link, one direction; a GPU's NVLink, one way
    torus: tuple[int, ...]  # a TPU slice's torus; GPUs: (hosts, GPUs per host)
    wraparound: tuple[bool, ...]  # per torus dimension (GPUs: none)
    usable_bytes: int  # what one program may use: the chip's HBM, a GPU's JAX pool
    usable_source: str
    network_bytes_per_s: float | None = None  # GPU hosts: one GPU's share of the network, one way
    host_bytes_per_s: float | None = None  # the chip's PCIe link to its host's memory, one way
    mxu_width: float | None = None  # a TPU's matrix unit (elements), which pads narrower matmul dimensions
    dcn_bytes_per_s: float | None = None  # several TPU slices: one chip's share of the data-center network

    @property
    def gpus_per_host(self) -> int | None:
        return self.torus[1] if self.network_bytes_per_s is not None else None

    def axis_bytes_per_s(self, size: int, inner: int) -> float:
        """A mesh axis's bandwidth for a ring collective, one way, per chip: `size` chips after
        `inner` chips of faster-varying axes. Across GPU hosts each GPU's share of the network times
        the axis's GPUs on one host (`hardware.hosts.axis_network_bytes_per_s`, as the estimate)."""
        gpus = self.gpus_per_host
        if gpus is None:
            return self.link_bytes_per_s * axis_links(size, self.torus, self.wraparound, inner)
        within = gpus % (size * inner) == 0
        assert self.network_bytes_per_s is not None
        if within:
            return self.link_bytes_per_s
        on_one_host = min(size, max(1, gpus // inner))
        return axis_network_bytes_per_s(self.network_bytes_per_s, on_one_host, self.link_bytes_per_s)


@dataclass(frozen=True)
class Modelled:
    """The analytic model's figures for one candidate, per chip."""

    candidate: Candidate
    memory_bytes: int
    weights_bytes: int  # parameters + optimizer + gradients
    activation_bytes: int
    flops: float
    comm_bytes: tuple[tuple[str, float], ...]  # (mesh axis, bytes sent per step)
    t_math_s: float
    t_comm_s: tuple[tuple[str, float], ...]  # (mesh axis, seconds)
    fits: bool
    t_host_s: float = 0.0  # remat's offloaded activations to the host's memory and back

    @property
    def t_rank_s(self) -> float:
        """What candidates are ranked by: the bound plus a quarter of what it assumes hidden (the
        roofline alone ties every compute-bound layout; real steps overlap communication only in part)."""
        return self.t_bound_s + 0.25 * min(self.t_math_s, self.t_transfers_s)

    def rank_tokens_per_s_per_chip(self, seq: int) -> float:
        c = self.candidate
        return c.global_batch * seq / c.chips / self.t_rank_s

    @property
    def t_transfers_s(self) -> float:
        """The axes' T_comm summed + T_host: the transfers one after another, as the estimate queues them."""
        return sum(t for _, t in self.t_comm_s) + self.t_host_s

    @property
    def t_bound_s(self) -> float:
        """max(T_math, T_comm + T_host), as the step-time estimate bounds a step."""
        return max(self.t_math_s, self.t_transfers_s)

    @property
    def bound(self) -> str:
        axis, largest = max(self.t_comm_s, key=lambda x: x[1], default=("", 0.0))
        if self.t_math_s >= self.t_transfers_s:
            return "math"
        return "host" if self.t_host_s >= largest else axis

    def tokens_per_s_per_chip(self, seq: int) -> float:
        c = self.candidate
        return c.global_batch * seq / c.chips / self.t_bound_s


def axis_links(axis_size: int, torus: tuple[int, ...], wraparound: tuple[bool, ...], inner: int) -> float:
    """How many one-way links' worth of bandwidth a mesh axis has for a ring collective.

    The axis takes `axis_size` chips after `inner` chips of faster-varying axes (mesh axes are laid
    along the torus dimensions in order, the innermost first). Each torus dimension it spans fully
    gives a bidirectional ring (2 links; 1 without wraparound); one it spans in part gives 1.
    """
    links = 0.0
    remaining_inner, remaining = inner, axis_size
    for dim, wrap in zip(torus, wraparound, strict=True):
        if remaining <= 1:
            break
        if remaining_inner >= dim:
            remaining_inner //= dim
            continue
        free = dim // max(remaining_inner, 1)
        take = math.gcd(free, remaining)
        remaining_inner = 1
        if take > 1:
            links += (2.0 if wrap else 1.0) if take == dim else 1.0
            remaining //= take
    return max(links, 1.0)


def model_candidate(cfg: DecoderConfig, c: Candidate, chip: ChipFigures, efficiency: float) -> Modelled:
    """The analytic figures of one candidate (see the module's docstring)."""
    dp, fs, sp, tp = (c.mesh.size(a) for a in ("data", "fsdp", "sequence", "tensor"))
    d, f, hd = cfg.d_model, cfg.mlp_dim, cfg.head_dim
    heads_split = tp if cfg.heads % tp == 0 else 1
    kv_split = tp if cfg.kv_heads % tp == 0 else 1
    params = cfg.parameters()
    layer = cfg.layer_parameters()
    weight_split = fs * tp
    weights = 16 * params / weight_split  # f32 params, two f32 moments, f32 gradients
    tokens = c.global_batch * cfg.seq / (dp * fs * sp)  # tokens each chip's activations hold
    act_embed = d / tp if c.rule_set == "fsdp-tp-sp" else d
    qkv = (cfg.heads / heads_split + 2 * cfg.kv_heads / kv_split) * hd
    mlp = f * (2 if cfg.gated else 1) / tp
    policy = parse_policy(c.remat)
    widths = _activation_widths(cfg, act_embed, heads_split, kv_split, tp)
    # Saved per token and layer (elements, bf16). Each layer's input is kept under any policy but one
    # that offloads it (decoder_layer_input=offload); the counts were fitted to compiles of 7B (none)
    # and 32B (minimal) on v5p-128 and 22B (full) on v4-128.
    if not policy.remat:  # everything, the norms' gathered outputs whole where the residual is split
        split_residual = c.rule_set == "fsdp-tp-sp"
        residual = d + 8 * d / tp if split_residual else 10 * d
        # the MLP's gate, up, activation and its derivative's inputs: about 6 of width f / tensor
        saved = qkv + 6 * f / tp + cfg.heads / heads_split * hd + residual
        offloaded = 0.0
    else:  # the layer's input, and what the policy keeps (`minimal`: every projection, qkv + mlp + 3 x embed)
        offloaded = sum(w for name, w in widths.items() if policy.on_host(name))
        saved = sum(w for name, w in widths.items() if policy.kept(name) and name != "decoder_layer_input")
        saved += 0.0 if policy.on_host("decoder_layer_input") else act_embed
    activations = 2 * tokens * saved * cfg.layers
    host_bytes = 2 * (2 * tokens * offloaded * cfg.layers)  # written in the forward, read in the backward
    working = tokens * (qkv + 2 * mlp + 4 * d) * 2  # one layer's intermediates, bf16
    # the bf16 logits kept for the backward pass and their bf16 gradient (the float32 cast is fused
    # into the loss; MaxText's logits_dot_in_fp32 False): 4 bytes an element, as compiled
    logits = 4 * tokens * cfg.vocab / tp
    gathered = 2 * 2 * layer / tp  # one layer's weights gathered in bf16, and the next one's
    memory = int(weights + activations + working + logits + gathered)

    blocks = 1  # dot attention's query blocks; a flash kernel skips the masked scores tile by tile
    while blocks < 8 and cfg.seq % (blocks * 2) == 0 and cfg.seq // (blocks * 2) >= 256:
        blocks *= 2
    if cfg.attention == "flash" and chip.gpus_per_host is None:  # splash: whole blocks of 512
        splash_blocks = cfg.seq // min(SPLASH_BLOCK, cfg.seq)
        causal = (splash_blocks + 1) / (2 * splash_blocks)
    elif cfg.attention == "flash":  # cuDNN's kernel: the visible scores
        causal = causal_share(cfg.seq, cfg.seq)
    else:
        causal = (blocks + 1) / (2 * blocks)
    attention = 4 * cfg.layers * cfg.heads * hd * cfg.seq * causal  # forward, per token
    forward = 2 * params + attention
    recompute = _recompute(cfg, policy, attention, forward)
    flops = (3 * forward + recompute) * c.global_batch * cfg.seq / c.chips
    padding = 0.0  # splash attention's matmuls over the head dim, padded to a wider MXU (v6e's 256)
    if cfg.attention == "flash" and chip.mxu_width and hd < chip.mxu_width:
        padding = 4 * attention * (chip.mxu_width / hd - 1) * c.global_batch * cfg.seq / c.chips

    comm: dict[str, float] = {}
    if fs > 1:  # weights gathered forward (and again for remat's backward), gradients reduce-scattered
        gathers = 2 if policy.remat else 1
        comm["fsdp"] = (2 * gathers + 4) * params / tp * (fs - 1) / fs
    if dp > 1:
        comm["data"] = 2 * 4 * params / weight_split * (dp - 1) / dp
    if tp > 1:
        passes = 5 if policy.remat else 4
        passes += 1 if policy.name == "full" else 0
        comm["tensor"] = passes * 2 * (tp - 1) / tp * tokens * d * 2 * cfg.layers
    if sp > 1:
        comm["sequence"] = 3 * 2 * tokens * 2 * cfg.kv_heads / kv_split * hd * (sp - 1) * cfg.layers
    inner = 1
    t_comm = []
    for axis in reversed(c.mesh.axes):
        size = c.mesh.ici_size(axis)  # within one slice (the whole axis on one slice)
        if axis in comm:
            across = c.mesh.dcn_size(axis) > 1 and chip.dcn_bytes_per_s is not None
            rate = chip.dcn_bytes_per_s if across else chip.axis_bytes_per_s(size, inner)
            assert rate is not None
            t_comm.append((axis, comm[axis] / rate / efficiency))
        inner *= size
    return Modelled(
        candidate=c,
        memory_bytes=memory,
        weights_bytes=int(weights),
        activation_bytes=int(activations),
        flops=flops,
        comm_bytes=tuple(comm.items()),
        t_math_s=(flops + padding) / chip.peak_flops / efficiency,
        t_comm_s=tuple(t_comm),
        fits=memory <= HEADROOM * chip.usable_bytes,
        t_host_s=host_bytes / chip.host_bytes_per_s / efficiency
        if host_bytes and chip.host_bytes_per_s
        else 0.0,
    )


def _activation_widths(
    cfg: DecoderConfig, act_embed: float, heads_split: int, kv_split: int, tp: int
) -> dict[str, float]:
    """Each named activation's elements per token and layer on one chip (`specs.remat.ACTIVATION_NAMES`)."""
    q = cfg.heads / heads_split * cfg.head_dim
    kv = cfg.kv_heads / kv_split * cfg.head_dim
    mlp = dict.fromkeys(mlp_names(cfg.gated), cfg.mlp_dim / tp)
    return {
        "decoder_layer_input": act_embed,
        "query_proj": q,
        "key_proj": kv,
        "value_proj": kv,
        "context": q,
        "out_proj": act_embed,
        **mlp,
        "mlpwo": act_embed,
    }


def _recompute(cfg: DecoderConfig, policy: RematPolicy, attention: float, forward: float) -> float:
    """FLOPs per token the backward pass recomputes: the attention always (its kernels, or its
    recomputed blocks, redo the scores), and the projections the policy neither keeps nor offloads
    (`full`: the whole forward; `minimal`: 5% of it, the norms and activations)."""
    if not policy.remat:
        return attention
    if policy.name == "full":
        return forward
    d, hd = cfg.d_model, cfg.head_dim
    dots = {
        "query_proj": 2 * d * cfg.heads * hd,
        "key_proj": 2 * d * cfg.kv_heads * hd,
        "value_proj": 2 * d * cfg.kv_heads * hd,
        "out_proj": 2 * cfg.heads * hd * d,
        **dict.fromkeys(mlp_names(cfg.gated), 2 * d * cfg.mlp_dim),
        "mlpwo": 2 * cfg.mlp_dim * d,
    }
    redone = sum(f for name, f in dots.items() if not policy.kept(name) and not policy.on_host(name))
    return attention + 0.05 * forward + redone * cfg.layers


def chip_figures(
    generation: str,
    topology: tuple[int, ...],
    environ: Mapping[str, str] | None = None,
    network: Figure | None = None,
    slices: int = 1,
) -> ChipFigures:
    """One chip of a target from the hardware table (`shardcli.hardware.chips`), and its torus (on GPUs
    (hosts, GPUs per host), the memory one program may use the pool JAX makes under `environ`, and
    `network`, one GPU's share of the network between hosts: the target's, default the table's; over
    several TPU `slices` one chip's share of the data-center network, `hardware.slices`).

    Raises:
        ShardcliError: a GPU target and a JAX allocator variable JAX would refuse (one line).
    """
    from shardcli.hardware.chips import CHIPS

    chip = CHIPS[generation]
    hbm = int(chip.hbm_bytes.value)
    rates = {
        "peak_flops": chip.bf16_flops.value,
        "hbm_bytes_per_s": chip.hbm_bytes_per_s.value,
        "link_bytes_per_s": chip.link_bytes_per_s.value,
    }
    host = chip.host_bytes_per_s.value if chip.host_bytes_per_s else None
    if chip.platform == "cuda":
        from shardcli.hardware.gpu_memory import read_gpu_pool

        pool = read_gpu_pool(environ or {})
        net = network or chip.network_bytes_per_s
        assert net is not None
        return ChipFigures(
            **rates,
            hbm_bytes=hbm,
            torus=topology if len(topology) == 2 else (1, topology[0]),  # (hosts, GPUs per host)
            wraparound=(False, False),
            usable_bytes=pool.limit_bytes(hbm),
            usable_source=pool.words(chip.label, hbm),
            network_bytes_per_s=net.value,
            host_bytes_per_s=host,
        )
    return ChipFigures(
        **rates,
        hbm_bytes=hbm,
        torus=topology,
        wraparound=tuple(chip.wraps(d, topology) for d in topology),
        usable_bytes=hbm,
        usable_source=chip.hbm_bytes.source,
        host_bytes_per_s=host,
        mxu_width=chip.mxu_width.value if chip.mxu_width else None,
        dcn_bytes_per_s=_dcn(generation) if slices > 1 else None,
    )


def _dcn(generation: str) -> float | None:
    from shardcli.hardware.slices import dcn_figure

    dcn = dcn_figure(generation)
    return dcn.value if dcn is not None else None
