"""Meshes and shardings as flags give them: `--mesh 2x4 --axes data,model`, `--spec data,None`."""

from __future__ import annotations

import keyword
import math
from dataclasses import dataclass

from shardcli.errors import ShardcliError
from shardcli.specs.values import INT_RE, parse_positive_ints

DEFAULT_AXIS_NAMES = ("x", "y", "z", "w")
RESERVED_SPEC_WORDS = ("None", "_")


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


def parse_mesh_shape(text: str) -> tuple[int, ...]:
    """Parse `--mesh`: `8`, `2x4`, `2x2x2`.

    Raises:
        ShardcliError: for anything but positive integers joined by `x`.
    """
    return parse_positive_ints(text, "--mesh", "mesh sizes", "8, 2x4 or 2x2x2")


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
    if len(parts) != 2 or not all(INT_RE.match(p) for p in parts):
        raise ShardcliError(f"--view-dims {text!r} is not valid; give two array dims as ROW,COL, such as 0,1")
    row, col = int(parts[0]), int(parts[1])
    if row == col or row >= rank or col >= rank:
        raise ShardcliError(
            f"--view-dims {text!r} must name two different dims below the array's rank {rank}"
        )
    return row, col
