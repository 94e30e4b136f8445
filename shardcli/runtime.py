"""Starting JAX on the right devices: real accelerators, or N faked CPU devices.

The number of CPU devices is fixed when the JAX backend starts, so `start_runtime` decides it
from the mesh before the first JAX operation. When JAX was already started in this process (tests
that call the CLI in-process, or a library user), it uses the first N devices it finds and says so.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from shardcli.allocator import AllocatorState, tune_for_reuse
from shardcli.errors import TRACEBACK_ENV, ExitCode, ShardcliError
from shardcli.specs import MAX_FAKE_DEVICES, DistributedSpec, RunOptions, format_bytes
from shardcli.stdout import route_native_stdout_to_stderr

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
    from shardcli.compilers import compiler_installed

    if not (compiler_installed("tpu") or compiler_installed("cuda")):
        return False
    try:
        from jax._src import hardware_utils  # JAX's own cheap probes: PCI ids and device files

        chips, _ = hardware_utils.num_available_tpu_chips_and_device_id()
        gpus = hardware_utils.has_visible_nvidia_gpu() or hardware_utils.num_available_amd_gpus(stop_at=1) > 0
    except Exception:  # noqa: BLE001 - a JAX without these probes: leave the choice to JAX
        return False
    return chips == 0 and not gpus


def _backends_started() -> bool:
    from jax._src import xla_bridge  # the only way to ask without starting them

    return bool(xla_bridge.backends_are_initialized())


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


@dataclass(frozen=True)
class CoordinatorBind:
    """Where process 0's coordination service listens, and why."""

    address: str | None  # what shardcli passes as coordinator_bind_address; None: JAX chooses
    listens_on: str  # what it listens on, in words
    exposed: bool  # reachable from the network (every interface, or a non-loopback address)


def _is_loopback(host: str) -> bool:
    import ipaddress

    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def coordinator_bind(spec: DistributedSpec, environ: dict[str, str] | None = None) -> CoordinatorBind:
    """Where process 0's coordination service will listen.

    `--coordinator-bind` (or SHARDCLI_COORDINATOR_BIND) wins; then JAX's own
    JAX_COORDINATOR_BIND_ADDRESS; then the coordinator's own address when it is a loopback one
    (a run on one machine, as `launch` starts it, stays off the network); otherwise JAX's default,
    every interface, which a run across hosts needs.
    """
    env = os.environ if environ is None else environ
    if spec.bind is not None:
        host = spec.bind.rpartition(":")[0]
        return CoordinatorBind(spec.bind, spec.bind, exposed=not _is_loopback(host))
    jax_bind = env.get("JAX_COORDINATOR_BIND_ADDRESS")
    if jax_bind:
        host = jax_bind.rpartition(":")[0]
        return CoordinatorBind(None, f"{jax_bind} (JAX_COORDINATOR_BIND_ADDRESS)", not _is_loopback(host))
    if spec.coordinator is not None and _is_loopback(spec.coordinator.rpartition(":")[0]):
        return CoordinatorBind(spec.coordinator, spec.coordinator, exposed=False)
    port = spec.coordinator.rpartition(":")[2] if spec.coordinator is not None else "PORT"
    return CoordinatorBind(None, f"every interface ([::]:{port}, JAX's default)", exposed=True)


def exposure_note(spec: DistributedSpec | None, process_index: int) -> str | None:
    """Process 0's one-line note when its coordination service is reachable from the network."""
    if spec is None or process_index != 0:
        return None
    bind = coordinator_bind(spec)
    if not bind.exposed:
        return None
    return (
        f"the coordinator listens on {bind.listens_on}: reachable from the network while the run "
        f"lasts; --coordinator-bind HOST:PORT narrows it"
    )


def join_cluster(spec: DistributedSpec) -> tuple[int, int]:
    """Join a multi-process run with `jax.distributed.initialize`, once per process.

    Must run before JAX's backends start. On CPU the processes talk through gloo. Native libraries
    (gloo) write chatter to file descriptor 1, so from here on that goes to stderr while Python's
    `sys.stdout` keeps the real stdout: JSON and reports stay clean.

    Returns:
        (number of processes, this process's index).

    Raises:
        ShardcliError: JAX could not join the cluster.
    """
    import jax
    from jax._src import distributed as jax_distributed

    state = jax_distributed.global_state
    if state.client is None:
        if _backends_started():
            raise ShardcliError(
                "a multi-process run must join the cluster before JAX starts, but JAX is already "
                "running in this process; run shardcli in a fresh process"
            )
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        route_native_stdout_to_stderr(force=True)
        if not spec.auto and spec.process_id != 0:
            _wait_for_coordinator(spec)
        try:
            if spec.auto:
                jax.distributed.initialize(
                    initialization_timeout=spec.join_timeout_s,
                    coordinator_bind_address=coordinator_bind(spec).address,
                )
            else:
                jax.distributed.initialize(
                    spec.coordinator,
                    num_processes=spec.num_processes,
                    process_id=spec.process_id,
                    initialization_timeout=spec.join_timeout_s,
                    coordinator_bind_address=coordinator_bind(spec).address,
                )
        except (RuntimeError, ValueError) as error:
            first = _first_line(error)
            if spec.auto:
                raise ShardcliError(
                    f"--distributed auto found no cluster JAX can detect ({first}); run it under SLURM, "
                    f"Open MPI or on a TPU pod, or give --coordinator --num-processes --process-id"
                ) from error
            raise ShardcliError(
                f"could not join the multi-process run as {spec.describe()}: {first}; check the "
                f"coordinator address and that every process started"
            ) from error
        _keep_gloo_on_loopback(spec)
    count, index = int(state.num_processes), int(state.process_id)
    if not spec.auto and (count, index) != (spec.num_processes, spec.process_id):
        raise ShardcliError(
            f"this process already joined a run as process {index} of {count}, not {spec.describe()}"
        )
    return count, index


def _keep_gloo_on_loopback(spec: DistributedSpec) -> None:
    """A run whose coordinator is on loopback (one machine, as `launch` starts it) keeps gloo there too.

    JAX makes gloo's sockets with no host name, so gloo listens on the address the machine's host
    name resolves to: a network address on many machines. JAX's Python API has no setting for it;
    the CPU backend's factory, registered again before any backend starts, passes gloo 127.0.0.1.
    Across hosts nothing changes: each host's name must resolve to the address the others reach.
    """
    if spec.coordinator is None or not _is_loopback(spec.coordinator.rpartition(":")[0]):
        return
    try:
        from jax._src import distributed as jax_distributed
        from jax._src import xla_bridge
        from jax._src.lib import _jax

        def cpu_client() -> object:
            gloo = _jax.make_gloo_tcp_collectives(
                distributed_client=jax_distributed.global_state.client, hostname="127.0.0.1"
            )
            return xla_bridge.make_cpu_client(collectives=gloo)

        xla_bridge.register_backend_factory("cpu", cpu_client, priority=0, fail_quietly=False)
    except (ImportError, AttributeError, TypeError, RuntimeError):
        return  # another JAX: gloo uses the host name's address, as JAX would


# Process 0 hosts JAX's coordination service. When it exits, JAX aborts every process still
# connected (a C++ check failure, SIGABRT): one a moment from reporting the same error, and one
# that succeeded and waits at JAX's shutdown barrier. So every process records its exit code in
# the service's key-value store as it leaves; a failing process 0 waits (at most EXIT_GRACE_S)
# for the others' codes, and a process that succeeded waits for process 0's code and leaves at
# once if it is a failure.
EXIT_KEY = "shardcli/exit/{}"
EXIT_GRACE_S = 5.0
# How long a process that succeeded waits for process 0's code: JAX's shutdown barrier would wait
# for process 0 as long (it may still be printing), so this adds no wait of its own.
EXIT_WAIT_FOR_PROCESS_0_S = 300.0
_POLL_MS = 200  # waits are cut into slices so that Ctrl-C is seen between them


def leave_cluster(code: int) -> bool:
    """Record this process's exit code for the others, and wait for theirs where it matters.

    A failing process 0 (not one interrupted) waits at most EXIT_GRACE_S for the others' codes: a
    process still busy in a collective records nothing, and JAX stops it once process 0 is gone.
    A process other than 0 that succeeded waits for process 0's code.

    Returns:
        Whether this process must leave at once (os._exit) rather than through JAX's shutdown
        barrier: it failed, or process 0 did. False outside a cluster.

    Raises:
        KeyboardInterrupt: Ctrl-C while waiting.
    """
    import time

    from jax._src import distributed as jax_distributed

    state = jax_distributed.global_state
    client = state.client
    if client is None:
        return False
    index, count = int(state.process_id), int(state.num_processes)
    try:
        client.key_value_set(EXIT_KEY.format(index), str(code))
    except Exception:  # noqa: BLE001 - the service is gone (process 0 left): nothing to wait for
        return code != 0
    if code == 0 and index != 0:
        said = _wait_for_key(client, EXIT_KEY.format(0), time.monotonic() + EXIT_WAIT_FOR_PROCESS_0_S)
        return said is not None and said != "0"
    if code == 0 or index != 0 or code == ExitCode.INTERRUPTED:
        return code != 0
    deadline = time.monotonic() + EXIT_GRACE_S
    for other in range(1, count):
        if _wait_for_key(client, EXIT_KEY.format(other), deadline) is None:
            return True
    time.sleep(0.2)  # each records its code just before it leaves
    return True


def _wait_for_key(client: Any, key: str, deadline: float) -> str | None:
    """The key's value once set, or None at the deadline or when the service cannot answer."""
    import time

    while (left_ms := int((deadline - time.monotonic()) * 1000)) > 0:
        try:
            return client.blocking_key_value_get(key, min(left_ms, _POLL_MS))
        except Exception as error:  # noqa: BLE001 - JAX raises its own runtime error type
            if "DEADLINE_EXCEEDED" not in str(error):
                return None  # the service is gone or refuses: stop waiting
    return None


def _wait_for_coordinator(spec: DistributedSpec) -> None:
    """Wait until process 0's coordinator accepts connections, or fail with one line.

    JAX itself would wait `initialization_timeout` and then abort the process with a C++ stack
    trace; a plain TCP connect tells a wrong address or a missing process 0 apart cleanly.
    """
    import socket
    import time

    assert spec.coordinator is not None
    host, _, port = spec.coordinator.rpartition(":")
    host = host.strip("[]")
    deadline = time.monotonic() + spec.join_timeout_s
    last = ""
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=2.0):
                return
        except OSError as error:
            last = error.strerror or type(error).__name__
        if time.monotonic() >= deadline:
            raise ShardcliError(
                f"no coordinator answered at {spec.coordinator} within --join-timeout "
                f"{spec.join_timeout_s} s ({last}); start process 0 there, or check --coordinator"
            )
        time.sleep(0.25)


def _per_process(needed: int, processes: int) -> int:
    if needed % processes:
        raise ShardcliError(
            f"the mesh's {needed} devices do not split evenly over {processes} processes; use a "
            f"mesh whose size is a multiple of {processes}"
        )
    return needed // processes


def pick_devices(present: list[Any], needed: int, processes: int) -> list[Any]:
    """The mesh's devices: the first `needed`, or with several processes the same share of each.

    Devices come in process order, so the mesh's leading axes span processes (hosts outside,
    each host's devices inside).

    Raises:
        ShardcliError: a process has fewer devices than its share.
    """
    if processes == 1:
        return present[:needed]
    share = _per_process(needed, processes)
    by_process: dict[int, list[Any]] = {}
    for device in present:
        by_process.setdefault(int(device.process_index), []).append(device)
    counts = {k: len(v) for k, v in sorted(by_process.items())}
    if len(set(counts.values())) > 1:
        # JAX's cross-process helpers (and the verdicts built on them) assume equal shares.
        raise ShardcliError(
            "every process must start with the same number of devices, but "
            + ", ".join(f"process {k} has {n}" for k, n in counts.items())
            + "; give every process the same --devices"
        )
    picked = []
    for index in range(processes):
        mine = by_process.get(index, [])
        if len(mine) < share:
            raise ShardcliError(
                f"the mesh needs {share} devices from each of {processes} processes but process "
                f"{index} has {len(mine)}; use a smaller mesh or more devices per process"
            )
        picked.extend(mine[:share])
    return picked


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
    import_jax_quietly()
    with jax_start_complaints() as complaints:
        return _start_runtime(needed, options, x64=x64, complaints=complaints)


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
    from shardcli.compilers import compiler_installed, quiet_native_logs

    # JAX's own test for a visible NVIDIA GPU (hardware_utils), without importing JAX to ask it
    gpu_here = any(os.path.exists(d) for d in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg"))
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
    # Before JAX starts its threads: each would get its own malloc arena (see shardcli.allocator).
    allocator = tune_for_reuse(
        options.malloc,
        backend_started="jax" in sys.modules and _backends_started(),
        why=options.malloc_why,
    )
    import jax

    from shardcli.core.cache import enable_compile_cache

    enable_compile_cache(options.compile_cache)
    platform = options.platform
    requested = options.devices
    processes = 1
    if options.distributed is not None:
        processes, _ = join_cluster(options.distributed)
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
    from shardcli.compilers import compiler_installed, native_complaint, quiet_native_logs

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


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0].rstrip(".") if lines else type(error).__name__


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

    from shardcli.compilers import compiler_versions
    from shardcli.core.cache import cache_state

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


def available_host_memory() -> int | None:
    """Bytes of memory the host can still give (MemAvailable), or None when unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def device_memory_limit(device: Any) -> int | None:
    """Bytes one accelerator can hold, when its backend reports it."""
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - backends differ; no stats is a normal answer
        return None
    if not stats:
        return None
    return stats.get("bytes_limit")


def check_fits_in_memory(info: RuntimeInfo, devices: list, *, per_device: int, total: int, what: str) -> None:
    """Refuse before allocating when the bytes would not fit.

    On CPU every faked device lives in host memory, so this process's share of the total counts;
    on an accelerator the bytes one device holds count against that device's limit. With several
    processes every one refuses if any does, so none is left waiting for the others.

    Raises:
        ShardcliError: when the estimate exceeds what is available (here or in another process).
    """
    refusal = _memory_refusal(info, devices, per_device=per_device, total=total, what=what)
    if info.process_count > 1:
        import numpy as np

        from shardcli.core.processes import gather_from_processes

        refused = gather_from_processes(np.array([refusal is not None], dtype=np.int32))[:, 0]
        if refusal is None and refused.any():
            where = ", ".join(str(k) for k in np.flatnonzero(refused))
            refusal = (
                f"{what} does not fit in the memory of process(es) {where} (see their output); "
                f"use a smaller size"
            )
    if refusal is not None:
        raise ShardcliError(refusal)


def _memory_refusal(
    info: RuntimeInfo, devices: list, *, per_device: int, total: int, what: str
) -> str | None:
    import jax

    here = [d for d in devices if d.process_index == jax.process_index()] or devices
    if info.platform == "cpu":
        available = available_host_memory()
        mine = total * len(here) // max(len(devices), 1)
        # Leave headroom for XLA's temporaries and the host copy the inputs are built from.
        if available is not None and mine > 0.8 * available:
            return (
                f"{what} needs about {format_bytes(mine)} across {len(here)} CPU devices but "
                f"this machine has {format_bytes(available)} available; use a smaller size"
            )
        return None
    limit = device_memory_limit(here[0])
    if limit is not None and per_device > 0.9 * limit:
        return (
            f"{what} needs about {format_bytes(per_device)} per device but one {info.device_kind} "
            f"holds {format_bytes(limit)}; use a smaller size"
        )
    return None
