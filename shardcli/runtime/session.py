"""A run's devices and mesh: what every device command starts from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardcli.runtime.devices import RuntimeInfo, start_runtime
from shardcli.runtime.mesh import MeshLayout, build_mesh, describe_mesh
from shardcli.specs.meshes import MeshSpec
from shardcli.specs.runs import RunOptions


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

    from shardcli.hardware.compilers import compiler_versions
    from shardcli.runtime.devices import RuntimeInfo

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
