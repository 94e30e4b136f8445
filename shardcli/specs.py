"""Flags become frozen specs here, before JAX is touched.

Everything in this module is pure Python: parsing and validation can be unit-tested without
devices, and nothing on the `--help` path pays for importing JAX.
"""

from __future__ import annotations

import enum
import keyword
import math
import re
from dataclasses import dataclass, field

from shardcli.errors import ShardcliError


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
    """CPU host allocator: glibc malloc keeps freed buffers (`shardcli.allocator`), or left alone."""

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


DEFAULT_AXIS_NAMES = ("x", "y", "z", "w")
PLATFORMS = tuple(Platform)
MODES = tuple(Mode)
FORMATS = (Format.TABLE, Format.JSON)
PROCESS_TIMINGS = tuple(ProcessTiming)
DTYPE_KINDS = ("float", "int", "uint", "bool")
# Faking more CPU devices than this in one process is slow to start and never what a learner meant.
MAX_FAKE_DEVICES = 512
RESERVED_SPEC_WORDS = ("None", "_")


@dataclass(frozen=True)
class DType:
    """A dtype the user may name, with the facts we need before JAX is imported."""

    name: str
    itemsize: int
    kind: str  # "float", "int", "uint" or "bool"
    needs_x64: bool = False

    def __post_init__(self) -> None:
        if self.kind not in DTYPE_KINDS:
            raise ShardcliError(
                f"dtype {self.name} has kind {self.kind!r}; choose one of {', '.join(DTYPE_KINDS)}"
            )
        if self.itemsize < 1:
            raise ShardcliError(f"dtype {self.name} has itemsize {self.itemsize}; give at least 1 byte")


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("float32", 4, "float"),
        DType("bfloat16", 2, "float"),
        DType("float16", 2, "float"),
        DType("float64", 8, "float", needs_x64=True),
        DType("int8", 1, "int"),
        DType("int16", 2, "int"),
        DType("int32", 4, "int"),
        DType("int64", 8, "int", needs_x64=True),
        DType("uint8", 1, "uint"),
        DType("uint32", 4, "uint"),
        DType("bool", 1, "bool"),
    )
}

INITS = {
    "arange": "0, 1, 2, ... in row-major order (wraps for narrow dtypes)",
    "ones": "every element 1",
    "zeros": "every element 0",
    "random": "uniform in [0, 1) for floats, [0, 100) for ints (fixed seed)",
}


@dataclass(frozen=True)
class MeshSpec:
    """A device mesh: its shape and one name per axis."""

    shape: tuple[int, ...]
    axes: tuple[str, ...]

    def __post_init__(self) -> None:
        shape, axes = tuple(self.shape), tuple(self.axes)
        if not shape or not all(isinstance(n, int) and n >= 1 for n in shape):
            raise ShardcliError(
                f"mesh shape {shape} is not valid; give one or more positive sizes, such as (2, 4)"
            )
        if len(axes) != len(shape):
            raise ShardcliError(
                f"mesh shape {shape} has {len(shape)} dims but axes {axes} name {len(axes)}; "
                f"give one name per dim"
            )
        for name in axes:
            if (
                not isinstance(name, str)
                or not name.isidentifier()
                or keyword.iskeyword(name)
                or name in RESERVED_SPEC_WORDS
            ):
                raise ShardcliError(
                    f"mesh axis name {name!r} is not valid; axis names are Python identifiers "
                    f"such as data or x"
                )
        if len(set(axes)) != len(axes):
            raise ShardcliError(f"mesh axes {axes} name an axis twice; axis names must be unique")

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def axis_sizes(self) -> dict[str, int]:
        return dict(zip(self.axes, self.shape, strict=True))

    def describe(self) -> str:
        """`2x4 (data=2, model=4)`."""
        dims = "x".join(str(n) for n in self.shape)
        return f"{dims} ({', '.join(f'{a}={n}' for a, n in zip(self.axes, self.shape, strict=True))})"


@dataclass(frozen=True)
class ShardingSpec:
    """A PartitionSpec as plain data: per array dim, the mesh axes it is split over (empty: none)."""

    entries: tuple[tuple[str, ...], ...]

    def __post_init__(self) -> None:
        # An axis used twice is allowed here: it is how a spec JAX refuses is described (matmul's
        # illegal case); parse_sharding refuses it in --spec.
        if not all(isinstance(e, tuple) and all(isinstance(a, str) for a in e) for e in self.entries):
            raise ShardcliError(
                f"sharding entries {self.entries!r} are not valid; give one tuple of mesh axis names "
                f"per array dim, such as (('data',), ())"
            )

    def axes_used(self) -> tuple[str, ...]:
        return tuple(a for entry in self.entries for a in entry)

    def to_partition_spec_args(self) -> tuple[object, ...]:
        """Arguments for `jax.sharding.PartitionSpec(*args)`."""
        out: list[object] = []
        for entry in self.entries:
            if not entry:
                out.append(None)
            elif len(entry) == 1:
                out.append(entry[0])
            else:
                out.append(tuple(entry))
        return tuple(out)

    def describe(self) -> str:
        """`P('data', None)` in the user's spelling: `data,None`; replicated is `P()`."""
        if not self.entries:
            return "P() (replicated)"
        parts = ["None" if not e else "+".join(e) for e in self.entries]
        return ",".join(parts)


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
    # CPU host allocator: "reuse" keeps freed buffers in glibc malloc (shardcli.allocator);
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


@dataclass(frozen=True)
class ArraySpec:
    """A global array to create: shape, dtype and how to fill it (`init`, or the user's `values`)."""

    shape: tuple[int, ...]
    dtype: DType
    init: str = "arange"
    values: tuple[float, ...] | None = None  # --values / --values-file, row-major; wins over init

    def __post_init__(self) -> None:
        if not all(isinstance(n, int) and n >= 0 for n in self.shape):
            raise ShardcliError(f"array shape {self.shape} is not valid; give sizes of 0 or more")
        if self.init not in INITS:
            raise ShardcliError(f"init {self.init!r} is not valid; choose one of {', '.join(INITS)}")
        if self.values is not None:
            if len(self.values) != math.prod(self.shape):
                shape = "x".join(map(str, self.shape))
                raise ShardcliError(
                    f"--values has {len(self.values)} numbers but --shape {shape} holds "
                    f"{math.prod(self.shape)}; give one number per element, in row-major order"
                )
            check_values_fit(self.values, self.dtype)

    @property
    def source(self) -> str:
        """How the array is filled, as the header says it: `--values` or `init arange`."""
        return "--values" if self.values is not None else f"init {self.init}"

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


@dataclass(frozen=True)
class ShardRequest:
    """Everything `shardcli shard` needs: mesh, array, sharding and what to show."""

    mesh: MeshSpec
    array: ArraySpec
    sharding: ShardingSpec
    show_values: bool | None = None  # None: automatic for small arrays
    view_dims: tuple[int, int] | None = None
    options: RunOptions = field(default_factory=RunOptions)


_INT_RE = re.compile(r"^[0-9]+$")


def _parse_positive_ints(text: str, flag: str, what: str, example: str) -> tuple[int, ...]:
    raw = text.strip()
    if not raw:
        raise ShardcliError(f"{flag} is empty; give {what} such as {example}")
    parts = raw.lower().split("x")
    values: list[int] = []
    for part in parts:
        part = part.strip()
        if not _INT_RE.match(part):
            raise ShardcliError(
                f"{flag} {text!r} is not valid: {what} are positive integers joined by 'x', such as {example}"
            )
        value = int(part)
        if value <= 0:
            raise ShardcliError(
                f"{flag} {text!r} has a size of {value}; every size must be a positive integer "
                f"(such as {example})"
            )
        values.append(value)
    return tuple(values)


def parse_mesh_shape(text: str) -> tuple[int, ...]:
    """Parse `--mesh`: `8`, `2x4`, `2x2x2`.

    Raises:
        ShardcliError: for anything but positive integers joined by `x`.
    """
    return _parse_positive_ints(text, "--mesh", "mesh sizes", "8, 2x4 or 2x2x2")


def parse_axes(text: str | None, rank: int) -> tuple[str, ...]:
    """Parse `--axes data,model` for a mesh of the given rank (default names x, y, z, w).

    Raises:
        ShardcliError: wrong count, duplicates, invalid identifiers or reserved names.
    """
    if text is None:
        if rank > len(DEFAULT_AXIS_NAMES):
            raise ShardcliError(
                f"a {rank}-D mesh needs --axes with {rank} names; default names exist for up to "
                f"{len(DEFAULT_AXIS_NAMES)} axes ({','.join(DEFAULT_AXIS_NAMES)})"
            )
        return DEFAULT_AXIS_NAMES[:rank]
    names = tuple(n.strip() for n in text.split(","))
    if len(names) != rank:
        raise ShardcliError(
            f"--axes {text!r} names {len(names)} axes but the mesh has {rank}; give {rank} "
            f"comma-separated names, such as {','.join(DEFAULT_AXIS_NAMES[:rank]) or 'x'}"
        )
    for name in names:
        if name in RESERVED_SPEC_WORDS:
            raise ShardcliError(
                f"--axes name {name!r} is reserved (--spec uses None and _ for 'not sharded'); "
                f"pick another name"
            )
        if not name.isidentifier() or keyword.iskeyword(name) or not name.isascii():
            raise ShardcliError(
                f"--axes name {name!r} is not valid; axis names are Python identifiers "
                f"such as data, model or x"
            )
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ShardcliError(f"--axes {text!r} names axis {name!r} twice; axis names must be unique")
        seen.add(name)
    return names


def parse_mesh(mesh: str, axes: str | None) -> MeshSpec:
    """Build a MeshSpec from `--mesh` and `--axes`."""
    shape = parse_mesh_shape(mesh)
    return MeshSpec(shape=shape, axes=parse_axes(axes, len(shape)))


def parse_shape(text: str, flag: str = "--shape") -> tuple[int, ...]:
    """Parse an array shape: `8x8`, `16`, `4x8x8`."""
    return _parse_positive_ints(text, flag, "array dims", "8x8, 16 or 4x8x8")


def parse_dtype(name: str) -> DType:
    """Look up a dtype by name."""
    try:
        return DTYPES[name.strip().lower()]
    except KeyError:
        raise ShardcliError(f"--dtype {name!r} is not supported; choose one of {', '.join(DTYPES)}") from None


def parse_init(name: str) -> str:
    """Validate an `--init` name."""
    if name not in INITS:
        raise ShardcliError(f"--init {name!r} is not supported; choose one of {', '.join(INITS)}")
    return name


def parse_choice(value: str, flag: str, choices: tuple[str, ...]) -> str:
    """Validate a flag against a fixed set of words."""
    if value not in choices:
        raise ShardcliError(f"{flag} {value!r} is not valid; choose one of {', '.join(choices)}")
    return value


def parse_sharding(text: str | None, mesh: MeshSpec, flag: str = "--spec") -> ShardingSpec:
    """Parse `--spec`: comma-separated entries, each an axis, `None`/`_`, or axes joined by `+`.

    `None` (the flag left out) or an empty string means fully replicated.

    Raises:
        ShardcliError: unknown axes, an axis used twice, or malformed entries.
    """
    if text is None or not text.strip():
        return ShardingSpec(entries=())
    entries: list[tuple[str, ...]] = []
    first_use: dict[str, int] = {}
    for dim, raw_entry in enumerate(text.split(",")):
        entry = raw_entry.strip()
        if entry in RESERVED_SPEC_WORDS:
            entries.append(())
            continue
        if not entry:
            raise ShardcliError(
                f"{flag} {text!r} has an empty entry at position {dim}; use None (or _) for a dim "
                f"that is not sharded"
            )
        names = tuple(n.strip() for n in entry.split("+"))
        for name in names:
            if name not in mesh.axes:
                raise ShardcliError(
                    f"{flag} {text!r} names mesh axis {name!r}, which is not in the mesh; "
                    f"the mesh axes are {', '.join(mesh.axes)} (or None for not sharded)"
                )
            if name in first_use:
                raise ShardcliError(
                    f"{flag} {text!r} uses mesh axis {name!r} twice (entries {first_use[name]} and "
                    f"{dim}); a mesh axis can shard at most one dim"
                )
            first_use[name] = dim
        entries.append(names)
    return ShardingSpec(entries=tuple(entries))


def check_sharding_fits(
    sharding: ShardingSpec,
    mesh: MeshSpec,
    shape: tuple[int, ...],
    flag: str = "--spec",
    what: str | None = None,
) -> None:
    """Check that a sharding applies to an array of this shape on this mesh (`flag` gave it; `what`
    names the array in messages, `--shape 8x8` by default).

    Raises:
        ShardcliError: a spec longer than the rank, or a dim not divisible by its axes' sizes.
    """
    shape_text = "x".join(map(str, shape))
    what = what or f"--shape {shape_text}"
    if len(sharding.entries) > len(shape):
        raise ShardcliError(
            f"{flag} {sharding.describe()!r} has {len(sharding.entries)} entries but the array has "
            f"rank {len(shape)} (--shape {shape_text}); give at most {len(shape)}"
        )
    sizes = mesh.axis_sizes
    for dim, entry in enumerate(sharding.entries):
        if not entry:
            continue
        parts = math.prod(sizes[a] for a in entry)
        if shape[dim] % parts:
            over = "+".join(entry)
            raise ShardcliError(
                f"{what}: dim {dim} ({shape[dim]}) is not divisible by {parts}, the "
                f"size of mesh axis {over!r} that {flag} shards it over; use a multiple of {parts}"
            )


def parse_view_dims(text: str | None, rank: int) -> tuple[int, int] | None:
    """Parse `--view-dims 0,2`: the pair of array dims our picture draws for 3-D+ arrays."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(_INT_RE.match(p) for p in parts):
        raise ShardcliError(f"--view-dims {text!r} is not valid; give two array dims as ROW,COL, such as 0,1")
    row, col = int(parts[0]), int(parts[1])
    if row == col or row >= rank or col >= rank:
        raise ShardcliError(
            f"--view-dims {text!r} must name two different dims below the array's rank {rank}"
        )
    return row, col


# ---------------------------------------------------------------------------------------------
# Byte sizes and sweeps (nccl-tests conventions: K = 1024).

_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
_SIZE_RE = re.compile(r"^([0-9]+)\s*([KMG]?)(I?B)?$", re.IGNORECASE)


def parse_bytes(text: str, flag: str = "--size") -> int:
    """Parse `16M`, `1K`, `4096`, `2G` (binary units, as nccl-tests uses them)."""
    match = _SIZE_RE.match(text.strip())
    if not match:
        raise ShardcliError(
            f"{flag} {text!r} is not a byte size; give a number with an optional K, M or G suffix "
            f"(binary units), such as 4096, 64K or 16M"
        )
    value = int(match.group(1)) * _UNITS[match.group(2).upper()]
    if value <= 0:
        raise ShardcliError(f"{flag} {text!r} must be a positive number of bytes")
    return value


def format_bytes(n: float, *, short: bool = False) -> str:
    """A byte count in binary units.

    Args:
        n: the bytes.
        short: nccl-tests' form, the one `--size` and `--sizes` read back: `1K`, `64M`, `1536`
            (a unit only where it divides `n` exactly). Otherwise as people read memory: `64 MiB`,
            `1.5 KiB`.

    Returns:
        The text.
    """
    if short:
        for suffix, scale in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
            if n >= scale and n % scale == 0:
                return f"{n // scale}{suffix}"
        return str(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" or n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _parse_sweep(text: str, flag: str, parse_one, what: str, example: str) -> tuple:
    """`MIN:MAX` (x2 steps), `MIN:MAX:xF`, or a comma-separated list, each value by `parse_one`."""
    raw = text.strip()
    if ":" not in raw:
        values = tuple(parse_one(p) for p in raw.split(","))
        if len(set(values)) != len(values):
            raise ShardcliError(f"{flag} {text!r} lists a {what} twice; give each {what} once")
        return values
    parts = raw.split(":")
    if len(parts) not in (2, 3):
        raise ShardcliError(
            f"{flag} {text!r} is not valid; give MIN:MAX, MIN:MAX:xF or a list such as {example}"
        )
    low, high = parse_one(parts[0]), parse_one(parts[1])
    factor = 2
    if len(parts) == 3:
        step = parts[2].strip().lower()
        if not re.match(r"^x[0-9]+$", step) or int(step[1:]) < 2:
            raise ShardcliError(
                f"{flag} step {parts[2]!r} is not valid; give a factor of 2 or more such as x2 or x4"
            )
        factor = int(step[1:])
    if low > high:
        raise ShardcliError(
            f"{flag} {text!r} runs backwards ({parts[0]} > {parts[1]}); give MIN:MAX with MIN <= MAX"
        )
    swept = []
    value = low
    while value <= high * (1 + 1e-12):  # float scales: 0.1 * 2 * 2 ... must still reach MAX
        swept.append(value)
        value *= factor
    return tuple(swept)


def parse_sizes(text: str) -> tuple[int, ...]:
    """Parse `--sizes`: `1K:64M` (x2 steps), `1K:64M:x4`, or a list `4K,1M,16M`."""
    return _parse_sweep(text, "--sizes", lambda p: parse_bytes(p, "--sizes"), "size", "4K,1M")


def parse_values(text: str) -> tuple[float, ...]:
    """Parse `--values 3,1,4,1,5`."""
    out = []
    for part in text.split(","):
        part = part.strip()
        try:
            out.append(float(part))
        except ValueError:
            raise ShardcliError(
                f"--values {text!r} has {part!r}, which is not a number; give comma-separated numbers"
            ) from None
    return tuple(out)


# The largest finite value of each float dtype (numpy.finfo(...).max, written out so that no NumPy is
# imported to check flags); a finite --values beyond it would turn into inf silently.
FLOAT_MAX = {
    "float16": 65504.0,
    "bfloat16": 3.3895313892515355e38,
    "float32": 3.4028234663852886e38,
    "float64": 1.7976931348623157e308,
}
# The range of each integer dtype (numpy.iinfo), for the same reason.
INT_RANGE = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
    "uint32": (0, 2**32 - 1),
    "bool": (0, 1),
}


def check_values_fit(values: tuple[float, ...], dtype: DType) -> None:
    """Every --values number is one `dtype` holds: whole and in range for ints, not past a float's max.

    NaN and infinities are kept for float dtypes (NaN in, NaN out is a lesson too); a finite number
    that would round to infinity is refused, as is anything an integer dtype cannot hold.

    Raises:
        ShardcliError: the first number that does not fit, named with the dtype's range.
    """
    if dtype.kind == "float":
        top = FLOAT_MAX.get(dtype.name, math.inf)
        over = [v for v in values if math.isfinite(v) and abs(v) > top]
        if over:
            raise ShardcliError(
                f"--values has {over[0]:g}, beyond {dtype.name}'s largest finite value {top:g}, so it "
                f"would become inf; use smaller numbers or --dtype float64"
            )
        return
    not_whole = [v for v in values if not math.isfinite(v) or v != int(v)]
    if not_whole:
        raise ShardcliError(
            f"--values has {not_whole[0]:g}, which is not a whole number, but --dtype is {dtype.name}; "
            f"use whole numbers or a float dtype"
        )
    low, high = INT_RANGE.get(dtype.name, (-math.inf, math.inf))
    out = [v for v in values if not low <= v <= high]
    if out:
        raise ShardcliError(f"--values has {out[0]:g}, outside {dtype.name}'s range {low}..{high}")


def parse_perm(text: str) -> tuple[tuple[int, int], ...]:
    """Parse `--perm 0:1,1:2,2:0` into (source, destination) pairs (validated later)."""
    pairs = []
    for part in text.split(","):
        bits = part.strip().split(":")
        if len(bits) != 2 or not all(_INT_RE.match(b.strip()) for b in bits):
            raise ShardcliError(
                f"--perm {text!r} is not valid; give SRC:DST pairs of axis positions such as 0:1,1:2,2:0"
            )
        pairs.append((int(bits[0]), int(bits[1])))
    return tuple(pairs)


def parse_dims(text: str) -> tuple[int, int, int]:
    """Parse `--dims I,J,K`: three positive integers (rows of A, the contracting dim, columns of B)."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3 or not all(_INT_RE.match(p) for p in parts) or any(int(p) <= 0 for p in parts):
        raise ShardcliError(
            f"--dims {text!r} is not valid; give three positive integers I,J,K such as 256,512,256"
        )
    i, j, k = (int(p) for p in parts)
    return i, j, k


def _parse_scale(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value <= 0:
        raise ShardcliError(
            f"{flag} has {text.strip()!r}; every scale must be a positive number such as 0.5 or 4"
        )
    return value


def parse_scales(text: str, flag: str = "--sizes") -> tuple[float, ...]:
    """Parse scale factors for the dims: `1:8` (x2 steps), `1:64:x4`, or a list `0.5,1,2`."""
    return _parse_sweep(text, flag, lambda p: _parse_scale(p, flag), "scale", "0.5,1,2")


def scale_dims(dims: tuple[int, int, int], scale: float, flag: str = "--sizes") -> tuple[int, int, int]:
    """The matmul's I, J, K times `scale`; each must come out a whole number."""
    i, j, k = scale_shape(dims, scale, "IJK", flag)
    return i, j, k


def scale_shape(shape: tuple[int, ...], scale: float, names: str, flag: str = "--sizes") -> tuple[int, ...]:
    """Each dim (named by a letter of `names`) times `scale`; each must come out a whole number."""
    out = []
    for name, d in zip(names, shape, strict=True):
        value = d * scale
        if abs(value - round(value)) > 1e-9 or round(value) < 1:
            raise ShardcliError(
                f"{flag} scale {scale:g} makes {name}={d} into {value:g}, not a whole number; "
                f"use scales that keep every dim a positive integer"
            )
        out.append(int(round(value)))
    return tuple(out)


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


_TOLERANCE_RE = re.compile(r"^[0-9]*\.?[0-9]+$|^[0-9]+\.$")


def parse_tolerance(text: str) -> float:
    """`--tolerance 10%` or `--tolerance 0.1` (both ten percent) -> 0.1.

    A bare number is a fraction, so one above 1 is refused: `10` would mean 1000%.

    Raises:
        ShardcliError: not a number, negative, or a bare fraction above 1.
    """
    raw = text.strip()
    percent = raw.endswith("%")
    number = raw[:-1].strip() if percent else raw
    if number.startswith("-") and _TOLERANCE_RE.match(number[1:].strip()):
        raise ShardcliError(f"--tolerance {text!r} is negative; give 0 or more, such as 10% or 0.1")
    if not _TOLERANCE_RE.match(number):
        raise ShardcliError(
            f"--tolerance {text!r} is not valid; give a percentage such as 10% or a fraction such as 0.1"
        )
    value = float(number)
    if percent:
        return value / 100
    if value > 1:
        raise ShardcliError(
            f"--tolerance {text!r} is a fraction above 1 ({value * 100:g}%); "
            f"write {number}% for {number} percent, or a fraction such as 0.1"
        )
    return value


# JAX's short dtype names (and HLO's), as `--arg` takes them beside the long ones `--dtype` takes.
SHORT_DTYPES = {
    "f32": "float32",
    "bf16": "bfloat16",
    "f16": "float16",
    "f64": "float64",
    "i8": "int8",
    "s8": "int8",
    "i16": "int16",
    "s16": "int16",
    "i32": "int32",
    "s32": "int32",
    "i64": "int64",
    "s64": "int64",
    "u8": "uint8",
    "u32": "uint32",
    "pred": "bool",
}
_ARG_RE = re.compile(r"^\s*(?P<dtype>key<[^>]*>|[A-Za-z0-9_]+)\[(?P<shape>[0-9,\s]*)\]\s*(?:@(?P<spec>.*))?$")


@dataclass(frozen=True)
class KeyImpl:
    """A typed PRNG key's implementation (`jax.random.key(0, impl=NAME)`), known before JAX starts."""

    name: str  # JAX's name for it: threefry2x32, rbg, unsafe_rbg
    short: str  # as JAX prints the key's dtype: key<fry>, key<rbg>, key<urbg>
    words: int  # uint32 words per key (`jax.random.key_data(key).shape[-1]`)

    @property
    def dtype(self) -> DType:
        """The key as a dtype: `key<fry>`, stored as `words` uint32s per element."""
        return DType(f"key<{self.short}>", 4 * self.words, "uint")


KEY_IMPLS = {
    k.name: k
    for k in (KeyImpl("threefry2x32", "fry", 2), KeyImpl("rbg", "rbg", 4), KeyImpl("unsafe_rbg", "urbg", 4))
}
# The names JAX prints (key<fry>) and the short ones people write, beside JAX's own.
KEY_ALIASES = {"threefry": "threefry2x32", "fry": "threefry2x32", "urbg": "unsafe_rbg"}


@dataclass(frozen=True)
class AbstractArg:
    """One argument given as `DTYPE[SHAPE]@SPEC` (`bf16[256,4096]@data,None`): nothing allocated."""

    dtype: DType
    shape: tuple[int, ...]
    sharding: ShardingSpec
    key: KeyImpl | None = None  # a typed PRNG key (`key<rbg>[4]`); `dtype` then is its key dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def describe(self) -> str:
        return f"{self.dtype.name}[{','.join(map(str, self.shape))}]@{self.sharding.describe()}"


# XLA counts an array's bytes in a signed 64-bit integer (and aborts the process past it).
MAX_ABSTRACT_BYTES = 1 << 60


def parse_abstract_arg(text: str, mesh: MeshSpec, flag: str = "--arg") -> AbstractArg:
    """Parse `--arg 'bf16[256,4096]@data,None'`; `@SPEC` left out is replicated.

    Raises:
        ShardcliError: a malformed argument, an unknown dtype, an axis the mesh lacks, a dim not
            divisible by its axes.
    """
    match = _ARG_RE.match(text)
    if match is None:
        raise ShardcliError(
            f"{flag} {text!r} is not DTYPE[SHAPE]@SPEC; e.g. 'bf16[256,4096]@data,None' "
            f"(@SPEC left out: replicated)"
        )
    name = match.group("dtype").lower()
    name = SHORT_DTYPES.get(name, name)
    key = _key_impl(name, text, flag) if name.startswith("key<") else None
    if key is None and name not in DTYPES:
        raise ShardcliError(
            f"{flag} {text!r}: dtype {match.group('dtype')!r} is not supported; choose one of "
            f"{', '.join(DTYPES)}, {', '.join(SHORT_DTYPES)} or a typed PRNG key key<IMPL> "
            f"({', '.join(KEY_IMPLS)})"
        )
    dims = [d.strip() for d in match.group("shape").split(",")] if match.group("shape").strip() else []
    if any(not (d.isascii() and d.isdigit()) for d in dims):
        raise ShardcliError(f"{flag} {text!r}: the shape holds sizes separated by commas, e.g. [256,4096]")
    shape = tuple(int(d) for d in dims)
    dtype = key.dtype if key else DTYPES[name]
    if math.prod(shape) * dtype.itemsize > MAX_ABSTRACT_BYTES:
        raise ShardcliError(
            f"{flag} {text!r}: {math.prod(shape) * dtype.itemsize:.3g} bytes is beyond what XLA can "
            f"describe (at most 2**60 bytes in one array); give a smaller shape"
        )
    sharding = parse_sharding(match.group("spec"), mesh, flag=f"{flag} {text!r}: spec")
    check_sharding_fits(sharding, mesh, shape, flag="its spec", what=f"{flag} {text!r}")
    return AbstractArg(dtype=dtype, shape=shape, sharding=sharding, key=key)


def _key_impl(name: str, text: str, flag: str) -> KeyImpl:
    impl = name[len("key<") : -1].strip()
    impl = KEY_ALIASES.get(impl, impl)
    if impl not in KEY_IMPLS:
        raise ShardcliError(
            f"{flag} {text!r}: {name!r} names no PRNG key implementation; give key<IMPL> with IMPL "
            f"one of {', '.join(KEY_IMPLS)} (or {', '.join(KEY_ALIASES)}), e.g. key<threefry>[] or "
            f"key<rbg>[4]@data"
        )
    return KEY_IMPLS[impl]


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
