"""A program compiled for several TPU slices: its collectives within a slice, and across slices.

libtpu compiles a multislice program (`--slices`) as one slice's program: its collectives' replica
groups number the devices of one slice (0 to the slice's chips - 1, in the mesh's order restricted
to that slice), and what crosses slices is no collective op but a pair of host transfers to
Megascale, the data-center network's runtime: `send(...)`/`recv(...)` with `is_host_transfer=true`
and `_xla_megascale_transfer_type="ALL_REDUCE"` (checked on libtpu 0.0.52: a gradient's all-reduce
over a data axis across two v5e slices). `slice_view` reads how a mesh lies over its slices;
`dcn_collectives` turns each such send into a collective over the mesh axes that cross slices.
Pure Python over plain data and the HLO text; reads a JAX mesh's devices by their attributes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from shardcli.analysis.collectives import CollectiveOp
from shardcli.analysis.hlo.arrays import shape_bytes
from shardcli.analysis.hlo.module import HloModuleText
from shardcli.analysis.loops import runs_per_computation

_SEND_RE = re.compile(
    r"=\s*\((?P<shape>[a-z0-9]+\[[0-9,]*\])[^=]*?\bsend\(.*_xla_megascale_transfer_type=\"(?P<kind>[A-Z_]+)\""
)
_OP_NAME_RE = re.compile(r'op_name="(?P<name>[^"]*)"')
KINDS = {
    "ALL_REDUCE": "all-reduce",
    "ALL_GATHER": "all-gather",
    "REDUCE_SCATTER": "reduce-scatter",
    "ALL_TO_ALL": "all-to-all",
}


@dataclass(frozen=True)
class SliceView:
    """How a mesh lies over TPU slices: each axis's chips within one slice, and the axes across."""

    ici_shape: tuple[int, ...]  # per mesh axis, its chips within one slice
    crossing: tuple[str, ...]  # the axes whose chips lie in more than one slice
    slices: int  # how many slices the crossing axes span together


def slice_view(mesh: Any) -> SliceView | None:
    """The mesh's axes within and across slices (devices' `slice_index`); None on one slice."""
    devices = mesh.devices
    first = int(getattr(devices.flat[0], "slice_index", 0) or 0)
    indices = {int(getattr(d, "slice_index", 0) or 0) for d in devices.flat}
    if len(indices) <= 1:
        return None
    ici, crossing = [], []
    for axis, name in enumerate(mesh.axis_names):
        line = devices.swapaxes(0, axis).reshape(devices.shape[axis], -1)[:, 0]  # through the first chip
        same = sum(int(getattr(d, "slice_index", 0) or 0) == first for d in line)
        ici.append(same)
        if same < devices.shape[axis]:
            crossing.append(str(name))
    return SliceView(tuple(ici), tuple(crossing), len(indices))


def dcn_collectives(module: HloModuleText, view: SliceView) -> tuple[CollectiveOp, ...]:
    """Each transfer across slices (a Megascale host `send`) as a collective over the crossing axes,
    once per run of its computation; its bytes those of what one chip sends, as a collective of
    that kind over the slices would (an all-gather's result `slices` times the piece sent)."""
    runs = runs_per_computation(module)
    found = []
    for comp in module.computations.values():
        for line in comp.text[1:]:
            match = _SEND_RE.search(line)
            if match is None or "is_host_transfer=true" not in line:
                continue
            kind = KINDS.get(match.group("kind"), "collective-permute")
            sent = shape_bytes(match.group("shape"))
            result = {"all-gather": sent * view.slices, "reduce-scatter": sent // max(1, view.slices)}
            count, known = runs.get(comp.name, (1, True))
            op_name = _OP_NAME_RE.search(line)
            found.append(
                CollectiveOp(
                    kind=kind,
                    shape=match.group("shape"),
                    result_bytes=result.get(kind, sent),
                    mesh_axes=view.crossing,
                    group_size=view.slices,
                    runs=count,
                    runs_known=known,
                    op_name=op_name.group("name") if op_name else "megascale_dcn_transfer",
                    source=None,
                    is_async=False,
                    computation=comp.name,
                )
            )
    return tuple(found)
