"""The flag parsers several commands' requests share: an input's values, --target with its mesh, --impl.

Pure Python, no JAX: each reads one flag, or the few that go together, as typed, and raises a
one-line ShardcliError for a value it cannot take.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardcli.errors import ShardcliError
from shardcli.specs.meshes import MeshSpec, parse_mesh
from shardcli.specs.runs import check_plot_file
from shardcli.specs.values import parse_shape, parse_values

if TYPE_CHECKING:
    from shardcli.hardware.targets import TargetSpec


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


def target_and_mesh(
    compile_target: str | None,
    mesh: str | None,
    axes: str | None,
    network: str | None = None,
    slices: str | None = None,
) -> tuple[TargetSpec | None, MeshSpec]:
    """--target (with --network, a GPU's share of the network between hosts, or --slices, TPU slices
    joined over the data-center network) and the mesh the flags are checked against before libtpu
    describes its chips: --mesh as typed, else the target's topology (its slices first), else 2x4
    (checked again on the target's real mesh)."""
    from shardcli.hardware.slices import parse_slices
    from shardcli.hardware.targets import parse_network, parse_target

    if compile_target is None and network is not None:
        parse_network(network, None)  # refused: no target to give it to
    if compile_target is None and slices is not None:
        parse_slices(slices, None, None, None)  # refused unless 1: no target to give it to
    hardware = (
        parse_target(compile_target, network=network, slices=slices) if compile_target is not None else None
    )
    own = hardware.topology if hardware is not None else ()
    if hardware is not None and hardware.slices > 1:
        own = (hardware.slices, *own)  # the slices, then each slice's torus (as the session lays them)
    shown = mesh if mesh is not None else ("x".join(map(str, own)) if hardware else "2x4")
    return hardware, parse_mesh(shown, axes)


def parse_names(text: str, flag: str, choices: tuple[str, ...], what: str) -> tuple[str, ...]:
    """A comma-separated list of distinct names from `choices`."""
    names = tuple(n.strip() for n in text.split(","))
    for name in names:
        if name not in choices:
            raise ShardcliError(f"{flag} {name!r} is not {what}; choose one of {', '.join(choices)} or all")
    twice = [n for n in names if names.count(n) > 1]
    if twice:
        raise ShardcliError(f"{flag} {text!r} names {twice[0]!r} twice; give each once")
    return names


def parse_ways(text: str, choices: tuple[str, ...]) -> tuple[str, ...]:
    """`--impl auto`, `--impl auto,explicit` or `--impl all` for einsum and reshard."""
    if text.strip() == "all":
        return choices
    return parse_names(text, "--impl", choices, "valid")
