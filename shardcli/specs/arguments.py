"""Abstract arguments as `--arg` gives them: `f32[8,512]@data,None`, `key<fry>[]`."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from shardcli.errors import ShardcliError
from shardcli.specs.meshes import MeshSpec, ShardingSpec, check_sharding_fits, parse_sharding
from shardcli.specs.values import DTYPES, DType

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
