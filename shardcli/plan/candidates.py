"""The layouts `shardcli plan` considers: meshes over a target's chips, logical-axis rules, remat and batch.

Pure Python. A `Candidate` is one full choice: how the chips are named (data x fsdp x sequence x
tensor, each axis along whole torus dimensions where it can; on GPU hosts the tensor axis within a
host, the others within or across hosts), which rule set maps the model's logical axes onto those
mesh axes, the remat policy and the per-device batch. `enumerate_candidates` lists every one that
makes sense for a model on a target; `plan_model` ranks them.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shardcli.errors import ShardcliError
from shardcli.specs.decoder import Rules, rules_text
from shardcli.specs.remat import SEARCHED

if TYPE_CHECKING:
    from shardcli.plan.schedules import PipelineChoice

MESH_AXES = ("data", "fsdp", "sequence", "tensor")  # outermost first: tensor varies fastest
SHORT = {"data": "dp", "fsdp": "fsdp", "sequence": "sp", "tensor": "tp"}
BATCH_CHOICES = (1, 2, 4, 8, 16, 32)

# Rule sets: the model's logical axes -> mesh axes. `fsdp-tp` is MaxText's default (weights' embed dim
# over fsdp, heads/mlp/vocab over tensor, the batch over data and fsdp); `fsdp-tp-sp` also splits
# the residual stream's embed dim over tensor between layers (Megatron's sequence parallelism in
# effect: reduce-scatter and all-gather in place of all-reduce, a tensor-th of the saved activations).
_COMMON: Rules = (
    ("batch", ("data", "fsdp")),
    ("length", ("sequence",)),
    ("vocab", ("tensor",)),
    ("embed", ("fsdp",)),
    ("heads", ("tensor",)),
    ("kv_heads", ("tensor",)),
    ("mlp", ("tensor",)),
    ("act_heads", ("tensor",)),
    ("act_kv_heads", ("tensor",)),
    ("act_mlp", ("tensor",)),
    ("act_vocab", ("tensor",)),
)
RULE_SETS: dict[str, Rules] = {
    "fsdp-tp": _COMMON,
    "fsdp-tp-sp": _COMMON + (("act_embed", ("tensor",)),),
}


@dataclass(frozen=True)
class MeshChoice:
    """Named mesh axes over the target's chips, and whether each runs along whole torus dimensions."""

    sizes: tuple[tuple[str, int], ...]  # (axis, size) for every axis of size > 1, outermost first
    aligned: bool  # every axis is a product of whole torus dimensions
    # several TPU slices (`plan.slices`): (axis, slices it spans) for each axis across slices
    dcn: tuple[tuple[str, int], ...] = ()

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(s for _, s in self.sizes) or (1,)

    @property
    def axes(self) -> tuple[str, ...]:
        return tuple(a for a, _ in self.sizes) or ("data",)

    def size(self, axis: str) -> int:
        return dict(self.sizes).get(axis, 1)

    def dcn_size(self, axis: str) -> int:
        """How many slices the axis spans (1: it stays within each slice)."""
        return dict(self.dcn).get(axis, 1)

    def ici_size(self, axis: str) -> int:
        """The axis's chips within one slice."""
        return self.size(axis) // self.dcn_size(axis)

    @property
    def dcn_shape(self) -> tuple[int, ...]:
        return tuple(self.dcn_size(a) for a in self.axes)

    @property
    def crossing(self) -> tuple[str, ...]:
        """The axes whose chips lie in more than one slice."""
        return tuple(a for a, n in self.dcn if n > 1)

    @property
    def label(self) -> str:
        """`dp2 fsdp128`; an axis across slices says over how many: `dp2(dcn2) fsdp128`."""
        parts = [
            f"{SHORT[a]}{s}" + (f"(dcn{self.dcn_size(a)})" if self.dcn_size(a) > 1 else "")
            for a, s in self.sizes
        ]
        return " ".join(parts) or "dp1"


@dataclass(frozen=True)
class Candidate:
    """One layout to rank: mesh, rule set, remat policy, per-device batch."""

    mesh: MeshChoice
    rule_set: str
    remat: str
    global_batch: int
    chips: int
    # pipeline stages (`plan.pipeline`): `mesh` is then one stage's, `global_batch` all M microbatches'
    pipeline: PipelineChoice | None = None

    @property
    def per_device_batch(self) -> float:
        """MaxText's per_device_batch_size: the global batch over every chip (tensor axes included)."""
        return self.global_batch / self.chips

    @property
    def rules(self) -> Rules:
        return RULE_SETS[self.rule_set]

    @property
    def label(self) -> str:
        sp = "+sp" if self.rule_set == "fsdp-tp-sp" else ""
        pp = f"pp{self.pipeline.stages} " if self.pipeline is not None else ""
        return f"{pp}{self.mesh.label}{sp}"

    @property
    def key(self) -> str:
        """Everything that names this layout, as text (for the cache and JSON)."""
        mesh = ",".join(f"{a}={s}" for a, s in self.mesh.sizes)
        dcn = ",".join(f"{a}={s}" for a, s in self.mesh.dcn)
        mesh += f" dcn[{dcn}]" if dcn else ""
        mesh += f" {self.pipeline.key}" if self.pipeline is not None else ""
        return f"mesh[{mesh}] rules[{rules_text(self.rules)}] remat={self.remat} batch={self.global_batch}"


def _factorizations(n: int, parts: int) -> list[tuple[int, ...]]:
    """Ordered tuples of `parts` positive ints whose product is n."""
    if parts == 1:
        return [(n,)]
    out = []
    for d in range(1, n + 1):
        if n % d == 0:
            out += [(d,) + rest for rest in _factorizations(n // d, parts - 1)]
    return out


def _aligned(sizes: tuple[int, ...], torus: tuple[int, ...]) -> bool:
    """Whether the torus dimensions can be grouped so that each axis is a product of whole ones."""
    for owner in itertools.product(range(len(sizes)), repeat=len(torus)):
        product = [1] * len(sizes)
        for dim, axis in zip(torus, owner, strict=True):
            product[axis] *= dim
        if tuple(product) == sizes:
            return True
    return False


def mesh_choices(
    torus: tuple[int, ...], *, sequence: bool = False, aligned_only: bool = True
) -> list[MeshChoice]:
    """Every naming of the chips as data x fsdp (x sequence) x tensor.

    Args:
        torus: chips along each torus dimension (the target's topology).
        sequence: also split the sequence over a `sequence` axis.
        aligned_only: only meshes whose axes run along whole torus dimensions (when there are some
            besides the trivial one).
    """
    chips = math.prod(torus)
    names = MESH_AXES if sequence else tuple(a for a in MESH_AXES if a != "sequence")
    out = []
    for sizes in _factorizations(chips, len(names)):
        aligned = _aligned(sizes, torus)
        if aligned_only and not aligned:
            continue
        out.append(MeshChoice(tuple((a, s) for a, s in zip(names, sizes, strict=True) if s > 1), aligned))
    return out


def gpu_mesh_choices(hosts: int, gpus: int, *, sequence: bool = False) -> list[MeshChoice]:
    """Every naming of `hosts` x `gpus` GPUs as data x fsdp (x sequence) x tensor, the tensor axis
    within a host (it moves activations every layer: NVLink's, not the network's, to carry).

    The mesh's devices run host by host, so the innermost axes stay within a host. Every such mesh
    counts as aligned: NVSwitch joins every GPU of a host to every other, so no naming of them
    breaks a ring the way a part of a torus dimension does."""
    names = MESH_AXES if sequence else tuple(a for a in MESH_AXES if a != "sequence")
    out = []
    for sizes in _factorizations(hosts * gpus, len(names)):
        if gpus % sizes[-1]:
            continue  # a tensor axis across hosts
        out.append(MeshChoice(tuple((a, s) for a, s in zip(names, sizes, strict=True) if s > 1), True))
    return out


def parse_named_mesh(text: str, chips: int, flag: str = "--mesh") -> tuple[tuple[str, int], ...]:
    """`data=32,fsdp=8` -> (("data", 32), ("fsdp", 8)): the axes in plan's order (data, fsdp,
    sequence, tensor), those of size 1 left out.

    Raises:
        ShardcliError: an axis plan does not name, a size that is not a positive whole number, an
            axis given twice, or sizes whose product is not the target's chips (one line each).
    """
    sizes: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        name, eq, value = part.partition("=")
        name = name.strip()
        if not eq or name not in MESH_AXES:
            raise ShardcliError(
                f"{flag} {text!r}: {part!r} is not AXIS=SIZE with AXIS one of {', '.join(MESH_AXES)} "
                "(for example data=2,fsdp=8)"
            )
        if name in sizes:
            raise ShardcliError(f"{flag} {text!r}: {name} is given twice")
        if re.fullmatch(r"0*[1-9][0-9]{9,}", value.strip()):
            raise ShardcliError(
                f"{flag} {text!r}: the size of {name}, {len(value.strip())} digits, is too large; a mesh "
                "axis holds at most 999,999,999 chips (and the product must be the target's chips)"
            )
        if not re.fullmatch(r"[0-9]{1,9}", value.strip()) or int(value) < 1:
            raise ShardcliError(
                f"{flag} {text!r}: the size of {name}, {value.strip()!r}, is not a positive whole number"
            )
        sizes[name] = int(value)
    named = math.prod(sizes.values())
    if named != chips:
        raise ShardcliError(
            f"{flag} {text!r} names {named} chip{'' if named == 1 else 's'}; the target has {chips}"
        )
    return tuple((a, sizes[a]) for a in MESH_AXES if sizes.get(a, 1) > 1)


@dataclass(frozen=True)
class Pruned:
    """A combination left out before any model, and why."""

    label: str
    why: str


def global_batches(chips: int, global_batch: int | None, per_device_batch: int | None) -> list[int]:
    """The global batches to try on `chips`: the one given, the per-chip batch times the chips, or
    each of BATCH_CHOICES per chip."""
    if global_batch is not None:
        return [global_batch]
    if per_device_batch is not None:
        return [per_device_batch * chips]
    return [b * chips for b in BATCH_CHOICES]


def enumerate_candidates(
    torus: tuple[int, ...],
    *,
    global_batch: int | None,
    per_device_batch: int | None,
    remats: tuple[str, ...] = SEARCHED,
    rule_sets: tuple[str, ...] = tuple(RULE_SETS),
    sequence: bool = False,
    seq_len: int,
    aligned_only: bool = True,
    gpu_hosts: bool = False,
    only_mesh: tuple[tuple[str, int], ...] | None = None,
    meshes: list[MeshChoice] | None = None,
    slices: int = 1,
) -> tuple[list[Candidate], list[Pruned]]:
    """Every candidate layout for a model on a target, and the combinations that cannot be laid out.

    The batch is fixed by `global_batch` or `per_device_batch` (global = per-device x chips, as
    MaxText counts it); with neither, each of BATCH_CHOICES is a candidate. With `gpu_hosts`,
    `torus` is (hosts, GPUs per host) and the meshes are `gpu_mesh_choices`. `only_mesh`
    (`parse_named_mesh`) keeps that one mesh, along the torus or not. On several TPU slices the
    caller gives the `meshes` (`plan.slices`) and their `slices` (the chips are `torus`'s times them).

    Raises:
        ShardcliError: `only_mesh` is no mesh of the target (a tensor axis across GPU hosts).
    """
    chips = math.prod(torus) * slices
    batches = global_batches(chips, global_batch, per_device_batch)
    out: list[Candidate] = []
    pruned: list[Pruned] = []
    if meshes is None:  # else laid out by the caller (several slices)
        if only_mesh is not None:
            meshes = _named_mesh(torus, only_mesh, gpu_hosts)
        elif gpu_hosts:
            meshes = gpu_mesh_choices(*torus, sequence=sequence)
        else:
            meshes = mesh_choices(torus, sequence=sequence, aligned_only=aligned_only)
    for mesh in meshes:
        for rule_set in rule_sets:
            if rule_set == "fsdp-tp-sp" and mesh.size("tensor") == 1:
                continue  # the same program as fsdp-tp
            for remat, batch in itertools.product(remats, batches):
                split = mesh.size("data") * mesh.size("fsdp")
                candidate = Candidate(mesh, rule_set, remat, batch, chips)
                if batch % split:
                    pruned.append(
                        Pruned(
                            candidate.label, f"global batch {batch} does not split over data x fsdp = {split}"
                        )
                    )
                    continue
                if seq_len % mesh.size("sequence"):
                    pruned.append(
                        Pruned(
                            candidate.label,
                            f"sequence {seq_len} does not split over sequence = {mesh.size('sequence')}",
                        )
                    )
                    continue
                out.append(candidate)
    return out, pruned


def names_sequence(sizes: tuple[tuple[str, int], ...] | None) -> bool:
    """Whether a named mesh (`parse_named_mesh`) has a sequence axis."""
    return any(axis == "sequence" for axis, _ in sizes or ())


def _named_mesh(
    torus: tuple[int, ...], sizes: tuple[tuple[str, int], ...], gpu_hosts: bool
) -> list[MeshChoice]:
    """The one mesh `--mesh` names, as plan would have named it."""
    sequence = names_sequence(sizes)
    if gpu_hosts:
        found = [m for m in gpu_mesh_choices(*torus, sequence=sequence) if m.sizes == sizes]
        if not found:
            raise ShardcliError(
                f"--mesh {','.join(f'{a}={n}' for a, n in sizes)}: the tensor axis must stay within a host "
                f"of {torus[1]} GPUs (its size divides {torus[1]})"
            )
        return found
    return [m for m in mesh_choices(torus, sequence=sequence, aligned_only=False) if m.sizes == sizes]
