"""A framework's jit wrapper compiled exactly as the framework compiles it (issue 54 item 8).

haliax's `named_jit` (Levanter's train step) cannot be lowered on abstract arrays by its own `lower`
(it holds them static), so shardcli calls it whole inside a jit of its own. That outer jit must carry
what named_jit gives its jit: the results' shardings and the donations; left to the compiler, the
results' layout and the pairing of donated buffers with results differed (Levanter's step: 64 bytes
more temporaries per device than Levanter's own `lower(...).compile()`).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import jax
import pytest
from jax.sharding import AxisType
from test_real_models import hand_haliax

pytestmark = pytest.mark.slow

PROGRAM = Path(__file__).resolve().parent / "programs" / "haliax_out_layout.py"
# The module's header less its name: aliasing of donated buffers, layouts, whether the compiler may
# choose the parameters' and results' shardings.
HEADER = re.compile(r"^HloModule \S+, (.*)$", re.M)


@pytest.mark.skipif(
    tuple(int(x) for x in jax.__version__.split(".")[:2]) >= (0, 11),
    reason="haliax 1.4.dev453 traces with jax 0.10 only (jax.core.is_constant_dim)",
)
def test_a_named_jit_step_compiles_as_named_jit_compiles_it():
    from shardcli.program.jit import compile_program

    spec = importlib.util.spec_from_file_location("haliax_out_layout", PROGRAM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.train_step = module.step  # hand_haliax's name for the step
    mesh = jax.make_mesh(
        (2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=jax.devices()[:8]
    )
    hand = hand_haliax(module, mesh)
    ours = compile_program(module.step, module.inputs(mesh), (str(PROGRAM),), "step", mesh).compiled
    assert HEADER.search(ours.as_text()).group(1) == HEADER.search(hand.as_text()).group(1)
    mine, theirs = ours.memory_analysis(), hand.memory_analysis()
    assert (mine.temp_size_in_bytes, mine.output_size_in_bytes, mine.alias_size_in_bytes) == (
        theirs.temp_size_in_bytes,
        theirs.output_size_in_bytes,
        theirs.alias_size_in_bytes,
    )
