"""`shardcli collective`'s flags turned into its requests, one per named collective: pure Python, no JAX.

Every flag is parsed and checked once, in the order the command has always reported them: the out
buffer and the host allocator it goes with, the mesh, the input (`InputFlags`), the collective's
knobs, the collectives named; then each request is validated before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from shardcli.commands.requests.parsing import check_sweep_plot, parse_input_values
from shardcli.errors import ShardcliError
from shardcli.specs.meshes import MeshSpec, parse_mesh, parse_sharding
from shardcli.specs.runs import Malloc, RunOptions
from shardcli.specs.values import parse_bytes, parse_dtype, parse_init, parse_perm, parse_sizes

if TYPE_CHECKING:
    from shardcli.playground.collective.entries import Collective
    from shardcli.playground.collective.request import CollectiveRequest
    from shardcli.specs.runs import OutBuffer, Placement


def parse_collective_names(text: str) -> list[str]:
    """`psum` or `psum,all_gather`: each a known collective, none twice."""
    from shardcli.playground.collective.cases import get_collective

    names = [n.strip() for n in text.split(",")]
    for n in names:
        get_collective(n)
    if len(set(names)) != len(names):
        raise ShardcliError(f"collective list {text!r} names one twice")
    return names


def parse_collective_axes(text: str | None, mesh: MeshSpec) -> tuple[str, ...]:
    """`--axis model` or `--axis data,model`; default: every mesh axis."""
    if text is None:
        return mesh.axes
    names = tuple(n.strip() for n in text.split(","))
    for name in names:
        if name not in mesh.axes:
            raise ShardcliError(
                f"--axis {name!r} is not a mesh axis; the mesh axes are {', '.join(mesh.axes)}"
            )
    if len(set(names)) != len(names):
        raise ShardcliError(f"--axis {text!r} names an axis twice")
    return names


def default_malloc(malloc: str | None, out_buffer: str, platform: str = "auto") -> tuple[str, str | None]:
    """--malloc, or its default for the out buffer and platform, and what chose it when --malloc did not.

    A fresh 64 MiB output every call fragments a heap that never gives memory back (measured:
    all_gather of 64 MiB on 8 devices grew to 24 GiB and was killed), and fresh outputs are there
    to show what allocating costs; so reuse is the default only with the preallocated buffer. On a
    GPU or TPU asked for by name the collective's buffers are device memory, not malloc's, so the
    host allocator is left alone (`auto` is decided only once JAX has started, too late for it).
    """
    if malloc is not None:
        return malloc, None
    if platform in ("gpu", "tpu"):
        return "system", f"the default with --platform {platform}: device buffers do not come from malloc"
    if out_buffer == "fresh":
        return "system", "the default with --out-buffer fresh"
    return "reuse", None


@dataclass(frozen=True)
class InputFlags:
    """A collective's input flags, as typed; None is a flag not given.

    At most one of --shape, --size and --sizes sets the input's size (--values alone: a 1-D input of
    that many numbers); --values or --values-file, or --init, fills it; --spec and --dtype say how it
    is sharded and stored.
    """

    shape: str | None = None
    size: str | None = None
    sizes: str | None = None
    values: str | None = None
    spec: str | None = None
    dtype: str = "float32"
    init: str | None = None  # None: arange, and free to be replaced by --values
    values_file: str | None = None


def build_collective_requests(
    name: str,
    array: InputFlags = InputFlags(),
    *,
    mesh: str = "8",
    axes: str | None = None,
    axis: str | None = None,
    tiled: bool | None = None,
    gather_dim: int | None = None,
    scatter_dim: int | None = None,
    shift: int | None = None,
    perm: str | None = None,
    split_dim: int | None = None,
    concat_dim: int | None = None,
    root: int | None = None,
    placement: str = "out",
    out_buffer: str | None = None,
    warmup: int = 5,
    iters: int = 20,
    malloc: str | None = None,
    show_values: bool | None = None,
    min_busbw: float | None = None,
    plot_file: str | None = None,
    options: RunOptions | None = None,
) -> list[CollectiveRequest]:
    """`shardcli collective`'s flags as one request per named collective, every one validated.

    Args:
        name: the collective, or several joined by commas.
        array: the input's flags (--shape, --size, --sizes, --values, --spec, --dtype, --init).
        options: the shared run options; the requests carry them with the host allocator chosen.
        The rest: the flags of the same names, as typed; None is a flag not given.

    Returns:
        The requests, in the order named; each holds only the knobs that apply to it.

    Raises:
        ShardcliError: any flag, or combination, that the run cannot do, before anything runs.
    """
    from shardcli.playground.collective.cases import get_collective
    from shardcli.playground.collective.entries import CollectiveParams
    from shardcli.playground.collective.request import CollectiveRequest, validate_request

    out_buffer = _out_buffer(out_buffer, placement)
    options = _with_malloc(options or RunOptions(), malloc, out_buffer)
    mesh_spec = parse_mesh(mesh, axes)
    shape, values = _parse_input(array)
    knobs = _set_knobs(
        tiled=tiled,
        gather_dim=gather_dim,
        scatter_dim=scatter_dim,
        shift=shift,
        perm=parse_perm(perm) if perm is not None else None,
        split_dim=split_dim,
        concat_dim=concat_dim,
        root=root,
    )
    set_params = frozenset(knobs)
    params = CollectiveParams(axes=parse_collective_axes(axis, mesh_spec), **knobs)
    dtype_spec = parse_dtype(array.dtype)
    names = parse_collective_names(name)
    collectives = [get_collective(n) for n in names]
    _check_knobs_apply(set_params, names, collectives)
    check_sweep_plot(plot_file, array.sizes, "1K:64M")
    base = CollectiveRequest(
        collective=names[0],
        mesh=mesh_spec,
        params=params,
        dtype=dtype_spec,
        init=parse_init(array.init or "arange"),
        # --values alone: global_shapes counts them; a values file brings its own shape
        shape=shape if array.shape is not None or array.values_file is not None else None,
        sizes=_parse_input_sizes(array),
        values=values,
        sharding=parse_sharding(array.spec, mesh_spec) if array.spec is not None else None,
        # words: CollectiveRequest turns them into their enums and refuses others as their flags
        placement=cast("Placement", placement),
        out_buffer=cast("OutBuffer", out_buffer),
        warmup=warmup,
        iters=iters,
        show_values=show_values,
        min_busbw=min_busbw,
        set_params=set_params,
        sweep=array.sizes is not None,
        options=options,
    )
    # Each collective gets the knobs that are its own (the check above refused any that fit none).
    requests = [replace(base, collective=c.name, set_params=set_params & c.options) for c in collectives]
    for request in requests:  # every bad input is found before anything runs
        validate_request(request)
    return requests


def _out_buffer(out_buffer: str | None, placement: str) -> str:
    """--out-buffer, preallocated by default; refused with --placement in, which has no out buffer."""
    if out_buffer is not None and placement == "in":
        raise ShardcliError(
            "--out-buffer is for out-of-place runs, and --placement in writes the result into the "
            "input; use --placement out or both"
        )
    return out_buffer or "preallocated"


def _with_malloc(options: RunOptions, malloc: str | None, out_buffer: str) -> RunOptions:
    from shardcli.runtime.allocator import ALLOCATORS

    chosen, why = default_malloc(malloc, out_buffer, options.platform)
    if chosen not in ALLOCATORS:
        raise ShardcliError(f"--malloc {chosen!r} is not valid; choose one of {', '.join(ALLOCATORS)}")
    return replace(options, malloc=Malloc(chosen), malloc_why=why)


def _parse_input(array: InputFlags) -> tuple[tuple[int, ...] | None, tuple[float, ...] | None]:
    """The input's shape and numbers (see `parse_input_values`), once one flag at most sets its size.

    Raises:
        ShardcliError: two of --shape, --size and --sizes, or --size or --sizes with values.
    """
    given = {"--shape": array.shape, "--size": array.size, "--sizes": array.sizes}
    chosen = [flag for flag, value in given.items() if value is not None]
    if len(chosen) > 1:
        raise ShardcliError(f"{' and '.join(chosen)} both set the input; give only one of them")
    values_flag = "--values" if array.values is not None else "--values-file"
    if chosen and chosen[0] != "--shape" and (array.values is not None or array.values_file is not None):
        raise ShardcliError(
            f"{chosen[0]} and {values_flag} both set the input; give --values alone (1-D) or with --shape"
        )
    return parse_input_values(array.values, array.values_file, array.shape, array.init)


def _parse_input_sizes(array: InputFlags) -> tuple[int, ...] | None:
    """--sizes, or --size as a sweep of one."""
    if array.sizes is not None:
        return parse_sizes(array.sizes)
    return (parse_bytes(array.size),) if array.size is not None else None


def _set_knobs(**knobs: Any) -> dict[str, Any]:
    """The collective's knobs that a flag set (None is a flag not given).

    Raises:
        ShardcliError: --shift and --perm both, which both set ppermute's pairs.
    """
    set_knobs = {k: v for k, v in knobs.items() if v is not None}
    if "shift" in set_knobs and "perm" in set_knobs:
        raise ShardcliError("--shift and --perm both set ppermute's pairs; give only one")
    return set_knobs


def _check_knobs_apply(set_params: frozenset[str], names: list[str], collectives: list[Collective]) -> None:
    """Each knob set applies to at least one of the collectives named.

    Raises:
        ShardcliError: a knob that none of them takes, naming the collectives that do.
    """
    from shardcli.playground.collective.cases import COLLECTIVES, PARAM_FLAGS

    for param in sorted(set_params):
        if not any(param in c.options for c in collectives):
            raise ShardcliError(
                f"{PARAM_FLAGS[param]} does not apply to {', '.join(names)}; it is for "
                f"{', '.join(c.name for c in COLLECTIVES.values() if param in c.options)}"
            )
