"""The decoder-only transformer `shardcli plan` lays out: its shape, presets and parameters. Pure Python.

A `DecoderConfig` holds what decides the program's cost: layers, widths, heads, vocabulary, sequence
length and the MLP's activation. `PRESETS` carries published shapes (Llama 2/3, Gemma) and the MaxText
shapes its published TPU measurements used (`maxtext_scale`: the Dec-2023 base.yml scaled by
global_parameter_scale). `parameter_table` lists every parameter with its shape and logical axis
names, the names a layout maps to mesh axes; the JAX program lives in `shardcli/plan/decoder.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from shardcli.errors import ShardcliError

ACTIVATIONS = ("swiglu", "geglu", "relu")  # gated SiLU (Llama), gated GELU (Gemma), plain ReLU (MaxText 2023)
# How attention is computed: "dot" writes the scores to HBM as XLA fuses the einsums and the softmax
# (MaxText's `dot_product`); "flash" is a fused kernel whose scores never leave the chip (on GPUs
# cuDNN's flash attention, MaxText's `cudnn_flash_te`; on TPUs Pallas splash attention, MaxText's
# `flash`).
ATTENTIONS = ("dot", "flash")
SPLASH_BLOCK = 512  # MaxText's sa_block_* defaults: splash attention's query and key blocks
# Logical axis names of parameters and activations (MaxText's vocabulary).
PARAM_AXES = ("vocab", "embed", "heads", "kv_heads", "head_dim", "mlp", "layers", "norm")
ACTIVATION_AXES = ("batch", "length", "act_embed", "act_heads", "act_kv_heads", "act_mlp", "act_vocab")
LOGICAL_AXES = PARAM_AXES + ACTIVATION_AXES


@dataclass(frozen=True)
class DecoderConfig:
    """The shape of a decoder-only transformer and the sequences it trains on."""

    name: str
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp_dim: int
    vocab: int
    seq: int
    activation: str = "swiglu"
    tied_embeddings: bool = False
    source: str = ""  # where the shape comes from
    attention: str = "dot"  # one of ATTENTIONS: how the program computes attention, not the shape

    @property
    def gated(self) -> bool:
        return self.activation != "relu"

    @property
    def describe(self) -> str:
        return (
            f"{self.name}: {self.layers} layers, d_model {self.d_model}, {self.heads} heads "
            f"({self.kv_heads} kv) x {self.head_dim}, mlp {self.mlp_dim} {self.activation}, "
            f"vocab {self.vocab}, seq {self.seq}" + (", flash attention" if self.attention == "flash" else "")
        )

    def layer_parameters(self) -> int:
        """Parameters of one layer (attention, MLP and its two norms)."""
        attention = self.d_model * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        mlp = self.d_model * self.mlp_dim * (3 if self.gated else 2)
        return attention + mlp + 2 * self.d_model

    def embedding_parameters(self) -> int:
        """The embedding table, the unembedding when untied, and the final norm."""
        return self.vocab * self.d_model * (1 if self.tied_embeddings else 2) + self.d_model

    def parameters(self) -> int:
        return self.layers * self.layer_parameters() + self.embedding_parameters()

    def maxtext_train_flops_per_token(self) -> float:
        """MaxText's count of one training step's FLOPs per token (`calculate_tflops_training_per_device`
        as of Dec 2023: 6 x parameters + causal attention, 12 L H hd S / 2), the count its published
        TFLOP/s/chip figures divide by."""
        attention = 12 * self.heads * self.layers * self.head_dim * self.seq / 2
        return 6 * self.parameters() + attention


@dataclass(frozen=True)
class ParamInfo:
    """One parameter: its path in the params tree, shape and logical axis names."""

    path: tuple[str, ...]
    shape: tuple[int, ...]
    axes: tuple[str, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def name(self) -> str:
        return "/".join(self.path)


def parameter_table(cfg: DecoderConfig, *, stacked: bool = True) -> tuple[ParamInfo, ...]:
    """Every parameter with its logical axes; the layers' are stacked on a leading `layers` axis
    (`stacked`, as `lax.scan` takes them) or given for one layer."""
    d, h, kv, hd, f = cfg.d_model, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.mlp_dim
    layer = [
        (("attn_norm",), (d,), ("norm",)),
        (("wq",), (d, h, hd), ("embed", "heads", "head_dim")),
        (("wk",), (d, kv, hd), ("embed", "kv_heads", "head_dim")),
        (("wv",), (d, kv, hd), ("embed", "kv_heads", "head_dim")),
        (("wo",), (h, hd, d), ("heads", "head_dim", "embed")),
        (("mlp_norm",), (d,), ("norm",)),
    ]
    if cfg.gated:
        layer.append((("w_gate",), (d, f), ("embed", "mlp")))
    layer += [(("w_up",), (d, f), ("embed", "mlp")), (("w_down",), (f, d), ("mlp", "embed"))]
    out = [ParamInfo(("embed",), (cfg.vocab, d), ("vocab", "embed"))]
    for path, shape, axes in layer:
        if stacked:
            out.append(ParamInfo(("layers",) + path, (cfg.layers,) + shape, ("layers",) + axes))
        else:
            out.append(ParamInfo(("layers",) + path, shape, axes))
    out.append(ParamInfo(("final_norm",), (d,), ("norm",)))
    if not cfg.tied_embeddings:
        out.append(ParamInfo(("unembed",), (d, cfg.vocab), ("embed", "vocab")))
    return tuple(out)


# --- presets --------------------------------------------------------------------------------------

_LLAMA2 = "Llama 2 paper (Touvron et al. 2023), Table 1, and the released config.json"
_LLAMA3 = "Llama 3 released config.json (meta-llama/Meta-Llama-3-8B, -70B)"
_GEMMA = "Gemma report (Gemma Team 2024), Table 1, and the released config.json"
_MAXTEXT = (
    "MaxText base.yml (Dec 2023: emb 2560, 8 heads x 256, mlp 8192 relu, 16 layers, vocab 32768, tied) "
    "scaled by global_parameter_scale"
)


def maxtext_scale(scale: int, seq: int = 2048) -> DecoderConfig:
    """MaxText's Dec-2023 base model at `global_parameter_scale` = scale (a power of two).

    scale = 2^(3b + r): heads and mlp grow by 2^(b + [r > 0]), emb by 2^(b + [r > 1]), layers by 2^b
    (MaxText's pyconfig).
    """
    exponent = int(math.log2(scale))
    if 2**exponent != scale:
        raise ShardcliError(f"global_parameter_scale {scale} is not a power of two; give 1, 2, 4, ... 1024")
    b, r = divmod(exponent, 3)
    wide = 2 ** (b + (r > 0))
    return DecoderConfig(
        name=f"maxtext-{scale}b",
        layers=16 * 2**b,
        d_model=2560 * 2 ** (b + (r > 1)),
        heads=8 * wide,
        kv_heads=8 * wide,
        head_dim=256,
        mlp_dim=8192 * wide,
        vocab=32768,
        seq=seq,
        activation="relu",
        tied_embeddings=True,
        source=f"{_MAXTEXT} = {scale}",
    )


PRESETS: dict[str, DecoderConfig] = {
    c.name: c
    for c in (
        DecoderConfig("llama2-7b", 32, 4096, 32, 32, 128, 11008, 32000, 4096, source=_LLAMA2),
        DecoderConfig("llama2-13b", 40, 5120, 40, 40, 128, 13824, 32000, 4096, source=_LLAMA2),
        DecoderConfig("llama2-70b", 80, 8192, 64, 8, 128, 28672, 32000, 4096, source=_LLAMA2),
        DecoderConfig("llama3-8b", 32, 4096, 32, 8, 128, 14336, 128256, 8192, source=_LLAMA3),
        DecoderConfig("llama3-70b", 80, 8192, 64, 8, 128, 28672, 128256, 8192, source=_LLAMA3),
        DecoderConfig("gemma-2b", 18, 2048, 8, 1, 256, 16384, 256000, 8192, "geglu", True, _GEMMA),
        DecoderConfig("gemma-7b", 28, 3072, 16, 16, 256, 24576, 256000, 8192, "geglu", True, _GEMMA),
        maxtext_scale(16),
        maxtext_scale(32),
        maxtext_scale(64),
        maxtext_scale(128),
        # MaxText's v4 22B (configs/v4/22b.sh): base.yml with emb 6144, 24 heads, mlp 24576, 48 layers.
        DecoderConfig(
            "maxtext-22b",
            48,
            6144,
            24,
            24,
            256,
            24576,
            32768,
            2048,
            "relu",
            True,
            f"{_MAXTEXT}: configs/v4/22b.sh",
        ),
        # A model small enough for tests and --quick benchmarks.
        DecoderConfig("tiny", 2, 64, 4, 2, 16, 128, 256, 32, source="shardcli's test model"),
    )
}
SHAPE_FLAGS = ("layers", "d_model", "heads", "kv_heads", "head_dim", "mlp_dim", "vocab", "seq")
# JAX's integers are 32-bit unless 64-bit mode is on: a trip count, a position or a token id beyond
# this is refused by jit ("An overflow was encountered while parsing an argument").
MAX_SIZE = 2**31 - 1
# The largest array a plan compiles. XLA's TPU compiler aborts the whole process (SIGABRT, exit 134,
# nothing printed) on arrays near 2**60 bytes (its heap simulator, a window's dilated bound past
# 64 bits); 1 PiB is some 5,000 times the largest chip's HBM, so nothing that could fit is refused.
MAX_ARRAY_BYTES = 2**50


def flash_refusal(cfg: DecoderConfig, platform: str, sequence: bool) -> str | None:
    """Why the target's flash kernel cannot run this model (cuDNN's on "cuda", splash attention on
    "tpu"), or None where it can."""
    kernel = "cuDNN's flash attention" if platform == "cuda" else "splash attention"
    if sequence:
        return (
            f"with a sequence axis (--sequence, or sequence in --mesh) {kernel} splits the batch and the "
            "heads, never the queries"
        )
    if platform == "cuda" and not (cfg.head_dim % 8 == 0 and cfg.head_dim <= 256):  # JAX's check
        return f"{kernel} takes a head width that is a multiple of 8 and at most 256, not {cfg.head_dim}"
    if platform == "tpu" and (cfg.seq % min(SPLASH_BLOCK, cfg.seq) or cfg.seq % 128):
        return (
            f"{kernel} runs blocks of {SPLASH_BLOCK} (or the whole sequence, a multiple of 128), "
            f"not {cfg.seq} long"
        )
    return None


def build_config(preset: str | None, **shape: int | str | bool | None) -> DecoderConfig:
    """A preset with the shape flags given on top of it, or a model from the flags alone.

    Raises:
        ShardcliError: an unknown preset, a missing or non-positive size, kv heads that do not
            divide the heads, an unknown activation.
    """
    given: dict[str, Any] = {k: v for k, v in shape.items() if v is not None}
    if preset is not None:
        base = PRESETS.get(preset.lower())
        if base is None:
            raise ShardcliError(f"--preset {preset!r} is not known; choose one of {', '.join(PRESETS)}")
        cfg = replace(base, **given) if given else base
        if given:
            cfg = replace(
                cfg, name=f"{base.name}*", source=f"{base.source}; changed: {', '.join(sorted(given))}"
            )
    else:
        missing = [k for k in SHAPE_FLAGS if k not in given]
        if missing:
            flags = ", ".join("--" + k.replace("_", "-") for k in missing)
            raise ShardcliError(
                f"give --preset NAME or every shape flag; missing {flags} (presets: {', '.join(PRESETS)})"
            )
        given.setdefault("kv_heads", given["heads"])
        cfg = DecoderConfig(name="custom", source="flags", **given)
    for k in SHAPE_FLAGS:
        value = getattr(cfg, k)
        if not isinstance(value, int) or value < 1:
            raise ShardcliError(f"--{k.replace('_', '-')} {value} must be a positive whole number")
        check_size(f"--{k.replace('_', '-')}", value)
    if cfg.heads % cfg.kv_heads:
        raise ShardcliError(
            f"--kv-heads {cfg.kv_heads} must divide --heads {cfg.heads} (grouped-query attention)"
        )
    if cfg.activation not in ACTIVATIONS:
        raise ShardcliError(
            f"--activation {cfg.activation!r} is not known; choose one of {', '.join(ACTIVATIONS)}"
        )
    return cfg


def check_size(flag: str, value: int) -> None:
    """Raises: ShardcliError for a size beyond JAX's 32-bit integers (one line naming the limit)."""
    if value > MAX_SIZE:
        raise ShardcliError(
            f"{flag} {value} is beyond what JAX takes: at most {MAX_SIZE:,} (2**31 - 1; its integers, "
            "positions, token ids and loop counts among them, are 32-bit)"
        )


def largest_array(cfg: DecoderConfig, global_batch: int) -> tuple[str, tuple[int, ...], str]:
    """The train step's largest array at this global batch: (what, its shape, the flags it grows with)."""
    b, s, gated = global_batch, cfg.seq, 2 if cfg.gated else 1
    arrays = [
        ("logits", (b, s, cfg.vocab), "--batch, --seq, --vocab"),
        ("attention scores", (b, cfg.heads, s, s), "--batch, --heads, --seq"),
        ("MLP activations", (b, s, gated * cfg.mlp_dim), "--batch, --seq, --mlp-dim"),
        ("query activations", (b, s, cfg.heads * cfg.head_dim), "--batch, --seq, --heads, --head-dim"),
        ("embedding", (cfg.vocab, cfg.d_model), "--vocab, --d-model"),
        ("MLP weights", (cfg.layers, cfg.d_model, gated * cfg.mlp_dim), "--layers, --d-model, --mlp-dim"),
        (
            "attention weights",
            (cfg.layers, cfg.d_model, cfg.heads * cfg.head_dim),
            "--layers, --d-model, --heads, --head-dim",
        ),
    ]
    return max(arrays, key=lambda a: math.prod(a[1]))


def check_array_sizes(cfg: DecoderConfig, global_batch: int) -> None:
    """Raises: ShardcliError when the train step at `global_batch` (the largest the plan may try) has
    an array over MAX_ARRAY_BYTES in float32, naming it, its shape and the limit."""
    what, shape, flags = largest_array(cfg, global_batch)
    nbytes = 4 * math.prod(shape)
    if nbytes > MAX_ARRAY_BYTES:
        dims = "x".join(map(str, shape))
        raise ShardcliError(
            f"{cfg.name} at global batch {global_batch} (the largest the plan tries): its {what} "
            f"({dims}, 2**{math.log2(nbytes):.0f} bytes in float32) are beyond the 2**50 bytes (1 PiB) "
            f"per array a plan compiles (XLA's TPU compiler aborts near 2**60); make {flags} smaller"
        )


# --- layouts: logical axis names -> mesh axes ---------------------------------------------------

Rules = tuple[tuple[str, tuple[str, ...]], ...]


def resolve_axes(
    logical: tuple[str | None, ...],
    rules: Rules,
    mesh_sizes: dict[str, int],
    shape: tuple[int, ...] | None = None,
) -> tuple[tuple[str, ...], ...]:
    """The PartitionSpec entries (mesh axes per dim) that `rules` give an array with these logical axes.

    A mesh axis of size 1, one already used by an earlier dim, or one that does not divide the dim
    (when `shape` is given) is left out: that dim is replicated over it, as Flax's logical rules do.
    """
    table = dict(rules)
    used: set[str] = set()
    out = []
    for i, name in enumerate(logical):
        axes: list[str] = []
        split = 1
        for axis in table.get(name, ()) if name is not None else ():
            size = mesh_sizes.get(axis, 1)
            if axis in used or axis in axes or size == 1:
                continue
            if shape is not None and shape[i] % (split * size):
                continue
            axes.append(axis)
            split *= size
        used.update(axes)
        out.append(tuple(axes))
    return tuple(out)


def partition_spec_args(entries: tuple[tuple[str, ...], ...]) -> tuple[str | tuple[str, ...] | None, ...]:
    """`resolve_axes`' entries as `PartitionSpec(*args)` takes them: None for a replicated dim, the
    axis for one, the tuple for several."""
    return tuple(e if len(e) > 1 else (e[0] if e else None) for e in entries)


def rules_text(rules: Rules) -> str:
    """`embed=fsdp,mlp=tensor,...` (a logical axis mapped to no mesh axis is left out)."""
    return ",".join(f"{k}={'+'.join(v)}" for k, v in rules if v)


def parse_rules(text: str, flag: str = "--rules") -> Rules:
    """`embed=fsdp,mlp=tensor,batch=data+fsdp` -> rules.

    Raises:
        ShardcliError: a malformed entry.
    """
    out: list[tuple[str, tuple[str, ...]]] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, axes = part.partition("=")
        if not sep or not name.strip():
            raise ShardcliError(
                f"{flag} entry {part!r} is not LOGICAL=MESH_AXIS[+MESH_AXIS]; e.g. embed=fsdp,mlp=tensor"
            )
        mesh_axes = tuple(a.strip() for a in axes.split("+") if a.strip() and a.strip() != "None")
        if len(set(mesh_axes)) != len(mesh_axes):
            raise ShardcliError(
                f"{flag} entry {part!r} names a mesh axis twice; a dimension is split over each axis "
                f"once, e.g. embed=fsdp+tensor"
            )
        if name.strip() in {n for n, _ in out}:
            raise ShardcliError(f"{flag} maps {name.strip()!r} twice; give each logical axis once")
        out.append((name.strip(), mesh_axes))
    if not out:
        raise ShardcliError(f"{flag} {text!r} maps no logical axis; e.g. embed=fsdp,mlp=tensor")
    return tuple(out)
