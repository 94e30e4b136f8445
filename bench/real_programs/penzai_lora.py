"""penzai notebooks/lora_from_scratch.ipynb: the Gemma LoRA fine-tuning step. The notebook's own
cells (LowRankAdapter, loraify_linears_in_selection, xent_loss_fn) are executed from the fetched
notebook; the pretrained Gemma is replaced by a tiny Gemma-shaped llamalike model built from a config
(gemma_from_pretrained_checkpoint's settings: geglu_approx, tied embeddings, bf16 parameters,
activations upcast to f32), frozen, its attention Linears LoRA-ified (rank 16 -> 4), trained by
`basic_training.StatefulTrainer.build(..., donate_states=True)`'s jitted step. The frozen weights are
laid out as the notebook restores them (the last positional dimension over all devices, where it
divides); LoRA parameters, optimizer state and tokens are replicated.

Sources: $CORPUS_SRC/penzai (google-deepmind/penzai).

    shardcli inspect wrappers/penzai_lora.py:step --inputs wrappers/penzai_lora.py:inputs --mesh 8 --axes x
"""

from __future__ import annotations

import json
import os
import sys

# What bench/real_programs.py reads (without importing this file): the source folder it needs
# under --sources, and the mesh it is inspected on.
SOURCE, MESH, AXES = "penzai", "8", "x"

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("CORPUS_SRC", "/work/corpus/src")
sys.path.insert(0, os.path.join(SRC, "penzai"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from penzai import pz  # noqa: E402
from penzai.models.transformer.variants import llamalike_common  # noqa: E402
from penzai.toolshed import basic_training  # noqa: E402

PAD_ID, BATCH, SEQ = 0, 16, 32
CONFIG = llamalike_common.LlamalikeTransformerConfig(
    num_decoder_blocks=2,
    vocab_size=1024,
    num_kv_heads=1,
    query_head_multiplier=4,
    embedding_dim=256,
    projection_dim=64,
    mlp_hidden_dim=1024,
    parameter_dtype=jnp.bfloat16,
    mlp_variant="geglu_approx",
    tie_embedder_and_logits=True,
    activation_dtype=jnp.float32,
)


def _notebook_namespace():
    """The notebook's definitions, run from its cells (nothing else of it runs)."""
    with open(os.path.join(SRC, "penzai", "notebooks", "lora_from_scratch.ipynb"), encoding="utf-8") as f:
        nb = json.load(f)
    ns = {"pz": pz, "jax": jax, "jnp": jnp, "__name__": "lora_notebook"}
    exec("from __future__ import annotations", ns)
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and (
            "class LowRankAdapter" in src
            or "def loraify_linears_in_selection" in src
            or "def xent_loss_fn" in src
        ):
            exec(compile(src, "lora_from_scratch.ipynb", "exec"), ns)

    class _Vocab:  # the notebook's sentencepiece vocabulary: only pad_id() is read by the loss
        def pad_id(self):
            return PAD_ID

    ns["vocab"] = _Vocab()
    return ns


NB = _notebook_namespace()


def _lora_model():
    model = llamalike_common.build_llamalike_transformer(
        CONFIG, init_base_rng=jax.random.key(0), name="transformer"
    )
    frozen = pz.freeze_params(model)
    lora = NB["loraify_linears_in_selection"](
        pz.select(frozen).at_instances_of(pz.nn.Attention), rank=4, init_base_rng=jax.random.key(123)
    )
    stateless, variables = pz.unbind_variables(lora)
    return stateless, pz.freeze_variables(tuple(variables))


def _place(mesh):
    def frozen(leaf):
        n = mesh.devices.size
        if leaf.ndim and leaf.shape[-1] % n == 0:
            spec = P(*([None] * (leaf.ndim - 1)), tuple(mesh.axis_names))
        else:
            spec = P()
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, spec))

    def replicated(leaf):
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, P()))

    return frozen, replicated


def inputs(mesh):
    optimizer = optax.adamw(5e-5, weight_decay=0.01)

    def start():
        stateless, params = _lora_model()
        return stateless, params, optimizer.init(params)

    stateless, params, opt_state = jax.eval_shape(start)
    frozen, replicated = _place(mesh)
    stateless = jax.tree.map(frozen, stateless)
    params, opt_state = jax.tree.map(replicated, (params, opt_state))
    step_fn = basic_training.StatefulTrainer.build(
        root_rng=jax.random.key(42),
        model=_lora_model_for_build(),
        optimizer_def=optimizer,
        loss_fn=NB["xent_loss_fn"],
        donate_states=True,
    ).step_fn
    tokens = jax.tree.map(
        replicated, jax.eval_shape(lambda: pz.nx.wrap(jnp.zeros((BATCH, SEQ), jnp.int32)).tag("batch", "seq"))
    )
    return {
        "fn": step_fn,
        "args": (),
        "kwargs": {
            "root_rng": jax.eval_shape(lambda: jax.random.key(42)),
            "state": basic_training.InternalTrainerState(
                step=jax.ShapeDtypeStruct((), jnp.int32), opt_state=opt_state, loss_fn_state=None
            ),
            "stateless_model": stateless,
            "trainable_params": params,
            "frozen_params": (),
            "state_vars": (),
            "loss_fn": NB["xent_loss_fn"],
            "optimizer_def": optimizer,
            "kwargs": {"input_examples": tokens},
        },
    }


def _lora_model_for_build():
    # StatefulTrainer.build only reads the model to initialise the optimizer state: a model with no
    # parameters gives it nothing to allocate (the step is then called with the abstract state).
    return pz.nn.Sequential([])


def step(**kwargs):
    raise NotImplementedError("inspect takes the trainer's own step from inputs()")
