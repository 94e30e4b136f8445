"""A run's devices and mesh: what every device command starts from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
