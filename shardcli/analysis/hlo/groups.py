"""Replica groups as HLO text spells them: listed (`{{0,1},{2,3}}`), iota (`[2,2]<=[4]T(1,0)`), over
a mesh's named axes (`mesh['axis_0'=8,...]`, XLA's GPU compiler over hosts) and a permute's
`source_target_pairs`; groups no compiler writes are groups the text does not give (None).

Imports from: nothing of shardcli's.
"""

from __future__ import annotations

import math
import re

_GROUPS_LIST_RE = re.compile(r"replica_groups=\{(?P<groups>(?:\{[0-9,]*\},?)*)\}")
_GROUPS_IOTA_RE = re.compile(
    r"replica_groups=\[(?P<shape>[0-9,]+)\]<=\[(?P<dims>[0-9,]+)\](?:T\((?P<perm>[0-9,]+)\))?"
)
# `replica_groups=mesh['axis_0'=8,'axis_2'=2], device_ids=([2,8]T(1,0)) {'axis_0'}` (XLA's GPU compiler
# over several hosts): the mesh's positions hold the devices the iota `device_ids` lists, in order.
_GROUPS_MESH_RE = re.compile(
    r"replica_groups=mesh\[(?P<axes>[^\]]*)\]"
    r"(?:,\s*device_ids=\(\[(?P<dims>[0-9,]+)\](?:T\((?P<perm>[0-9,]+)\))?\))?\s*\{(?P<over>[^}]*)\}"
)
_PAIRS_RE = re.compile(r"source_target_pairs=\{(?P<pairs>(?:\{[0-9]+,[0-9]+\},?)*)\}")


_MAX_IDS = 1 << 24  # more devices than any module's groups hold


def _sizes(text: str) -> list[int] | None:
    """`2,4` -> [2, 4]; None where a size is no whole number of at most 9 digits."""
    sizes = text.split(",")
    return [int(d) for d in sizes] if all(re.fullmatch(r"[0-9]{1,9}", d) for d in sizes) else None


def has_groups_of_no_mesh(hlo_text: str) -> bool:
    """Whether an instruction's `replica_groups=mesh[...]` names axes its mesh does not have (or
    sizes no compiler writes): XLA's parser aborts the process on them."""
    return any(
        "replica_groups=mesh[" in line
        and _GROUPS_MESH_RE.search(line) is not None
        and device_groups(line) is None
        for line in hlo_text.splitlines()
    )


def device_groups(line: str) -> list[list[int]] | None:
    """The op's device groups (logical ids), from any of HLO's spellings; None where absent."""
    import numpy as np

    listed = _GROUPS_LIST_RE.search(line)
    if listed is not None:
        text = listed.group("groups")
        if re.search(r"[0-9]{10}", text):  # a device id past any device count
            return None
        return [[int(i) for i in g.split(",") if i] for g in re.findall(r"\{([0-9,]*)\}", text)]
    iota = _GROUPS_IOTA_RE.search(line)
    if iota is not None:
        shape, dims = _sizes(iota.group("shape")), _sizes(iota.group("dims"))
        perm = _sizes(iota.group("perm")) if iota.group("perm") else list(range(len(dims or ())))
        # groups no compiler writes (sizes that disagree, past any device count, a transpose that is
        # no permutation) are groups the text does not give
        if not shape or len(shape) != 2 or not dims or math.prod(shape) != math.prod(dims):
            return None  # XLA writes [groups, group size]
        if math.prod(dims) > _MAX_IDS or perm is None or sorted(perm) != list(range(len(dims))):
            return None
        return np.arange(math.prod(dims)).reshape(dims).transpose(perm).reshape(shape).tolist()
    named = _GROUPS_MESH_RE.search(line)
    if named is not None:
        axes = re.findall(r"'([^']*)'=(\d+)", named.group("axes"))
        over = re.findall(r"'([^']*)'", named.group("over"))
        names = [a for a, _ in axes]
        sizes = _sizes(",".join(s for _, s in axes)) if axes else None
        dims = _sizes(named.group("dims")) if named.group("dims") else sizes
        perm = _sizes(named.group("perm")) if named.group("perm") else list(range(len(dims or ())))
        if not sizes or not dims or math.prod(sizes) != math.prod(dims) or math.prod(dims) > _MAX_IDS:
            return None
        if perm is None or sorted(perm) != list(range(len(dims))) or len(set(names)) != len(names):
            return None
        if any(a not in names for a in over) or len(set(over)) != len(over):
            return None
        ids = np.arange(math.prod(dims)).reshape(dims).transpose(perm).reshape(sizes)
        keep = [i for i, a in enumerate(names) if a not in over]
        moved = [names.index(a) for a in over]
        ids = ids.transpose(keep + moved)
        size = math.prod(int(axes[i][1]) for i in moved)
        return ids.reshape(-1, size).tolist()
    pairs = _PAIRS_RE.search(line)
    if pairs is not None and not re.search(r"[0-9]{10}", pairs.group("pairs")):
        return [[int(a), int(b)] for a, b in re.findall(r"\{([0-9]+),([0-9]+)\}", pairs.group("pairs"))]
    return None
