"""What `shardcli matmul` is asked: the request, the plan of cases, implementations and sizes it
makes, and every check on it that needs no devices.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shardcli.errors import ShardcliError
from shardcli.hardware.targets import TargetSpec
from shardcli.playground.matmul.cases import MATMUL_CASES, Axes, MatmulCase, get_case, operand_roles
from shardcli.playground.run_settings import check_run_settings
from shardcli.playground.shard import resolve_show_values
from shardcli.specs.meshes import MeshSpec
from shardcli.specs.runs import RunOptions
from shardcli.specs.values import DType, scale_dims

DEFAULT_DIMS = (256, 512, 256)

Entries = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class MatmulRequest:
    """Everything `shardcli matmul` needs, parsed before JAX starts."""

    cases: tuple[str, ...]  # case names, or ("all",)
    mesh: MeshSpec
    dtype: DType
    impls: tuple[str, ...] | None = None  # None: each case's default
    dims: tuple[int, int, int] = DEFAULT_DIMS
    init: str = "random"
    scales: tuple[float, ...] | None = None  # --sizes: a sweep over dims x scale
    show_values: bool | None = None  # None: C is shown where it has up to 256 elements
    warmup: int = 5
    iters: int = 20
    peak_tflops: float | None = None
    link_gbps: float | None = None
    options: RunOptions = field(default_factory=RunOptions)
    compile_target: TargetSpec | None = None  # --target: compile every case for a TPU or GPU topology
    mesh_text: str | None = None  # --mesh as typed: with a target, a reshape of its chips
    axes_text: str | None = None

    @property
    def sweep(self) -> bool:
        return self.scales is not None


@dataclass(frozen=True)
class Plan:
    """What will run: cases (with why any is skipped), impls per case, and the dims of each size."""

    cases: tuple[tuple[MatmulCase, str | None], ...]
    impls: dict[str, tuple[str, ...]]
    sizes: tuple[tuple[float, tuple[int, int, int]], ...]
    axes: Axes


# --- validation (no devices) ----------------------------------------------------------------------


def mesh_axes(mesh: MeshSpec) -> Axes:
    """X is the first mesh axis, Y the second (if any)."""
    sizes = mesh.axis_sizes
    x = mesh.axes[0]
    y = mesh.axes[1] if len(mesh.axes) > 1 else None
    return Axes(x=x, nx=sizes[x], y=y, ny=sizes[y] if y else 1)


def _check_divisible(case: MatmulCase, dims: tuple[int, int, int], axes: Axes, flag: str) -> None:
    for op in (*case.operands, case.result):
        for d, role in zip(op.dims, operand_roles(op, axes), strict=True):
            parts = axes.size(role)
            if role is not None and dims[d] % parts:
                letter = case.letters[d]
                raise ShardcliError(
                    f"{flag}: {letter}={dims[d]} is not divisible by the {parts} devices of mesh axis "
                    f"{axes.name(role)}, which case {case.name} shards {letter} over; "
                    f"use a multiple of {parts}"
                )


def validate_request(request: MatmulRequest) -> Plan:
    """Every check that needs no devices.

    Raises:
        ShardcliError: anything the run cannot do as asked.
    """
    check_run_settings(request, "matmul")
    every = request.cases == ("all",)
    names = tuple(MATMUL_CASES) if every else request.cases
    cases = [get_case(name) for name in names]
    axes = mesh_axes(request.mesh)
    impls = {}
    for case in cases:
        impls[case.name] = request.impls if request.impls is not None else (case.default_impl,)
    scales = request.scales if request.scales is not None else (1.0,)
    sizes = []
    for scale in scales:
        sizes.append((scale, scale_dims(request.dims, scale)))
    if request.show_values and request.sweep:
        raise ShardcliError("--show-values is for a single run; --sizes runs several sizes")
    if request.show_values:
        resolve_show_values(True, sizes[0][1][0] * sizes[0][1][2])  # C is I x K
    planned: list[tuple[MatmulCase, str | None]] = []
    for case in cases:
        if case.needs_y and axes.y is None:
            why = f"case {case.name} needs a 2-D mesh (it shards over X and Y); this mesh has one axis"
            if not every:
                raise ShardcliError(f"{why}; use a mesh such as --mesh 2x4")
            planned.append((case, why))
            continue
        for scale, dims in sizes:
            flag = f"--dims {','.join(map(str, dims))}" + (f" (scale {scale:g})" if request.scales else "")
            _check_divisible(case, dims, axes, flag)
        planned.append((case, None))
    return Plan(cases=tuple(planned), impls=impls, sizes=tuple(sizes), axes=axes)
