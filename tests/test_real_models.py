"""Real training programs, inspected unmodified: each style of tests/programs/ through the CLI, on a
faked 2x4 CPU mesh and on a TPU target, against a hand-written `jax.jit(...).lower(...).compile()` of
the same step.

Memory (argument, output, temporary and aliased bytes) and the collectives (kinds and counts, from
the hand compile's HLO text) must be equal. FLOPs are compared as the one figure shardcli reads from
a compiled program (`program_analysis.analyze_compiled`: XLA's `cost_analysis()` with every loop
body counted once per trip), applied to the hand compile, and the raw `cost_analysis()['flops']`
(the report's `xla_flops_per_device`, a loop body counted once) must equal the hand compile's.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import pytest
from conftest import run_shardcli
from jax.sharding import AxisType

from shardcli.analysis.program import analyze_compiled
from shardcli.results import documents

# Compiles, processes or whole programs: left out of the quick subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

pytest.importorskip("flax")
pytest.importorskip("equinox")

PROGRAMS = Path(__file__).resolve().parent / "programs"
AXES = ("data", "model")
COLLECTIVE = re.compile(
    r"\b(all-reduce|all-gather|reduce-scatter|collective-permute|all-to-all)(?:-start)?\("
)
TPU = "tpu-v5e:2x4"


def fresh_module(name: str) -> ModuleType:
    """The program imported anew (a module-level mesh is built from the devices of this moment)."""
    path = PROGRAMS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_hand_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import does: dataclasses look their module up
    spec.loader.exec_module(module)
    return module


# --- the hand-written AOT compiles, as each program's author would write them ------------------------


def hand_linen(module: ModuleType, mesh: Any) -> Any:
    step, args = module.make(mesh)
    return step.lower(*args).compile()


def hand_llama(module: ModuleType, mesh: Any) -> Any:
    return module.train_step.lower(*module.inputs(mesh)).compile()


def hand_nnx(module: ModuleType, mesh: Any) -> Any:
    made = module.make()  # its own mesh: jax.make_mesh((2, 4), ("data", "model")), explicit axes
    with jax.set_mesh(made["args"][2].sharding.mesh):  # the NNX script runs under its mesh
        return made["fn"].lower(*made["args"]).compile()


def hand_shard_map(module: ModuleType, mesh: Any) -> Any:
    return module.step.lower(*module.inputs()).compile()


def hand_equinox(module: ModuleType, mesh: Any) -> Any:
    import equinox as eqx

    args = module.inputs(mesh)
    arrays, static = eqx.partition(args, lambda x: isinstance(x, jax.ShapeDtypeStruct))

    def step(arrays: Any) -> Any:  # what eqx.filter_jit traces: the arrays, the rest held static
        return eqx.filter(module.train_step.__wrapped__(*eqx.combine(arrays, static)), eqx.is_array)

    return jax.jit(step).lower(arrays).compile()


def hand_equinox_donating(module: ModuleType, mesh: Any) -> Any:
    """What `eqx.filter_jit(donate="all")` traces: the arrays, every one of them donated."""
    import equinox as eqx

    args = module.inputs(mesh)
    arrays, static = eqx.partition(args, lambda x: isinstance(x, jax.ShapeDtypeStruct))

    def step(arrays: Any) -> Any:
        return eqx.filter(module.train_step.__wrapped__(*eqx.combine(arrays, static)), eqx.is_array)

    return jax.jit(step, donate_argnums=0).lower(arrays).compile()


def hand_haliax(module: ModuleType, mesh: Any) -> Any:
    """`named_jit`'s own lowering under the mesh, as Levanter's trainer runs it. Its `lower` holds
    abstract arrays static (it filters with `eqx.is_array`), so here it is told they are arrays:
    haliax's own code lays the step out, not shardcli's way of calling it inside a trace."""
    import equinox as eqx
    import haliax.partitioning as partitioning

    real = partitioning.is_array, partitioning.is_in_jit
    partitioning.is_array = lambda x: eqx.is_array(x) or isinstance(x, jax.ShapeDtypeStruct)
    # haliax asks whether it is traced by making a zero on the mesh's devices, which compile-only
    # chips cannot: asked of JAX's trace state instead
    from jax._src import core

    partitioning.is_in_jit = lambda: not core.trace_state_clean()
    args = module.inputs(mesh)
    try:
        with jax.set_mesh(mesh):
            return module.train_step.lower(*args).compile()
    finally:
        partitioning.is_array, partitioning.is_in_jit = real


def hand_penzai(module: ModuleType, mesh: Any) -> Any:
    """The trainer's jitted step lowered with the keywords `StatefulTrainer.step` calls it with."""
    made = module.inputs(mesh)
    return made["fn"].lower(*made["args"], **made["kwargs"]).compile()


@dataclass(frozen=True)
class Program:
    module: str
    step: str
    inputs: str
    hand: Callable[[ModuleType, Any], Any]
    own_mesh: bool  # builds its mesh itself (at import or in its maker): no --mesh/--axes needed
    loops: bool  # holds a scan or fori_loop of its own (raw cost_analysis counts its body once)

    def args(self) -> list[str]:
        path = PROGRAMS / f"{self.module}.py"
        given = [f"{path}:{self.step}", "--inputs", f"{path}:{self.inputs}"]
        return given if self.own_mesh else [*given, "--mesh", "2x4", "--axes", ",".join(AXES)]


PROGRAMS_TABLE = [
    pytest.param(Program("linen_fsdp", "train_step", "make", hand_linen, False, True), id="linen-fsdp"),
    pytest.param(
        Program("scanned_llama", "train_step", "inputs", hand_llama, False, True), id="scanned-llama"
    ),
    pytest.param(Program("nnx_explicit", "make_step", "make", hand_nnx, True, False), id="nnx-explicit"),
    pytest.param(
        Program("shard_map_module_mesh", "step", "inputs", hand_shard_map, True, True),
        id="shard-map-own-mesh",
    ),
    pytest.param(Program("equinox_mlp", "train_step", "inputs", hand_equinox, False, False), id="equinox"),
    pytest.param(
        Program("equinox_scanned", "train_step", "inputs", hand_equinox_donating, False, True),
        id="equinox-donate-all-scanned",
    ),
    pytest.param(
        Program("haliax_named", "train_step", "inputs", hand_haliax, False, False),
        id="haliax",
        marks=pytest.mark.skipif(
            tuple(int(x) for x in jax.__version__.split(".")[:2]) >= (0, 11),
            reason="haliax 1.4.dev453, the newest on PyPI, calls jax.core.is_constant_dim, which jax 0.11 "
            "removed: it traces with jax 0.10 only (seen on jax 0.11.2 and 0.12.0.1)",
        ),
    ),
    pytest.param(Program("penzai_named", "train_step", "inputs", hand_penzai, False, False), id="penzai"),
]


def cpu_mesh() -> Any:
    return jax.make_mesh((2, 4), AXES, axis_types=(AxisType.Auto,) * 2, devices=jax.devices()[:8])


@pytest.fixture(scope="module")
def tpu_mesh() -> Any:
    """The v5e 2x4 topology's mesh, laid along the torus."""
    pytest.importorskip("libtpu", reason="the tpu extra")
    from jax.experimental import topologies

    from shardcli.analysis.target import quiet_native_logs

    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # as shardcli's target session sets it
    with quiet_native_logs():
        topology = topologies.get_topology_desc(topology_name="v5e:2x4", platform="tpu")
    return topologies.make_mesh(topology, (2, 4), AXES)


@contextlib.contextmanager
def own_meshes_on(mesh: Any) -> Iterator[None]:
    """A program's own `jax.make_mesh` of the mesh's shape gets its chips: how its author would point
    it at the TPU."""
    real = jax.make_mesh

    def on_the_chips(shape: Any, names: Any, *args: Any, **kwargs: Any) -> Any:
        made = real(shape, names, *args, **{**kwargs, "devices": jax.devices()[:8]})
        return jax.sharding.Mesh(mesh.devices, made.axis_names, axis_types=made.axis_types)

    jax.make_mesh = on_the_chips  # type: ignore[assignment]
    try:
        yield
    finally:
        jax.make_mesh = real


def inspect_doc(cli: Any, args: list[str]) -> dict[str, Any]:
    out = cli(["inspect", *args, "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert documents.document_problems(doc) == []
    return doc


def collectives_of(compiled: Any) -> Counter[str]:
    return Counter(COLLECTIVE.findall(compiled.as_text()))


def assert_same_program(
    doc: dict[str, Any], hand: Any, mesh: Any, loops: bool, async_fusions: bool = False
) -> None:
    memory = hand.memory_analysis()
    assert doc["program"]["memory"] | {"code_bytes": 0, "total_bytes": 0} == {
        "argument_bytes": memory.argument_size_in_bytes,
        "output_bytes": memory.output_size_in_bytes,
        "temp_bytes": memory.temp_size_in_bytes,
        "alias_bytes": memory.alias_size_in_bytes,
        "code_bytes": 0,
        "total_bytes": 0,
        "host_bytes": memory.host_temp_size_in_bytes
        + memory.host_argument_size_in_bytes
        + memory.host_output_size_in_bytes
        - memory.host_alias_size_in_bytes,
        "host_transfer_bytes": 2 * memory.host_temp_size_in_bytes
        + memory.host_argument_size_in_bytes
        + memory.host_output_size_in_bytes,
    }
    assert doc["program"]["flops_per_device"] == analyze_compiled(hand, mesh).flops
    assert doc["program"]["xla_flops_per_device"] == hand.cost_analysis()["flops"]  # XLA's raw figure
    assert doc["program"]["flops_per_device"] >= hand.cost_analysis()["flops"]
    if loops:  # the scan, nn.scan or fori_loop bodies count once per trip
        assert doc["program"]["flops_per_device"] > hand.cost_analysis()["flops"]
    ours, text = Counter(c["kind"] for c in doc["program"]["collectives"]), collectives_of(hand)
    if async_fusions:
        # a TPU async collective's name appears in its start, its carried-on copies and its done
        # fusions (analysis.exposed reads it as one transfer): the same kinds, each at most as often
        assert set(ours) == set(text) and all(ours[k] <= text[k] for k in ours), (ours, text)
    else:
        assert ours == text


@pytest.mark.every_variant  # each style is a framework, whose version differs between the suites
@pytest.mark.parametrize("program", PROGRAMS_TABLE)
def test_each_style_inspects_unmodified_as_the_hand_aot_compiles_it(cli, program):
    doc = inspect_doc(cli, program.args())
    hand = program.hand(fresh_module(program.module), cpu_mesh())
    assert_same_program(doc, hand, cpu_mesh(), program.loops)
    assert doc["mesh"]["shape"] == [2, 4] and doc["mesh"]["axes"] == list(AXES)


def screen(cli: Any, args: list[str], columns: int) -> list[str]:
    out = cli(["inspect", *args, "--no-color"], env={"COLUMNS": str(columns)})
    assert out.exit_code == 0, out.output
    return out.stdout.splitlines()


def assert_one_screen(lines: list[str]) -> None:
    """At most 60 lines of at most 100 columns; long pytree paths shortened, never stacked as
    `column  value` records."""
    assert len(lines) <= 60, "\n".join(lines)
    assert all(len(line) <= 100 for line in lines)
    assert not any(line.startswith("argument  ") for line in lines), "\n".join(lines)


@pytest.mark.parametrize("program", PROGRAMS_TABLE)
def test_each_style_inspects_for_a_tpu_target_as_the_hand_aot_compiles_it(cli, program, tpu_mesh):
    from shardcli.runtime.cache import unreadable_entries_compiled_again

    doc = inspect_doc(cli, [*program.args(), "--target", TPU])
    # A compile-only client cannot load an executable from the persistent cache, which JAX reads
    # once a process has used it (jax 0.12 warns and compiles again), as for shardcli's own compiles.
    with own_meshes_on(tpu_mesh), unreadable_entries_compiled_again():
        hand = program.hand(fresh_module(program.module), tpu_mesh)
    assert_same_program(doc, hand, tpu_mesh, program.loops, async_fusions=True)
    assert doc["runtime"]["device_kind"] == "TPU v5 lite"


@pytest.mark.parametrize("program", PROGRAMS_TABLE)
def test_each_styles_default_view_on_a_tpu_target_is_one_screen_at_100_columns(cli, program, tpu_mesh):
    """The longer of the two views (a target adds its verdict and step time); the CPU mesh's is the
    same less those lines."""
    assert_one_screen(screen(cli, [*program.args(), "--target", TPU], 100))


def test_long_paths_are_shortened_told_apart_not_stacked_at_80_columns(cli):
    lines = screen(cli, PROGRAMS_TABLE[0].values[0].args(), 80)
    table = lines[lines.index(next(x for x in lines if x.startswith("arguments:"))) + 1 :]
    rows = [x.split()[0] for x in table[1:9]]
    assert len(set(rows)) == len(rows) and all(len(x) <= 80 for x in lines)
    # `['layers']['down']` written as `.layers.down`; mu and nu still told apart
    assert "state.opt_state[0].mu.layers.down.kernel.value" in rows, rows
    assert "state.opt_state[0].nu.layers.down.kernel.value" in rows, rows


def test_a_thin_wrapper_over_the_users_model_file_blames_the_model_file(cli):
    """Every collective the model makes has its line in the model's file (equinox_scanned.py), not
    in the named script that calls it (thin_wrapper.py): the user's files are all files outside the
    installed packages."""
    path = PROGRAMS / "thin_wrapper.py"
    doc = inspect_doc(
        cli, [f"{path}:train_step", "--inputs", f"{path}:inputs", "--mesh", "2x4", "--axes", ",".join(AXES)]
    )
    sources = {c["source"] for c in doc["program"]["collectives"]}
    assert sources and all(s.startswith(str(PROGRAMS / "equinox_scanned.py")) for s in sources), sources
    # the user's whole stack, innermost first, each frame once: the model's lines, then the wrapper's
    for c in doc["program"]["collectives"]:
        assert c["stack"][0] == c["source"] and c["stack"][-1].startswith(str(path)), c["stack"]
        assert len(set(c["stack"])) == len(c["stack"])


@pytest.mark.parametrize(
    ("program", "fed_back"),
    [
        pytest.param(PROGRAMS_TABLE[5].values[0], 19, id="equinox-donate-all-scanned"),
        pytest.param(PROGRAMS_TABLE[6].values[0], 46, id="haliax", marks=PROGRAMS_TABLE[6].marks),
        pytest.param(PROGRAMS_TABLE[7].values[0], 65, id="penzai-by-keywords"),
    ],
)
def test_each_new_style_runs_timed_with_its_donations_fed_back(cli, program, fed_back):
    """`--run` calls the step as its framework does (equinox's filter, haliax's named_jit, penzai's
    keywords) on generated inputs, feeding each donated array the result that replaces it."""
    doc = inspect_doc(cli, [*program.args(), "--run", "--warmup", "1", "--iters", "2"])
    assert len(doc["timing"]["samples_s"]) == 2
    assert doc["donation"]["fed_back_arrays"] == fed_back, doc["donation"]


@pytest.mark.parametrize("program", PROGRAMS_TABLE[5:])
def test_each_new_styles_collectives_point_into_its_own_file(cli, program):
    """Haliax's and penzai's layers are library code: each collective's line is the user's line that
    called into them, in the program's file."""
    doc = inspect_doc(cli, program.args())
    sources = [c["source"] for c in doc["program"]["collectives"]]
    assert sources and all(s.startswith(str(PROGRAMS / program.module)) for s in sources), sources


def test_a_wrapper_that_cannot_lower_is_named_with_what_to_hand_over(cli, tmp_path):
    """Another library's jit wrapper whose own `lower` refuses: one line naming the wrapper and what
    to give instead, exit 2 (an error in the library, not in the user's file: no traceback)."""
    package = tmp_path / "site-packages" / "fakewrap"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "class Wrapped:\n"
        "    def __init__(self, fn):\n"
        "        self.__wrapped__ = fn\n"
        "    def __call__(self, *args):\n"
        "        return self.__wrapped__(*args)\n"
        "    def lower(self, *args):\n"
        "        raise ValueError('lowers only on Tuesdays')\n"
    )
    program = tmp_path / "prog.py"
    program.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(package.parent)!r})\n"
        "import jax\n"
        "from fakewrap import Wrapped\n"
        "step = Wrapped(lambda x: x * 2)\n"
        "def inputs(mesh):\n"
        "    return (jax.ShapeDtypeStruct((8,), 'float32'),)\n"
    )
    out = cli(["inspect", f"{program}:step", "--inputs", f"{program}:inputs", "--mesh", "2"])
    assert out.exit_code == 2, out.output
    assert out.stderr.strip().splitlines() == [
        f"shardcli: error: JAX could not compile {program}:step: ValueError: lowers only on Tuesdays "
        f"({program}:step is fakewrap's Wrapped; hand over the function it wraps (`.__wrapped__`), or a "
        'jax.jit of it, as --inputs\' "fn")'
    ]


def test_the_arguments_keep_their_pytree_paths_and_key_types(cli):
    doc = inspect_doc(cli, PROGRAMS_TABLE[1].values[0].args())
    names = {a["name"]: a for a in doc["arguments"]}
    assert names["key"]["dtype"] == "key<rbg>" and names["key"]["bytes_per_device"] == 16  # 4 uint32 words
    assert "params.layers.wq" in names and "opt.mu.layers.w_down" in names
    # donate_argnums=(0, 1): most of the new params and optimizer state are written over the old
    donated = sum(a["bytes_per_device"] for n, a in names.items() if n.startswith(("params.", "opt.")))
    assert 0.9 * donated < doc["program"]["memory"]["alias_bytes"] <= donated


def test_linen_partitioned_params_compile_as_under_plain_jit_not_under_a_context_mesh(cli):
    """The check above can fail: under `jax.set_mesh` flax constrains every boxed parameter it
    reads, and the program is another one (more temporaries)."""
    module = fresh_module("linen_fsdp")
    step, args = module.make(cpu_mesh())
    plain = step.lower(*args).compile().memory_analysis().temp_size_in_bytes
    with jax.set_mesh(cpu_mesh()):
        under_mesh = step.lower(*args).compile().memory_analysis().temp_size_in_bytes
    assert plain != under_mesh
    doc = inspect_doc(cli, PROGRAMS_TABLE[0].values[0].args())
    assert doc["program"]["memory"]["temp_bytes"] == plain


def test_a_module_that_builds_its_mesh_at_import_in_a_fresh_process():
    """The real start-up path: the 8 devices are faked before the file is imported, so its
    module-level jax.make_mesh((2, 4), ...) works."""
    program = PROGRAMS_TABLE[3].values[0]
    done = run_shardcli("inspect", *program.args(), "--format", "json", timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["mesh"]["axes"] == list(AXES) and doc["runtime"]["device_count"] == 8
    assert Counter(c["kind"] for c in doc["program"]["collectives"]) == {"collective-permute": 1}
    hand = hand_shard_map(fresh_module(program.module), None)
    assert doc["program"]["memory"]["argument_bytes"] == hand.memory_analysis().argument_size_in_bytes
    assert doc["program"]["flops_per_device"] == analyze_compiled(hand).flops


def test_the_python_api_takes_nnx_state_on_an_abstract_mesh_with_typed_keys():
    import shardcli

    module = fresh_module("nnx_explicit")
    made = module.make()
    mesh = made["args"][2].sharding.mesh
    report = shardcli.inspect(made["fn"], *made["args"], mesh=mesh)
    with jax.set_mesh(mesh):
        hand = made["fn"].lower(*made["args"]).compile()
    assert report.memory.temp_bytes == hand.memory_analysis().temp_size_in_bytes
    keys = [a for a in report.result.arguments if a.dtype == "key<fry>"]
    assert keys and all(a.bytes_per_device == 8 for a in keys)  # threefry: 2 uint32 words


if __name__ == "__main__":  # pragma: no cover - a helper to look at one program's report
    sys.exit(pytest.main([__file__, "-q"]))
