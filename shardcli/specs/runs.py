"""How a run goes, as flags give it: platform, mode, output, processes and the files it writes."""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass, field

from shardcli.errors import ShardcliError
from shardcli.specs.meshes import MeshSpec, ShardingSpec
from shardcli.specs.values import ArraySpec


# Closed choices. StrEnum members are their words: they compare equal to them, join, format and
# go into JSON as plain strings.
class Platform(enum.StrEnum):
    AUTO = "auto"
    CPU = "cpu"
    GPU = "gpu"
    TPU = "tpu"


class Mode(enum.StrEnum):
    """Sharding mode: JAX's automatic sharding, or explicit sharding types."""

    AUTO = "auto"
    EXPLICIT = "explicit"


class Format(enum.StrEnum):
    """Output format; each command accepts its own subset (csv only where there are rows)."""

    TABLE = "table"
    JSON = "json"
    CSV = "csv"


class ProcessTiming(enum.StrEnum):
    """How per-process timings combine, per iteration."""

    MAX = "max"
    AVG = "avg"


class Malloc(enum.StrEnum):
    """CPU host allocator: glibc malloc keeps freed buffers (`shardcli.runtime.allocator`), or left alone."""

    REUSE = "reuse"
    SYSTEM = "system"


class Placement(enum.StrEnum):
    """Where a collective's result goes: a new buffer, the donated input, or both runs."""

    OUT = "out"
    IN = "in"
    BOTH = "both"


class OutBuffer(enum.StrEnum):
    """Out of place: one preallocated buffer donated to every call, or a fresh one per call."""

    PREALLOCATED = "preallocated"
    FRESH = "fresh"


PLATFORMS = tuple(Platform)
MODES = tuple(Mode)
FORMATS = (Format.TABLE, Format.JSON)
PROCESS_TIMINGS = tuple(ProcessTiming)
# Faking more CPU devices than this in one process is slow to start and never what a learner meant.
MAX_FAKE_DEVICES = 512


@dataclass(frozen=True)
class DistributedSpec:
    """How this process joins a multi-process run (`jax.distributed.initialize`).

    `auto` calls it with no arguments so JAX detects SLURM, Open MPI or a TPU pod; otherwise all
    three of coordinator, num_processes and process_id are set.
    """

    coordinator: str | None = None  # HOST:PORT of process 0's coordination service
    num_processes: int | None = None
    process_id: int | None = None
    join_timeout_s: int = 300  # how long to wait for the coordinator and the other processes
    bind: str | None = None  # --coordinator-bind HOST:PORT: where process 0's service listens

    def __post_init__(self) -> None:
        given = (self.coordinator, self.num_processes, self.process_id)
        if any(v is None for v in given) and any(v is not None for v in given):
            raise ShardcliError(
                "a multi-process run takes coordinator, num_processes and process_id together "
                "(or none of them, to let JAX detect the cluster)"
            )
        if self.num_processes is not None and self.num_processes < 1:
            raise ShardcliError(f"num_processes {self.num_processes} is not valid; give at least 1")
        if (
            self.process_id is not None
            and self.num_processes is not None
            and not 0 <= self.process_id < self.num_processes
        ):
            raise ShardcliError(
                f"process_id {self.process_id} is not valid for {self.num_processes} processes; "
                f"give 0 to {self.num_processes - 1}"
            )
        if self.join_timeout_s < 1:
            raise ShardcliError(f"join_timeout_s {self.join_timeout_s} is not valid; give at least 1 second")

    @property
    def auto(self) -> bool:
        return self.coordinator is None

    def describe(self) -> str:
        if self.auto:
            return "jax.distributed.initialize() (cluster detected by JAX)"
        return f"process {self.process_id} of {self.num_processes}, coordinator {self.coordinator}"


@dataclass(frozen=True)
class RunOptions:
    """Options every device command shares."""

    platform: Platform = Platform.AUTO
    devices: int | None = None  # on a multi-process run: this process's devices
    mode: Mode = Mode.AUTO
    format: Format = Format.TABLE
    color: bool = True
    quiet: bool = False
    distributed: DistributedSpec | None = None  # None: a single process
    all_processes: bool = False  # every process prints its report, not only process 0
    process_timing: ProcessTiming = ProcessTiming.MAX  # how per-process timings combine, per iteration
    compile_cache: bool = False  # JAX's persistent compile cache (the compiling commands turn it on)
    save: str | None = None  # --save: also write what is printed to this .svg, .html or .txt file
    verbose: bool = False  # -v: the header's full provenance (allocator, bandwidth, buffers, tolerance)
    wide: bool = False  # --wide: every table column at its natural width, however wide the terminal
    # CPU host allocator: "reuse" keeps freed buffers in glibc malloc (shardcli.runtime.allocator);
    # "system" leaves malloc alone. Commands that time large buffers (collective) turn reuse on.
    malloc: Malloc = Malloc.SYSTEM
    malloc_why: str | None = None  # what chose `malloc` when not --malloc itself, for the header

    def __post_init__(self) -> None:
        # The flags' parsers give today's messages for bad words; this turns the words into the
        # enums and refuses anything else, however the options were built.
        for name, choices in (
            ("platform", Platform),
            ("mode", Mode),
            ("format", Format),
            ("process_timing", ProcessTiming),
            ("malloc", Malloc),
        ):
            value = getattr(self, name)
            if value not in tuple(choices):
                raise ShardcliError(f"{name} {value!r} is not valid; choose one of {', '.join(choices)}")
            object.__setattr__(self, name, choices(value))

    @property
    def shows_progress(self) -> bool:
        """A progress bar is for people: table format, not --quiet, and only the reporting process."""
        if self.format != "table" or self.quiet:
            return False
        if self.distributed is None or self.all_processes:
            return True
        return self.distributed.process_id == 0  # unknown (None) under --distributed auto: off


def parse_choice(value: str, flag: str, choices: tuple[str, ...]) -> str:
    """Validate a flag against a fixed set of words."""
    if value not in choices:
        raise ShardcliError(f"{flag} {value!r} is not valid; choose one of {', '.join(choices)}")
    return value


_HOST_PORT_RE = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})$")
DISTRIBUTED_MODES = ("off", "auto")


def parse_distributed(
    coordinator: str | None,
    num_processes: int | None,
    process_id: int | None,
    distributed: str,
    join_timeout: int = 300,
    bind: str | None = None,
) -> DistributedSpec | None:
    """`--coordinator HOST:PORT --num-processes N --process-id K`, or `--distributed auto`; with
    `--coordinator-bind HOST:PORT` for where process 0's coordination service listens.

    Returns:
        None for a single-process run.

    Raises:
        ShardcliError: a partial or inconsistent set of flags.
    """
    mode = parse_choice(distributed, "--distributed", DISTRIBUTED_MODES)
    if join_timeout < 1:
        raise ShardcliError(f"--join-timeout {join_timeout} is not valid; give at least 1 second")
    if bind is not None:
        bind = _host_port(bind, "--coordinator-bind", "127.0.0.1:1234 or [::1]:1234")
    given = {
        "--coordinator": coordinator,
        "--num-processes": num_processes,
        "--process-id": process_id,
    }
    named = [flag for flag, value in given.items() if value is not None]
    if mode == "auto":
        if named:
            raise ShardcliError(
                f"--distributed auto lets JAX detect the cluster, so {' and '.join(named)} cannot be "
                f"given with it; use one or the other"
            )
        return DistributedSpec(join_timeout_s=join_timeout, bind=bind)
    if not named:
        if bind is not None:
            raise ShardcliError(
                "--coordinator-bind is for a multi-process run; give it with --coordinator "
                "--num-processes --process-id (or --distributed auto)"
            )
        return None
    missing = [flag for flag, value in given.items() if value is None]
    if missing:
        raise ShardcliError(
            f"{' and '.join(named)} also need{'s' * (len(named) == 1)} {' and '.join(missing)}: a "
            f"multi-process run takes --coordinator HOST:PORT --num-processes N --process-id K "
            f"(or --distributed auto)"
        )
    assert coordinator is not None and num_processes is not None and process_id is not None
    coordinator = _host_port(coordinator, "--coordinator", "10.0.0.1:1234 or localhost:1234")
    if num_processes < 1:
        raise ShardcliError(f"--num-processes {num_processes} is not valid; give at least 1")
    if not 0 <= process_id < num_processes:
        raise ShardcliError(
            f"--process-id {process_id} is not valid for --num-processes {num_processes}; "
            f"give 0 to {num_processes - 1}"
        )
    return DistributedSpec(coordinator, num_processes, process_id, join_timeout, bind)


def _host_port(value: str, flag: str, examples: str) -> str:
    match = _HOST_PORT_RE.match(value.strip())
    if not match or not 1 <= int(match.group(2)) <= 65535:
        raise ShardcliError(f"{flag} {value!r} is not HOST:PORT; give e.g. {examples} (port 1-65535)")
    return value.strip()


SAVE_SUFFIXES = (".svg", ".html", ".txt")


def parse_save(path: str | None) -> str | None:
    """`--save FILE.svg|FILE.html|FILE.txt`: the suffix picks the format; the folder must exist.

    Returns:
        The absolute path (a relative one is taken from the folder shardcli started in).

    Raises:
        ShardcliError: another suffix, or a folder that is not there.
    """
    if path is None:
        return None
    import os

    suffix = os.path.splitext(path)[1].lower()
    if suffix not in SAVE_SUFFIXES:
        raise ShardcliError(
            f"--save {path!r} needs one of the suffixes {', '.join(SAVE_SUFFIXES)} (it picks the format)"
        )
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ShardcliError(f"--save {path!r}: the folder {folder} does not exist")
    if os.path.isdir(path):
        raise ShardcliError(f"--save {path!r} is a folder; give a file name")
    check_writable_folder(folder, f"--save {path!r}")
    # Resolved now, before the user's code runs: an os.chdir in their file must not move it.
    return os.path.abspath(path)


def check_writable_folder(folder: str, what: str) -> None:
    """Refuse a folder no file can be written to, before a run is spent on it.

    Raises:
        ShardcliError: creating a file there fails.
    """
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".shardcli-probe-"):
            pass
    except OSError as error:
        raise ShardcliError(
            f"{what}: cannot write in {folder} ({error.strerror or error}); give a folder you can write to"
        ) from error


PLOT_SUFFIXES = (".png", ".svg")


def check_plot_file(path: str) -> None:
    """`--plot-file FILE.png|FILE.svg` needs matplotlib (the `plot` extra) and a folder it can write.

    Raises:
        ShardcliError: another suffix, a missing or unwritable folder, or no matplotlib.
    """
    import importlib.util
    import os

    if os.path.splitext(path)[1].lower() not in PLOT_SUFFIXES:
        raise ShardcliError(f"--plot-file {path!r} needs the suffix .png or .svg (it picks the format)")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ShardcliError(f"--plot-file {path!r}: the folder {folder} does not exist")
    check_writable_folder(folder, f"--plot-file {path!r}")
    if importlib.util.find_spec("matplotlib") is None:
        raise ShardcliError(
            "--plot-file needs matplotlib, which comes with the plot extra: pip install 'shardcli[plot]'"
        )


def check_timing(iters: int, warmup: int) -> None:
    """--iters and --warmup, as every timed command takes them.

    Raises:
        ShardcliError: fewer than one timed iteration, or a negative warm-up.
    """
    if iters < 1:
        raise ShardcliError(f"--iters {iters} is not valid; give at least 1")
    if warmup < 0:
        raise ShardcliError(f"--warmup {warmup} is not valid; give 0 or more")


def check_cost_figures(peak_tflops: float | None, link_gbps: float | None) -> None:
    """--peak-tflops and --link-gbps, the cost model's figures: positive and finite where given.

    Raises:
        ShardcliError: a figure that is zero, negative, infinite or NaN.
    """
    for flag, value in (("--peak-tflops", peak_tflops), ("--link-gbps", link_gbps)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ShardcliError(f"{flag} {value:g} is not valid; give a positive number")


@dataclass(frozen=True)
class ShardRequest:
    """Everything `shardcli shard` needs: mesh, array, sharding and what to show."""

    mesh: MeshSpec
    array: ArraySpec
    sharding: ShardingSpec
    show_values: bool | None = None  # None: automatic for small arrays
    view_dims: tuple[int, int] | None = None
    options: RunOptions = field(default_factory=RunOptions)
