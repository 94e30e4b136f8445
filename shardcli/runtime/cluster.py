"""Joining and leaving a multi-process run (`jax.distributed`), and each process's devices."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from shardcli.errors import ExitCode, ShardcliError
from shardcli.runtime.stdout import filter_native_chatter, route_native_stdout_to_stderr
from shardcli.specs.runs import DistributedSpec


@dataclass(frozen=True)
class CoordinatorBind:
    """Where process 0's coordination service listens, and why."""

    address: str | None  # what shardcli passes as coordinator_bind_address; None: JAX chooses
    listens_on: str  # what it listens on, in words
    exposed: bool  # reachable from the network (every interface, or a non-loopback address)


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


def _backends_started() -> bool:
    from jax._src import xla_bridge  # the only way to ask without starting them

    return bool(xla_bridge.backends_are_initialized())


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0].rstrip(".") if lines else type(error).__name__


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


def join_cluster(spec: DistributedSpec, *, chatter: bool = False) -> tuple[int, int]:
    """Join a multi-process run with `jax.distributed.initialize`, once per process.

    Must run before JAX's backends start. On CPU the processes talk through gloo. Native libraries
    (gloo) write chatter to file descriptor 1, so from here on that goes to stderr while Python's
    `sys.stdout` keeps the real stdout: JSON and reports stay clean. gloo's connection messages
    (`[Gloo] Rank N is connected to ...`, on descriptor 1 or 2) are kept off stderr too, unless
    `chatter` (-v) asks for them (`filter_native_chatter`).

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
        if not chatter:
            filter_native_chatter()
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
