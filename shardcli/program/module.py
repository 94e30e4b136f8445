"""`shardcli inspect PATH.hlo.txt --target gpu-h200:8`: the report of a module compiled elsewhere.

A job on a real cluster writes its optimized HLO (`compiled.as_text()`, or XLA_FLAGS=--xla_dump_to's
`*.after_optimizations.txt`); this reads it on a laptop through the one analysis every command uses
(`program_analysis.analyze_text`): collectives with their mesh axes and source lines, loops and
their trips, FLOPs (the library kernels a GPU calls included), bytes, and the step-time estimate for
the target. What only a compile knows (memory, the fit verdict, the arguments' shardings) is said to
be missing in one line. Nothing is compiled; the target's compiler only describes its devices.
"""

from __future__ import annotations

import stat
import zlib
from dataclasses import replace
from pathlib import Path

from shardcli.analysis.hlo.header import (
    entry_parameter_bytes,
    module_partitions,
    module_platform,
    module_problem,
)
from shardcli.analysis.hlo.module import ModuleTextError
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
GZIP_MAGIC = b"\x1f\x8b"
UNKNOWN_COMPILER = "(the module's text does not say which compiler wrote it)"
# Far beyond any real module (a 7B train step's text is 1 MB; examples/gpu_h200's largest is 1.1 MB):
# a text this big is not one, and reading one would hold this much before it is refused.
MAX_MODULE_BYTES = 256 << 20


def read_module(path_text: str) -> str:
    """The module's text (gunzipped where it is a gzip, whatever its name), read in chunks: the limit counts
    the bytes as they are read and inflated, so a small gzip that inflates to gigabytes is refused at
    the limit, never held whole. A UTF-8 byte-order mark before `HloModule` is dropped.

    Raises:
        ShardcliError: no such file, a folder or a FIFO, unreadable, a damaged gzip, too big, or not
            an optimized HLO module (one line).
    """
    path = Path(path_text)
    try:
        mode = path.stat().st_mode  # the file a link points to; never opened unless a regular file
    except OSError:
        raise ShardcliError(
            f"inspect {path_text}: no such file; give the text of a compiled module (compiled.as_text(), "
            "or the *.after_optimizations.txt that XLA_FLAGS=--xla_dump_to=DIR writes)"
        ) from None
    if not stat.S_ISREG(mode):
        what = {stat.S_ISDIR: "a folder", stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket"}
        kind = next((word for test, word in what.items() if test(mode)), "a device")
        raise ShardcliError(
            f"inspect {path_text} is {kind}, not a file; give the file of a compiled module's text"
        )
    try:
        data = _module_bytes(path, MAX_MODULE_BYTES)
        text = data.decode("utf-8-sig")
    except _TooBig as big:
        raise ShardcliError(
            f"inspect {path_text}: it {big.args[0]} more than {MAX_MODULE_BYTES:,} bytes, which is no "
            "module's text"
        ) from None
    except zlib.error as error:
        raise ShardcliError(f"inspect {path_text}: cannot read it: the gzip is damaged ({error})") from None
    except (OSError, EOFError, UnicodeDecodeError) as error:
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


class _TooBig(Exception):
    """The text passed the limit: args[0] says how ("holds", "inflates to")."""


def _module_bytes(path: Path, limit: int) -> bytearray:
    """The file's bytes, inflated where they are a gzip's (its magic bytes, whatever the file's
    name: one member after another, as `gzip -d` reads them), counted as they come and refused past
    `limit` (`_TooBig`).

    Raises:
        _TooBig: more than `limit` bytes.
        zlib.error: a damaged gzip; EOFError: one cut short; OSError: the file cannot be read.
    """
    chunks = bytearray()  # one buffer: a list of chunks joined at the end would hold the text twice
    held = 0
    inflate = None
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            if held == 0 and inflate is None and chunk.startswith(GZIP_MAGIC):
                inflate = zlib.decompressobj(wbits=31)  # 31: a gzip header and trailer
            if inflate is None:
                held += len(chunk)
                if held > limit:
                    raise _TooBig("holds")
                chunks += chunk
                continue
            while chunk:
                out = inflate.decompress(chunk, min(1 << 20, limit + 1 - held))  # 1 MiB at a time
                held += len(out)
                if held > limit:
                    raise _TooBig("inflates to")
                chunks += out
                if not inflate.eof:
                    chunk = inflate.unconsumed_tail
                elif inflate.unused_data.strip(b"\0"):  # another member follows (cat a.gz b.gz)
                    chunk, inflate = inflate.unused_data, zlib.decompressobj(wbits=31)
                else:
                    break
    if inflate is not None and not inflate.eof:
        raise EOFError("the gzip is cut short")
    return chunks


def check_save_is_not_the_module(path: str, save: str | None) -> None:
    """Refuse `--save` onto the module being read (the same file, through links or not).

    Raises:
        ShardcliError: `save` is the module's file.
    """
    if save is None:
        return
    import os

    same = os.path.realpath(save) == os.path.realpath(path)
    if not same and os.path.exists(save) and os.path.exists(path):
        same = os.path.samefile(save, path)  # a hard link
    if same:
        raise ShardcliError(
            f"--save {save} is the module being read ({path}); saving the report there would overwrite "
            "it: give another file"
        )


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
    check_save_is_not_the_module(path, request.options.save)
    text = read_module(path)
    platform, partitions = check_module_target(path, text, target)
    session = open_target_session(target, request.mesh_text, request.axes_text, request.options)
    # The compiler installed here only describes the target's devices; the module's own is not named
    # in its text (XLA writes no version into it).
    runtime = replace(session.runtime, compiler=(("unknown", UNKNOWN_COMPILER),))
    session = replace(session, runtime=runtime)
    count, argument_bytes = entry_parameter_bytes(text)
    module = ModuleFacts(path, platform, partitions, count, argument_bytes)
    mesh = session.mesh
    try:
        analysis = analyze_text(
            text,
            tuple(mesh.devices.shape),
            tuple(str(a) for a in mesh.axis_names),
            missing=(ONLY_A_COMPILE_KNOWS,),
            text_source=f"read from {path}",
            user_files=(),
        )
    except ModuleTextError as error:
        raise ShardcliError(f"inspect {path} is no module XLA writes: {error}") from None
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
        step=step_time_for(analysis, session, dtype, request.peak_tflops, request.link_gbps, target),
        module=module,
    )
