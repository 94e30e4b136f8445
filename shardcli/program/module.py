"""`shardcli inspect PATH.hlo.txt --target gpu-h200:8`: the report of a module compiled elsewhere.

A job on a real cluster writes its optimized HLO (`compiled.as_text()`, or XLA_FLAGS=--xla_dump_to's
`*.after_optimizations.txt`); this reads it on a laptop through the one analysis every command uses
(`program_analysis.analyze_text`): collectives with their mesh axes and source lines, loops and
their trips, FLOPs (the library kernels a GPU calls included), bytes, and the step-time estimate for
the target. What only a compile knows (memory, the fit verdict, the arguments' shardings) is said to
be missing in one line. Nothing is compiled; the target's compiler only describes its devices.
"""

from __future__ import annotations

import gzip
from pathlib import Path

from shardcli.analysis.hlo.header import (
    entry_parameter_bytes,
    module_partitions,
    module_platform,
    module_problem,
)
from shardcli.analysis.program import analyze_text, program_cost
from shardcli.errors import ShardcliError
from shardcli.hardware.targets import TargetSpec
from shardcli.program.inspect import (
    InspectRequest,
    InspectResult,
    ModuleFacts,
    hardware_for,
    step_time_for,
    with_roles,
)

PLATFORM_WORDS = {"cuda": "a GPU", "tpu": "a TPU", "cpu": "the CPU"}  # "compiled for a GPU"
# The one line of what a module's text cannot say.
ONLY_A_COMPILE_KNOWS = (
    "memory (memory_analysis(): temporaries, outputs, aliasing), the fit verdict, the arguments' "
    "shardings and the sharding findings: only a compile knows them; read from a module's text"
)
# Far beyond any real module (a 7B train step's text is 1 MB); a file this big is not one.
MAX_MODULE_BYTES = 1 << 30


def read_module(path_text: str) -> str:
    """The module's text (gunzipped where the name ends in .gz).

    Raises:
        ShardcliError: no such file, unreadable, too big, or not an optimized HLO module (one line).
    """
    path = Path(path_text)
    if not path.is_file():
        raise ShardcliError(
            f"inspect {path_text}: no such file; give the text of a compiled module (compiled.as_text(), "
            "or the *.after_optimizations.txt that XLA_FLAGS=--xla_dump_to=DIR writes)"
        )
    try:
        size = path.stat().st_size
        if size > MAX_MODULE_BYTES:
            raise ShardcliError(f"inspect {path_text}: {size:,} bytes is no module's text")
        raw = path.read_bytes()
        if path.name.lower().endswith(".gz"):
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8")
    except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError) as error:
        raise ShardcliError(
            f"inspect {path_text}: cannot read it ({type(error).__name__}: {error})"
        ) from None
    problem = module_problem(text)
    if problem is not None:
        raise ShardcliError(
            f"inspect {path_text} is not an optimized HLO module: {problem}; give compiled.as_text() or "
            "the *.after_optimizations.txt that XLA_FLAGS=--xla_dump_to=DIR writes"
        )
    return text


def check_module_target(path: str, text: str, target: TargetSpec) -> tuple[str | None, int]:
    """(the platform the module was compiled for, its devices), checked against the target.

    Raises:
        ShardcliError: a module compiled for another platform, or for another number of devices.
    """
    platform = module_platform(text)
    wanted = target.generation.platform
    if platform is not None and platform != wanted:
        raise ShardcliError(
            f"inspect {path} was compiled for {PLATFORM_WORDS[platform]}, but --target {target.name} is "
            f"{PLATFORM_WORDS[wanted]}; give a target of the hardware it was compiled for"
        )
    partitions = module_partitions(text)
    if partitions != target.chips:
        raise ShardcliError(
            f"inspect {path} was compiled for {partitions} device(s) (num_partitions={partitions}), but "
            f"--target {target.name} has {target.chips}; give a target of {partitions} "
            f"{target.generation.chip}s"
        )
    return platform, partitions


def inspect_module(request: InspectRequest) -> InspectResult:
    """The report of a compiled module's text on `request.compile_target`.

    Raises:
        ShardcliError: no target, an unreadable file, a text that is no optimized module, a module
            of another platform or device count, a mesh that is no reshape of the target's chips.
    """
    from shardcli.analysis.target import open_target_session

    path = request.target
    target = request.compile_target
    if target is None:  # the request builder refuses it first; kept for the Python API
        raise ShardcliError(f"inspect {path} reads a compiled module: give --target, the hardware it ran on")
    text = read_module(path)
    platform, partitions = check_module_target(path, text, target)
    session = open_target_session(target, request.mesh_text, request.axes_text, request.options)
    count, argument_bytes = entry_parameter_bytes(text)
    module = ModuleFacts(path, platform, partitions, count, argument_bytes)
    mesh = session.mesh
    analysis = analyze_text(
        text,
        tuple(mesh.devices.shape),
        tuple(str(a) for a in mesh.axis_names),
        missing=(ONLY_A_COMPILE_KNOWS,),
        text_source=f"read from {path}",
        user_files=(),
    )
    analysis = with_roles(analysis, (), ())
    dtype = analysis.dot_dtype or "float32"
    hardware = hardware_for(session, dtype, request.peak_tflops, request.link_gbps)
    return InspectResult(
        session=session,
        target=path,
        arguments=(),
        results=(),
        analysis=analysis,
        model=program_cost(analysis, hardware),
        hardware=hardware,
        findings=(),
        lower_s=0.0,
        compile_s=0.0,
        step=step_time_for(analysis, session, dtype, request.peak_tflops, request.link_gbps),
        module=module,
    )
