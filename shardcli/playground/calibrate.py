"""`shardcli calibrate`'s measurements: this machine's devices, measured with the playground's own runs.

- the GEMM curve: each device multiplies its own square blocks of standard normal numbers, all at
  once, at each size and dtype, its per-call cost taken off each run; on an accelerator small GEMMs
  chained in one program (`chain_length`), so that the kernels' time sets their rate, not a call's;
- the memory stream: `x * 2 + 1` over a buffer per device, bytes read and written per second, the
  call's cost taken off as a GEMM's;
- the bus bandwidth per mesh axis: the collective playground's `psum` over each axis (busbw), and
  its `all_gather`, `psum_scatter`, `all_to_all` and `ppermute` (what a byte of each costs), each
  call writing a fresh output as a jitted program's collective does, and each timed as the
  collective alone: what its program does around it (on a CPU an all-to-all's slices and
  concatenation: XLA's bytes accessed beyond the collective's operand and result) is taken off at
  the measured stream, as the estimate charges those ops of a program at the stream itself;
- host-device copies: `jax.device_put` of a host array onto the devices, and back;
- the cost of a call (a program that does almost nothing) and of a loop trip (a `fori_loop`'s
  trips beyond one); on a GPU also of a kernel launch (a chain of small GEMMs).

Every run is timed by `runtime.timing`, the playground's one timer, and each figure is taken from
its fastest run: on a machine shared with other work the median moves with their load, the fastest
run much less (`bench/calibrated_cpu.py` holds estimates against the fastest step for that reason).
The result is a `hardware.profile.HardwareProfile`; nothing is printed (progress goes to the caller's
callback).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardcli.analysis.collectives import HloCollective, operand_bytes
from shardcli.hardware.profile import BusPoint, HardwareProfile, MatmulPoint, Measured
from shardcli.runtime.session import Session
from shardcli.runtime.timing import summarize, time_iterations
from shardcli.specs.meshes import MeshSpec
from shardcli.specs.runs import RunOptions

Progress = Callable[[str], None]


@dataclass(frozen=True)
class CalibrateRequest:
    """What to measure: the mesh (every axis's collective), and whether only the smallest sizes."""

    mesh: MeshSpec
    options: RunOptions
    quick: bool = False


@dataclass(frozen=True)
class Sizes:
    """How much each measurement moves: the GEMM sizes per dtype, the bytes, the counts."""

    matmul: tuple[tuple[str, tuple[int, ...]], ...]  # (dtype, M = N = K per device)
    stream_bytes: int  # per device, read and as much written
    bus_bytes: int  # per device, the all-reduce's input
    copy_bytes: int  # per device, host to device and back
    trips: int  # the loop of the loop-trip measurement
    warmup: int
    iters: int
    collectives: tuple[str, ...] = ("psum", "all_gather", "psum_scatter", "all_to_all", "ppermute")
    # GEMMs chained in one timed program until their FLOPs reach chain_flops, at most max_chain: on a
    # GPU a small GEMM's kernel takes microseconds and a call ~60 (measured alone, the call's jitter
    # would set its rate); in a step the GPU runs ahead of the host and the kernels follow each other
    chain_flops: float = 0.0
    max_chain: int = 1


# A CPU's (faked devices sharing the host's cores): within 3 minutes on a 2-core machine faking 8.
CPU_SIZES = Sizes(
    matmul=(("float32", (64, 128, 256, 512, 1024)), ("bfloat16", (64, 128, 256))),
    stream_bytes=16 << 20,
    bus_bytes=4 << 20,
    copy_bytes=16 << 20,
    trips=1024,
    warmup=3,
    iters=30,
)
# An accelerator's: GEMMs up to where a GPU's library kernels reach their rate (an 8192^3 bf16 GEMM
# is ~1.5 ms on an H200), each chained to the FLOPs of a 4096^3 one; a stream and copies of many
# times a GPU's L2 (50-60 MB)
ACCELERATOR_SIZES = Sizes(
    matmul=(("bfloat16", (256, 512, 1024, 2048, 4096, 8192)), ("float32", (256, 1024, 4096, 8192))),
    stream_bytes=1 << 30,
    bus_bytes=32 << 20,  # an all-gather's fresh output is the axis's size times it: 8 GiB over 256 chips
    copy_bytes=256 << 20,
    trips=1024,
    warmup=3,
    iters=30,
    chain_flops=2.0 * 4096**3,
    max_chain=64,
)
# The smallest sizes and fewest runs, one collective (seconds: a smoke test)
QUICK_SIZES = Sizes(
    matmul=(("float32", (16, 32)), ("bfloat16", (16,))),
    stream_bytes=64 << 10,
    bus_bytes=64 << 10,
    copy_bytes=64 << 10,
    trips=8,
    warmup=1,
    iters=3,
    collectives=("psum",),
)


def sizes_for(platform: str, *, quick: bool = False) -> Sizes:
    """The sizes calibrate measures on `platform`'s devices ("cpu", "gpu", "tpu")."""
    if quick:
        return QUICK_SIZES
    return CPU_SIZES if platform == "cpu" else ACCELERATOR_SIZES


def _measured(samples: tuple[float, ...], amount: float, unit: str, how: str) -> Measured:
    """`amount` per fastest second (unit "B/s"), or the fastest run itself (`amount` 0, unit "s")."""
    fastest = summarize(samples).min
    return Measured(amount / fastest if amount else fastest, unit, how, samples)


def beyond_call(fastest_s: float, call_s: float) -> float:
    """The seconds of a run beyond its call's own cost, at least half the run (a GEMM's, a stream's)."""
    return max(fastest_s - call_s, 0.5 * fastest_s)


def _timed(step: Any, x: Any, sizes: Sizes, fresh: Callable[[], Any] | None = None) -> tuple[float, ...]:
    samples, _ = time_iterations(step, x, warmup=sizes.warmup, iters=sizes.iters, fresh=fresh)
    return samples


def _sharded(session: Session, shape: tuple[int, ...], dtype: str = "float32") -> Any:
    """A float array of `shape` per device, split along its first dim over every mesh axis."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    n = session.spec.size
    sharding = NamedSharding(session.mesh, P(tuple(session.spec.axes)))
    return jax.device_put(jnp.ones((n * shape[0], *shape[1:]), dtype), sharding)


def measure_call(session: Session, sizes: Sizes) -> Measured:
    """The fastest of a call that does almost nothing: one add over 8 floats per device."""
    import jax

    x = _sharded(session, (8,))
    samples = _timed(jax.jit(lambda v: v + 1), x, sizes)
    n = session.spec.size
    return _measured(samples, 0, "s", f"fastest of jit(x + 1) over f32[8] on each of {n} devices")


def measure_loop_trip(session: Session, sizes: Sizes, call_s: float, kernel_s: float = 0.0) -> Measured:
    """What one more trip of a loop costs: a fori_loop of `trips` tiny trips, less the call, per trip;
    on a GPU less the kernels the loop launches too (counted in the compiled program, at `kernel_s`
    each), which the estimate charges as kernels."""
    import jax
    from jax import lax

    x = _sharded(session, (8,))
    trips = sizes.trips
    compiled = jax.jit(lambda v: lax.fori_loop(0, trips, lambda i, a: a * 1.0001 + 1, v)).lower(x).compile()
    samples = _timed(compiled, x, sizes)
    kernels = kernels_launched(session, compiled) if kernel_s else 0
    return loop_trip_measured(samples, trips, call_s, kernels, kernel_s)


def kernels_launched(session: Session, compiled: Any) -> int:
    """The kernels one call of `compiled` launches, as the estimate counts them (0 where unknown)."""
    from shardcli.analysis.program import analyze_compiled

    launches = analyze_compiled(compiled, session.mesh).launches
    return launches.kernels if launches is not None else 0


def loop_trip_measured(
    samples: tuple[float, ...], trips: int, call_s: float, kernels: int, kernel_s: float
) -> Measured:
    """A loop trip's cost from the loop's runs: (the fastest run - a call - the kernels beyond the
    call's one) / trips, at least 0."""
    beyond = max(kernels - 1, 0) * kernel_s
    per_trip = max(0.0, summarize(samples).min - call_s - beyond) / trips
    how = f"fori_loop of {trips} trips of a * 1.0001 + 1 over f32[8] per device: (fastest - a call"
    how += f" - {kernels - 1} kernels) / {trips}" if beyond else f") / {trips}"
    return Measured(per_trip, "s", how, samples)


def measure_kernel(session: Session, sizes: Sizes, call_s: float) -> Measured | None:
    """What one more kernel launch costs on a GPU: tanh(x @ w) chained 32 times on f32[16,16], its
    kernels counted in the compiled program (XLA fuses some of the tanhs into their GEMMs); None
    where the chain compiled to one kernel (nothing beyond the call's to measure)."""
    import jax
    import jax.numpy as jnp

    x = _sharded(session, (16, 16))

    def chain(v: Any) -> Any:
        for _ in range(32):
            v = jnp.tanh(v @ jnp.ones((16, 16), v.dtype))
        return v

    compiled = jax.jit(chain).lower(x).compile()
    kernels = kernels_launched(session, compiled)
    if kernels < 2:
        return None
    samples = _timed(compiled, x, sizes)
    per = max(0.0, summarize(samples).min - call_s) / (kernels - 1)
    how = (
        f"tanh(x @ w) chained 32 times on f32[16,16], {kernels} kernels: (fastest - a call of one "
        f"kernel) / {kernels - 1}"
    )
    return Measured(per, "s", how, samples)


def measure_stream(session: Session, sizes: Sizes, call_s: float) -> Measured:
    """Bytes per second each device streams: x * 2 + 1 over `stream_bytes` in and as much out."""
    import jax

    count = sizes.stream_bytes // 4
    x = _sharded(session, (count,))
    samples = _timed(jax.jit(lambda v: v * 2 + 1), x, sizes)
    return stream_measured(samples, sizes.stream_bytes, call_s, session.spec.size)


def stream_measured(samples: tuple[float, ...], stream_bytes: int, call_s: float, devices: int) -> Measured:
    """The stream's rate from its runs: bytes read and written over the fastest run less a call (at
    least half of it), as a GEMM's; the estimate charges the call once, apart (on an H200 the call
    was ~9% of a 1 GiB stream's run)."""
    fastest = summarize(samples).min
    seconds = beyond_call(fastest, call_s)
    mib = stream_bytes / (1 << 20)
    how = (
        f"x * 2 + 1 over f32 {mib:g} MiB in and out per device, all {devices} devices at once: bytes / "
        f"(the fastest run - a call, at least half of it)"
    )
    return Measured(2 * stream_bytes / seconds, "B/s", how, samples)


def measure_copies(session: Session, sizes: Sizes) -> tuple[Measured, Measured]:
    """Host to device (jax.device_put of a host array) and back (np.asarray), bytes per device per s."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    n = session.spec.size
    host = np.ones(n * sizes.copy_bytes // 4, np.float32)
    sharding = NamedSharding(session.mesh, P(tuple(session.spec.axes)))
    to_device = _timed(lambda h: jax.device_put(h, sharding), host, sizes)
    # each copy back from a fresh array: a jax.Array keeps its host copy after the first
    to_host = _timed(np.asarray, None, sizes, fresh=lambda: jax.device_put(host, sharding))
    mib = sizes.copy_bytes / (1 << 20)
    return (
        _measured(
            to_device, sizes.copy_bytes, "B/s", f"jax.device_put of {mib:g} MiB per device, {n} devices"
        ),
        _measured(to_host, sizes.copy_bytes, "B/s", f"np.asarray of {mib:g} MiB per device, {n} devices"),
    )


def chain_length(size: int, sizes: Sizes) -> int:
    """How many GEMMs of `size` one timed program chains: enough that the chain's FLOPs reach
    `sizes.chain_flops` (a kernel's own time, not the call's, then sets the rate), at most
    `sizes.max_chain`."""
    return max(1, min(sizes.max_chain, math.ceil(sizes.chain_flops / (2.0 * size**3))))


def measure_gemm(session: Session, dtype: str, size: int, sizes: Sizes, call_s: float) -> MatmulPoint:
    """FLOP/s per device of a `size`^3 GEMM in `dtype`: each device multiplies its own standard normal
    numbers, `chain_length` GEMMs one after another in one program (v = v @ w, w scaled by
    1/sqrt(size) so the numbers stay normal), all devices at once; the call's cost taken off."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    n = session.spec.size
    chain = chain_length(size, sizes)
    rng = np.random.default_rng(0)
    axes = tuple(session.spec.axes)
    x = jax.device_put(
        rng.standard_normal((n * size, size), dtype=np.float32).astype(dtype),
        NamedSharding(session.mesh, P(axes)),
    )
    w = jax.device_put(
        (rng.standard_normal((size, size), dtype=np.float32) / np.sqrt(size)).astype(dtype),
        NamedSharding(session.mesh, P()),
    )

    def gemms(v: Any, m: Any) -> Any:
        for _ in range(chain):
            v = jnp.matmul(v, m)
        return v

    step = jax.jit(jax.shard_map(gemms, mesh=session.mesh, in_specs=(P(axes), P()), out_specs=P(axes)))
    samples = _timed(lambda v: step(v, w), x, sizes)
    fastest = summarize(samples).min
    seconds = beyond_call(fastest, call_s) / chain
    how = (
        f"{chain} {dtype} {size}x{size}x{size} GEMM(s) of standard normal numbers chained in one program "
        f"on each of {n} devices at once: 2 M N K / ((the fastest run - a call, at least half of it) "
        f"/ {chain})"
    )
    return MatmulPoint(dtype, size, 2.0 * size**3 / seconds, how, samples)


def measure_matmul_curve(
    session: Session, sizes: Sizes, call_s: float, progress: Progress
) -> tuple[MatmulPoint, ...]:
    """`measure_gemm` at each size of each dtype."""
    points: list[MatmulPoint] = []
    for dtype, edges in sizes.matmul:
        progress(f"matmul {dtype} {', '.join(map(str, edges))}")
        points.extend(measure_gemm(session, dtype, size, sizes, call_s) for size in edges)
    return tuple(points)


def measure_bus(
    session: Session, request: CalibrateRequest, sizes: Sizes, progress: Progress, stream: Measured
) -> tuple[BusPoint, ...]:
    """The collective playground's collectives over each mesh axis of two devices or more: busbw of
    the collective alone (`collective_alone`)."""
    from shardcli.playground.collective.entries import CollectiveParams
    from shardcli.playground.collective.request import CollectiveRequest, validate_request
    from shardcli.playground.collective.run import run_collective
    from shardcli.specs.runs import OutBuffer
    from shardcli.specs.values import parse_dtype, parse_init

    points = []
    axes = [(a, n) for a, n in zip(request.mesh.axes, request.mesh.shape, strict=True) if n > 1]
    for (axis, size), name in ((a, c) for a in axes for c in sizes.collectives):
        progress(f"{name} over {axis} ({size} devices)")
        collective = CollectiveRequest(
            collective=name,
            mesh=request.mesh,
            params=CollectiveParams(axes=(axis,)),
            dtype=parse_dtype("float32"),
            init=parse_init("ones"),
            sizes=(sizes.bus_bytes,),
            # a fresh output per call, as a jitted program's collective writes one: nccl-tests' one
            # donated output buffer never pays for new memory, and on a CPU that is most of an
            # all-gather's cost (its 8x output: the kernel faults in and zeroes every page each call)
            out_buffer=OutBuffer.FRESH,
            warmup=sizes.warmup,
            iters=sizes.iters,
            show_values=False,
            options=request.options,
        )
        validate_request(collective)
        run = run_collective(collective, session=session).runs[0]
        placed = run.placements[0]
        if placed.busbw is None or placed.timing is None:
            continue
        stats = placed.timing.stats  # busbw from the fastest run, as every figure here
        alone, around = collective_alone(stats.min, placed.bytes_accessed, placed.hlo, size, stream.value)
        how = (
            f"the collective playground's {name} over {axis} of {size} devices, "
            f"{run.bytes_per_device >> 10} KiB per device, a fresh output per call (as in a jitted "
            f"program): busbw (nccl-tests') of the fastest run{around}"
        )
        points.append(
            BusPoint(
                name,
                axis,
                size,
                run.bytes_per_device,
                placed.busbw * 1e9 * stats.p50 / alone,
                how,
                placed.timing.samples,
            )
        )
    return tuple(points)


def collective_alone(
    fastest_s: float,
    bytes_accessed: float | None,
    hlo: tuple[HloCollective, ...],
    group_size: int,
    stream_bytes_per_s: float,
) -> tuple[float, str]:
    """The seconds of a collective program's fastest run that its collectives take, and how they were
    found ("" where nothing was taken off): the program's other ops (XLA's bytes accessed beyond
    the collectives' operands and results) at the stream rate taken off, never below a quarter of the run."""
    if bytes_accessed is None or stream_bytes_per_s <= 0:
        return fastest_s, ""
    own = sum(operand_bytes(c.op, c.result_bytes, group_size) + c.result_bytes for c in hlo)
    other = bytes_accessed - own
    if other <= 0:
        return fastest_s, ""
    alone = max(fastest_s - other / stream_bytes_per_s, fastest_s / 4)
    return alone, (
        f", less the program's other ops ({other / (1 << 20):.3g} MiB per device at the stream: "
        f"{(fastest_s - alone) * 1e3:.3g} of {fastest_s * 1e3:.3g} ms)"
    )


def run_calibrate(request: CalibrateRequest, progress: Progress | None = None) -> HardwareProfile:
    """Measure this machine's devices (see the module's docstring) into a profile.

    Raises:
        ShardcliError: bad input (the mesh, the devices), before anything is measured.
    """
    from shardcli.runtime.session import open_session

    say = progress or (lambda _: None)
    session = open_session(request.mesh, request.options)
    rt = session.runtime
    sizes = sizes_for(rt.platform, quick=request.quick)
    say(f"calling: {rt.device_count} {rt.device_kind} devices")
    call = measure_call(session, sizes)
    kernel, not_measured = None, ["per array buffer taken or returned (counted as 0)"]
    if rt.platform == "gpu":
        say("kernel launches")
        kernel = measure_kernel(session, sizes, call.value)
        if kernel is None:
            not_measured.append("kernel launches: XLA fused the chain of GEMMs into one kernel")
    else:
        not_measured.append(
            f"kernel launches: {rt.platform} programs launch no kernels (in the per-call cost)"
        )
    say("loop trips")
    trip = measure_loop_trip(session, sizes, call.value, kernel.value if kernel is not None else 0.0)
    say("memory stream")
    stream = measure_stream(session, sizes, call.value)
    say("host copies")
    to_device, to_host = measure_copies(session, sizes)
    buses = measure_bus(session, request, sizes, say, stream)
    if not buses:
        not_measured.append("collectives: the mesh has no axis of two devices or more")
    curve = measure_matmul_curve(session, sizes, call.value, say)
    return HardwareProfile(
        device_kind=rt.device_kind,
        platform=rt.platform,
        device_count=rt.device_count,
        versions=rt.compiler,
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        matmul=curve,
        stream=stream,
        collectives=buses,
        host_to_device=to_device,
        device_to_host=to_host,
        call=call,
        loop_trip=trip,
        kernel=kernel,
        not_measured=tuple(not_measured),
    )
