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


def test_an_unsharded_argument_goes_to_the_mesh_s_platform_not_jax_s_default(monkeypatch):
    """On a GPU host a mesh of faked CPU devices (`--mesh 2x4` beside one GPU) compiled an argument
    with no sharding for JAX's default platform, the GPU: an H200 ran the program while the report said
    CPU. Where the mesh's platform is not JAX's default, such an argument goes to the mesh's first
    device (here JAX's default is made to read "gpu" and the mesh is CPU device 3)."""
    from shardcli.program.jit import compile_program

    mesh = jax.make_mesh((1,), ("d",), axis_types=(AxisType.Auto,), devices=jax.devices()[3:4])
    args = (jax.ShapeDtypeStruct((4,), "float32"),)
    same = compile_program(lambda x: x * 2, args, (), "f", mesh).compiled
    assert {d.id for d in same.input_shardings[0][0].device_set} == {0}  # JAX's default, as jit does
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    moved = compile_program(lambda x: x * 2, args, (), "f", mesh).compiled
    assert {d.id for d in moved.input_shardings[0][0].device_set} == {3}
