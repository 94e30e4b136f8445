"""Starting JAX on the right devices: real accelerators, or N faked CPU devices."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from shardcli.errors import TRACEBACK_ENV, ShardcliError
from shardcli.runtime.allocator import AllocatorState, tune_for_reuse
from shardcli.runtime.cluster import (
    _backends_started,
    _first_line,
    _per_process,
    exposure_note,
    join_cluster,
    pick_devices,
)
from shardcli.specs.runs import MAX_FAKE_DEVICES, DistributedSpec, RunOptions

ACCELERATORS = ("gpu", "tpu")


@dataclass(frozen=True)
class RuntimeInfo:
    """Facts about the devices a run uses, for the header and the JSON config."""

    platform: str  # "cpu", "gpu" or "tpu"
    device_kind: str
    device_count: int  # devices the mesh uses
    devices_present: int  # devices of that platform in this process
    faked: bool  # CPU devices simulated with jax_num_cpu_devices
    note: str | None  # why these devices (fallbacks, a backend started earlier)
    process_count: int
    process_index: int
    jax_version: str
    # (package, version) of what compiled the run's programs: jax, jaxlib, and for a TPU or GPU (a
    # --target's, or real ones) libtpu or JAX's CUDA plugin; a fit verdict belongs to these versions.
    compiler: tuple[tuple[str, str], ...]
    distributed: DistributedSpec | None = None
    process_timing: str = "max"  # several processes: timings shown are the max or avg per iteration
    compile_cache: str | None = None  # the persistent compile cache's directory; None: off
    allocator: AllocatorState | None = None  # the host malloc settings of this process
    warnings: tuple[str, ...] = ()  # for the user on stderr (render.console.show_warnings)
    target: str | None = None  # a compile-only target (`tpu-v5e:16x16`): its chips are described, not run

    def describe_compiler(self) -> str:
        """`jax 0.12.0.1, jaxlib 0.12.0.1, libtpu 0.0.52`."""
        return ", ".join(f"{package} {version}" for package, version in self.compiler)

    def describe_devices(self) -> str:
        """`8 faked CPU devices` / `4 of 8 real GPU devices` / `... in 2 processes, 4 each`."""
        if self.target is not None:
            return f"{self.device_count} {self.device_kind} chips of the compile-only target {self.target}"
        what = "faked" if self.faked else "real"
        name = self.platform.upper()
        if self.device_count == self.devices_present:
            text = f"{self.device_count} {what} {name} device{'s' * (self.device_count != 1)}"
        else:
            text = f"{self.device_count} of {self.devices_present} {what} {name} devices"
        if self.process_count > 1:
            text += f" in {self.process_count} processes, {self.device_count // self.process_count} each"
        return text


def _only_cpu_with_compile_plugins() -> bool:
    """A compiler for --target is installed (libtpu, JAX's CUDA plugin), but this host has no TPU
    chip and no GPU JAX could use."""
    from shardcli.hardware.compilers import compiler_installed

    if not (compiler_installed("tpu") or compiler_installed("cuda")):
        return False
    try:
        from jax._src import hardware_utils  # JAX's own cheap probes: PCI ids and device files

        chips, _ = hardware_utils.num_available_tpu_chips_and_device_id()
        gpus = hardware_utils.has_visible_nvidia_gpu() or hardware_utils.num_available_amd_gpus(stop_at=1) > 0
    except Exception:  # noqa: BLE001 - a JAX without these probes: leave the choice to JAX
        return False
    return chips == 0 and not gpus


def _accelerator_devices(platform: str) -> list[Any]:
    import jax

    try:
        return list(jax.devices(platform))
    except RuntimeError:
        return []


def _check_fake_count(count: int) -> None:
    if count > MAX_FAKE_DEVICES:
        raise ShardcliError(
            f"faking {count} CPU devices is more than the {MAX_FAKE_DEVICES} shardcli allows in one "
            f"process; use a smaller mesh"
        )


def start_runtime(needed: int, options: RunOptions, *, x64: bool = False) -> tuple[RuntimeInfo, list]:
    """Start JAX with at least `needed` devices of the requested platform.

    What JAX complains about while its backends start (a plugin that failed, a GPU it could not
    use) goes into the run's note, or the error when the platform asked for did not start, not
    onto stderr as a traceback.

    Args:
        needed: devices the mesh needs (in all processes together).
        options: the shared run options (platform, devices, the multi-process run to join).
        x64: enable 64-bit dtypes.

    Returns:
        The runtime facts and the list of devices for the mesh (exactly `needed` of them).

    Raises:
        ShardcliError: too few devices, or an accelerator that is not there.
    """
    from shardcli.hardware.compilers import check_cuda_plugin_environment

    # What JAX's CUDA plugin reads as it starts, refused in one line before it starts (it would
    # print a traceback and start without the plugin); on a GPU it compiles, so of jaxlib's version.
    on_gpu = options.platform == "gpu" or (options.platform == "auto" and _nvidia_gpu_visible())
    check_cuda_plugin_environment(gpu=on_gpu)
    import_jax_quietly()
    with jax_start_complaints() as complaints:
        return _start_runtime(needed, options, x64=x64, complaints=complaints)


def _nvidia_gpu_visible() -> bool:
    """JAX's own test for a visible NVIDIA GPU (hardware_utils), without importing JAX to ask it."""
    return any(os.path.exists(d) for d in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg"))


def import_jax_quietly() -> None:
    """`import jax`, keeping what JAX's CUDA plugin prints at import (C++ logging on descriptor 2,
    "Could not find cuda drivers") off the screen when no GPU is here: the gpu extra, installed for
    --target gpu-..., must not make every run noisy. With SHARDCLI_TRACEBACK set it is printed.

    Raises:
        ShardcliError: an environment JAX or XLA refuses (JAX_ENABLE_X64=banana, an unknown flag in
            XLA_FLAGS), as one line.
    """
    if "jax" in sys.modules:
        return
    check_xla_flags()
    from shardcli.hardware.compilers import compiler_installed, quiet_native_logs

    gpu_here = _nvidia_gpu_visible()
    quiet = compiler_installed("cuda") and not gpu_here  # a real GPU: what the plugin says may matter
    native: contextlib.AbstractContextManager[list[str]] = (
        quiet_native_logs() if quiet else contextlib.nullcontext([])
    )
    try:
        with native:
            import jax  # noqa: F401
    except ValueError as error:  # JAX reads its JAX_* variables as it is imported
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ShardcliError(f"JAX refuses its environment: {reason}; fix or unset that variable") from None


_x64_before: list[bool] = []  # jax_enable_x64 before a run turned it on (restore_x64 puts it back)


def enable_x64() -> None:
    """64-bit dtypes on for this run (int64/float64 values); `restore_x64` turns them back after it."""
    import jax

    if not _x64_before:
        _x64_before.append(bool(jax.config.read("jax_enable_x64")))
    jax.config.update("jax_enable_x64", True)


def restore_x64() -> None:
    """jax_enable_x64 as it was before the run turned it on: a process that runs commands one after
    another (a notebook, the tests) compiles the next one's program as its user wrote it."""
    if _x64_before:
        import jax

        jax.config.update("jax_enable_x64", _x64_before.pop())


XLA_FLAGS_ENV = "XLA_FLAGS"


def check_xla_flags() -> None:
    """Refuse an XLA_FLAGS that XLA would die on, before this process starts XLA.

    XLA ends the process (exit 1, its words on descriptor 2) at the first unknown flag, as it
    starts; no Python code runs after that to report it. So when XLA_FLAGS is set, a throw-away
    process starts XLA on the CPU first (about a second, and only then), and its last words become
    the one-line error.

    Raises:
        ShardcliError: XLA refused XLA_FLAGS.
    """
    import subprocess

    flags = os.environ.get(XLA_FLAGS_ENV, "").strip()
    if not flags:
        return
    probe = "import jax; jax.devices('cpu')"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    try:
        done = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return  # no verdict: this process starts XLA and meets whatever it says itself
    if done.returncode == 0:
        return
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    said = next((line for line in lines if XLA_FLAGS_ENV in line), lines[-1] if lines else "no message")
    said = said.split("] ", 1)[-1] if said.startswith(("F", "E")) and "] " in said else said
    raise ShardcliError(f"{XLA_FLAGS_ENV}={flags!r} is refused by XLA ({said}); fix or unset {XLA_FLAGS_ENV}")


def _start_runtime(
    needed: int, options: RunOptions, *, x64: bool, complaints: list[str]
) -> tuple[RuntimeInfo, list]:
    # Before JAX starts its threads: each would get its own malloc arena (see shardcli.runtime.allocator).
    allocator = tune_for_reuse(
        options.malloc,
        backend_started="jax" in sys.modules and _backends_started(),
        why=options.malloc_why,
    )
    import jax

    from shardcli.runtime.cache import enable_compile_cache

    enable_compile_cache(options.compile_cache)
    platform = options.platform
    requested = options.devices
    processes = 1
    if options.distributed is not None:
        processes, _ = join_cluster(options.distributed, chatter=options.verbose)
    share = _per_process(needed, processes)
    each = " per process" if processes > 1 else ""
    here = "this process" if processes > 1 else "this machine"
    if requested is not None:
        if requested < 1:
            raise ShardcliError(f"--devices {requested} is not valid; give a positive device count")
        if requested < share and processes > 1:
            raise ShardcliError(
                f"the mesh's {needed} devices over {processes} processes need {share} per process but "
                f"this one starts with {requested} (--devices, or launch's --devices-per-process); "
                f"give at least {share}, or a smaller mesh"
            )
        if requested < share:
            raise ShardcliError(
                f"the mesh needs {share} devices but --devices is {requested}; use --devices "
                f"{share} or a smaller mesh"
            )
    started = _backends_started()
    forced_cpu = False  # auto on a host with only a CPU, where the --target compilers are installed
    fake_count = requested or share
    if not started:
        if platform == "cpu":
            _check_fake_count(fake_count)
            jax.config.update("jax_platforms", "cpu")
            jax.config.update("jax_num_cpu_devices", fake_count)
        elif platform == "auto":
            # Harmless when an accelerator wins: it only sizes the CPU client we may fall back to.
            _check_fake_count(fake_count)
            jax.config.update("jax_num_cpu_devices", fake_count)
            # Only where the user left the choice to JAX (JAX_PLATFORMS unset)
            forced_cpu = not getattr(jax.config, "jax_platforms", None) and _only_cpu_with_compile_plugins()
            if forced_cpu:
                # libtpu and the CUDA plugin (the tpu and gpu extras, for --target) make JAX try a TPU
                # and a GPU on every start: on a host with neither that costs ~0.5 s and prints their
                # complaints. Nothing but the CPU is here.
                jax.config.update("jax_platforms", "cpu")
    if x64:
        enable_x64()
    from shardcli.hardware.compilers import compiler_installed, native_complaint, quiet_native_logs

    # libtpu and the CUDA plugin write their start-up complaints straight to descriptor 2: one complaint
    quiet = not started and (compiler_installed("tpu") or compiler_installed("cuda"))
    native: contextlib.AbstractContextManager[list[str]] = (
        quiet_native_logs() if quiet else contextlib.nullcontext([])
    )
    with native as libtpu_lines:
        try:
            jax.devices()  # starts every backend JAX is set up for, here where a failure can be named
        except Exception as error:  # noqa: BLE001 - a broken set-up raises RuntimeError, or worse
            failed: Exception | None = error
        else:
            failed = None
    if platform in ACCELERATORS:  # asked for a GPU or TPU: what their plugins said is the reason
        complaints.extend(native_complaint(libtpu_lines))
    if failed is not None:
        raise ShardcliError(_backends_failed(failed, complaints)) from failed

    note = None
    if platform in ACCELERATORS or platform == "auto":
        accel_platform = platform if platform != "auto" else None
        if accel_platform is None:
            default = jax.default_backend()
            accel = [] if default == "cpu" else list(jax.devices())
        else:
            accel = _accelerator_devices(accel_platform)
        if accel_platform is not None and not accel:
            why = f" ({_said(complaints)})" if complaints else ""
            raise ShardcliError(
                f"--platform {platform} was asked for but this machine has no {platform.upper()} "
                f"devices JAX can use{why}; use --platform cpu to fake devices on the CPU"
            )
        local = [d for d in accel if d.process_index == jax.process_index()]
        enough = len(local) >= (requested or share)
        if accel_platform is not None and not enough:
            raise ShardcliError(
                f"the mesh needs {requested or share} {platform.upper()} devices{each} but {here} "
                f"has {len(local)}; use a smaller mesh or --platform cpu to fake them"
            )
        if accel and enough:
            present = accel if requested is None else _first_of_each(accel, requested)
            return (
                _info(
                    accel[0].platform,
                    present,
                    needed,
                    faked=False,
                    note=_with_complaints(None, complaints),
                    options=options,
                    allocator=allocator,
                ),
                pick_devices(accel, needed, processes),
            )
        if accel:
            note = (
                f"auto: {here} has {len(local)} {accel[0].platform.upper()} device(s), fewer "
                f"than the {share} the mesh needs{each}, so the CPU fakes them"
            )

    cpu = list(jax.devices("cpu"))
    local_cpu = [d for d in cpu if d.process_index == jax.process_index()]
    if len(local_cpu) < share:
        raise ShardcliError(
            f"the mesh needs {share} devices{each} but JAX was already started in this process with "
            f"{len(local_cpu)} CPU devices (the count is fixed at start-up); use a mesh of at most "
            f"{len(local_cpu) * processes} devices or run shardcli in a fresh process"
        )
    if started and requested is not None and len(local_cpu) != requested:
        note = (
            f"JAX was already started in this process with {len(local_cpu)} CPU devices; "
            f"--devices {requested} cannot change that, the mesh uses the first {share}"
        )
    elif started and len(local_cpu) != share and note is None:
        note = f"JAX was already started with {len(local_cpu)} CPU devices; the mesh uses the first {share}"
    if note is None and platform == "auto" and complaints:
        note = "auto: no GPU or TPU backend started, so the CPU runs the mesh"
    info = _info(
        "cpu",
        cpu,
        needed,
        faked=len(local_cpu) > 1,
        note=_with_complaints(note, complaints),
        options=options,
        allocator=allocator,
    )
    return info, pick_devices(cpu, needed, processes)


# What JAX logs, through this logger, when a backend cannot start: a plugin whose initialize()
# raised (with its traceback), a GPU or TPU it found but could not use. Other messages pass.
_JAX_START_LOGGER = "jax._src.xla_bridge"
_PLUGIN_FAILED = "Jax plugin configuration error"
_GUESSES = ("An NVIDIA GPU may be present", "A Google TPU may be present")
_START_COMPLAINTS = (_PLUGIN_FAILED, "CUDA backend failed to initialize", *_GUESSES)


class _KeepStartComplaints(logging.Filter):
    def __init__(self, *, also_print: bool) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.also_print = also_print

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if record.levelno < logging.WARNING or not text.startswith(_START_COMPLAINTS):
            return True
        text = " ".join(text.replace(" %s", "").split()).rstrip(".")  # JAX logs one with no args
        error = record.exc_info[1] if record.exc_info else None
        if error is not None:
            text += f": {_error_line(error)}"
        self.lines.append(text)
        return self.also_print


def _error_line(error: BaseException) -> str:
    """The exception's first line, and its cause's (a missing library behind a plugin's error)."""
    line = _first_line(error)
    cause = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    if cause is None or _first_line(cause) in line:  # JAX often repeats its cause's words
        return line
    return f"{line} ({_first_line(cause)})"


@contextmanager
def jax_start_complaints() -> Iterator[list[str]]:
    """Keep JAX's start-up complaints (one line each) instead of letting them print.

    Yields the list they are added to while the block runs. With SHARDCLI_TRACEBACK set they are
    printed as JAX prints them as well.
    """
    logger = logging.getLogger(_JAX_START_LOGGER)
    keep = _KeepStartComplaints(also_print=bool(os.environ.get(TRACEBACK_ENV)))
    logger.addFilter(keep)
    try:
        yield keep.lines
    finally:
        logger.removeFilter(keep)


def _said(complaints: list[str]) -> str:
    """What JAX said, for a note or an error.

    JAX's guess that a GPU or TPU "may be present, but ... jaxlib is not installed" is left out
    when a plugin's own failure says what happened, and its "Falling back to cpu" always is:
    shardcli says itself what it does next.
    """
    plugin_failed = any(c.startswith(_PLUGIN_FAILED) for c in complaints)
    kept = []
    for complaint in complaints:
        if complaint.startswith(_GUESSES):
            if plugin_failed:
                continue
            complaint = complaint.split(". Falling back to")[0]
        kept.append(complaint)
    return "JAX at start-up: " + "; ".join(kept)


def _with_complaints(note: str | None, complaints: list[str]) -> str | None:
    if not complaints:
        return note
    return f"{note}; {_said(complaints)}" if note else _said(complaints)


def _backends_failed(error: BaseException, complaints: list[str]) -> str:
    why = f"; {_said(complaints)}" if complaints else ""
    pinned = os.environ.get("JAX_PLATFORMS")
    fix = f"unset JAX_PLATFORMS (it is {pinned!r}) or use" if pinned else "use"
    return f"JAX could not start its backends ({_error_line(error)}{why}); {fix} --platform cpu"


def _first_of_each(devices: list[Any], count: int) -> list[Any]:
    """The first `count` devices of every process (what --devices limits a process to)."""
    seen: dict[int, int] = {}
    out = []
    for device in devices:
        k = int(device.process_index)
        if seen.get(k, 0) < count:
            seen[k] = seen.get(k, 0) + 1
            out.append(device)
    return out


def _info(
    platform: str,
    present: list,
    needed: int,
    *,
    faked: bool,
    note: str | None,
    options: RunOptions,
    allocator: AllocatorState | None = None,
) -> RuntimeInfo:
    import jax

    from shardcli.hardware.compilers import compiler_versions
    from shardcli.runtime.cache import cache_state

    exposed = exposure_note(options.distributed, jax.process_index())
    return RuntimeInfo(
        platform=platform,
        device_kind=str(present[0].device_kind),
        device_count=needed,
        devices_present=len(present),
        faked=faked,
        note="; ".join(n for n in (note, exposed) if n) or None,
        process_count=jax.process_count(),
        process_index=jax.process_index(),
        jax_version=jax.__version__,
        compiler=compiler_versions(platform),
        distributed=options.distributed,
        process_timing=options.process_timing,
        compile_cache=cache_state().directory,
        allocator=allocator,
        warnings=tuple(w for w in (cache_state().warning,) if w),
    )
