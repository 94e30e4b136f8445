"""Several processes: the flags that join a run, the launcher, and real runs over jax.distributed.

The multi-process runs start real local processes (`shardcli launch`, gloo on loopback), each with
its own faked CPU devices; they are the slowest tests here, so they use two timed iterations.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import clean_env, pythonpath_first, run_shardcli
from test_cli_foundation import assert_one_line_error

from shardcli.errors import ShardcliError
from shardcli.runtime import launcher
from shardcli.runtime.cluster import coordinator_bind, exposure_note, pick_devices
from shardcli.runtime.processes import combine_check, combine_timing
from shardcli.runtime.timing import Timing, summarize
from shardcli.specs.runs import DistributedSpec, parse_distributed

# Compiles, processes or whole programs: left out of the quick subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

FAST = ("--warmup", "1", "--iters", "2")

# --- flags (no processes) -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param((None, None, None, "off"), None, id="single-process"),
        pytest.param((None, None, None, "auto"), DistributedSpec(), id="auto"),
        pytest.param(("10.0.0.1:1234", 4, 3, "off"), DistributedSpec("10.0.0.1:1234", 4, 3), id="explicit"),
        pytest.param(("[::1]:80", 2, 0, "off"), DistributedSpec("[::1]:80", 2, 0), id="ipv6"),
        pytest.param(
            ("10.0.0.1:1234", 4, 3, "off", 300, " 10.0.0.1:1234 "),
            DistributedSpec("10.0.0.1:1234", 4, 3, bind="10.0.0.1:1234"),
            id="bind",
        ),
        pytest.param(
            (None, None, None, "auto", 300, "[::]:99"), DistributedSpec(bind="[::]:99"), id="auto-bind"
        ),
    ],
)
def test_parse_distributed(args, expected):
    assert parse_distributed(*args) == expected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            (None, 2, None, "off"),
            "--num-processes also needs --coordinator and --process-id",
            id="count-alone",
        ),
        pytest.param(
            ("h:1", None, 0, "off"),
            "--coordinator and --process-id also need --num-processes",
            id="no-count",
        ),
        pytest.param(("h", 2, 0, "off"), "--coordinator 'h' is not HOST:PORT", id="no-port"),
        pytest.param(("h:70000", 2, 0, "off"), "(port 1-65535)", id="port-range"),
        pytest.param(("h:1", 0, 0, "off"), "--num-processes 0 is not valid", id="zero-processes"),
        pytest.param(
            ("h:1", 2, 2, "off"),
            "--process-id 2 is not valid for --num-processes 2; give 0 to 1",
            id="id-too-big",
        ),
        pytest.param(
            ("h:1", None, None, "auto"),
            "--distributed auto lets JAX detect the cluster, so --coordinator cannot be given",
            id="auto-and-explicit",
        ),
        pytest.param((None, None, None, "mpi"), "--distributed 'mpi' is not valid", id="bad-mode"),
        pytest.param(
            ("h:1", 2, 0, "off", 0),
            "--join-timeout 0 is not valid; give at least 1 second",
            id="join-timeout",
        ),
        pytest.param(
            ("h:1", 2, 0, "off", 300, "127.0.0.1"),
            "--coordinator-bind '127.0.0.1' is not HOST:PORT; give e.g. 127.0.0.1:1234",
            id="bind-no-port",
        ),
        pytest.param(
            (None, None, None, "off", 300, "127.0.0.1:5"),
            "--coordinator-bind is for a multi-process run",
            id="bind-alone",
        ),
    ],
)
def test_parse_distributed_refuses(args, message):
    with pytest.raises(ShardcliError) as info:
        parse_distributed(*args)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("spec", "environ", "address", "exposed"),
    [
        pytest.param(DistributedSpec("127.0.0.1:5", 2, 0), {}, "127.0.0.1:5", False, id="loopback"),
        pytest.param(DistributedSpec("localhost:5", 2, 0), {}, "localhost:5", False, id="localhost"),
        pytest.param(DistributedSpec("[::1]:5", 2, 0), {}, "[::1]:5", False, id="ipv6-loopback"),
        pytest.param(DistributedSpec("10.0.0.1:5", 2, 0), {}, None, True, id="network"),
        pytest.param(DistributedSpec(), {}, None, True, id="auto"),
        pytest.param(
            DistributedSpec("10.0.0.1:5", 2, 0, bind="10.0.0.1:5"), {}, "10.0.0.1:5", True, id="bind-nic"
        ),
        pytest.param(
            DistributedSpec("127.0.0.1:5", 2, 0),
            {"JAX_COORDINATOR_BIND_ADDRESS": "[::]:5"},
            None,
            True,
            id="jax-env-wins-over-the-default",
        ),
        pytest.param(
            DistributedSpec("127.0.0.1:5", 2, 0, bind="127.0.0.1:5"),
            {"JAX_COORDINATOR_BIND_ADDRESS": "[::]:5"},
            "127.0.0.1:5",
            False,
            id="flag-wins-over-jax-env",
        ),
    ],
)
def test_coordinator_bind(spec, environ, address, exposed):
    bind = coordinator_bind(spec, environ)
    assert (bind.address, bind.exposed) == (address, exposed)


def test_only_an_exposed_process_0_gets_the_note(monkeypatch):
    monkeypatch.delenv("JAX_COORDINATOR_BIND_ADDRESS", raising=False)
    network = DistributedSpec("10.0.0.1:5", 2, 0)
    assert exposure_note(network, 0) == (
        "the coordinator listens on every interface ([::]:5, JAX's default): reachable from the network "
        "while the run lasts; --coordinator-bind HOST:PORT narrows it"
    )
    assert exposure_note(network, 1) is None
    assert exposure_note(DistributedSpec("127.0.0.1:5", 2, 0), 0) is None
    assert exposure_note(None, 0) is None


CLI_BAD_INPUT = [
    pytest.param(
        ["collective", "psum", "--process-id", "1"],
        "--process-id also needs --coordinator and --num-processes",
        id="collective-partial",
    ),
    pytest.param(
        ["matmul", "--coordinator", "h:1", "--num-processes", "2", "--process-id", "-1"],
        "--process-id -1 is not valid for --num-processes 2",
        id="matmul-negative-id",
    ),
    pytest.param(
        ["collective", "psum", "--process-timing", "median"],
        "--process-timing 'median' is not valid; choose one of max, avg",
        id="process-timing",
    ),
    pytest.param(["launch", "-n", "0", "--", "mesh"], "-n 0 is not valid; give 1 to 64", id="launch-n"),
    pytest.param(["launch", "-n", "2"], "launch needs a command after --", id="launch-no-command"),
    pytest.param(
        ["launch", "--", "launch", "mesh"], "launch runs a device command, not 'launch'", id="launch-nested"
    ),
    pytest.param(
        ["launch", "--", "collective", "psum", "--coordinator", "h:1"],
        "--coordinator is set by launch for every process; leave it out of the command",
        id="launch-reserved",
    ),
    pytest.param(
        ["launch", "--", "mesh", "--process-id=1"],
        "--process-id is set by launch for every process",
        id="launch-reserved-equals",
    ),
    pytest.param(
        ["launch", "--devices-per-process", "2", "--", "mesh", "--devices", "2"],
        "--devices in the command and --devices-per-process both set the devices of each process",
        id="launch-devices-twice",
    ),
    pytest.param(
        ["launch", "--", "mesh", "--platform", "gpu"],
        "launch runs every process on this machine's CPU, so --platform gpu does not apply",
        id="launch-platform",
    ),
    pytest.param(
        ["launch", "--devices-per-process", "0", "--", "mesh"],
        "--devices-per-process 0 is not valid; give at least 1",
        id="launch-devices-zero",
    ),
    pytest.param(
        ["launch", "--timeout", "-1", "--", "mesh"], "--timeout -1 is not valid", id="launch-timeout"
    ),
    pytest.param(["launch", "--port", "0", "--", "mesh"], "--port 0 is not valid", id="launch-port"),
    pytest.param(["launch", "--timeout", "nan", "--", "mesh"], "--timeout nan is not valid", id="launch-nan"),
    pytest.param(
        ["launch", "--log-dir", "/proc/no/such", "--", "mesh"],
        "--log-dir '/proc/no/such' cannot be used",
        id="launch-log-dir",
    ),
]


@pytest.mark.parametrize(("args", "message"), CLI_BAD_INPUT)
def test_bad_distributed_input_exits_2_with_one_line(cli, args, message):
    assert message in assert_one_line_error(cli(args))


def test_env_vars_feed_the_flags(cli):
    result = cli(["mesh"], env={"SHARDCLI_NUM_PROCESSES": "2"})
    assert "--num-processes also needs --coordinator and --process-id" in assert_one_line_error(result)


def test_launch_refuses_a_taken_port(cli):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        line = assert_one_line_error(cli(["launch", "--port", str(port), "--", "mesh"]))
    assert f"--port {port} is taken on this machine" in line


# --- device selection and combining (one process) -------------------------------------------------


@dataclass(frozen=True)
class FakeDevice:
    id: int
    process_index: int


def fake_devices(per_process: list[int]) -> list[FakeDevice]:
    return [
        FakeDevice(id=k * 1000 + i, process_index=k)
        for k, count in enumerate(per_process)
        for i in range(count)
    ]


def test_pick_devices_takes_the_same_share_of_each_process_in_order():
    picked = pick_devices(fake_devices([3, 3]), needed=4, processes=2)
    assert [d.id for d in picked] == [0, 1, 1000, 1001]


def test_pick_devices_single_process_takes_the_first():
    assert [d.id for d in pick_devices(fake_devices([4]), needed=2, processes=1)] == [0, 1]


@pytest.mark.parametrize(
    ("per_process", "needed", "message"),
    [
        pytest.param(
            [1, 1], 4, "the mesh needs 2 devices from each of 2 processes but process 0 has 1", id="short"
        ),
        pytest.param(
            [2, 1],
            2,
            "every process must start with the same number of devices, but process 0 has 2, process 1 has 1",
            id="unequal",
        ),
        pytest.param([2, 2], 3, "the mesh's 3 devices do not split evenly over 2 processes", id="uneven"),
    ],
)
def test_pick_devices_refuses(per_process, needed, message):
    with pytest.raises(ShardcliError) as info:
        pick_devices(fake_devices(per_process), needed=needed, processes=len(per_process))
    assert message in str(info.value)


def test_combining_is_the_identity_in_one_process():
    samples = (0.5, 0.25, 0.75)
    timing = Timing(compile_s=1.0, warmup=1, samples=samples, stats=summarize(samples))
    assert combine_timing(timing, "max") is timing
    assert combine_check(3, [5, 1], 0.5, [0, 1, 5]) == (3, (1, 5), 0.5)


# --- real runs over several processes -------------------------------------------------------------


def launch(
    *args: str, timeout: float = 180, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_shardcli("launch", *args, timeout=timeout, env=env)


def with_site(tmp_path: Path, code: str) -> dict[str, str]:
    """Plant CODE as the children's sitecustomize: TMP_PATH goes first on PYTHONPATH, the rest is kept.

    sitecustomize runs before `-m` puts the working directory on sys.path, so replacing PYTHONPATH
    would hide a checkout that is not installed (run with PYTHONPATH=.): the plant's import of
    shardcli would fail, Python would only print "Error in sitecustomize", and the run would go on
    unplanted.
    """
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent(code))
    return pythonpath_first(tmp_path)


def json_doc(proc: subprocess.CompletedProcess[str]) -> dict:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


COLLECTIVES = ("psum", "all_gather", "psum_scatter", "ppermute", "all_to_all")


@pytest.mark.parametrize("processes", [2, 4])
def test_every_collective_over_processes_is_verified(processes):
    # one launch runs the five collectives (`collective a,b,...`), each verified and timed on its own
    devices = 2 * processes
    proc = launch(
        "-n",
        str(processes),
        "--devices-per-process",
        "2",
        "--",
        "collective",
        ",".join(COLLECTIVES),
        "--mesh",
        f"{processes}x2",
        "--axes",
        "host,local",
        "--format",
        "json",
        *FAST,
    )
    assert proc.returncode == 0, proc.stderr
    whole = json_doc(proc)
    assert [d["config"]["collective"] for d in whole["collectives"]] == list(COLLECTIVES)
    assert whole["summary"]["wrong"] == 0
    for doc in whole["collectives"]:
        name = doc["config"]["collective"]
        runtime = doc["runtime"]
        assert (runtime["process_count"], runtime["process_index"], runtime["device_count"]) == (
            processes,
            0,
            devices,
        ), name
        # the leading mesh axis spans processes: row k of the mesh belongs to process k
        owners = [d["process_index"] for d in doc["mesh"]["devices"]]
        assert owners == [k for k in range(processes) for _ in range(2)], name
        (size,) = doc["sizes"]
        assert size["wrong"] == 0, name
        (placement,) = size["placements"]
        timing = placement["timing"]
        assert timing["across_processes"] == "max", name
        assert [p["process_index"] for p in timing["processes"]] == list(range(processes)), name
        per_iteration_max = np.max([p["samples_s"] for p in timing["processes"]], axis=0)
        assert timing["samples_s"] == pytest.approx(per_iteration_max.tolist()), name


def test_matmul_over_processes_is_verified_for_every_impl():
    proc = launch(
        "--",
        "matmul",
        "--case",
        "allreduce",
        "--impl",
        "all",
        "--mesh",
        "2x2",
        "--format",
        "json",
        "--process-timing",
        "avg",
        *FAST,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json_doc(proc)
    assert (doc["runtime"]["process_count"], doc["runtime"]["process_timing"]) == (2, "avg")
    (run,) = doc["runs"]
    assert [(i["impl"], i["status"], i["wrong"]) for i in run["impls"]] == [
        ("manual", "ok", 0),
        ("auto", "ok", 0),
        ("explicit", "ok", 0),
    ]
    timing = run["impls"][0]["timing"]
    assert timing["across_processes"] == "avg"
    per_iteration_mean = np.mean([p["samples_s"] for p in timing["processes"]], axis=0)
    assert timing["samples_s"] == pytest.approx(per_iteration_mean.tolist())


def test_distributed_auto_without_a_cluster_is_one_line():
    proc = run_shardcli("mesh", "--distributed", "auto")
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith("shardcli: error: --distributed auto found no cluster JAX can detect")


@pytest.mark.once  # the launcher's own handling of its processes
def test_an_unreachable_coordinator_is_one_line_after_the_join_timeout():
    """Process 1 waits for a coordinator nobody started: one line, exit 2, not JAX's abort."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nothing listens there
    started = time.monotonic()
    proc = run_shardcli(
        "mesh", "--mesh", "2", "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
        "--process-id", "1", "--join-timeout", "2",
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert f"no coordinator answered at 127.0.0.1:{port} within --join-timeout 2 s" in line
    assert time.monotonic() - started < 30


def test_recipe_over_processes_is_verified():
    proc = launch("--", "recipe", "three-ways", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json_doc(proc)
    assert doc["runtime"]["process_count"] == 2
    assert doc["ok"] and all(c["ok"] for c in doc["checks"])


@pytest.mark.once  # the launcher's own handling of its processes
def test_only_process_0_prints_unless_all_processes():
    quiet = launch("--tee", "--", "collective", "psum", "--mesh", "4", "--no-color", *FAST)
    assert quiet.returncode == 0, quiet.stderr
    lines = quiet.stdout.splitlines()
    assert lines and all(line.startswith("[0] ") for line in lines), quiet.stdout
    assert "each of the 2 processes checked its own devices" in quiet.stdout

    both = launch("--tee", "--", "collective", "psum", "--mesh", "4", "--no-color", "--all-processes", *FAST)
    assert both.returncode == 0, both.stderr
    for k in (0, 1):
        assert re.search(rf"^\[{k}\] processes\s+2 \(this is process {k}\)", both.stdout, re.M), both.stdout


PLANT = """
    import dataclasses, os
    if os.environ.get("SHARDCLI_PROCESS_ID") == "1":
        from shardcli.playground.collective import cases as collectives
        psum = collectives.COLLECTIVES["psum"]
        collectives.COLLECTIVES["psum"] = dataclasses.replace(
            psum, body=lambda x, params, n: psum.body(x, params, n) + 1
        )
"""


def test_a_wrong_shard_on_process_1_fails_every_process(tmp_path):
    """process 1's psum adds 1 after the collective; process 0 must still exit 1 and name its devices."""
    env = with_site(tmp_path, PLANT)
    proc = launch(
        "--log-dir",
        str(tmp_path / "logs"),
        "--",
        "collective",
        "psum",
        "--mesh",
        "4",
        "--format",
        "json",
        *FAST,
        env=env,
    )
    assert proc.returncode == 1, proc.stderr
    doc = json_doc(proc)
    process_1 = [d["id"] for d in doc["mesh"]["devices"] if d["process_index"] == 1]
    (size,) = doc["sizes"]
    (placement,) = size["placements"]
    assert size["wrong"] == 2 * 4  # 2 devices x 4 elements each
    assert placement["wrong_devices"] == process_1
    # process 1 reached the same verdict on its own: every log ends without a launcher stop
    assert "stopped by the launcher" not in proc.stderr


@pytest.mark.once  # the launcher's own handling of its processes
def test_bad_input_in_the_command_exits_2_with_the_child_line():
    proc = launch("--", "collective", "psum", "--mesh", "3")
    assert proc.returncode == 2
    assert "the mesh's 3 devices do not split evenly over 2 processes" in proc.stderr
    assert "Traceback" not in proc.stderr


def pids_of(stderr_text: str) -> list[int]:
    line = next(line for line in stderr_text.splitlines() if "shardcli launch: " in line and "pids" in line)
    inside = line.split("(pids ", 1)[1].split(")", 1)[0]
    return [int(p) for p in inside.split(", ")]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes; it only waits for its parent (gone too) to be reaped
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


IN_THE_LOOP = """
    import os, pathlib
    import shardcli.playground.collective.placement as collective_placement
    real_loop = collective_placement.time_iterations
    def marked(*args, **kwargs):
        name = "in-the-loop-" + os.environ.get("SHARDCLI_PROCESS_ID", "0")
        pathlib.Path(os.environ["PLANT_DIR"], name).touch()
        return real_loop(*args, **kwargs)
    collective_placement.time_iterations = marked
"""


def start_launcher(*args: str, tmp_path: Path) -> tuple[subprocess.Popen[bytes], list[int], Path]:
    """Start `shardcli launch ARGS` in the background; return it, its children's pids and its log.

    The children are planted to say (a file each in TMP_PATH) when they enter the timing loop:
    `wait_in_the_loop` waits for that instead of guessing how long start-up takes.
    """
    log = tmp_path / "launch.err"
    env = clean_env({"PLANT_DIR": str(tmp_path), **with_site(tmp_path, IN_THE_LOOP)})
    with open(log, "wb") as stderr:  # the launcher keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "shardcli", "launch", *args],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if "(pids " in text:
            return proc, pids_of(text), log
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"the launcher never said which processes it started: {log.read_text()}")


def wait_in_the_loop(proc: subprocess.Popen, tmp_path: Path, processes: int = 2) -> None:
    """Until every process has entered its timing loop (generous: start-up on a loaded machine)."""
    markers = [tmp_path / f"in-the-loop-{k}" for k in range(processes)]
    deadline = time.monotonic() + 120
    while not all(m.exists() for m in markers):
        if proc.poll() is not None or time.monotonic() > deadline:
            log = tmp_path / "launch.err"
            said = log.read_text() if log.exists() else f"exit code {proc.poll()}"
            raise AssertionError(f"not every process reached its timing loop: {said}")
        time.sleep(0.05)


LONG_RUN = ("--", "collective", "psum", "--mesh", "2", "--iters", "1000000", "-q")


@pytest.mark.once  # the launcher's own handling of its processes
def test_killing_one_process_stops_the_run_and_leaves_nothing_behind(tmp_path):
    proc, pids, _ = start_launcher("--timeout", "120", *LONG_RUN, tmp_path=tmp_path)
    wait_in_the_loop(proc, tmp_path)
    os.kill(pids[1], signal.SIGKILL)
    started = time.monotonic()
    code = proc.wait(timeout=60)
    assert time.monotonic() - started < 30
    assert code != 0
    text = (tmp_path / "launch.err").read_text()
    assert "process 1 was killed by SIGKILL (the first to fail)" in text
    assert not any(alive(pid) for pid in pids)


@pytest.mark.once  # the launcher's own handling of its processes
def test_timeout_stops_every_process_with_124(tmp_path):
    proc, pids, _ = start_launcher("--timeout", "10", *LONG_RUN, tmp_path=tmp_path)
    code = proc.wait(timeout=60)
    assert code == 124
    assert "timed out after --timeout 10 s" in (tmp_path / "launch.err").read_text()
    assert not any(alive(pid) for pid in pids)


@pytest.mark.once  # the launcher's own handling of its processes
@pytest.mark.parametrize(
    "signals",
    [
        pytest.param((signal.SIGINT,), id="ctrl-c"),
        pytest.param((signal.SIGHUP,), id="terminal-closed"),
        pytest.param((signal.SIGTERM, signal.SIGTERM), id="sigterm-twice"),
    ],
)
def test_stop_signals_stop_every_process_with_130(tmp_path, signals):
    proc, pids, _ = start_launcher("--timeout", "120", *LONG_RUN, tmp_path=tmp_path)
    wait_in_the_loop(proc, tmp_path)
    for sig in signals:  # a second signal while stopping must not leave children running
        proc.send_signal(sig)
        time.sleep(0.3)
    assert proc.wait(timeout=60) == 130
    assert "internal error" not in (tmp_path / "launch.err").read_text()
    assert not any(alive(pid) for pid in pids)


def listening_addresses(pids: list[int]) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket the processes PIDS listen on, read from /proc."""
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:  # closed meanwhile
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            hex_address, hex_port = local.split(":")
            raw = bytes.fromhex(hex_address)  # 32-bit words in host (little-endian) order
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.append((str(ipaddress.ip_address(raw)), int(hex_port, 16)))
    return found


def is_loopback(address: str) -> bool:
    parsed = ipaddress.ip_address(address)
    mapped = getattr(parsed, "ipv4_mapped", None)
    return parsed.is_loopback or (mapped is not None and mapped.is_loopback)


@pytest.mark.once  # the launcher's own handling of its processes
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads sockets from Linux's /proc")
def test_a_launch_run_listens_on_loopback_only(tmp_path):
    proc, pids, log = start_launcher("--timeout", "120", *LONG_RUN, tmp_path=tmp_path)
    try:
        wait_in_the_loop(proc, tmp_path)  # the coordinator and gloo are up by now
        listening = listening_addresses([proc.pid, *pids])
        port = int(re.search(r"coordinator 127\.0\.0\.1:(\d+)", log.read_text()).group(1))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert port in {p for _, p in listening}, listening
    assert [a for a in listening if not is_loopback(a[0])] == [], listening


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads sockets from Linux's /proc")
@pytest.mark.parametrize(
    ("env", "loopback_only"),
    [
        pytest.param({"JAX_COORDINATOR_BIND_ADDRESS": "[::]:{port}"}, False, id="jax-env-alone-exposes"),
        pytest.param(
            {"JAX_COORDINATOR_BIND_ADDRESS": "[::]:{port}", "SHARDCLI_COORDINATOR_BIND": "127.0.0.1:{port}"},
            True,
            id="coordinator-bind-wins",
        ),
    ],
)
def test_a_hand_started_pair_binds_where_told(tmp_path, env, loopback_only):
    port = launcher.free_port()
    planted = {"PLANT_DIR": str(tmp_path), **with_site(tmp_path, IN_THE_LOOP)}
    procs = by_hand(
        lambda k: LONG_RUN[1:],
        {**planted, **{k: v.format(port=port) for k, v in env.items()}},
        coordinator=f"127.0.0.1:{port}",
    )
    try:
        wait_in_the_loop(procs[0], tmp_path)
        coordinator = [a for a, p in listening_addresses([procs[0].pid]) if p == port]
    finally:
        reap_killed(procs)
    assert coordinator, "process 0 listens on no socket at the coordinator port"
    assert all(is_loopback(a) for a in coordinator) == loopback_only, coordinator


@pytest.mark.once  # the launcher's own handling of its processes
def test_children_die_with_a_killed_launcher(tmp_path):
    proc, pids, _ = start_launcher("--timeout", "120", *LONG_RUN, tmp_path=tmp_path)
    wait_in_the_loop(proc, tmp_path)
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.2)
    assert not any(alive(pid) for pid in pids)


LATE_FAILURE = """
    import os
    if os.environ.get("SHARDCLI_PROCESS_ID") == "1":
        import shardcli.runtime.processes as processes
        from shardcli.errors import ShardcliError
        real, calls = processes.combine_timing, []

        def second_fails(*args, **kwargs):
            calls.append(1)
            if len(calls) == 2:
                raise ShardcliError("planted: process 1 refuses the second size")
            return real(*args, **kwargs)

        processes.combine_timing = second_fails
"""


@pytest.mark.once  # the launcher's own handling of its processes
def test_one_process_failing_after_the_join_ends_the_run_promptly(tmp_path):
    """Process 1 fails between two collectives; it must exit (not wait at JAX's shutdown barrier)."""
    env = with_site(tmp_path, LATE_FAILURE)
    started = time.monotonic()
    args = ("--timeout", "150", "--", "collective", "psum", "--mesh", "4", "--sizes", "16,64", *FAST, "-q")
    proc = launch(*args, env=env)
    assert time.monotonic() - started < 60
    assert proc.returncode == 2, proc.stderr
    assert "process 1 exited with code 2 (the first to fail)" in proc.stderr
    assert "planted: process 1 refuses the second size" in proc.stderr


BIG_OUTPUT = """
    import atexit, os, sys
    if os.environ.get("SHARDCLI_PROCESS_ID") == "0":
        def _big():
            sys.stdout.write(("x" * 99 + "\\n") * 3000 + "END-OF-PROCESS-0\\n")
            sys.stdout.flush()
        atexit.register(_big)
"""

SLOW_READER = """
import sys, time
n = 0
while chunk := sys.stdin.buffer.read1(4096):
    n += len(chunk)
    last = chunk
    time.sleep(0.05)
print(n, last.endswith(b"END-OF-PROCESS-0\\n"))
"""


@pytest.mark.once  # the launcher's own handling of its processes
def test_all_output_reaches_a_slow_reader_and_a_closed_pipe_is_no_error(tmp_path):
    env = clean_env(with_site(tmp_path, BIG_OUTPUT))
    (tmp_path / "slow.py").write_text(SLOW_READER)
    launch_cmd = f"{sys.executable} -m shardcli launch -- mesh --mesh 2 -q"
    slow = subprocess.run(
        ["bash", "-c", f"{launch_cmd} | {sys.executable} {tmp_path / 'slow.py'}; exit ${{PIPESTATUS[0]}}"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert slow.returncode == 0, slow.stderr
    count, complete = slow.stdout.split()
    assert complete == "True" and int(count) > 300_000
    closed = subprocess.run(
        ["bash", "-c", f"{launch_cmd} | head -1; exit ${{PIPESTATUS[0]}}"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert closed.returncode == 0, closed.stderr
    assert "Traceback" not in closed.stderr and "BrokenPipe" not in closed.stderr


LATE_AT_THE_CHECK = """
    import os
    if os.environ.get("SHARDCLI_PROCESS_ID") == os.environ["PLANT_LATE_PROCESS"]:
        import time
        import shardcli.runtime.devices as runtime
        pick = runtime.pick_devices
        def late(*args, **kwargs):
            time.sleep(2)
            return pick(*args, **kwargs)
        runtime.pick_devices = late
"""


@pytest.mark.parametrize("late", [0, 1])
def test_unequal_devices_per_process_is_one_line_everywhere(tmp_path, late):
    """Both processes find the fault; one finds it 2 s later. Process 1 late: process 0 (the
    coordination service's host) must wait for it, or JAX aborts process 1 before it says a word."""
    procs = by_hand(
        lambda k: ("collective", "psum", "--mesh", "4", "--devices", str(3 - k)),
        {"PLANT_LATE_PROCESS": str(late), **with_site(tmp_path, LATE_AT_THE_CHECK)},
    )
    errs = reap(procs, timeout=120)  # both, before any assert: a failure leaves no process behind
    for p, err in zip(procs, errs, strict=True):
        assert p.returncode == 2, err
        assert error_lines(err) == [
            "shardcli: error: every process must start with the same number of devices, but process 0 "
            "has 3, process 1 has 2; give every process the same --devices"
        ]


PROCESS_0_FAILS_LAST = """
    import os, pathlib, time
    leaving = pathlib.Path(os.environ["PLANT_DIR"], "process-1-leaving")
    if os.environ.get("SHARDCLI_PROCESS_ID") == "1":
        import shardcli.runtime.cluster as runtime
        real_leave = runtime.leave_cluster
        def say_leaving(code):
            leaving.touch()
            return real_leave(code)
        runtime.leave_cluster = say_leaving
    if os.environ.get("SHARDCLI_PROCESS_ID") == "0":
        import shardcli.cli as cli
        def fail_at_the_end(prog, code):
            deadline = time.monotonic() + 60
            while not leaving.exists() and time.monotonic() < deadline:  # process 1 waits at its exit
                time.sleep(0.05)
            return cli._fail(prog, "planted: process 0 fails at the end", 2)
        cli._save_output = fail_at_the_end
"""


@pytest.mark.once  # the launcher's own handling of its processes
def test_a_process_that_succeeded_is_not_aborted_when_process_0_fails(tmp_path):
    """Process 1 waits at its exit for process 0's code and leaves with its own 0 when it is a
    failure; at JAX's shutdown barrier JAX would abort it once process 0 is gone."""
    env = {"PLANT_DIR": str(tmp_path), **with_site(tmp_path, PROCESS_0_FAILS_LAST)}
    procs = by_hand(lambda k: ("mesh", "--mesh", "2"), env)
    errs = reap(procs, timeout=120)
    assert procs[0].returncode == 2, errs[0]
    assert error_lines(errs[0]) == ["shardcli: error: planted: process 0 fails at the end"]
    assert procs[1].returncode == 0, errs[1]
    assert error_lines(errs[1]) == []


PROCESS_0_FAILS_IN_THE_COMBINE = """
    import os
    if os.environ.get("SHARDCLI_PROCESS_ID") == "0":
        import shardcli.runtime.processes as processes
        from shardcli.errors import ShardcliError
        def refuse(*args, **kwargs):
            raise ShardcliError("planted: process 0 refuses to combine the timings")
        processes.combine_timing = refuse
        import pathlib
        import shardcli.runtime.cluster as runtime
        real_wait = runtime._wait_for_key
        def say_waiting(*args, **kwargs):
            pathlib.Path(os.environ["PLANT_DIR"], "process-0-waiting").touch()
            return real_wait(*args, **kwargs)
        runtime._wait_for_key = say_waiting
"""


@pytest.mark.once  # the launcher's own handling of its processes
def test_ctrl_c_cuts_process_0_s_wait_for_the_others_short(tmp_path):
    """Process 0 fails while process 1 waits for it in a collective, so process 1 never records
    a code and process 0 would wait the whole EXIT_GRACE_S; Ctrl-C ends the wait at once."""
    from shardcli.runtime.cluster import EXIT_GRACE_S

    args = ("collective", "psum", "--mesh", "2", "--size", "1K", "--iters", "3", "--warmup", "1", "-q")
    env = {"PLANT_DIR": str(tmp_path), **with_site(tmp_path, PROCESS_0_FAILS_IN_THE_COMBINE)}
    procs = by_hand(lambda k: args, env)
    try:
        said = ""
        deadline = time.monotonic() + 90
        while "planted" not in said and time.monotonic() < deadline and procs[0].poll() is None:
            said += procs[0].stderr.readline()
        assert "planted" in said, said
        waiting = tmp_path / "process-0-waiting"
        while not waiting.exists() and time.monotonic() < deadline and procs[0].poll() is None:
            time.sleep(0.05)
        assert waiting.exists(), "process 0 never reached its wait for the others"
        interrupted = time.monotonic()
        procs[0].send_signal(signal.SIGINT)
        procs[0].wait(timeout=60)
        assert time.monotonic() - interrupted < EXIT_GRACE_S - 2
    finally:
        errs = reap(procs, timeout=30)
    err = said + errs[0]
    assert procs[0].returncode == 2, err
    assert error_lines(err) == ["shardcli: error: planted: process 0 refuses to combine the timings"]


def by_hand(
    args_for, env: dict[str, str], processes: int = 2, coordinator: str | None = None
) -> list[subprocess.Popen[str]]:
    """Start `shardcli ARGS_FOR(K) --platform cpu` as process K of a run joined through SHARDCLI_*
    variables (on CPU, as `launch` does: on a GPU host, auto would put every process on GPU 0)."""
    joined = {
        "SHARDCLI_COORDINATOR": coordinator or f"127.0.0.1:{launcher.free_port()}",
        "SHARDCLI_NUM_PROCESSES": str(processes),
    }
    return [
        subprocess.Popen(
            [sys.executable, "-m", "shardcli", *args_for(k), "--platform", "cpu"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env({**joined, "SHARDCLI_PROCESS_ID": str(k), **env}),
        )
        for k in range(processes)
    ]


def reap_killed(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.communicate()


def error_lines(err: str) -> list[str]:
    """stderr without gloo's connection messages."""
    return [line for line in err.splitlines() if not line.startswith("[Gloo]")]


def reap(procs: list[subprocess.Popen[str]], timeout: float) -> list[str]:
    """Every process's stderr once it ended; any still running at the deadline is killed first."""
    deadline = time.monotonic() + timeout
    errs = []
    try:
        for p in procs:
            errs.append(p.communicate(timeout=max(deadline - time.monotonic(), 0.1))[1])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()  # reaps it and closes its pipes
    return errs


@pytest.mark.once  # the launcher's own handling of its processes
def test_a_taken_coordinator_port_is_replaced(tmp_path, monkeypatch):
    """The port picked turns out to be taken (a race with another program): retry on another."""
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as held:
        held.bind(("::", 0))
        held.listen()
        taken = held.getsockname()[1]
        ports = iter([taken])
        real_free_port = launcher.free_port
        monkeypatch.setattr(launcher, "free_port", lambda: next(ports, None) or real_free_port())
        monkeypatch.setattr(os, "environ", clean_env())
        out, err = tmp_path / "out", tmp_path / "err"
        with open(out, "wb") as o, open(err, "wb") as e:
            result = launcher.run_launch(
                launcher.LaunchSpec(
                    processes=2, command=("mesh", "--mesh", "2", "--format", "json"), timeout_s=120
                ),
                out=o,
                err=e,
            )
    assert result.exit_code == 0, err.read_text()
    assert result.ports_tried[0] == taken and len(result.ports_tried) == 2
    assert f"port {taken} was taken; retrying on another" in err.read_text()
    assert json.loads(out.read_text())["runtime"]["process_count"] == 2


@pytest.mark.parametrize("verbose", [False, True], ids=["default", "verbose"])
def test_gloo_connection_messages_stay_off_the_terminal_unless_asked(verbose):
    """gloo prints `[Gloo] Rank N is connected to M peer ranks...` in every process of a CPU run (from
    C++, on descriptor 1 or 2): a `--distributed` run (here joined through SHARDCLI_*, as SLURM's
    `auto` joins) keeps them off stderr; -v shows them. Everything else still reaches stderr and
    stdout (issue 54)."""
    flags = ["-v"] if verbose else []
    procs = by_hand(lambda k: ["collective", "psum", "--mesh", "4", "--no-color", *flags, *FAST], {})
    try:
        outs = [p.communicate(timeout=180) for p in procs]
    finally:
        reap_killed(procs)
    for k, (out, err) in enumerate(outs):
        assert procs[k].returncode == 0, err
        gloo = [line for line in (out + err).splitlines() if line.startswith("[Gloo]")]
        assert bool(gloo) == verbose, err
        assert "[Gloo]" not in out
    assert "collective  psum over x" in outs[0][0]
