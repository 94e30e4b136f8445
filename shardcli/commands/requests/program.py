"""`shardcli inspect`'s flags turned into its frozen request: pure Python, no JAX.

A program (FILE.py:FUNCTION) is compiled from its flags; a module compiled elsewhere (PATH.hlo.txt)
is read as it is, so the flags that shape a compile are refused for it. The checks that need the
program itself run in shardcli/program/inspect.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardcli.commands.requests.parsing import target_and_mesh
from shardcli.errors import ShardcliError
from shardcli.specs.meshes import parse_sharding
from shardcli.specs.runs import RunOptions

if TYPE_CHECKING:
    from shardcli.program.inspect import InspectRequest


def _check_module_flags(
    target: str,
    args: list[str],
    inputs: str | None,
    rules: str | None,
    outs: list[str],
    run: bool,
    compile_target: str | None,
    specs: list[str],
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
            ("--spec", specs),
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
    specs: list[str] | None = None,
    fixes: bool = True,
    network: str | None = None,
    slices: str | None = None,
) -> InspectRequest:
    """`shardcli inspect`'s flags as its request; every check that needs no devices."""
    from shardcli.program.inspect import InspectRequest, is_module_path
    from shardcli.specs.arguments import parse_abstract_arg
    from shardcli.specs.decoder import parse_rules
    from shardcli.specs.runs import check_cost_figures

    if is_module_path(target):
        _check_module_flags(target, args, inputs, rules, outs, run, compile_target, specs or [])

    if rules is not None and inputs is None:
        raise ShardcliError(
            "--rules lays out the arguments of --inputs FILE.py:NAME by their logical axis names; "
            "give --inputs (--arg takes its sharding as typed)"
        )
    hardware, mesh_spec = target_and_mesh(compile_target, mesh, axes, network, slices)
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
        specs=parse_spec_flags(specs or []),
        fixes=fixes,
    )


def parse_spec_flags(texts: list[str]) -> tuple[tuple[str, tuple[tuple[str, ...], ...]], ...]:
    """`--spec 'state.params.w=None,fsdp'`: (argument path, mesh axes per dim) each. The axes are
    checked against the mesh the program meets (its inputs may bring their own).

    Raises:
        ShardcliError: no `=`, an empty path, an empty entry, a path given twice.
    """
    from shardcli.specs.meshes import RESERVED_SPEC_WORDS

    out: dict[str, tuple[tuple[str, ...], ...]] = {}
    for text in texts:
        name, equals, spec = text.rpartition("=")
        name = name.strip()
        if not equals or not name:
            raise ShardcliError(
                f"--spec {text!r} is not PATH=SPEC (PATH: an argument as inspect names it); e.g. "
                '"state.params.w=None,fsdp" (an empty SPEC: replicated)'
            )
        if name in out:
            raise ShardcliError(f"--spec names {name!r} twice; give each argument once")
        entries = []
        for dim, raw in enumerate(spec.split(",") if spec.strip() else []):
            entry = raw.strip()
            axes = () if entry in RESERVED_SPEC_WORDS else tuple(a.strip() for a in entry.split("+"))
            if not entry or any(not a.isidentifier() for a in axes):
                raise ShardcliError(
                    f"--spec {text!r} has no mesh axis at position {dim} ({entry!r}); give axis names joined "
                    "by + or None for a dim that is not sharded"
                )
            entries.append(axes)
        out[name] = tuple(entries)
    return tuple(out.items())
