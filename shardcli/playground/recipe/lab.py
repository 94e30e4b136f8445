"""What a recipe program works with: the `Lab` (the mesh and helpers), its `RecipeOutput`, and the
helpers the programs share (inputs, placing and reading arrays, the float32 matmul bound).

`shardcli/playground/recipe/programs.py` holds the programs themselves. NumPy and JAX are imported
inside the functions, never here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardcli.analysis.report import Check, Picture, Section, TableSection, picture_of, spec_of

if TYPE_CHECKING:
    import numpy as np

    from shardcli.analysis.program import HloCollective
    from shardcli.runtime.session import Session

SEED = 0


@dataclass(frozen=True)
class RecipeOutput:
    """What a recipe program shows (sections) and asserts (checks)."""

    sections: tuple[Section, ...]
    checks: tuple[Check, ...]


class Lab:
    """What a recipe program works with: the mesh, and helpers that turn JAX objects into sections."""

    def __init__(
        self,
        session: Session,
        steps: int | None = None,
        shape: tuple[int, ...] | None = None,
        init: str | None = None,
    ) -> None:
        self.session = session
        self.steps = steps  # pipeline-ring: how many ring steps (None: the ring's length)
        self.mesh = session.mesh
        self.axes = session.spec.axes
        self.sizes = session.spec.shape
        self.shape = shape  # --shape: the recipe's input shape (None: the recipe's own)
        self.init = init  # --init: how the input is filled (None: the recipe's own random values)

    def input(
        self,
        default_shape: tuple[int, ...],
        spec: tuple[Any, ...],
        seed: int = SEED,
        fill: Callable[[tuple[int, ...]], np.ndarray] | None = None,
        default_init: str | None = None,
    ) -> np.ndarray:
        """The recipe's input in float32: --shape and --init where given, else its own shape and
        its lesson's values (`default_init`), or its own (`fill`, by default random values in [-1, 1)).

        Raises:
            ShardcliError: a --shape the recipe's sharding `spec` cannot split over this mesh.
        """
        from shardcli.specs.meshes import ShardingSpec, check_sharding_fits
        from shardcli.specs.values import ArraySpec, parse_dtype

        shape = self.shape if self.shape is not None else default_shape
        entries = tuple(() if a is None else (a,) if isinstance(a, str) else tuple(a) for a in spec)
        check_sharding_fits(ShardingSpec(entries), self.session.spec, shape, flag="--shape")
        init = self.init if self.init is not None else default_init
        if init is None:
            return fill(shape) if fill is not None else random_input(shape, seed)
        from shardcli.runtime.arrays import make_host_array

        return make_host_array(ArraySpec(shape=shape, dtype=parse_dtype("float32"), init=init))

    def picture(self, title: str, array: Any) -> Picture:
        """The sharding picture of a JAX array (what `jax.debug.visualize_array_sharding` draws)."""
        return picture_of(title, array)

    def device_rows(self, array: Any, *, label: str = "values") -> TableSection:
        """Each of this process's devices, its mesh coordinates and its block of `array`."""
        import numpy as np

        by_id = {s.device.id: s for s in array.addressable_shards}
        rows = []
        for cell in self.session.layout.cells:
            shard = by_id.get(cell.device_id)
            if shard is None:
                continue
            coords = " ".join(f"{a}={c}" for a, c in zip(self.axes, cell.coords, strict=True))
            rows.append((cell.device_id, coords, np.asarray(shard.data)))
        return TableSection(
            title=f"per device: {label}", columns=("device", "mesh coords", label), rows=tuple(rows)
        )

    def operands(self, shapes: tuple[tuple[int, ...], ...]) -> list[np.ndarray]:
        """Several float32 inputs: --init fills them (arange numbering them in one sequence, as matmul's
        A and B), else random values in [-1, 1), seeds 1, 2, ..."""
        if self.init is None:
            return [random_input(shape, seed) for seed, shape in enumerate(shapes, start=1)]
        from shardcli.runtime.arrays import make_host_array
        from shardcli.specs.values import ArraySpec, parse_dtype

        hosts, start = [], 0
        for shape in shapes:
            spec = ArraySpec(shape=shape, dtype=parse_dtype("float32"), init=self.init)
            hosts.append(make_host_array(spec, start=start))
            start += spec.size
        return hosts

    def collectives(self, jitted: Any, *args: Any) -> tuple[HloCollective, ...]:
        """The collectives the compiler put into `jitted(*args)`."""
        from shardcli.analysis.program import find_collectives

        return find_collectives(jitted.lower(*args).compile().as_text())


RecipeProgram = Callable[[Lab], RecipeOutput]


def random_input(shape: tuple[int, ...], seed: int = SEED) -> np.ndarray:
    """Float32 inputs in [-1, 1), the same in every process."""
    import numpy as np

    return (np.random.default_rng(seed).random(shape, dtype=np.float32) * 2 - 1).astype(np.float32)


def place(lab: Lab, host: np.ndarray, *spec: Any) -> Any:
    """The host array on the lab's mesh, laid out by the PartitionSpec `spec`."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from shardcli.runtime.arrays import place_array

    return place_array(host, NamedSharding(lab.mesh, P(*spec)))


def replicated(lab: Lab, array: Any) -> np.ndarray:
    """The whole of a (small) array in this process: resharded to every device, read locally."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    whole = jax.jit(lambda v: v, out_shardings=NamedSharding(lab.mesh, P()))(array)
    return np.asarray(whole.addressable_shards[0].data)


def matmul_bound(
    lab: Lab, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None
) -> tuple[np.ndarray, str]:
    """|x @ W + b - exact| <= ((D + 2) eps + 2 u_in) (|x| @ |W| + |b|): any summation order, float32.

    u_in is the roundoff of the values the dot multiplies at JAX's default precision on this
    platform: 0 on CPU, TF32's on a GPU, bf16's on a TPU. Returns the bound and how it reads.
    """
    import numpy as np

    from shardcli.runtime.verify import EPS32, dot_input_roundoff

    u_in, in_text = dot_input_roundoff(lab.session.runtime.platform, "float32")
    scale = np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64))
    if b is not None:
        scale = scale + np.abs(b.astype(np.float64))
    terms = "|x|@|W|+|b|" if b is not None else "|x|@|W|"
    if u_in == 0:
        return (x.shape[-1] + 2) * EPS32 * scale + EPS32, f"(D+2) eps ({terms})"
    how = f"((D+2) eps + 2 u_in) ({terms}), u_in = {u_in:.2g}: {in_text}"
    return ((x.shape[-1] + 2) * EPS32 + 2 * u_in) * scale + EPS32, how


def same_sharding_check(what: str, a: Any, b: Any) -> Check:
    """A check that arrays `a` and `b` are sharded alike."""
    same = bool(a.sharding.is_equivalent_to(b.sharding, a.ndim))
    return Check(what, same, f"{spec_of(a)} vs {spec_of(b)}")
