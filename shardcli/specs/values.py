"""Arrays and numbers as flags give them: shapes, dtypes, inits, byte sizes, sweeps, tolerances."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from shardcli.errors import ShardcliError

DTYPE_KINDS = ("float", "int", "uint", "bool")


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
    "normal": "standard normal for floats (fixed seed), as weights and activations are; ints as random",
}


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


INT_RE = re.compile(r"^[0-9]+$")


def parse_positive_ints(text: str, flag: str, what: str, example: str) -> tuple[int, ...]:
    raw = text.strip()
    if not raw:
        raise ShardcliError(f"{flag} is empty; give {what} such as {example}")
    parts = raw.lower().split("x")
    values: list[int] = []
    for part in parts:
        part = part.strip()
        if not INT_RE.match(part):
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


def parse_shape(text: str, flag: str = "--shape") -> tuple[int, ...]:
    """Parse an array shape: `8x8`, `16`, `4x8x8`."""
    return parse_positive_ints(text, flag, "array dims", "8x8, 16 or 4x8x8")


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
        if len(bits) != 2 or not all(INT_RE.match(b.strip()) for b in bits):
            raise ShardcliError(
                f"--perm {text!r} is not valid; give SRC:DST pairs of axis positions such as 0:1,1:2,2:0"
            )
        pairs.append((int(bits[0]), int(bits[1])))
    return tuple(pairs)


def parse_dims(text: str) -> tuple[int, int, int]:
    """Parse `--dims I,J,K`: three positive integers (rows of A, the contracting dim, columns of B)."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3 or not all(INT_RE.match(p) for p in parts) or any(int(p) <= 0 for p in parts):
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
