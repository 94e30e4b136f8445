"""The playground's matmul, einsum and reshard flags turned into their frozen requests: pure Python, no JAX.

Each builder parses and checks every flag once, in the order the command has always reported them,
so the command only runs what it gets back and tests call the builders directly. The playground
modules (imported when a builder runs, to keep `shardcli --help` light) hold the request types and
the checks that need the whole request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardcli.commands.requests.parsing import (
    check_sweep_plot,
    parse_input_values,
    parse_names,
    parse_ways,
    target_and_mesh,
)
from shardcli.errors import ShardcliError
from shardcli.specs.meshes import parse_sharding
from shardcli.specs.runs import RunOptions
from shardcli.specs.values import parse_dims, parse_dtype, parse_init, parse_scales, parse_shape

if TYPE_CHECKING:
    from shardcli.playground.einsum import EinsumRequest
    from shardcli.playground.matmul.request import MatmulRequest
    from shardcli.playground.reshard import ReshardRequest


def parse_cases(text: str) -> tuple[str, ...]:
    """`--case allreduce`, `--case allreduce,collective` or `--case all` (kept as ("all",))."""
    from shardcli.playground.matmul.cases import MATMUL_CASES

    if text.strip() == "all":
        return ("all",)
    return parse_names(text, "--case", tuple(MATMUL_CASES), "a matmul case")


def parse_impls(text: str | None) -> tuple[str, ...] | None:
    """`--impl manual`, `--impl manual,auto` or `--impl all`; None keeps each case's default."""
    from shardcli.playground.matmul.cases import IMPLS

    if text is None:
        return None
    if text.strip() == "all":
        return IMPLS
    return parse_names(text, "--impl", IMPLS, "valid")


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
    from shardcli.playground.matmul.request import MatmulRequest

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
