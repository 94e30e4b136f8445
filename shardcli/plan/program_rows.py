"""The request, rows and result of `shardcli plan FILE.py:FN --inputs FILE.py:NAME`
(`plan.user_program` runs it; `plan.own_layout` lays out a program that lays itself out)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardcli.analysis.step_time import StepEstimate
from shardcli.hardware.targets import TargetSpec
from shardcli.plan.candidates import MeshChoice
from shardcli.plan.compiled_figures import CompiledFigures
from shardcli.specs.decoder import Rules
from shardcli.specs.runs import RunOptions


@dataclass(frozen=True)
class ProgramPlanRequest:
    """`shardcli plan FILE.py:FN --inputs FILE.py:NAME`'s flags."""

    program: str
    inputs: str
    target: TargetSpec
    rules: Rules | None = None  # --rules; None: the decoder's rule sets
    compile_n: int = 8
    use_cache: bool = True  # --no-cache: compile every layout again (the cache is still written)
    options: RunOptions = field(default_factory=RunOptions)


@dataclass(frozen=True)
class ProgramRow:
    """One layout of the user's program."""

    mesh: MeshChoice
    rule_set: str
    rules: Rules
    argument_bytes: int  # per chip, from the arguments' shapes and specs
    status: str  # "compiled", "cached", "modelled", "pruned", "interrupted"
    why: str = ""
    compiled: CompiledFigures | None = None
    estimate: StepEstimate | None = None
    # A program that lays itself out: the mesh its inputs(mesh) was handed, every axis (size 1 too)
    mesh_axes: tuple[tuple[str, int], ...] = ()

    @property
    def label(self) -> str:
        return f"{self.mesh.label} {self.rule_set}"


@dataclass(frozen=True)
class ProgramPlanResult:
    request: ProgramPlanRequest
    rows: tuple[ProgramRow, ...]
    named_leaves: int  # leaves with logical names
    leaves: int
    names_used: tuple[str, ...]  # the logical axis names the arguments carry
    peak_flops: float
    interrupted: bool
    compile_s: float
    cache_hits: int = 0
    warnings: tuple[str, ...] = ()  # one line each: names no rule maps, names taken as mesh axes
    own_layout: str = ""  # how the program lays itself out, where it does ("" : by its names)

    @property
    def winner(self) -> ProgramRow | None:
        fitting = [r for r in self.rows if r.compiled is not None and r.compiled.fits and r.estimate]
        return fitting[0] if fitting else None


@dataclass(frozen=True)
class LoadedProgram:
    """The user's function and its arguments, with the logical names each leaf carries."""

    fn: Callable[..., Any]
    given: Any  # program_inputs' answer: args, kwargs (and a function where --inputs gave one)
    roots: tuple[str, ...]
    table: dict[str, Any]
    leaves: list[Any]
    named: int
    maker: Any = None  # the loaded --inputs (UserObject)
    own_layout: str = ""  # why the program lays itself out (`own_layout`), or ""
