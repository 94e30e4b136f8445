"""`shardcli reshard`: move an array from one sharding to another, see what moves, verify it.

Three ways, each verified bit for bit against the NumPy array: `jax.sharding.reshard` under jit on
an Explicit mesh, `jit` of the identity with in/out shardings on an Auto mesh (the compiler picks
the collectives), and an eager `jax.device_put` to the new sharding. The two compiled ways are read
through `program_analysis`; the tile math says how many bytes each device must receive at least
(the part of its new block it did not already hold).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from shardcli.analysis.program import ProgramAnalysis, analyze_compiled
from shardcli.analysis.target import FitVerdict, compile_for_target, judge_fit
from shardcli.errors import ShardcliError, refusal_text
from shardcli.hardware.targets import TargetSpec
from shardcli.playground.shard import resolve_show_values
from shardcli.runtime.arrays import ShownValues, make_host_array, place_array, shown_values
from shardcli.runtime.memory import check_fits_in_memory
from shardcli.runtime.mesh import entries_of, partition_spec
from shardcli.runtime.program_run import check_blocks, time_compiled
from shardcli.runtime.session import Session, open_session
from shardcli.runtime.timing import Timing, compile_timed
from shardcli.specs.meshes import MeshSpec, ShardingSpec, check_sharding_fits
from shardcli.specs.runs import Mode, RunOptions, check_timing
from shardcli.specs.values import ArraySpec
from shardcli.tile_math import block_index

WAYS = ("reshard", "jit", "device_put")
WAY_TEXT = {
    "reshard": "jax.sharding.reshard under jit on an Explicit mesh",
    "jit": "jit of the identity with in/out shardings (the compiler picks the collectives)",
    "device_put": "jax.device_put to the new sharding, eagerly (no program of ours to read)",
}

Entries = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class ReshardRequest:
    """Everything `shardcli reshard` needs, parsed and checked before JAX starts."""

    array: ArraySpec
    source: ShardingSpec
    target: ShardingSpec
    mesh: MeshSpec
    ways: tuple[str, ...] = WAYS
    warmup: int = 5
    iters: int = 20
    options: RunOptions = field(default_factory=RunOptions)
    compile_target: TargetSpec | None = None  # --target: compile the moves for a TPU topology only
    mesh_text: str | None = None
    axes_text: str | None = None
    show_values: bool | None = None  # None: the blocks' values are shown for up to 256 elements


@dataclass(frozen=True)
class DeviceMove:
    """One device: its block before and after, and the bytes of the new block it did not hold."""

    device_id: int
    before: tuple[tuple[int, int], ...]
    after: tuple[tuple[int, int], ...]
    receive_bytes: int


@dataclass(frozen=True)
class ReshardWay:
    way: str
    status: str  # "ok" or "refused"
    message: str | None
    out_entries: Entries | None
    analysis: ProgramAnalysis | None  # None for device_put
    timing: Timing | None
    algbw: float | None  # array bytes / p50, bytes/s
    wrong: int
    wrong_devices: tuple[int, ...]
    fit: FitVerdict | None = None  # --target: the compiled move's memory per chip against its HBM
    values_before: ShownValues | None = None  # a small array's blocks as placed (--from), and
    values: ShownValues | None = None  # as this way moved them (--to)


@dataclass(frozen=True)
class ReshardResult:
    session: Session
    request: ReshardRequest
    moves: tuple[DeviceMove, ...]
    ways: tuple[ReshardWay, ...]

    @property
    def wrong(self) -> int:
        return sum(w.wrong for w in self.ways)

    @property
    def min_receive_bytes(self) -> int:
        """The most any one device must receive: the bound every way pays at least."""
        return max((m.receive_bytes for m in self.moves), default=0)

    @property
    def does_not_fit(self) -> bool:
        return any(w.fit is not None and not w.fit.fits for w in self.ways)

    @property
    def needs_communication(self) -> bool:
        return any(m.receive_bytes for m in self.moves)


def validate_reshard_request(request: ReshardRequest) -> None:
    """Every check that needs no devices.

    Raises:
        ShardcliError: anything the run cannot do as asked.
    """
    check_sharding_fits(request.source, request.mesh, request.array.shape, flag="--from")
    check_sharding_fits(request.target, request.mesh, request.array.shape, flag="--to")
    check_timing(request.iters, request.warmup)
    if request.show_values:
        if request.compile_target is not None:
            raise ShardcliError(
                f"--show-values needs a run; --target {request.compile_target.name} only compiles"
            )
        resolve_show_values(True, request.array.size)
    if not request.ways or any(w not in WAYS for w in request.ways):
        raise ShardcliError(
            f"--impl {','.join(request.ways)!r} is not valid; choose {', '.join(WAYS)} or all"
        )


def plan_moves(request: ReshardRequest, device_coords: dict[int, dict[str, int]]) -> tuple[DeviceMove, ...]:
    """Per device: the block it holds before and after, and how many bytes of the new block are not
    in the old one (what it must receive whichever way the move is made)."""
    shape = request.array.shape
    sizes = request.mesh.axis_sizes
    moves = []
    for device, coords in device_coords.items():
        before = block_index(request.source.entries, sizes, coords, shape)
        after = block_index(request.target.entries, sizes, coords, shape)
        overlap = math.prod(
            max(0, min(a.stop, b.stop) - max(a.start, b.start)) for a, b in zip(before, after, strict=True)
        )
        new = math.prod(s.stop - s.start for s in after)
        moves.append(
            DeviceMove(
                device_id=device,
                before=tuple((s.start, s.stop) for s in before),
                after=tuple((s.start, s.stop) for s in after),
                receive_bytes=(new - overlap) * request.array.dtype.itemsize,
            )
        )
    return tuple(moves)


def _program(way: str, session: Session, explicit_mesh: Any, request: ReshardRequest, host: np.ndarray):
    """(the step to time, its input, a compiled program or None, compile seconds, cached, mesh)."""
    import jax
    from jax.sharding import NamedSharding

    target = partition_spec(request.target.entries)
    source = partition_spec(request.source.entries)
    if way == "reshard":
        mesh = explicit_mesh
        x = place_array(host, NamedSharding(mesh, source))
        with jax.set_mesh(mesh):
            compiled, seconds, cached = compile_timed(jax.jit(lambda a: jax.sharding.reshard(a, target)), x)
        return compiled, x, compiled, seconds, cached, mesh
    mesh = session.mesh
    src, dst = NamedSharding(mesh, source), NamedSharding(mesh, target)
    x = place_array(host, src)
    if way == "jit":
        compiled, seconds, cached = compile_timed(
            jax.jit(lambda a: a, in_shardings=src, out_shardings=dst), x
        )
        return compiled, x, compiled, seconds, cached, mesh
    return (lambda a: jax.device_put(a, dst)), x, None, 0.0, None, mesh


def run_way(
    way: str, session: Session, explicit_mesh: Any, request: ReshardRequest, host: np.ndarray
) -> ReshardWay:
    """Move, time and verify one way; a refusal by JAX is a result, not a crash."""
    try:
        step, x, compiled, seconds, cached, mesh = _program(way, session, explicit_mesh, request, host)
    except Exception as error:  # noqa: BLE001 - JAX's refusal is the lesson
        return ReshardWay(way, "refused", refusal_text(error), None, None, None, None, 0, ())
    order = [c.device_id for c in session.layout.cells]
    shows = resolve_show_values(request.show_values, request.array.size)
    before = shown_values(x, order) if shows else None  # read now: timing may donate x
    timing, y = time_compiled(
        step,
        (x,),
        compile_s=seconds,
        cached=cached,
        warmup=request.warmup,
        iters=request.iters,
        process_timing=request.options.process_timing,
    )
    ref = host.astype(np.float64)
    zero = np.zeros_like(ref)
    check = check_blocks(y, ref, zero, np.ones_like(ref), order)
    p50 = timing.stats.p50
    return ReshardWay(
        way=way,
        status="ok",
        message=None,
        out_entries=entries_of(y.sharding, y.ndim),
        analysis=analyze_compiled(compiled, mesh) if compiled is not None else None,
        timing=timing,
        algbw=request.array.nbytes / p50 if p50 > 0 else None,
        wrong=check.wrong,
        wrong_devices=check.wrong_devices,
        values_before=before,
        values=shown_values(y, order) if shows else None,
    )


def compile_way(
    way: str, session: Session, explicit_mesh: Any, request: ReshardRequest, target: TargetSpec
) -> ReshardWay:
    """Compile one way's move for the target from an abstract array: nothing runs."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding

    dst_spec = partition_spec(request.target.entries)
    mesh = explicit_mesh if way == "reshard" else session.mesh
    src = NamedSharding(mesh, partition_spec(request.source.entries))
    x = jax.ShapeDtypeStruct(request.array.shape, jnp.dtype(request.array.dtype.name), sharding=src)
    if way == "reshard":
        program = jax.jit(lambda a: jax.sharding.reshard(a, dst_spec))
    else:
        program = jax.jit(lambda a: a, in_shardings=src, out_shardings=NamedSharding(mesh, dst_spec))
    try:
        compiled, verdict = compile_for_target(program, (x,), mesh, target)
    except Exception as error:  # noqa: BLE001 - JAX's refusal is the lesson
        return ReshardWay(way, "refused", refusal_text(error), None, None, None, None, 0, ())
    if compiled is None:
        assert verdict is not None
        return ReshardWay(way, "does not fit", verdict.text, None, None, None, None, 0, (), fit=verdict)
    analysis = analyze_compiled(compiled, mesh)
    out = compiled.output_shardings
    out = out[0] if isinstance(out, (tuple, list)) else out
    return ReshardWay(
        way=way,
        status="compiled",
        message=None,
        out_entries=entries_of(out, len(request.array.shape)),
        analysis=analysis,
        timing=None,
        algbw=None,
        wrong=0,
        wrong_devices=(),
        fit=judge_fit(analysis.memory, target),
    )


def run_reshard(
    request: ReshardRequest, progress: Callable[[int, int, str], None] | None = None
) -> ReshardResult:
    """Run every way of the request.

    The request is checked once, where it is built
    (`shardcli.commands.requests.playground.build_reshard_request_from_flags`); a request built by
    hand must pass `validate_reshard_request` first: it is not checked again here.

    Raises:
        ShardcliError: what only the devices tell (too little memory, a target's mesh), before allocating.
    """
    if request.compile_target is not None:
        return _compile_only(request, request.compile_target)
    item_blocks = sum(
        math.prod(request.array.shape) // math.prod(request.mesh.axis_sizes[a] for a in spec.axes_used())
        for spec in (request.source, request.target)
    )
    per_device = item_blocks * request.array.dtype.itemsize
    total = request.mesh.size * per_device * 2 + request.array.nbytes + math.prod(request.array.shape) * 8 * 3
    session = open_session(
        request.mesh, replace(request.options, mode=Mode.AUTO), x64=request.array.dtype.needs_x64
    )
    check_fits_in_memory(
        session.runtime,
        list(session.devices),
        per_device=per_device,
        total=total,
        what=f"reshard of {'x'.join(map(str, request.array.shape))} {request.array.dtype.name}",
    )
    explicit_mesh = None
    if "reshard" in request.ways:
        from shardcli.runtime.mesh import build_mesh

        explicit_mesh = build_mesh(request.mesh, list(session.devices), mode="explicit")
    host = make_host_array(request.array)
    coords = {
        c.device_id: dict(zip(session.layout.axes, c.coords, strict=True)) for c in session.layout.cells
    }
    ways = []
    for n, way in enumerate(request.ways):
        if progress is not None:
            progress(n, len(request.ways), way)
        ways.append(run_way(way, session, explicit_mesh, request, host))
    if progress is not None:
        progress(len(request.ways), len(request.ways), "done")
    return ReshardResult(
        session=session, request=request, moves=plan_moves(request, coords), ways=tuple(ways)
    )


def _compile_only(request: ReshardRequest, target: TargetSpec) -> ReshardResult:
    from shardcli.analysis.target import open_target_session
    from shardcli.runtime.mesh import explicit_twin

    session = open_target_session(
        target, request.mesh_text, request.axes_text, replace(request.options, mode=Mode.AUTO)
    )
    check_sharding_fits(request.source, session.spec, request.array.shape, flag="--from")
    check_sharding_fits(request.target, session.spec, request.array.shape, flag="--to")
    mesh = session.mesh
    explicit = explicit_twin(mesh)
    request = replace(request, mesh=session.spec)
    coords = {
        c.device_id: dict(zip(session.layout.axes, c.coords, strict=True)) for c in session.layout.cells
    }
    ways = tuple(compile_way(way, session, explicit, request, target) for way in request.ways)
    return ReshardResult(session=session, request=request, moves=plan_moves(request, coords), ways=ways)
