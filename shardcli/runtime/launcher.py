"""`shardcli launch`: run one shardcli command as N local processes joined by jax.distributed.

Each child is `python -m shardcli COMMAND...` with its own faked CPU devices; the coordinates of the
run (coordinator address, process count, process id) reach it through the `SHARDCLI_*` variables its
options read. JAX's runtime does all the communication; this module only starts, watches, streams and
stops processes.

The supervisor's rules:
- every child runs in its own session (process group), so stopping it stops whatever it started;
- when one child fails, the others get a short grace to finish on their own (they usually reach the
  same verdict), then are stopped; the run exits with the first failure's code;
- `timeout` bounds the whole run (exit 124); Ctrl-C or SIGTERM stop every child (exit 130);
- a coordinator port that turns out to be taken is replaced and the run retried.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import BinaryIO

from shardcli.errors import ExitCode, ShardcliError

# Flags the launcher sets for every child; the command must leave them out.
RESERVED_FLAGS = ("--coordinator", "--num-processes", "--process-id", "--distributed")
MAX_PROCESSES = 64
TAIL_LINES = 15
GRACE_S = 5.0  # after a first failure, how long the others may take to finish on their own
STOP_S = 1.0  # after SIGTERM, how long before SIGKILL
PORT_ATTEMPTS = 4
# Native chatter kept out of the streamed output (it stays in the logs).
STREAM_NOISE = (b"[Gloo] Rank ", b"preemption_notifier.cc")
# What JAX's coordination service (gRPC) prints when it cannot bind its port.
PORT_TAKEN_MARKERS = (b"Failed to add port", b"Address already in use")
POLL_S = 0.05


@dataclass(frozen=True)
class LaunchSpec:
    """A validated `shardcli launch` request."""

    processes: int
    command: tuple[str, ...]  # the shardcli command each process runs, without the program name
    devices_per_process: int | None = None
    timeout_s: float | None = 600.0  # None: no limit
    tee: bool = False
    log_dir: str | None = None  # None: a fresh temporary directory
    port: int | None = None  # None: a free port, replaced if it turns out to be taken


@dataclass(frozen=True)
class ProcessExit:
    process_id: int
    pid: int
    returncode: int | None
    stopped: bool  # the launcher stopped it (after another's failure, a timeout or Ctrl-C)
    log: str
    tail: tuple[str, ...]

    @property
    def how(self) -> str:
        if self.stopped:
            return "was stopped by the launcher"
        if self.returncode is not None and self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"was killed by {name}"
        return f"exited with code {self.returncode}"


@dataclass(frozen=True)
class LaunchResult:
    """How the run ended."""

    exit_code: int
    reason: str  # "ok", "failed", "timeout" or "interrupted"
    coordinator: str
    log_dir: str
    exits: tuple[ProcessExit, ...]
    first_failure: int | None  # the process id that failed first
    ports_tried: tuple[int, ...] = field(default_factory=tuple)
    elapsed_s: float = 0.0
    port_taken: bool = False  # process 0 could not bind the coordinator port


def validate_launch(spec: LaunchSpec, device_commands: tuple[str, ...]) -> LaunchSpec:
    """Check a request before anything starts; `device_commands` are those launch may run.

    Raises:
        ShardcliError: a request the launcher cannot run as asked.
    """
    if not 1 <= spec.processes <= MAX_PROCESSES:
        raise ShardcliError(f"-n {spec.processes} is not valid; give 1 to {MAX_PROCESSES} processes")
    if not spec.command:
        raise ShardcliError(
            "launch needs a command after --, e.g. shardcli launch -n 2 -- collective psum --mesh 2x4"
        )
    verb = spec.command[0]
    if verb not in device_commands:
        raise ShardcliError(
            f"launch runs a device command, not {verb!r}; give one of {', '.join(device_commands)} after --"
        )
    for word in spec.command:
        flag = word.split("=", 1)[0]
        if flag in RESERVED_FLAGS:
            raise ShardcliError(f"{flag} is set by launch for every process; leave it out of the command")
        if flag == "--devices" and spec.devices_per_process is not None:
            raise ShardcliError(
                "--devices in the command and --devices-per-process both set the devices of each "
                "process; give only --devices-per-process"
            )
        if flag == "--platform":
            value = _flag_value(spec.command, word)
            if value != "cpu":
                raise ShardcliError(
                    f"launch runs every process on this machine's CPU, so --platform {value} does not "
                    f"apply; on several hosts start one shardcli per host with --coordinator "
                    f"--num-processes --process-id (or --distributed auto)"
                )
    if spec.devices_per_process is not None and spec.devices_per_process < 1:
        raise ShardcliError(f"--devices-per-process {spec.devices_per_process} is not valid; give at least 1")
    if spec.timeout_s is not None and not (math.isfinite(spec.timeout_s) and spec.timeout_s > 0):
        raise ShardcliError(f"--timeout {spec.timeout_s:g} is not valid; give seconds > 0, or 0 for none")
    if spec.log_dir is not None:
        try:
            os.makedirs(spec.log_dir, exist_ok=True)
        except OSError as error:
            raise ShardcliError(
                f"--log-dir {spec.log_dir!r} cannot be used ({error.strerror or error}); give a folder "
                f"you can write to"
            ) from error
        if not os.access(spec.log_dir, os.W_OK):
            raise ShardcliError(f"--log-dir {spec.log_dir!r} is not writable; give a folder you can write to")
    if spec.port is not None:
        if not 1 <= spec.port <= 65535:
            raise ShardcliError(f"--port {spec.port} is not valid; give 1-65535, or leave it out")
        if not port_is_free(spec.port):
            raise ShardcliError(
                f"--port {spec.port} is taken on this machine; give another, or leave --port out to "
                f"pick a free one"
            )
    return spec


def _flag_value(command: tuple[str, ...], word: str) -> str:
    if "=" in word:
        return word.split("=", 1)[1]
    at = command.index(word)
    return command[at + 1] if at + 1 < len(command) else ""


def port_is_free(port: int) -> bool:
    """Whether the coordinator could bind `port` (it listens on every interface)."""
    for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((host, port))
        except OSError as error:
            if family == socket.AF_INET6 and error.errno in (97, 99):  # no IPv6 here
                continue
            return False
    return True


def free_port() -> int:
    """A port nothing listens on now (another program may still take it before the coordinator)."""
    for _ in range(20):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            port = int(s.getsockname()[1])
        if port_is_free(port):
            return port
    raise ShardcliError("could not find a free TCP port on this machine for the coordinator")


class _Child:
    """One process: its Popen, a log file, and threads copying its output."""

    def __init__(
        self,
        process_id: int,
        argv: list[str],
        env: dict[str, str],
        log_path: str,
        stream: bool,
        prefix: bytes,
        out: BinaryIO,
        err: BinaryIO,
        write_lock: threading.Lock,
    ) -> None:
        self.process_id = process_id
        self.log_path = log_path
        self.tail: collections.deque[bytes] = collections.deque(maxlen=TAIL_LINES)
        self.port_taken = False
        self.stopped = False
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in close()
        self._log_lock = threading.Lock()
        self.popen = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: stopping it stops its children too
        )
        self._threads = [
            threading.Thread(
                target=self._pump, args=(pipe, target if stream else None, prefix, write_lock), daemon=True
            )
            for pipe, target in ((self.popen.stdout, out), (self.popen.stderr, err))
        ]
        for t in self._threads:
            t.start()
        self.exited_at: float | None = None  # when it exited, to tell which failed first
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        self.popen.wait()
        self.exited_at = time.monotonic()

    def _pump(
        self, pipe: BinaryIO, target: BinaryIO | None, prefix: bytes, write_lock: threading.Lock
    ) -> None:
        """Copy one pipe, line by line, into the log and (unless it is noise) to `target`."""
        for line in iter(pipe.readline, b""):
            if any(marker in line for marker in PORT_TAKEN_MARKERS):
                self.port_taken = True
            noise = any(marker in line for marker in STREAM_NOISE)
            with self._log_lock:
                self._log.write(line)
                self._log.flush()
                if not noise:
                    self.tail.append(line)
            if target is not None and not noise:
                try:
                    with write_lock:
                        target.write(prefix + line)
                        target.flush()
                except (BrokenPipeError, ValueError, OSError):
                    # The reader went away (`| head`): keep logging, stop streaming, and keep the
                    # interpreter's own final flush of that stream from failing too.
                    _point_at_devnull(target)
                    target = None
        pipe.close()

    def signal(self, sig: int) -> bool:
        """Send `sig` to its process group; False when it has already exited."""
        if self.popen.poll() is not None:
            return False
        self.stopped = True
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def close(self) -> None:
        """After it exited: stop what it left in its group, drain its output, close the log."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        for t in self._threads:
            t.join()  # every byte it wrote reaches the log and the stream
        self._log.close()

    def exit(self) -> ProcessExit:
        return ProcessExit(
            process_id=self.process_id,
            pid=self.popen.pid,
            returncode=self.popen.returncode,
            stopped=self.stopped,
            log=self.log_path,
            tail=tuple(line.decode("utf-8", "replace").rstrip("\n") for line in self.tail),
        )


def _point_at_devnull(stream: BinaryIO) -> None:
    """After its reader went away, send what is still written to `stream` (e.g. at exit) nowhere."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


class _Interrupted(Exception):
    pass


# Variables that say how a process joins a run: the launcher sets them for each child.
JOIN_VARIABLES = (
    "SHARDCLI_COORDINATOR",
    "SHARDCLI_NUM_PROCESSES",
    "SHARDCLI_PROCESS_ID",
    "SHARDCLI_DISTRIBUTED",
)


def _child_env(spec: LaunchSpec, coordinator: str, process_id: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in JOIN_VARIABLES}
    env.update(
        SHARDCLI_LAUNCHER_PID=str(os.getpid()),  # the child dies with the launcher (see cli.py)
        SHARDCLI_COORDINATOR=coordinator,
        SHARDCLI_NUM_PROCESSES=str(spec.processes),
        SHARDCLI_PROCESS_ID=str(process_id),
        PYTHONUNBUFFERED="1",
    )
    if spec.devices_per_process is not None:
        env["SHARDCLI_DEVICES"] = str(spec.devices_per_process)
    return env


def _argv(spec: LaunchSpec) -> list[str]:
    command = list(spec.command)
    if not any(w.split("=", 1)[0] == "--platform" for w in command):
        command += ["--platform", "cpu"]
    return [sys.executable, "-m", "shardcli", *command]


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Stopping:
    """Signal handling while children run: the first stop signal interrupts, later ones are ignored.

    Ctrl-C, SIGTERM and SIGHUP (a closed terminal) all stop the run; a second signal while the
    children are being stopped must not cut that short and leave them running.
    """

    def __init__(self) -> None:
        self.stopping = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> _Stopping:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        if not self.stopping:
            self.stopping = True
            raise _Interrupted

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def run_launch(
    spec: LaunchSpec,
    *,
    out: BinaryIO | None = None,
    err: BinaryIO | None = None,
    on_start: Callable[[str, str, tuple[int, ...]], None] | None = None,
) -> LaunchResult:
    """Run the command in `spec.processes` local processes until all finish, one fails, or time runs out.

    Args:
        spec: the validated request.
        out, err: where process 0's (with tee, every process's) stdout and stderr go.
        on_start: called with (coordinator, log directory, child pids) once the children started.
    """
    out = out if out is not None else sys.stdout.buffer
    err = err if err is not None else sys.stderr.buffer
    log_dir = spec.log_dir or tempfile.mkdtemp(prefix="shardcli-launch-")
    start = time.monotonic()
    deadline = start + spec.timeout_s if spec.timeout_s is not None else None
    ports: list[int] = []
    with _Stopping() as stopping:
        while True:
            port = spec.port if spec.port is not None else free_port()
            ports.append(port)
            result = _run_once(spec, port, log_dir, out, err, deadline, on_start, start, stopping)
            retry = (
                result.reason == "failed"
                and spec.port is None
                and len(ports) < PORT_ATTEMPTS
                and result.port_taken
            )
            if not retry:
                break
            err.write(f"shardcli launch: port {port} was taken; retrying on another\n".encode())
            err.flush()
    if spec.log_dir is None and result.reason == "ok":
        shutil.rmtree(log_dir, ignore_errors=True)  # kept only when something went wrong
    return replace(result, ports_tried=tuple(ports))


def _run_once(
    spec: LaunchSpec,
    port: int,
    log_dir: str,
    out: BinaryIO,
    err: BinaryIO,
    deadline: float | None,
    on_start: Callable[[str, str, tuple[int, ...]], None] | None,
    start: float,
    stopping: _Stopping,
) -> LaunchResult:
    coordinator = f"127.0.0.1:{port}"
    write_lock = threading.Lock()
    children: list[_Child] = []
    reason, first_failure = "ok", None
    try:
        for k in range(spec.processes):
            children.append(
                _Child(
                    k,
                    _argv(spec),
                    _child_env(spec, coordinator, k),
                    os.path.join(log_dir, f"process-{k}.log"),
                    stream=k == 0 or spec.tee,
                    prefix=f"[{k}] ".encode() if spec.tee else b"",
                    out=out,
                    err=err,
                    write_lock=write_lock,
                )
            )
        if on_start is not None:
            on_start(coordinator, log_dir, tuple(c.popen.pid for c in children))
        grace_until = None
        while True:
            if first_failure is None:
                failed = [c for c in children if c.exited_at is not None and c.popen.returncode != 0]
                if failed:
                    first_failure = min(failed, key=lambda c: c.exited_at or 0.0).process_id
                    reason = "failed"
                    grace_until = time.monotonic() + GRACE_S
            if all(c.exited_at is not None for c in children):
                break
            now = time.monotonic()
            if grace_until is not None and (now >= grace_until or children[0].port_taken):
                break  # (with the port taken, the others can only wait for a coordinator)
            if deadline is not None and now >= deadline:
                reason = "timeout" if first_failure is None else reason
                break
            time.sleep(POLL_S)
    except (KeyboardInterrupt, _Interrupted):
        reason = "interrupted"
    finally:
        stopping.stopping = True  # a second Ctrl-C must not cut the stopping short
        _stop_all(children)
    exits = tuple(c.exit() for c in children)
    return LaunchResult(
        exit_code=_exit_code(reason, exits, first_failure),
        reason=reason,
        coordinator=coordinator,
        log_dir=log_dir,
        exits=exits,
        first_failure=first_failure,
        elapsed_s=time.monotonic() - start,
        port_taken=first_failure == 0 and children[0].port_taken,
    )


def _stop_all(children: list[_Child]) -> None:
    """SIGTERM every live child's group, SIGKILL what is left after STOP_S, then collect them.

    JAX catches SIGTERM (preemption notices), so SIGKILL is what usually ends a busy child.
    """
    if any([c.signal(signal.SIGTERM) for c in children]):
        until = time.monotonic() + STOP_S
        while time.monotonic() < until and any(c.popen.poll() is None for c in children):
            time.sleep(POLL_S)
        for c in children:
            c.signal(signal.SIGKILL)
    for c in children:
        c.popen.wait()
        c.close()


def _exit_code(reason: str, exits: tuple[ProcessExit, ...], first_failure: int | None) -> int:
    if first_failure is not None and reason == "failed":
        rc = exits[first_failure].returncode
        assert rc is not None
        return 128 - rc if rc < 0 else rc
    if reason == "timeout":
        return ExitCode.TIMEOUT
    if reason == "interrupted":
        return ExitCode.INTERRUPTED
    return ExitCode.OK
