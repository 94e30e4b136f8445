"""The classic sharding mistakes in an inspected program, and the argument facts they judge.

`core.inspect` describes every argument and result leaf as an `ArrayFact` and reads the compiled
program through `program_analysis`; `find_mistakes` names what looks wrong in them.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardcli.core.program_analysis import CollectiveOp, ProgramAnalysis
from shardcli.specs import ShardingSpec
from shardcli.tile_math import ShardingLayout

Entries = tuple[tuple[str, ...], ...]

# A fully replicated argument at least this large per device, and this share of all arguments, is
# named: smaller ones (biases, scales, step counters) are replicated on purpose.
LARGE_REPLICATED_BYTES = 1 << 20
LARGE_REPLICATED_SHARE = 0.05
# The JAX operations whose collectives compute something; others only move data between layouts.
COMPUTING_OPS = ("dot_general", "conv_general_dilated", "reduce_sum", "reduce_max", "reduce_min", "cumsum")
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


@dataclass(frozen=True)
class Finding:
    """A classic mistake found in the program, naming the argument or operation."""

    kind: str  # "replicated", "gathered-whole", "reshard", "result-sharding"
    message: str


def _hlo_type(fact: ArrayFact) -> str:
    return f"{HLO_DTYPE.get(fact.dtype, fact.dtype)}[{','.join(map(str, fact.shape))}]"


def _where(c: CollectiveOp) -> str:
    op = c.op or "the partitioner"
    return f"{op} ({c.source})" if c.source else op


def find_mistakes(
    arguments: tuple[ArrayFact, ...],
    results: tuple[ArrayFact, ...],
    analysis: ProgramAnalysis | None,
    asked: tuple[ShardingSpec, ...],
    devices: int,
) -> tuple[Finding, ...]:
    """The classic sharding mistakes, each naming the argument or operation."""
    from shardcli.runtime import format_bytes

    found = []
    total = sum(a.bytes_per_device for a in arguments) or 1
    for a in arguments:
        if (
            devices > 1
            and a.replicated
            and a.bytes_per_device >= LARGE_REPLICATED_BYTES
            and a.bytes_per_device >= LARGE_REPLICATED_SHARE * total
        ):
            found.append(
                Finding(
                    "replicated",
                    f"argument {a.name} ({_hlo_type(a)}, {format_bytes(a.bytes_global)}) is fully "
                    f"replicated: each of the {devices} devices holds all of it; shard one of its dims "
                    f"over a mesh axis",
                )
            )
    for c in analysis.collectives if analysis is not None else ():
        if c.kind == "all-gather":
            whole = [a for a in arguments if not a.replicated and _hlo_type(a) == c.shape]
            for a in whole:
                found.append(
                    Finding(
                        "gathered-whole",
                        f"{a.name} ({c.shape}) is all-gathered whole over {c.axes_text} at {_where(c)}: "
                        f"every device holds all of it while it is used",
                    )
                )
            if whole:
                continue
        if c.op_name and "shard_map" in c.op_name:
            continue  # a collective the program asked for itself
        op = c.op_name.rsplit("/", 1)[-1] if c.op_name else None
        if c.kind == "all-to-all" or (
            c.kind in ("all-gather", "collective-permute") and op not in COMPUTING_OPS
        ):
            found.append(
                Finding(
                    "reshard",
                    f"the compiler added {'an' if c.kind[0] == 'a' else 'a'} {c.kind} over {c.axes_text} "
                    f"({c.shape}, {format_bytes(c.sent_bytes)} sent per device"
                    f"{f', {c.runs} runs' if c.runs > 1 else ''}) to reshard between operations, "
                    f"at {_where(c)}",
                )
            )
    for result, spec in zip(results, asked, strict=False):
        want = spec.entries + ((),) * (len(result.shape) - len(spec.entries))
        if result.entries is not None and tuple(result.entries) != want:
            found.append(
                Finding(
                    "result-sharding",
                    f"result {result.name} came out {result.spec} but --out asked for "
                    f"{ShardingSpec(spec.entries).describe() or 'P()'}: moving it there is one more reshard",
                )
            )
    return tuple(found)
