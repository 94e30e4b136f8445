"""The program's arguments and results as the findings and the collectives' roles judge them.

`ArrayFact` describes one argument or result leaf (its pytree path, type, sharding and bytes);
`moved_argument` ties a collective to the argument whose value it moves, by identity:
`collectives` follows its operand back to the entry parameter it copies or slices, never by a
shape that happens to match.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from shardcli.analysis.collectives import CollectiveOp
from shardcli.tile_math import ShardingLayout

Entries = tuple[tuple[str, ...], ...]
# shardcli's own name for the i-th array it hands a step it wraps (`jit_of`'s `call(*arrays)`)
_WRAPPED_ARRAY = re.compile(r"arrays\[(\d+)\]")
# A string key that reads as an attribute: `['layers']` is shown `.layers`
_DICT_KEY = re.compile(r"\['([A-Za-z_][A-Za-z0-9_]*)'\]")


def shown_path(path: str) -> str:
    """A pytree path as every screen shows it: string keys written as attributes
    (`state['params']['w']` is `state.params.w`); JSON keeps `jax.tree_util.keystr`'s own."""
    return _DICT_KEY.sub(r".\1", path)


HLO_DTYPE = {
    "float32": "f32",
    "bfloat16": "bf16",
    "float16": "f16",
    "float64": "f64",
    "int8": "s8",
    "int16": "s16",
    "int32": "s32",
    "int64": "s64",
    "uint8": "u8",
    "uint32": "u32",
    "bool": "pred",
}


@dataclass(frozen=True)
class ArrayFact:
    """One argument or result leaf: its name, type, sharding and bytes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    entries: Entries | None  # mesh axes per dim; None where the sharding has no PartitionSpec
    spec: str  # as people read it
    layout: ShardingLayout
    bytes_global: int
    bytes_per_device: int

    @property
    def replicated(self) -> bool:
        return self.layout.replication > 1 and len(self.layout.tiles) == 1


def moved_argument(c: CollectiveOp, arguments: Sequence[ArrayFact]) -> ArrayFact | None:
    """The argument whose value the collective moves (its operand is a copy or slice of it): by
    JAX's name of the entry parameter, else by its number where JAX gave no name. `arrays[i]` is the
    i-th array leaf, as `program.inputs.jit_of` hands a haliax `named_jit` or equinox step its
    arrays."""
    if c.operand is not None:
        named = next((a for a in arguments if a.name == c.operand), None)
        index = _WRAPPED_ARRAY.fullmatch(c.operand)
        if named is None and index is not None and int(index.group(1)) < len(arguments):
            return arguments[int(index.group(1))]
        return named
    if c.operand_parameter is not None and c.operand_parameter < len(arguments):
        return arguments[c.operand_parameter]
    return None
