"""Remat policies of the decoder `shardcli plan` lays out: MaxText's names, and its `custom`. Pure Python.

A policy says which of a layer's activations the backward pass finds kept on the chip, which it finds
offloaded to the host's memory (written there in the forward pass, read back in the backward), and
recomputes the rest. The decoder (`shardcli/plan/decoder.py`) names its activations as MaxText's
decoder layers do (`jax.ad_checkpoint.checkpoint_name`): the layer's input, the query, key and value
projections, the attention's output (`context`), the output projection, the MLP's input projections
(`mlpwi_0` and `mlpwi_1` when gated, `mlpwi` when not) and its output projection (`mlpwo`).

The names and what each keeps follow MaxText's `get_remat_policy` (MaxText/layers/decoders.py):

- `none` keeps everything (no remat); `full` keeps only each layer's input;
- `minimal` keeps every matmul output without batch dimensions (the projections); `minimal_flash` those
  and the attention's output; `minimal_offloaded` offloads what `minimal` keeps;
- `save_dot_with_context_except_mlp`, `save_dot_except_mlpwi`, `save_dot_except_mlp`, `save_qkv_proj`,
  `save_out_proj` keep the named projections; `qkv_proj_offloaded` offloads q, k and v;
- `custom:NAME=WHERE+...` places each named activation: `device` (kept), `offload` (to the host),
  `remat` (recomputed, what an unnamed one gets), as MaxText's `remat_policy=custom` with
  `query_proj=offload` and the like.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardcli.errors import ShardcliError

# The activations a decoder layer names (MaxText's names, in the order a layer makes them).
ACTIVATION_NAMES = (
    "decoder_layer_input",
    "query_proj",
    "key_proj",
    "value_proj",
    "context",
    "out_proj",
    "mlpwi_0",
    "mlpwi_1",
    "mlpwi",
    "mlpwo",
)
PLACES = ("device", "offload", "remat")  # MaxText's RematTensorConfigValue
SEARCHED = ("none", "minimal", "full")  # what `plan` tries when --remat is not given
CUSTOM = "custom:"
_QKV = ("query_proj", "key_proj", "value_proj")
_ALL_DOTS = ("query_proj", "key_proj", "value_proj", "out_proj", "mlpwi_0", "mlpwi_1", "mlpwi", "mlpwo")


def mlp_names(gated: bool) -> tuple[str, ...]:
    """The MLP's input projections a model makes: gate and up of a gated MLP, one of a plain one."""
    return ("mlpwi_0", "mlpwi_1") if gated else ("mlpwi",)


@dataclass(frozen=True)
class RematPolicy:
    """What one policy keeps (`saved`), offloads to the host (`offloaded`) and recomputes.

    `dots`: "save" keeps, "offload" offloads, every matmul output without batch dimensions (JAX's
    `checkpoint_dots_with_no_batch_dims` / `offload_dot_with_no_batch_dims`), besides the names.
    """

    name: str
    remat: bool = True  # False: no remat at all (every activation kept)
    saved: tuple[str, ...] = ()
    offloaded: tuple[str, ...] = ()
    dots: str | None = None  # None, "save" or "offload"

    @property
    def offloads(self) -> bool:
        return bool(self.offloaded) or self.dots == "offload"

    def kept(self, name: str) -> bool:
        """Whether the named activation stays on the chip for the backward pass."""
        return not self.remat or name in self.saved or (self.dots == "save" and name in _ALL_DOTS)

    def on_host(self, name: str) -> bool:
        """Whether the named activation is offloaded to the host for the backward pass."""
        return self.remat and (name in self.offloaded or (self.dots == "offload" and name in _ALL_DOTS))


_NAMED = (
    RematPolicy("none", remat=False),
    RematPolicy("minimal", dots="save"),
    RematPolicy("full"),
    RematPolicy("minimal_flash", saved=("context",), dots="save"),
    RematPolicy("minimal_offloaded", dots="offload"),
    RematPolicy("save_dot_with_context_except_mlp", saved=(*_QKV, "context", "out_proj")),
    RematPolicy("save_dot_except_mlpwi", saved=(*_QKV, "out_proj", "mlpwo")),
    RematPolicy("save_dot_except_mlp", saved=(*_QKV, "out_proj")),
    RematPolicy("save_qkv_proj", saved=_QKV),
    RematPolicy("qkv_proj_offloaded", offloaded=_QKV),
    RematPolicy("save_out_proj", saved=("out_proj",)),
)
POLICIES: dict[str, RematPolicy] = {p.name: p for p in _NAMED}
REMAT_POLICIES = tuple(POLICIES)


def valid_words() -> str:
    names = ", ".join(ACTIVATION_NAMES)
    return (
        f"{', '.join(REMAT_POLICIES)}, or {CUSTOM}NAME=WHERE+... (NAME: {names}; WHERE: {'/'.join(PLACES)})"
    )


def parse_policy(text: str) -> RematPolicy:
    """The policy a `--remat` word names: one of POLICIES, or `custom:NAME=WHERE+...`.

    Raises:
        ShardcliError: a word that names no policy, or a custom one with a bad name or place.
    """
    word = text.strip()
    if word in POLICIES:
        return POLICIES[word]
    if not word.startswith(CUSTOM):
        raise ShardcliError(f"--remat {word!r} is not a policy; choose from {valid_words()}")
    places: dict[str, str] = {}
    for part in word[len(CUSTOM) :].split("+"):
        name, _, where = part.partition("=")
        name, where = name.strip(), where.strip()
        if name not in ACTIVATION_NAMES:
            raise ShardcliError(
                f"--remat {word!r}: {name!r} names no activation; name one of {', '.join(ACTIVATION_NAMES)}"
            )
        if where not in PLACES:
            raise ShardcliError(
                f"--remat {word!r}: {name}={where!r} is no place; write {name}=" + "|".join(PLACES)
            )
        if name in places and places[name] != where:
            raise ShardcliError(f"--remat {word!r} places {name} twice ({places[name]} and {where})")
        places[name] = where
    # the layer's input stays on the chip under every policy: `decoder_layer_input=device` changes nothing
    saved = tuple(n for n in ACTIVATION_NAMES if places.get(n) == "device" and n != "decoder_layer_input")
    offloaded = tuple(n for n in ACTIVATION_NAMES if places.get(n) == "offload")
    if not saved and not offloaded:
        return POLICIES["full"]  # every named activation recomputed: what `full` is
    # one spelling (the layer's order, `remat` places left out): two spellings of one policy share
    # a label and a cache entry
    name = CUSTOM + "+".join(f"{n}={places[n]}" for n in ACTIVATION_NAMES if n in (*saved, *offloaded))
    return RematPolicy(name, saved=saved, offloaded=offloaded)
