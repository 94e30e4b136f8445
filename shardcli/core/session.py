"""A run's devices and mesh: what every device command starts from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardcli.errors import ShardcliError
from shardcli.mesh import MeshLayout, build_mesh, describe_mesh
from shardcli.runtime import RuntimeInfo, start_runtime
from shardcli.specs import MeshSpec, RunOptions


@dataclass(frozen=True)
class Session:
    """The started runtime, the JAX mesh and its plain description."""

    runtime: RuntimeInfo
    spec: MeshSpec
    mesh: Any
    layout: MeshLayout
    mode: str
    devices: tuple[Any, ...]


def open_session(spec: MeshSpec, options: RunOptions, *, x64: bool = False) -> Session:
    """Start JAX with enough devices for `spec` and build the mesh in the requested mode."""
    runtime, devices = start_runtime(spec.size, options, x64=x64)
    mesh = build_mesh(spec, devices, mode=options.mode)
    return Session(
        runtime=runtime,
        spec=spec,
        mesh=mesh,
        layout=describe_mesh(mesh),
        mode=options.mode,
        devices=tuple(devices),
    )


def session_of_mesh(mesh: Any) -> Session:
    """A Session for a mesh the caller built in a JAX they started (the Python API): nothing starts."""
    import jax

    from shardcli.compilers import compiler_versions
    from shardcli.runtime import RuntimeInfo

    devices = list(mesh.devices.flat)
    platform = devices[0].platform
    runtime = RuntimeInfo(
        platform=platform,
        device_kind=devices[0].device_kind,
        device_count=len(devices),
        devices_present=len([d for d in jax.devices() if d.platform == platform]) or len(devices),
        faked=platform == "cpu",
        note=None,
        process_count=jax.process_count(),
        process_index=jax.process_index(),
        jax_version=jax.__version__,
        compiler=compiler_versions(platform),
    )
    layout = describe_mesh(mesh)
    spec = MeshSpec(shape=tuple(mesh.devices.shape), axes=tuple(str(a) for a in mesh.axis_names))
    mode = (
        "explicit"
        if any(getattr(t, "name", "") == "Explicit" for t in getattr(mesh, "axis_types", ()))
        else "auto"
    )
    return Session(runtime=runtime, spec=spec, mesh=mesh, layout=layout, mode=mode, devices=tuple(devices))


def session_on(session: Session, mesh: Any) -> Session:
    """The session with `mesh` (its devices among the session's) as the program's mesh."""
    from dataclasses import replace

    if mesh is session.mesh:
        return session
    explicit = any(getattr(t, "name", "") == "Explicit" for t in getattr(mesh, "axis_types", ()))
    return replace(
        session,
        runtime=replace(session.runtime, device_count=mesh.size),
        spec=MeshSpec(shape=tuple(mesh.devices.shape), axes=tuple(str(a) for a in mesh.axis_names)),
        mesh=mesh,
        layout=describe_mesh(mesh),
        mode="explicit" if explicit else "auto",
    )


def on_program_mesh(
    session: Session, tree: Any, mode: str | None, where: str, *, mesh_given: bool = True
) -> tuple[Session, Any]:
    """The program's arguments and the session on the mesh they name.

    Arguments sharded on a concrete mesh (one the user's file built) bring it: the session takes it,
    its devices being the run's. Arguments on an AbstractMesh (`nnx.eval_shape` under `jax.set_mesh`)
    are bound to the run's mesh by axis names and sizes; where no mesh was given (`mesh_given`), the
    run's devices take the abstract mesh's shape and names. The axis types follow the arguments' mesh
    (explicit inputs give an explicit run); `mode` (--mode typed) overrides them.

    Raises:
        ShardcliError: a mesh of other devices, or an abstract mesh whose names or sizes differ.
    """
    from shardcli.core.program_inputs import bind_to_mesh, check_binds, program_mesh, with_axis_types

    found = program_mesh(tree)
    mesh = session.mesh
    if found is not None and found.abstract:
        if not mesh_given and found.mesh.size <= len(session.devices):
            import jax
            import numpy as np

            devices = np.asarray(session.devices[: found.mesh.size], dtype=object)
            mesh = jax.sharding.Mesh(devices.reshape(found.mesh.axis_sizes), found.mesh.axis_names)
        check_binds(found, mesh, where)
    elif found is not None:
        own = {(d.platform, d.id) for d in session.devices}
        theirs = list(found.mesh.devices.flat)
        if not all((d.platform, d.id) in own for d in theirs):
            kind = theirs[0].device_kind if theirs else "no"
            raise ShardcliError(
                f"{where} are sharded on a mesh {found.describe()} of {kind} devices that this run does "
                f"not have ({session.runtime.describe_devices()}); build the mesh from the one "
                f"--inputs FILE.py:NAME receives (NAME(mesh)), or from jax.make_mesh"
            )
        mesh = found.mesh
    explicit = (
        mode == "explicit" if mode is not None else (found.explicit if found else session.mode == "explicit")
    )
    mesh = with_axis_types(mesh, explicit)
    return session_on(session, mesh), bind_to_mesh(tree, mesh)
