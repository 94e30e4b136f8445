"""Compiling for a TPU topology without a TPU: the session, libtpu's noise, and the fit verdict.

`open_target_session` starts JAX on the CPU (quietly: no TPU backend is started), asks libtpu for
the topology (`jax.experimental.topologies`), and builds the mesh over its chips. Programs are then
lowered and compiled as usual: the real TPU compiler runs, nothing executes. `judge_fit` holds the
compiled program's per-chip memory against the chip's HBM, or on a GPU against the pool JAX's GPU
client will make there (`shardcli.hardware.gpu_memory`: 75% of the GPU's memory unless the environment says
otherwise; "at risk" when little of it is left); a program the compiler refuses as too big
(`RESOURCE_EXHAUSTED ... CompileTimeHbmOom`) is a "does not fit" verdict, not an error.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from shardcli.analysis.program import MemoryUse
from shardcli.errors import TRACEBACK_ENV, ShardcliError
from shardcli.hardware.compilers import (
    check_cuda_plugin_environment,
    compiler_installed,
    compiling_versions,
    compute_capability,
    describe_cudnn_for_compile_only,
    quiet_native_logs,
)
from shardcli.hardware.gpu_memory import GpuFit, judge_gpu_fit, read_gpu_pool
from shardcli.hardware.targets import GIB, TargetSpec, known_targets
from shardcli.runtime.mesh import describe_mesh
from shardcli.runtime.session import Session
from shardcli.specs.meshes import MeshSpec, parse_axes
from shardcli.specs.runs import MAX_FAKE_DEVICES, RunOptions

_OOM_RE = re.compile(
    r"memory required for (?P<what>[^(]+?)\s*\((?P<need>[0-9.]+)(?P<unit>[KMGT])\)?\s*exceeds available HBM "
    r"\((?P<have>[0-9.]+)(?P<have_unit>[KMGT])\)?"
)
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True)
class FitVerdict:
    """Whether a compiled program fits each chip's HBM (on a GPU: JAX's pool there), and by how much.

    `fits` is true for a GPU program "at risk" too: it fits as computed, and exits 0 (the verdict's
    text and `status` say it is at risk)."""

    fits: bool
    capacity_bytes: int  # the chip's HBM; on a GPU what JAX's pool lets one program use
    capacity_source: str
    needed_bytes: int | None  # per chip; None where the compiler refused before saying exactly
    arguments_bytes: int | None = None
    temporaries_bytes: int | None = None
    compiler_message: str | None = None  # the TPU compiler's words when it refused
    gpu: GpuFit | None = None  # a GPU target: the pool, the margin and the setting that would fit

    @property
    def status(self) -> str:
        """`fits`, `at risk` (a GPU only) or `does not fit`."""
        if self.gpu is not None:
            return self.gpu.status
        return "fits" if self.fits else "does not fit"

    @property
    def text(self) -> str:
        from shardcli.specs.values import format_bytes

        if self.gpu is not None:
            return self._gpu_text()
        cap = f"{format_bytes(self.capacity_bytes)} HBM per chip ({self.capacity_source})"
        if self.fits:
            assert self.needed_bytes is not None
            free = format_bytes(self.capacity_bytes - self.needed_bytes)
            return f"fits: {format_bytes(self.needed_bytes)} of {cap}, {free} free"
        if self.needed_bytes is None:
            return f"does not fit in {cap}: {self.compiler_message}"
        over = format_bytes(self.needed_bytes - self.capacity_bytes)
        said = f" (the TPU compiler: {self.compiler_message})" if self.compiler_message else ""
        return (
            f"does not fit by {over}{self._parts()}; needs {format_bytes(self.needed_bytes)} of {cap}{said}"
        )

    def _parts(self) -> str:
        from shardcli.specs.values import format_bytes

        parts = []
        if self.arguments_bytes is not None:
            parts.append(f"arguments {format_bytes(self.arguments_bytes)}")
        if self.temporaries_bytes is not None:
            parts.append(f"temporaries {format_bytes(self.temporaries_bytes)}")
        return f": {', '.join(parts)}" if parts else ""

    def _gpu_text(self) -> str:
        """`at risk: 102.8 GiB of a 105.3 GiB pool, 2.5 GiB spare, under 10%, ...; <a setting>`."""
        from shardcli.hardware.gpu_memory import AT_RISK_SHARE
        from shardcli.specs.values import format_bytes

        gpu = self.gpu
        assert gpu is not None and self.needed_bytes is not None
        need, limit = format_bytes(self.needed_bytes), format_bytes(gpu.limit_bytes)
        of = f"of a {limit} pool" if gpu.pool.pooled else f"of the GPU's {limit}"
        words = gpu.pool.words(gpu.label, gpu.device_bytes)
        advice = f"; {gpu.advice}" if gpu.advice else ""
        spare = format_bytes(gpu.limit_bytes - self.needed_bytes)
        if gpu.status == "fits":
            return f"fits: {need} {of}, {spare} free ({words})"
        if gpu.status == "at risk":
            return (
                f"at risk: {need} {of}, {spare} spare, under {AT_RISK_SHARE:.0%}, too little for a pool "
                f"that arrays made earlier cut up ({words}){advice}"
            )
        over = format_bytes(self.needed_bytes - gpu.limit_bytes)
        return f"does not fit by {over}{self._parts()}; needs {need} {of} ({words}){advice}"


def judge_fit(memory: MemoryUse | None, target: TargetSpec) -> FitVerdict | None:
    """The compiled program's per-chip memory against the chip's HBM, or on a GPU against the pool
    JAX's GPU client makes there (`shardcli.hardware.gpu_memory`, from this process's environment).

    Raises:
        ShardcliError: a GPU target and a JAX allocator variable JAX would refuse (one line).
    """
    if memory is None:
        return None
    g = target.generation
    if g.platform == "cuda":
        gpu = judge_gpu_fit(memory.total_bytes, g.hbm_bytes, g.hardware.label, read_gpu_pool(os.environ))
        pool = gpu.pool.words(gpu.label, gpu.device_bytes)
        return FitVerdict(
            fits=gpu.status != "does not fit",
            capacity_bytes=gpu.limit_bytes,
            capacity_source=f"{pool}; the GPU's memory: {g.hbm_source}",
            needed_bytes=memory.total_bytes,
            arguments_bytes=memory.argument_bytes,
            temporaries_bytes=memory.temp_bytes,
            gpu=gpu,
        )
    return FitVerdict(
        fits=memory.total_bytes <= g.hbm_bytes,
        capacity_bytes=g.hbm_bytes,
        capacity_source=g.hbm_source,
        needed_bytes=memory.total_bytes,
        arguments_bytes=memory.argument_bytes,
        temporaries_bytes=memory.temp_bytes,
    )


def oom_verdict(error: BaseException, target: TargetSpec) -> FitVerdict | None:
    """The verdict a compile-time HBM OOM stands for; None for any other error (the compiler's own
    error only: a user's exception whose words say RESOURCE_EXHAUSTED is theirs, not a verdict)."""
    import jax

    text = str(error)
    if not isinstance(error, jax.errors.JaxRuntimeError):
        return None
    if "RESOURCE_EXHAUSTED" not in text and "HbmOom" not in text:
        return None
    lines = text.splitlines()
    line = next((x.strip() for x in lines if "exceeds available HBM" in x), lines[0] if lines else text)
    line = line.split("Ran out of memory on HBM, ")[-1].rstrip(".")
    match = _OOM_RE.search(text)
    g = target.generation
    if match is None:
        return FitVerdict(False, g.hbm_bytes, g.hbm_source, None, compiler_message=line)
    need = int(float(match.group("need")) * _UNITS[match.group("unit")])
    have = int(float(match.group("have")) * _UNITS[match.group("have_unit")])
    return FitVerdict(
        fits=False,
        capacity_bytes=have,
        capacity_source=f"what the compiler leaves available of the {g.chip}'s {g.hbm_bytes / GIB:.0f} GiB",
        needed_bytes=need,
        temporaries_bytes=need if "temporaries" in match.group("what") else None,
        compiler_message=line,
    )


def open_target_session(
    target: TargetSpec,
    mesh_text: str | None,
    axes_text: str | None,
    options: RunOptions,
    *,
    x64: bool = False,
    dcn: tuple[int, ...] | None = None,
) -> Session:
    """JAX on the CPU (nothing runs), the target's chips from its compiler, and a mesh over them
    (over several slices: `dcn`, the slices each mesh axis spans, default the outer axes first).

    Everything the compilers' native code prints while they load (at `import jax` and the first
    backend start, as well as the topology) is kept off the screen and counted in the note.

    Raises:
        ShardcliError: the compiler missing, a topology it does not know, a mesh that is not a
            reshape of the chips (one line each).
    """
    with quiet_native_logs() as noise:
        session = _open_target_session(target, mesh_text, axes_text, options, x64=x64, dcn=dcn)
    if not noise:
        return session
    platform = target.generation.platform
    who = "libtpu" if platform == "tpu" else "the CUDA plugin"
    note = (
        f"{session.runtime.note}; {who}'s {len(noise)} start-up line(s) about this host having no "
        f"{'TPU' if platform == 'tpu' else 'GPU'} left out ({TRACEBACK_ENV}=1 shows them)"
    )
    return replace(session, runtime=replace(session.runtime, note=note))


def _open_target_session(
    target: TargetSpec,
    mesh_text: str | None,
    axes_text: str | None,
    options: RunOptions,
    *,
    x64: bool = False,
    dcn: tuple[int, ...] | None = None,
) -> Session:
    """JAX on the CPU (nothing runs), the target's chips from its compiler, and a mesh over them.

    Args:
        target: the parsed --target.
        mesh_text: --mesh as typed, or None for the topology's own shape.
        axes_text: --axes as typed.

    Raises:
        ShardcliError: libtpu missing, a topology libtpu does not know, a mesh that is not a
            reshape of the chips, a GPU target with a JAX allocator variable JAX would refuse (one
            line each).
    """
    platform = target.generation.platform
    if not compiler_installed(platform):
        what = "the TPU compiler" if platform == "tpu" else "XLA's GPU compiler"
        raise ShardcliError(f"--target {target.name} needs {what}: {target.install_hint}")
    # The CUDA plugin starts with every backend (a TPU target's too) and reads JAX's GPU client
    # variables as it does; for a GPU target it is the compiler, so of jaxlib's version.
    check_cuda_plugin_environment(gpu=platform == "cuda")
    if platform == "cuda":
        read_gpu_pool(os.environ)  # JAX's allocator variables, refused before a compile starts
    else:
        check_libtpu_args(target)
    # libtpu takes a host-wide lock (/tmp/libtpu_lockfile) for the chips it drives; compiling for a
    # described topology drives none, so a second shardcli (or a notebook) may compile at once.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    import jax

    from shardcli.runtime.cluster import _backends_started
    from shardcli.runtime.devices import RuntimeInfo, enable_x64

    if not _backends_started():
        jax.config.update("jax_platforms", "cpu")  # the TPU is described, never started
        # As many CPU devices as chips (up to shardcli's limit), so that a user's file that counts
        # jax.devices() at import finds the run's size.
        jax.config.update("jax_num_cpu_devices", min(target.chips, MAX_FAKE_DEVICES))
    if x64:
        enable_x64()

    jax.devices()  # the CPU backend's start loads the compilers' plugins too
    try:
        topology = _topology(target)
    except Exception as error:  # noqa: BLE001 - the compiler's reason, as one line
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        who = "libtpu" if platform == "tpu" else "the CUDA plugin"
        raise ShardcliError(
            f"--target {target.name}: {who} does not know topology {target.libtpu_name!r} ({reason}); "
            f"known, for example: {known_targets()}"
        ) from None
    devices = list(topology.devices)
    shape = _mesh_shape(mesh_text, target, len(devices))
    axes = parse_axes(axes_text, len(shape))
    spec = MeshSpec(shape=shape, axes=axes)
    from jax.sharding import AxisType

    gpu = platform == "cuda"
    if target.slices > 1:  # ICI within each slice, the data-center network across them
        from shardcli.analysis.slice_mesh import multislice_mesh

        mesh, order = multislice_mesh(devices, shape, axes, target.slices, dcn)
    else:
        mesh, order = _one_slice_mesh(topology, devices, shape, axes, gpu)
    if options.mode == "explicit":
        mesh = jax.sharding.Mesh(mesh.devices, axes, axis_types=(AxisType.Explicit,) * len(shape))
    compiler = compiling_versions(platform)
    if gpu:
        plugin = ", ".join(f"{p} {v}" for p, v in compiler[2:]) or "the CUDA plugin"
        laid = f"; {order}" if len(devices) > 1 else ""
        note = f"compile-only: {plugin} describes {_gpu_hosts_words(target, len(devices))}{laid}; "
        note += "nothing runs; nothing is verified or timed"
    else:
        what = f"{len(devices)} {target.generation.chip}s"
        if target.slices > 1:
            what = f"{what} in {target.slices_words()}"
        note = f"compile-only: libtpu describes the {what} ({order}); "
        note += "nothing runs; nothing is verified or timed"
    runtime = RuntimeInfo(
        platform="tpu" if platform == "tpu" else "gpu",
        device_kind=devices[0].device_kind,
        device_count=len(devices),
        devices_present=len(devices),
        faked=False,
        note=note,
        process_count=1,
        process_index=0,
        jax_version=jax.__version__,
        compiler=compiler,
        target=target.name,
    )
    return Session(
        runtime=runtime,
        spec=spec,
        mesh=mesh,
        layout=describe_mesh(mesh),
        mode=str(options.mode),
        devices=tuple(devices),
    )


def _one_slice_mesh(
    topology: Any, devices: list[Any], shape: tuple[int, ...], axes: tuple[str, ...], gpu: bool
) -> tuple[Any, str]:
    """The mesh over one slice's chips (or GPU hosts), and how its devices were laid."""
    import jax
    from jax.experimental import topologies

    try:  # chips laid along the torus's axes (a GPU's host by host), as JAX's own mesh helper lays them
        mesh = topologies.make_mesh(topology, shape, axes)
        order = "laid along the torus by jax.experimental.topologies.make_mesh"
        if gpu:
            order = "the mesh takes them host by host (jax.experimental.topologies.make_mesh)"
    except (NotImplementedError, ValueError, AssertionError):  # a reshape that splits a physical axis
        import numpy as np

        mesh = jax.sharding.Mesh(np.asarray(devices, dtype=object).reshape(shape), axes)
        split = f"--mesh {'x'.join(map(str, shape))}"
        order = (
            f"the mesh takes them in the CUDA plugin's order: {split} is no whole hosts"
            if gpu
            else f"in libtpu's order: {split} splits a physical axis of the torus"
        )
    return mesh, order


LIBTPU_ARGS_ENV = "LIBTPU_INIT_ARGS"
_libtpu_args: dict[str, Any] = {"users": None, "checked": set()}


def note_users_libtpu_args(value: str) -> None:
    """LIBTPU_INIT_ARGS as the user set it, without the flags `plan` adds (only a value of the
    user's makes `check_libtpu_args` start a probe)."""
    _libtpu_args["users"] = value


def check_libtpu_args(target: TargetSpec) -> None:
    """Refuse a LIBTPU_INIT_ARGS that libtpu would die on, before this process loads libtpu.

    libtpu ends the process (exit 1, its words on descriptor 2, which shardcli keeps off the screen
    while libtpu loads) at the first flag it does not know or a value it cannot read. So when the
    user set LIBTPU_INIT_ARGS, a throw-away process asks libtpu for the target's topology first
    (about two seconds, once per value), and its words become the one-line error.

    Raises:
        ShardcliError: libtpu refused LIBTPU_INIT_ARGS (exit 2).
    """
    import subprocess
    import sys

    flags = os.environ.get(LIBTPU_ARGS_ENV, "").strip()
    users = _libtpu_args["users"]
    if not flags or not (users if users is not None else flags).strip() or flags in _libtpu_args["checked"]:
        return
    if "jax" in sys.modules and "jax._src.xla_bridge" in sys.modules:
        from jax._src import xla_bridge

        if getattr(xla_bridge, "_backends", None) and _libtpu_loaded():
            return  # libtpu read its flags already, and took them
    config = ', chip_config_name="megacore"' if target.generation.compiler_name == "v4" else ""
    probe = (
        "import jax; jax.config.update('jax_platforms', 'cpu'); from jax.experimental import topologies; "
        f"topologies.get_topology_desc(topology_name={target.libtpu_name!r}, platform='tpu'{config})"
    )
    env = dict(os.environ, JAX_PLATFORMS="cpu", ALLOW_MULTIPLE_LIBTPU_LOAD="1")
    try:
        done = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return  # no verdict: this process loads libtpu and meets whatever it says itself
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    said = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR: ")]
    if done.returncode == 0 or not said:
        _libtpu_args["checked"].add(flags)
        return  # a failure without libtpu's flag words: this process meets it and reports it
    shown = users.strip() if users else flags  # as the user set it (not with plan's own flags)
    raise ShardcliError(
        f"{LIBTPU_ARGS_ENV}={shown!r} is refused by libtpu ({'; '.join(said)}); "
        f"fix or unset {LIBTPU_ARGS_ENV}"
    )


def _libtpu_loaded() -> bool:
    """Whether this process has loaded libtpu's shared library already."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return "libtpu" in maps.read()
    except OSError:
        return False


# `jax.make_mesh`'s first parameter: `axis_shapes` up to jax 0.10, `axis_sizes` from 0.12.
SIZES_KEYWORDS = ("axis_sizes", "axis_shapes")


@contextlib.contextmanager
def target_meshes(session: Session) -> Iterator[None]:
    """While the user's file is imported (and its --inputs called): `jax.make_mesh` builds its mesh
    over the target's chips, so that a module-level `mesh = jax.make_mesh((4, 4), ...)` of the
    target's size is the target's mesh (laid out by JAX's own helper), not one of this host's CPUs.
    """
    import jax

    real = jax.make_mesh
    chips = list(session.devices)
    laid_out = session.mesh.devices  # the run's mesh, laid along the torus

    def make_mesh(*args: Any, devices: Any = None, **kwargs: Any) -> Any:
        # The sizes: positional, or by either keyword (jax 0.10 `axis_shapes`, 0.12 `axis_sizes`),
        # handed on positionally so that both spellings work with either JAX.
        named = [k for k in SIZES_KEYWORDS if k in kwargs]
        if (not args and len(named) != 1) or (args and named):  # JAX's own error for the call
            return real(*args, devices=devices, **kwargs)
        sizes = args[0] if args else kwargs.pop(named[0])
        rest = args[1:]
        shape = tuple(int(n) for n in sizes)
        if devices is None and shape == laid_out.shape:  # the run's own mesh, under the user's names
            made = real(sizes, *rest, devices=chips, **kwargs)
            return jax.sharding.Mesh(laid_out, made.axis_names, axis_types=made.axis_types)
        size = 1
        for n in shape:
            size *= n
        if devices is None and size <= len(chips):
            devices = chips[:size]
        return real(sizes, *rest, devices=devices, **kwargs)

    jax.make_mesh = make_mesh
    try:
        yield
    finally:
        jax.make_mesh = real


def _topology(target: TargetSpec) -> Any:
    """The compiler's description of the target's devices."""
    from jax.experimental import topologies

    if target.generation.platform == "tpu":
        # libtpu describes a v4 chip's two TensorCores as two devices unless asked for megacore, the
        # mode JAX runs v4 in (one device per chip); MaxText asks the same for v4.
        config: dict[str, Any] = (
            {"chip_config_name": "megacore"} if target.generation.compiler_name == "v4" else {}
        )
        if target.slices > 1:  # libtpu's compile-only multislice: each device has its slice_index
            config["num_slices"] = target.slices
        return topologies.get_topology_desc(topology_name=target.libtpu_name, platform="tpu", **config)
    from importlib import resources

    spec = (
        resources.files("shardcli.hardware")
        .joinpath("gpu_specs", target.generation.compiler_name)
        .read_text()
    )
    capability = compute_capability(spec)
    if capability is not None:  # cuDNN's fused attention traces for the described GPU (no GPU here)
        describe_cudnn_for_compile_only(capability)
    return topologies.get_topology_desc(platform="cuda", target_config=spec, topology=target.libtpu_name)


def _mesh_shape(text: str | None, target: TargetSpec, chips: int) -> tuple[int, ...]:
    from shardcli.specs.meshes import parse_mesh_shape

    if text is None:
        if target.generation.platform == "cuda":
            return (chips,)  # one axis over every GPU of every host
        if target.slices > 1 and target.chips == chips:
            return (target.slices, *target.topology)  # the slices, then each slice's torus
        return target.topology if target.chips == chips else (chips,)
    shape = parse_mesh_shape(text)
    size = 1
    for d in shape:
        size *= d
    if size != chips:
        own = "x".join(map(str, target.topology))
        raise ShardcliError(
            f"--mesh {text} has {size} devices but --target {target.name} has {chips} chips; give a "
            f"reshape of them, such as {own} or {chips}, or leave --mesh out for the topology's shape"
        )
    return shape


# On a real GPU XLA autotunes each dot; on the H200 of shared/gpu_h200 (jax 0.11.2, default flags)
# it gave every dot of four train steps to cuBLAS (`__cublas$lt$matmul`). Without a GPU it cannot
# autotune and emits Triton GEMM fusions instead, which the per-op roofline cannot tell from other
# ops. Compile-only GPU targets ask for the cuBLAS calls the GPU ran (`analysis.kernels` reads each).
# A hand AOT compile with JAX's defaults makes other temporaries (issue 54: lm1b 30.4 vs 32.1 MiB),
# so the option is said wherever a GPU target's figures are (inspect's and plan's headers, their JSON).
GPU_COMPILE_OPTIONS = {"xla_gpu_enable_triton_gemm": False}
GPU_OPTIONS_WHY = "every dot a cuBLAS call, as XLA's autotuning chose on a real H200; no GPU here to autotune"
GPU_OPTIONS_WORDS = f"xla_gpu_enable_triton_gemm=false ({GPU_OPTIONS_WHY})"


def _gpu_hosts_words(target: TargetSpec, gpus: int) -> str:
    """`16 H200 GPUs, 2 hosts of 8, NVLink within a host and the network between hosts (NVIDIA DGX
    H200: 8 x 400 Gb/s ConnectX-7 InfiniBand NICs for 8 GPUs, 50 GB/s per GPU)`."""
    hosts = target.topology[0] if len(target.topology) == 2 else 1
    per = gpus // hosts if hosts else gpus
    label = target.generation.hardware.label.split()[0]  # "H200"
    if hosts == 1:
        return f"{gpus} {label} GPUs of one host, NVLink between them" if gpus > 1 else f"1 {label} GPU"
    return (
        f"{gpus} {label} GPUs, {hosts} hosts of {per}, NVLink within a host and the network between hosts "
        f"({target.network_words()})"
    )


def compile_options_words(target: TargetSpec | None) -> str | None:
    """What a target's compile changes from JAX's defaults, and why; None where nothing."""
    if target is not None and target.generation.platform == "cuda":
        return GPU_OPTIONS_WORDS
    return None


def compiler_options(target: TargetSpec | None) -> dict[str, Any] | None:
    """The options a program is compiled with for `target` (GPU_COMPILE_OPTIONS on a GPU)."""
    if target is not None and target.generation.platform == "cuda":
        return dict(GPU_COMPILE_OPTIONS)
    return None


def compile_for_target(
    jitted: Any, args: tuple[Any, ...], mesh: Any, target: TargetSpec
) -> tuple[Any, FitVerdict | None]:
    """Lower and compile for the target under its mesh, libtpu kept quiet.

    Returns:
        (the compiled program, None), or (None, the verdict) when the TPU compiler ran out of HBM.

    Raises:
        Exception: anything else JAX raises (a refusal the caller reports).
    """
    import jax

    from shardcli.runtime.cache import unreadable_entries_compiled_again

    try:
        with quiet_native_logs(), jax.set_mesh(mesh), unreadable_entries_compiled_again():
            return jitted.lower(*args).compile(compiler_options=compiler_options(target)), None
    except Exception as error:
        verdict = oom_verdict(error, target)
        if verdict is None:
            raise
        return None, verdict
