"""A command's flags, as typed, turned into its frozen request: pure Python, no JAX.

Each builder parses and checks every flag once, in the order the command has always reported them,
so the command only runs what it gets back and tests call the builders directly. The core modules
(imported when a builder runs, to keep `shardcli --help` light) hold the request types and the
checks that need the whole request (`validate_request`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from shardcli.errors import ShardcliError
from shardcli.specs.meshes import MeshSpec, parse_mesh, parse_sharding
from shardcli.specs.runs import Malloc, RunOptions, check_plot_file
from shardcli.specs.values import (
    parse_bytes,
    parse_dims,
    parse_dtype,
    parse_init,
    parse_perm,
    parse_scales,
    parse_shape,
    parse_sizes,
    parse_values,
)

if TYPE_CHECKING:
    from shardcli.hardware.targets import TargetSpec
    from shardcli.playground.collective_request import CollectiveRequest
    from shardcli.playground.einsum import EinsumRequest
    from shardcli.playground.matmul_request import MatmulRequest
    from shardcli.playground.reshard import ReshardRequest
    from shardcli.program.inspect import InspectRequest
    from shardcli.specs.runs import OutBuffer, Placement
    from shardcli.training.pipeline.threads import PipelineRequest


def parse_collective_names(text: str) -> list[str]:
    """`psum` or `psum,all_gather`: each a known collective, none twice."""
    from shardcli.playground.collective_cases import get_collective

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


def check_sweep_plot(plot_file: str | None, sizes: str | None, example: str) -> None:
    """--plot-file draws a sweep: it needs --sizes, and a file shardcli can write.

    Raises:
        ShardcliError: either is missing or wrong.
    """
    if plot_file is None:
        return
    check_plot_file(plot_file)
    if sizes is None:
        raise ShardcliError(f"--plot-file draws a sweep over sizes; give --sizes (such as {example})")


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
    from shardcli.playground.collective_cases import (
        COLLECTIVES,
        PARAM_FLAGS,
        CollectiveParams,
        get_collective,
    )
    from shardcli.playground.collective_request import CollectiveRequest, validate_request

    options = options or RunOptions()
    if out_buffer is not None and placement == "in":
        raise ShardcliError(
            "--out-buffer is for out-of-place runs, and --placement in writes the result into the "
            "input; use --placement out or both"
        )
    out_buffer = out_buffer or "preallocated"
    options = _with_malloc(options, malloc, out_buffer)
    mesh_spec = parse_mesh(mesh, axes)
    given = {"--shape": array.shape, "--size": array.size, "--sizes": array.sizes}
    chosen = [flag for flag, value in given.items() if value is not None]
    if len(chosen) > 1:
        raise ShardcliError(f"{' and '.join(chosen)} both set the input; give only one of them")
    values_flag = "--values" if array.values is not None else "--values-file"
    if chosen and chosen[0] != "--shape" and (array.values is not None or array.values_file is not None):
        raise ShardcliError(
            f"{chosen[0]} and {values_flag} both set the input; give --values alone (1-D) or with --shape"
        )
    shape, values = parse_input_values(array.values, array.values_file, array.shape, array.init)
    knobs = {
        "tiled": tiled,
        "gather_dim": gather_dim,
        "scatter_dim": scatter_dim,
        "shift": shift,
        "perm": parse_perm(perm) if perm is not None else None,
        "split_dim": split_dim,
        "concat_dim": concat_dim,
        "root": root,
    }
    set_knobs: dict[str, Any] = {k: v for k, v in knobs.items() if v is not None}
    set_params = frozenset(set_knobs)
    if "shift" in set_params and "perm" in set_params:
        raise ShardcliError("--shift and --perm both set ppermute's pairs; give only one")
    params = CollectiveParams(axes=parse_collective_axes(axis, mesh_spec), **set_knobs)
    dtype_spec = parse_dtype(array.dtype)
    names = parse_collective_names(name)
    collectives = [get_collective(n) for n in names]
    for param in sorted(set_params):
        if not any(param in c.options for c in collectives):
            raise ShardcliError(
                f"{PARAM_FLAGS[param]} does not apply to {', '.join(names)}; it is for "
                f"{', '.join(c.name for c in COLLECTIVES.values() if param in c.options)}"
            )
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


def parse_input_values(
    values: str | None, values_file: str | None, shape: str | None, init: str | None
) -> tuple[tuple[int, ...] | None, tuple[float, ...] | None]:
    """--values or --values-file, with --shape: the input's shape and its numbers in row-major order.

    --values alone is a 1-D input of that many numbers; with --shape it fills that shape row by row.
    A values file brings its own shape, which --shape may reshape to (the same number of elements).
    --init fills an input too, so --values with --init is refused rather than one of them ignored.

    Returns:
        (shape or None where no flag gave one, values or None where --init fills the input).

    Raises:
        ShardcliError: both value flags, values with --init, a number the flags cannot read.
    """
    parsed_shape = parse_shape(shape) if shape is not None else None
    if values is None and values_file is None:
        return parsed_shape, None
    flag = "--values" if values is not None else "--values-file"
    if values is not None and values_file is not None:
        raise ShardcliError("--values and --values-file both give the input's numbers; give only one of them")
    if init is not None:
        raise ShardcliError(f"{flag} and --init {init} both fill the input; give only one of them")
    if values is not None:
        numbers = parse_values(values)
        return (parsed_shape or (len(numbers),)), numbers
    from shardcli.runtime.arrays import load_values_file

    assert values_file is not None
    array = load_values_file(values_file)
    return (parsed_shape or tuple(array.shape)), tuple(array.ravel().tolist())


def _parse_input_sizes(array: InputFlags) -> tuple[int, ...] | None:
    """--sizes, or --size as a sweep of one."""
    if array.sizes is not None:
        return parse_sizes(array.sizes)
    return (parse_bytes(array.size),) if array.size is not None else None


def _with_malloc(options: RunOptions, malloc: str | None, out_buffer: str) -> RunOptions:
    from shardcli.runtime.allocator import ALLOCATORS

    chosen, why = default_malloc(malloc, out_buffer, options.platform)
    if chosen not in ALLOCATORS:
        raise ShardcliError(f"--malloc {chosen!r} is not valid; choose one of {', '.join(ALLOCATORS)}")
    return replace(options, malloc=Malloc(chosen), malloc_why=why)


def _parse_names(text: str, flag: str, choices: tuple[str, ...], what: str) -> tuple[str, ...]:
    """A comma-separated list of distinct names from `choices`."""
    names = tuple(n.strip() for n in text.split(","))
    for name in names:
        if name not in choices:
            raise ShardcliError(f"{flag} {name!r} is not {what}; choose one of {', '.join(choices)} or all")
    twice = [n for n in names if names.count(n) > 1]
    if twice:
        raise ShardcliError(f"{flag} {text!r} names {twice[0]!r} twice; give each once")
    return names


def parse_cases(text: str) -> tuple[str, ...]:
    """`--case allreduce`, `--case allreduce,collective` or `--case all` (kept as ("all",))."""
    from shardcli.playground.matmul_cases import MATMUL_CASES

    if text.strip() == "all":
        return ("all",)
    return _parse_names(text, "--case", tuple(MATMUL_CASES), "a matmul case")


def parse_impls(text: str | None) -> tuple[str, ...] | None:
    """`--impl manual`, `--impl manual,auto` or `--impl all`; None keeps each case's default."""
    from shardcli.playground.matmul_cases import IMPLS

    if text is None:
        return None
    if text.strip() == "all":
        return IMPLS
    return _parse_names(text, "--impl", IMPLS, "valid")


def build_matmul_request(
    *,
    case: str = "all",
    impl: str | None = None,
    dims: str = "256,512,256",
    dtype: str = "float32",
    init: str = "random",
    show_values: bool | None = None,
    sizes: str | None = None,
    warmup: int = 5,
    iters: int = 20,
    peak_tflops: float | None = None,
    link_gbps: float | None = None,
    mesh: str | None = None,
    axes: str | None = None,
    plot_file: str | None = None,
    options: RunOptions | None = None,
    compile_target: str | None = None,
) -> MatmulRequest:
    """`shardcli matmul`'s flags as its request (the checks that need the plan run in the core).

    Args:
        The flags of the same names, as typed; `options`, the shared run options.

    Raises:
        ShardcliError: a flag, or --plot-file without --sizes.
    """
    from shardcli.playground.matmul_request import MatmulRequest

    hardware, mesh_spec = target_and_mesh(compile_target, mesh, axes)
    if hardware is not None and plot_file is not None:
        raise ShardcliError(f"--plot-file draws measured times; --target {hardware.name} only compiles")
    request = MatmulRequest(
        cases=parse_cases(case),
        mesh=mesh_spec,
        dtype=parse_dtype(dtype),
        impls=parse_impls(impl),
        dims=parse_dims(dims),
        init=parse_init(init),
        show_values=show_values,
        scales=parse_scales(sizes) if sizes is not None else None,
        warmup=warmup,
        iters=iters,
        peak_tflops=peak_tflops,
        link_gbps=link_gbps,
        options=options or RunOptions(),
        compile_target=hardware,
        mesh_text=mesh,
        axes_text=axes,
    )
    check_sweep_plot(plot_file, sizes, "1:8")
    return request


def default_pipeline_axes(mesh: str) -> str | None:
    """stage,model for a 2-D mesh, stage for 1-D; otherwise the usual names (None)."""
    rank = len(mesh.split("x"))
    return {1: "stage", 2: "stage,model"}.get(rank)


def build_pipeline_request(
    *,
    microbatches: int = 8,
    schedule: str = "1f1b",
    layers: int = 8,
    width: int = 256,
    batch: int = 32,
    stages: int | None = None,
    forward_only: bool = False,
    impl: str = "mpmd",
    mesh: str = "4x2",
    axes: str | None = None,
    options: RunOptions | None = None,
) -> PipelineRequest:
    """`shardcli pipeline`'s flags as its request.

    The layout checks (stages, layers, batch and width against the mesh) need the whole request and
    run once, in the core's `validate_request`, when the pipeline runs.

    Args:
        impl: mpmd, spmd or both (the two, in that order).
        axes: the mesh's axis names; default: stage,model on a 2-D mesh, stage on a 1-D one.
        options: the shared run options.
        The rest: the flags of the same names.

    Raises:
        ShardcliError: --impl is none of the three, or the mesh flags are not valid.
    """
    from shardcli.training.pipeline.threads import IMPLS, PipelineRequest

    choices = (*IMPLS, "both")
    if impl not in choices:
        raise ShardcliError(f"--impl {impl!r} is not valid; choose one of {', '.join(choices)}")
    return PipelineRequest(
        mesh=parse_mesh(mesh, axes if axes is not None else default_pipeline_axes(mesh)),
        stages=stages,
        microbatches=microbatches,
        batch=batch,
        layers=layers,
        width=width,
        schedule=schedule,
        forward_only=forward_only,
        impls=IMPLS if impl == "both" else (impl,),
        options=options or RunOptions(),
    )


def target_and_mesh(
    compile_target: str | None, mesh: str | None, axes: str | None
) -> tuple[TargetSpec | None, MeshSpec]:
    """--target and the mesh the flags are checked against before libtpu describes its chips: --mesh
    as typed, else the target's topology, else 2x4 (checked again on the target's real mesh)."""
    from shardcli.hardware.targets import parse_target

    hardware = parse_target(compile_target) if compile_target is not None else None
    shown = mesh if mesh is not None else ("x".join(map(str, hardware.topology)) if hardware else "2x4")
    return hardware, parse_mesh(shown, axes)


def parse_ways(text: str, choices: tuple[str, ...]) -> tuple[str, ...]:
    """`--impl auto`, `--impl auto,explicit` or `--impl all` for einsum and reshard."""
    if text.strip() == "all":
        return choices
    return _parse_names(text, "--impl", choices, "valid")


def build_einsum_request_from_flags(
    *,
    subscripts: str,
    shapes: list[str],
    in_specs: list[str],
    out_spec: str | None,
    impl: str,
    dtype: str,
    init: str,
    sizes: str | None,
    warmup: int,
    iters: int,
    peak_tflops: float | None,
    link_gbps: float | None,
    mesh: str | None,
    axes: str | None,
    options: RunOptions,
    compile_target: str | None = None,
    show_values: bool | None = None,
) -> EinsumRequest:
    """`shardcli einsum`'s flags as its request; every check that needs no devices."""
    from shardcli.playground.einsum import WAYS, build_einsum_request

    hardware, mesh_spec = target_and_mesh(compile_target, mesh, axes)
    return build_einsum_request(
        subscripts,
        tuple(parse_shape(s) for s in shapes),
        tuple(parse_sharding(s, mesh_spec, flag="--in") for s in in_specs),
        parse_sharding(out_spec, mesh_spec, flag="--out") if out_spec is not None else None,
        mesh_spec,
        parse_dtype(dtype),
        ways=parse_ways(impl, WAYS),
        init=parse_init(init),
        show_values=show_values,
        scales=parse_scales(sizes) if sizes is not None else None,
        warmup=warmup,
        iters=iters,
        peak_tflops=peak_tflops,
        link_gbps=link_gbps,
        options=options,
        compile_target=hardware,
        mesh_text=mesh,
        axes_text=axes,
    )


def build_reshard_request_from_flags(
    *,
    shape: str | None,
    source: str | None,
    target: str | None,
    impl: str,
    dtype: str,
    init: str | None,
    warmup: int,
    iters: int,
    mesh: str | None,
    axes: str | None,
    options: RunOptions,
    compile_target: str | None = None,
    values: str | None = None,
    values_file: str | None = None,
    show_values: bool | None = None,
) -> ReshardRequest:
    """`shardcli reshard`'s flags as its request; every check that needs no devices."""
    from shardcli.playground.reshard import WAYS, ReshardRequest, validate_reshard_request
    from shardcli.specs.values import ArraySpec

    hardware, mesh_spec = target_and_mesh(compile_target, mesh, axes)
    parsed_shape, numbers = parse_input_values(values, values_file, shape, init)
    ways = parse_ways(impl, WAYS)
    if hardware is not None:
        if impl.strip() == "all":
            ways = tuple(w for w in ways if w != "device_put")  # the report says why it is left out
        elif "device_put" in ways:
            raise ShardcliError(
                f"--impl device_put moves the array eagerly on devices; --target {hardware.name} only "
                f"compiles: use --impl reshard,jit"
            )
    request = ReshardRequest(
        array=ArraySpec(
            shape=parsed_shape or parse_shape("8x1024"),
            dtype=parse_dtype(dtype),
            init=parse_init(init or "arange"),
            values=numbers,
        ),
        source=parse_sharding(source, mesh_spec, flag="--from"),
        target=parse_sharding(target, mesh_spec, flag="--to"),
        mesh=mesh_spec,
        ways=ways,
        warmup=warmup,
        iters=iters,
        options=options,
        compile_target=hardware,
        mesh_text=mesh,
        axes_text=axes,
        show_values=show_values,
    )
    validate_reshard_request(request)
    return request


def _check_module_flags(
    target: str,
    args: list[str],
    inputs: str | None,
    rules: str | None,
    outs: list[str],
    run: bool,
    compile_target: str | None,
) -> None:
    """`inspect PATH.hlo.txt`: a compiled module is read as it is, on the hardware it was compiled for.

    Raises:
        ShardcliError: a flag that shapes a compile (--arg, --inputs, --rules, --out, --run), or no
            --target.
    """
    given = [
        flag
        for flag, value in (
            ("--arg", args),
            ("--inputs", inputs),
            ("--rules", rules),
            ("--out", outs),
            ("--run", run),
        )
        if value
    ]
    if given:
        them = "it" if len(given) == 1 else "them"
        raise ShardcliError(
            f"inspect {target} reads a module already compiled: {', '.join(given)} shape(s) a compile of "
            f"FILE.py:FUNCTION; leave {them} out"
        )
    if compile_target is None:
        raise ShardcliError(
            f"inspect {target} reads a compiled module: give the hardware it was compiled for with "
            "--target, such as gpu-h200:8, gpu-h100:2x8 or tpu-v5p:4x4x4"
        )


def build_inspect_request(
    *,
    target: str,
    args: list[str],
    inputs: str | None,
    outs: list[str],
    run: bool,
    warmup: int,
    iters: int,
    peak_tflops: float | None,
    link_gbps: float | None,
    mesh: str | None,
    axes: str | None,
    options: RunOptions,
    compile_target: str | None = None,
    mode_given: bool = False,
    rules: str | None = None,
) -> InspectRequest:
    """`shardcli inspect`'s flags as its request; every check that needs no devices."""
    from shardcli.program.inspect import InspectRequest, is_module_path
    from shardcli.specs.arguments import parse_abstract_arg
    from shardcli.specs.decoder import parse_rules
    from shardcli.specs.runs import check_cost_figures

    if is_module_path(target):
        _check_module_flags(target, args, inputs, rules, outs, run, compile_target)

    if rules is not None and inputs is None:
        raise ShardcliError(
            "--rules lays out the arguments of --inputs FILE.py:NAME by their logical axis names; "
            "give --inputs (--arg takes its sharding as typed)"
        )
    hardware, mesh_spec = target_and_mesh(compile_target, mesh, axes)
    check_cost_figures(peak_tflops, link_gbps)
    return InspectRequest(
        target=target,
        args=tuple(parse_abstract_arg(a, mesh_spec) for a in args),
        inputs=inputs,
        outs=tuple(parse_sharding(o, mesh_spec, flag="--out") for o in outs),
        mesh=None if hardware else mesh_spec,
        run=run,
        warmup=warmup,
        iters=iters,
        peak_tflops=peak_tflops,
        link_gbps=link_gbps,
        options=options,
        compile_target=hardware,
        mesh_text=mesh,
        axes_text=axes,
        mode_given=mode_given,
        rules=parse_rules(rules) if rules is not None else None,
    )
