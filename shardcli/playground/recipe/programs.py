"""The programs behind `shardcli recipe`: small JAX programs that teach one sharding idea each.

Every recipe program takes a `Lab` (the mesh and helpers, `recipe.lab`), runs its program, and returns
a `RecipeOutput`: sections (what a tutorial would print) and checks against NumPy references computed
in float64 from the same host data. The recipe registry names these functions, and the core looks
them up here when a recipe runs: NumPy and JAX are imported inside the functions, never here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shardcli.analysis.report import Check, TableSection, TextSection, close_check, collectives_text, spec_of
from shardcli.playground.recipe.lab import (
    SEED,
    Lab,
    RecipeOutput,
    matmul_bound,
    place,
    random_input,
    replicated,
    same_sharding_check,
)

if TYPE_CHECKING:
    import numpy as np


def elementwise(lab: Lab) -> RecipeOutput:
    """An elementwise function needs no communication and keeps the input's sharding."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from shardcli.runtime.verify import EPS32

    spec = lab.axes[:2]
    # The lesson: arange(32.0).reshape(4, 8) on a 2x4 mesh.
    host = lab.input(
        (2 * lab.sizes[0], 2 * lab.sizes[1] if len(lab.sizes) > 1 else 4), spec, default_init="arange"
    )
    x = place(lab, host, *spec)
    f = jax.jit(lambda v: 2 * jnp.sin(v) + 1)
    y = f(x)
    expected = 2 * np.sin(host.astype(np.float64)) + 1
    ops = lab.collectives(f, x)
    return RecipeOutput(
        sections=(
            lab.picture("input x", x),
            lab.picture("output 2*sin(x)+1", y),
            TextSection("compiled collectives", (collectives_text(ops),)),
            lab.device_rows(y, label="output block"),
        ),
        checks=(
            close_check(
                "values match NumPy",
                y,
                expected,
                4 * EPS32 * (np.abs(expected) + 2),
                "|err| <= 4 eps (|y|+2)",
            ),
            same_sharding_check("the output keeps the input's sharding", y, x),
            Check("no communication", not ops, collectives_text(ops)),
        ),
    )


def reduce(lab: Lab) -> RecipeOutput:
    """A reduction over a sharded dim: the compiler's choice of output sharding, then a forced one."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from shardcli.runtime.verify import EPS32

    a0, a1 = lab.axes
    n0, n1 = lab.sizes
    # The lesson: arange(32.0).reshape(4, 8) on a 2x4 mesh, its sum then spread over all 8 devices.
    host = lab.input((2 * n0, n0 * n1), (a0, a1), default_init="arange")
    shape = host.shape
    x = place(lab, host, a0, a1)
    free = jax.jit(lambda v: v.sum(axis=0))
    y = free(x)
    flat = NamedSharding(lab.mesh, P((a0, a1)))
    forced = jax.jit(lambda v: jax.lax.with_sharding_constraint(v.sum(axis=0), flat))
    z = forced(x)
    expected = host.astype(np.float64).sum(axis=0)
    bound = shape[0] * EPS32 * np.abs(host.astype(np.float64)).sum(axis=0) + EPS32
    how = "|err| <= rows * eps * sum|x|"
    return RecipeOutput(
        sections=(
            lab.picture("input x", x),
            lab.picture("x.sum(axis=0): the compiler's choice", y),
            TextSection(
                "compiled collectives (compiler's choice)", (collectives_text(lab.collectives(free, x)),)
            ),
            lab.picture("the sum under with_sharding_constraint over every device", z),
            TextSection("compiled collectives (forced)", (collectives_text(lab.collectives(forced, x)),)),
            lab.device_rows(z, label="forced output block"),
            TableSection(
                "the sum, gathered: the global result, as the lesson prints it",
                ("x.sum(axis=0)", "sharding", "values"),
                (
                    ("the compiler's choice", spec_of(y), replicated(lab, y)),
                    ("forced over every device", spec_of(z), replicated(lab, z)),
                ),
            ),
        ),
        checks=(
            close_check("the compiler's sum matches NumPy", y, expected, bound, how),
            close_check("the forced sum matches NumPy", z, expected, bound, how),
            Check(
                "the constraint shards the sum over every device",
                bool(z.sharding.is_equivalent_to(flat, 1)),
                spec_of(z),
            ),
        ),
    )


def three_ways(lab: Lab) -> RecipeOutput:
    """One layer three ways: automatic, semi-automatic and manual (shard_map with psum).

    On a 1-D mesh, the lesson itself: x[32] and the rows of weights[32, 4] split over the axis,
    bias replicated, the values drawn from NumPy's default_rng(0) in the lesson's order. On a 2-D
    mesh: a batch of x over the first axis, the contracting dim over the second.
    """
    import numpy as np

    if len(lab.axes) == 1:
        (n,) = lab.sizes
        rng = np.random.default_rng(0)
        d = 32 if 32 % n == 0 else 4 * n
        x_host = rng.normal(size=(d,)).astype(np.float32)
        w_host = rng.normal(size=(d, 4)).astype(np.float32)
        b_host = rng.normal(size=(4,)).astype(np.float32)
        return _three_ways(lab, x_host, w_host, b_host, (lab.axes[0],), lab.axes[0])
    a0, a1 = lab.axes
    n0, n1 = lab.sizes
    b_, d, f = 2 * n0, 4 * n1, 2 * n1
    x_host, w_host, b_host = random_input((b_, d), 1), random_input((d, f), 2), random_input((f,), 3)
    return _three_ways(lab, x_host, w_host, b_host, (a0, a1), a1)


def _three_ways(
    lab: Lab, x_host: np.ndarray, w_host: np.ndarray, b_host: np.ndarray, x_spec: tuple[str, ...], a1: str
) -> RecipeOutput:
    """sigmoid(x @ W + b) with x laid out by `x_spec`, W's rows over `a1` (the contracting dim)."""
    import jax
    import numpy as np

    from shardcli.runtime.verify import EPS32

    x, w, b = place(lab, x_host, *x_spec), place(lab, w_host, a1, None), place(lab, b_host)
    automatic = jax.jit(_layer)
    y_auto = automatic(x, w, b)
    semi, semi_args = _semi_automatic(lab, (x_host, w_host, b_host), x_spec, a1)
    y_semi = semi(*semi_args)
    manual = _manual(lab, x_spec, a1)
    y_manual = manual(x, w, b)

    pre = x_host.astype(np.float64) @ w_host.astype(np.float64) + b_host
    expected = 1 / (1 + np.exp(-pre))
    pre_bound, pre_how = matmul_bound(lab, x_host, w_host, b_host)
    bound = pre_bound / 4 + 2 * EPS32  # sigmoid' <= 1/4
    how = f"|err| <= {pre_how} / 4 + 2 eps"
    rows = tuple(
        (name, spec_of(y), collectives_text(ops))
        for name, y, ops in (
            ("automatic: jit on sharded inputs", y_auto, lab.collectives(automatic, x, w, b)),
            ("semi-automatic: with_sharding_constraint", y_semi, lab.collectives(semi, *semi_args)),
            ("manual: shard_map + psum over " + a1, y_manual, lab.collectives(manual, x, w, b)),
        )
    )
    agree = [replicated(lab, y) for y in (y_auto, y_semi, y_manual)]
    spread = max(float(np.max(np.abs(agree[0] - other))) for other in agree[1:])
    return RecipeOutput(
        sections=(
            lab.picture("x [B, D]", x),
            lab.picture("W [D, F]", w),
            TableSection("sigmoid(x @ W + b), three ways", ("way", "output sharding", "collectives"), rows),
            lab.picture("manual output", y_manual),
            lab.device_rows(y_manual, label="manual output block"),
            TextSection("the result (manual), as the lesson prints it", (np.array2string(agree[2]),)),
        ),
        checks=(
            close_check("automatic matches NumPy", y_auto, expected, bound, how),
            close_check("semi-automatic matches NumPy", y_semi, expected, bound, how),
            close_check("manual matches NumPy", y_manual, expected, bound, how),
            Check("the three agree", spread <= 2 * float(np.max(bound)), f"max difference {spread:.2e}"),
        ),
    )


def _layer(x: Any, w: Any, b: Any) -> Any:
    """The layer the three ways compute: sigmoid(x @ W + b)."""
    import jax

    return jax.nn.sigmoid(x @ w + b)


def _semi_automatic(
    lab: Lab, hosts: tuple[np.ndarray, ...], x_spec: tuple[str, ...], a1: str
) -> tuple[Any, tuple[Any, ...]]:
    """The layer under with_sharding_constraint (x by `x_spec`, W's rows over `a1`), and the inputs it
    is called on: unsharded, plain host arrays whose layout the constraints inside decide. Across
    processes jit takes only global arrays, so there they are replicated ones."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    def constrained(x: Any, w: Any, b: Any) -> Any:
        x = jax.lax.with_sharding_constraint(x, NamedSharding(lab.mesh, P(*x_spec)))
        w = jax.lax.with_sharding_constraint(w, NamedSharding(lab.mesh, P(a1, None)))
        return _layer(x, w, b)

    args: tuple[Any, ...] = hosts
    if lab.session.runtime.process_count > 1:
        args = tuple(place(lab, h) for h in hosts)
    return jax.jit(constrained), args


def _manual(lab: Lab, x_spec: tuple[str, ...], a1: str) -> Any:
    """The layer by hand: shard_map, each device's partial x @ W summed over `a1` with psum."""
    import jax
    from jax.sharding import PartitionSpec as P

    out_spec = P(*x_spec[:-1], None) if len(x_spec) > 1 else P(None)

    def body(x: Any, w: Any, b: Any) -> Any:
        return jax.nn.sigmoid(jax.lax.psum(x @ w, a1) + b)

    return jax.jit(
        jax.shard_map(body, mesh=lab.mesh, in_specs=(P(*x_spec), P(a1, None), P()), out_specs=out_spec)
    )


def normalize(lab: Lab) -> RecipeOutput:
    """parallel_normalize, as the lesson writes it: pmean(x, j) element by element.

    Each element is normalised by the mean and std of the elements at the same place in the
    blocks of its peers along the second axis (the devices that share its first-axis index).
    """
    import jax
    import numpy as np
    from jax.sharding import PartitionSpec as P

    a0, a1 = lab.axes
    n0, n1 = lab.sizes
    # The lesson's x: jax.random.normal(PRNGKey(0), (192, 64)); rows and columns split over the mesh.
    rows, cols = (192 if 192 % n0 == 0 else 8 * n0), (64 if 64 % n1 == 0 else 8 * n1)
    host = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (rows, cols)), dtype=np.float32)
    x = place(lab, host, a0, a1)

    def parallel_normalize(v: Any) -> Any:
        mean = jax.lax.pmean(v, axis_name=a1)
        std = jax.lax.pmean((v - mean) ** 2, axis_name=a1) ** 0.5
        return (v - mean) / std

    program = jax.jit(
        jax.shard_map(parallel_normalize, mesh=lab.mesh, in_specs=P(a0, a1), out_specs=P(a0, a1))
    )
    y = program(x)
    expected, bound = _normalize_reference(host, n1)
    whole = replicated(lab, y).astype(np.float64)
    return RecipeOutput(
        sections=(
            lab.picture(f"x: normal(PRNGKey(0), ({rows}, {cols})), rows over {a0}, columns over {a1}", x),
            TextSection("compiled collectives", (collectives_text(lab.collectives(program, x)),)),
            TextSection(
                "out = parallel_normalize(x), as the lesson prints it",
                (str(whole.shape), f"Mean {whole.mean():.6g}", f"Std {whole.std():.6g}"),
            ),
        ),
        checks=(
            close_check(
                "values match NumPy (statistics across the blocks along " + a1 + ")",
                y,
                expected,
                bound,
                "|err| <= 16 n eps (1+|y|)(1 + max|x|/std)",
            ),
            Check(
                "the mean over the whole output is 0 and its std 1",
                bool(abs(whole.mean()) < 1e-5 and abs(whole.std() - 1) < 1e-5),
                f"mean {whole.mean():.2e}, std {whole.std():.7f}",
            ),
        ),
    )


def _normalize_reference(host: np.ndarray, n1: int) -> tuple[np.ndarray, np.ndarray]:
    """parallel_normalize in NumPy, and the bound on float32's error of it: the n1 blocks of each row
    side by side, statistics across the blocks, element by element."""
    import numpy as np

    from shardcli.runtime.verify import EPS32

    rows, cols = host.shape
    blocks = host.astype(np.float64).reshape(rows, n1, cols // n1)
    mean = blocks.mean(axis=1, keepdims=True)
    std = np.sqrt(((blocks - mean) ** 2).mean(axis=1, keepdims=True))
    expected = ((blocks - mean) / std).reshape(rows, cols)
    bound = (
        16
        * n1
        * EPS32
        * (1 + np.abs(expected))
        * (
            1
            + np.abs(blocks).max(axis=1, keepdims=True).repeat(n1, 1).reshape(rows, cols)
            / std.repeat(n1, 1).reshape(rows, cols)
        )
    )
    return expected, bound


def normalize_rows(lab: Lab) -> RecipeOutput:
    """Rows split over the second axis: each row's mean and variance need a pmean over that axis."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import PartitionSpec as P

    from shardcli.runtime.verify import EPS32

    a0, a1 = lab.axes
    n0, n1 = lab.sizes
    shape = (2 * n0, 4 * n1)
    host = random_input(shape) * 3 + 1
    x = place(lab, host, a0, a1)

    def body(v: Any) -> Any:
        mean = jax.lax.pmean(jnp.mean(v, axis=1, keepdims=True), a1)
        var = jax.lax.pmean(jnp.mean((v - mean) ** 2, axis=1, keepdims=True), a1)
        return (v - mean) / jnp.sqrt(var)

    program = jax.jit(jax.shard_map(body, mesh=lab.mesh, in_specs=P(a0, a1), out_specs=P(a0, a1)))
    y = program(x)
    h = host.astype(np.float64)
    expected = (h - h.mean(axis=1, keepdims=True)) / h.std(axis=1, keepdims=True)
    whole = replicated(lab, y).astype(np.float64)
    means, stds = whole.mean(axis=1), whole.std(axis=1)
    bound = 16 * shape[1] * EPS32 * (1 + np.abs(expected))
    return RecipeOutput(
        sections=(
            lab.picture(f"x: rows over {a0}, each row split over {a1}", x),
            TextSection("compiled collectives", (collectives_text(lab.collectives(program, x)),)),
            TableSection(
                "per row of the result",
                ("row", "mean", "std"),
                tuple((i, f"{m:+.2e}", f"{s:.6f}") for i, (m, s) in enumerate(zip(means, stds, strict=True))),
            ),
            lab.device_rows(y, label="normalised block"),
        ),
        checks=(
            close_check("values match NumPy", y, expected, bound, "|err| <= 16 C eps (1+|y|)"),
            Check(
                "every row has mean 0",
                bool(np.all(np.abs(means) < 1e-5)),
                f"max |mean| {np.max(np.abs(means)):.2e}",
            ),
            Check(
                "every row has std 1",
                bool(np.all(np.abs(stds - 1) < 1e-5)),
                f"max |std - 1| {np.max(np.abs(stds - 1)):.2e}",
            ),
        ),
    )


def axis_index(lab: Lab) -> RecipeOutput:
    """Each device asks axis_index for its position along every axis."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import PartitionSpec as P

    axes = lab.axes
    count = int(np.prod(lab.sizes))

    def body(_: Any) -> Any:
        return jnp.stack([jax.lax.axis_index(a) for a in axes])[None, :]

    program = jax.jit(jax.shard_map(body, mesh=lab.mesh, in_specs=P(axes), out_specs=P(axes)))
    dummy = place(lab, np.zeros((count,), np.int32), axes)
    out = program(dummy)
    by_id = {s.device.id: np.asarray(s.data)[0] for s in out.addressable_shards}
    rows, wrong = [], []
    for cell in lab.session.layout.cells:
        if cell.device_id not in by_id:
            continue
        got = tuple(int(v) for v in by_id[cell.device_id])
        rows.append((cell.device_id, *got, "yes" if got == cell.coords else "NO"))
        if got != cell.coords:
            wrong.append(cell.device_id)
    return RecipeOutput(
        sections=(
            TableSection(
                "axis_index per device",
                ("device", *(f"axis_index({a!r})" for a in axes), "= mesh coords"),
                tuple(rows),
            ),
        ),
        checks=(
            Check(
                "axis_index equals each device's mesh coordinates",
                not wrong,
                "every device" if not wrong else f"devices {', '.join(map(str, wrong))} differ",
            ),
        ),
    )


def rng_fold(lab: Lab) -> RecipeOutput:
    """fold_in(key, axis_index(first axis)): devices differ along the first axis, agree along the second."""
    import jax
    import numpy as np
    from jax.sharding import PartitionSpec as P

    a0, a1 = lab.axes
    n0, n1 = lab.sizes
    key = jax.random.key(SEED)

    def body(k: Any) -> Any:
        folded = jax.random.fold_in(k, jax.lax.axis_index(a0))
        draw = jax.random.uniform(folded, (2,))
        return jax.random.key_data(folded)[None, None, :], draw[None, None, :]

    program = jax.jit(jax.shard_map(body, mesh=lab.mesh, in_specs=P(), out_specs=(P(a0, a1), P(a0, a1))))
    keys, draws = program(key)
    all_keys = replicated(lab, keys)  # [n0, n1, key words]
    reference = np.stack([np.asarray(jax.random.key_data(jax.random.fold_in(key, i))) for i in range(n0)])
    agree = all(np.array_equal(all_keys[i, j], all_keys[i, 0]) for i in range(n0) for j in range(n1))
    differ = len({all_keys[i, 0].tobytes() for i in range(n0)}) == n0
    matches = all(np.array_equal(all_keys[i, 0], reference[i]) for i in range(n0))
    key_rows = {s.device.id: np.asarray(s.data)[0, 0] for s in keys.addressable_shards}
    draw_rows = {s.device.id: np.asarray(s.data)[0, 0] for s in draws.addressable_shards}
    rows = tuple(
        (
            cell.device_id,
            f"{a0}={cell.coords[0]} {a1}={cell.coords[1]}",
            " ".join(f"{int(w):#010x}" for w in key_rows[cell.device_id]),
            np.round(draw_rows[cell.device_id], 4),
        )
        for cell in lab.session.layout.cells
        if cell.device_id in key_rows
    )
    return RecipeOutput(
        sections=(
            TableSection(
                "key and a uniform draw per device", ("device", "mesh coords", "key data", "uniform(2)"), rows
            ),
        ),
        checks=(
            Check(f"devices agree along {a1}", agree, f"{n1} devices per {a0} index hold one key"),
            Check(
                f"devices differ along {a0}",
                differ,
                f"{len({all_keys[i, 0].tobytes() for i in range(n0)})} distinct keys for {n0} indices",
            ),
            Check("each key is fold_in(key, index) computed outside shard_map", matches, f"{n0} indices"),
        ),
    )


def pipeline_ring(lab: Lab) -> RecipeOutput:
    """ppermute one step around the ring, K times: the building block of pipeline parallelism."""
    import jax
    import numpy as np
    from jax.sharding import PartitionSpec as P

    (axis,) = lab.axes
    (n,) = lab.sizes
    steps = lab.steps or n
    host = lab.input((n,), (axis,), default_init="arange")  # the lesson's x_exmp = np.arange(4)
    ring = [(i, (i + 1) % n) for i in range(n)]
    step = jax.jit(
        jax.shard_map(
            lambda v: jax.lax.ppermute(v, axis, ring), mesh=lab.mesh, in_specs=P(axis), out_specs=P(axis)
        )
    )
    x = place(lab, host, axis)
    devices = [c.device_id for c in lab.session.layout.cells]
    rows, bad_steps = [], []
    for k in range(steps + 1):
        whole = replicated(lab, x)
        if not np.array_equal(whole, np.roll(host, k, axis=0)):
            bad_steps.append(k)
        blocks = np.split(whole, n)  # device i's block along the ring axis
        rows.append((k, *(b[0] if b.shape[0] == 1 and b.ndim > 1 else b for b in blocks)))
        if k < steps:
            x = step(x)
    return RecipeOutput(
        sections=(
            TextSection(
                "the ring",
                (
                    " -> ".join(f"dev {devices[i]}" for i in range(n)) + f" -> dev {devices[0]}",
                    f"compiled collectives per step: {collectives_text(lab.collectives(step, x))}",
                ),
            ),
            TableSection(
                "each device's block after every step",
                ("step", *(f"dev {d} ({axis}={i})" for i, d in enumerate(devices))),
                tuple(rows),
            ),
        ),
        checks=(
            Check(
                "after k steps every device holds the block of the device k places before it (np.roll)",
                not bad_steps,
                f"{steps} step(s)" if not bad_steps else f"wrong after step(s) {bad_steps}",
            ),
        ),
    )


def sharded_mac(lab: Lab) -> RecipeOutput:
    """x @ W + b with batch over one axis and features over the other: no communication at all."""
    import jax
    import numpy as np
    from jax.sharding import PartitionSpec as P

    a0, a1 = lab.axes
    n0, n1 = lab.sizes
    b_, d, f = 2 * n0, 8, 2 * n1
    x_host, w_host, b_host = lab.operands(((b_, d), (d, f), (f,)))
    x, w, b = place(lab, x_host, a0, None), place(lab, w_host, None, a1), place(lab, b_host, a1)
    plain = jax.jit(lambda x, w, b: x @ w + b)
    y = plain(x, w, b)
    manual = jax.jit(
        jax.shard_map(
            lambda x, w, b: x @ w + b,
            mesh=lab.mesh,
            in_specs=(P(a0, None), P(None, a1), P(a1)),
            out_specs=P(a0, a1),
        )
    )
    y_manual = manual(x, w, b)
    expected = x_host.astype(np.float64) @ w_host.astype(np.float64) + b_host
    bound, how = matmul_bound(lab, x_host, w_host, b_host)
    how = f"|err| <= {how}"
    ops_plain, ops_manual = lab.collectives(plain, x, w, b), lab.collectives(manual, x, w, b)
    return RecipeOutput(
        sections=(
            lab.picture("x [B, D]", x),
            lab.picture("W [D, F]", w),
            lab.picture("b [F]", b),
            lab.picture("y = x @ W + b under jit (the compiler's choice)", y),
            TableSection(
                "two ways",
                ("way", "output sharding", "collectives"),
                (
                    ("jnp under jit", spec_of(y), collectives_text(ops_plain)),
                    ("shard_map", spec_of(y_manual), collectives_text(ops_manual)),
                ),
            ),
            lab.device_rows(y, label="output block"),
        ),
        checks=(
            close_check("jit result matches NumPy", y, expected, bound, how),
            close_check("shard_map result matches NumPy", y_manual, expected, bound, how),
            same_sharding_check("jit's output is sharded like shard_map's P(i, j)", y, y_manual),
            Check(
                "no communication", not ops_plain and not ops_manual, collectives_text(ops_plain + ops_manual)
            ),
        ),
    )
