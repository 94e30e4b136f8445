"""One placement of one collective size: its shard_map program compiled, timed out of place or in
place, a result checked against NumPy, and its speed held against the `Roofline`.

Out of place the result goes into a preallocated buffer donated to every call (nccl-tests'
recvbuff) or a fresh allocation per call; in place the input is donated and each output fed back
as the next input. A buffer the program should have written is poisoned first, so a result left
unwritten counts as wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardcli.analysis.program import HloCollective, find_collectives, read_cost
from shardcli.playground.collective.cases import in_place_refusal
from shardcli.playground.collective.entries import Collective, Entries
from shardcli.playground.collective.request import CollectiveRequest, SizeLayout
from shardcli.playground.roofline import min_bytes_rule
from shardcli.runtime.arrays import place_array
from shardcli.runtime.mesh import partition_spec
from shardcli.runtime.processes import combine_check, combine_timing
from shardcli.runtime.session import Session
from shardcli.runtime.timing import Timing, compile_timed, summarize, time_iterations
from shardcli.runtime.verify import compare_exact, compare_within
from shardcli.specs.runs import OutBuffer, Placement

# device id -> (expected output block, error bound or None for exact, input block)
Expected = dict[int, tuple[np.ndarray, np.ndarray | None, np.ndarray]]


@dataclass(frozen=True)
class Roofline:
    """What a run's speed is held against.

    On CPU with one process: the host's copy bandwidth, against the bytes the collective must at
    least read and write (`shardcli.playground.roofline`). On GPU/TPU: the device table's link bandwidth,
    against busbw (nccl-tests' busbw is comparable to one link's bandwidth). Otherwise none.
    """

    basis: str | None  # "host memory", "link" or None (not available)
    bandwidth_bytes_per_s: float | None
    source: str  # how the bandwidth was found, or why there is none
    rule: str | None = None  # host memory: the minimum-bytes rule in words
    measured_at: str | None = None  # host memory: when the copy bandwidth was measured (UTC)
    cached: bool | None = None  # host memory: read from the cache directory, not measured now
    warning: str | None = None  # host memory: for stderr, the figure could not be cached


@dataclass(frozen=True)
class PlacementRun:
    """One placement (out of place or in place) of one size."""

    placement: Placement  # out or in
    timing: Timing | None
    algbw: float | None  # GB/s, 1e9, from the p50 time
    busbw: float | None
    wrong: int
    wrong_devices: tuple[int, ...]
    max_abs_err: float
    # Did XLA write the result into the donated buffer: the input (in place) or the preallocated
    # output (out of place); None for fresh outputs.
    aliased: bool | None
    hlo: tuple[HloCollective, ...]
    not_run: str | None = None  # why this placement does not apply
    out_buffer: OutBuffer | None = None  # out of place: preallocated or fresh; in place: None
    roofline_fraction: float | None = None  # of the run's Roofline; None where it has none
    # XLA's cost analysis of the compiled program: bytes each device reads and writes per run, the
    # collective's operand and result and whatever the program does around it (on a CPU an
    # all-to-all's slices and concatenation); None where the compiler gives none
    bytes_accessed: float | None = None


def run_placement(
    session: Session,
    request: CollectiveRequest,
    collective: Collective,
    size: SizeLayout,
    host: np.ndarray,
    expected: Expected,
    placement: Placement,
    show_values: bool,
    roofline: Roofline | None,
    roofline_s: float | None,
) -> tuple[PlacementRun, dict[int, np.ndarray] | None, np.ndarray | None]:
    """One placement of one size: its run, this process's output blocks by device id (None where
    the placement does not apply), and the whole output where it is shown."""
    donate = placement == Placement.IN
    not_run = (
        in_place_refusal(collective, size.local, request.params, size.n, request.dtype) if donate else None
    )
    if not_run is not None:
        return PlacementRun(placement, None, None, None, 0, (), 0.0, None, (), not_run=not_run), None, None
    compiled, compile_s, cached, x, poisoned = _compile_placement(
        session, request, collective, size, host, donate
    )
    hlo = find_collectives(compiled.as_text())  # the kinds and counts: no memory or cost analysis
    measured = _time_and_check(compiled, x, poisoned, donate, request, expected, collective, show_values)
    # Several processes: every one must see the same verdict and the whole run's timing.
    device_ids = [c.device_id for c in session.layout.cells]
    wrong, wrong_devices, max_err = combine_check(
        measured.wrong, measured.wrong_devices, measured.max_err, device_ids
    )
    timing = combine_timing(
        Timing(
            compile_s=compile_s,
            warmup=request.warmup,
            samples=measured.samples,
            stats=summarize(measured.samples),
            compile_cached=cached,
        ),
        request.options.process_timing,
    )
    stats = timing.stats
    algbw = size.algbw_bytes / stats.p50 / 1e9 if size.algbw_bytes is not None else None
    busbw = algbw * size.factor if algbw is not None and size.factor is not None else None
    run = PlacementRun(
        placement=placement,
        timing=timing,
        algbw=algbw,
        busbw=busbw,
        wrong=wrong,
        wrong_devices=wrong_devices,
        max_abs_err=max_err,
        aliased=measured.aliased,
        hlo=hlo,
        out_buffer=None if donate else request.out_buffer,
        roofline_fraction=_roofline_fraction(roofline, roofline_s, stats.p50, busbw),
        bytes_accessed=read_cost(compiled)[1],
    )
    return run, measured.outputs, measured.global_output


def _compile_placement(
    session: Session,
    request: CollectiveRequest,
    collective: Collective,
    size: SizeLayout,
    host: np.ndarray,
    donate: bool,
) -> tuple[Any, float, bool | None, Any, Callable[[], Any] | None]:
    """The placement's program compiled: (executable, compile seconds, from the compile cache, the
    placed input, and out of place into a preallocated buffer the maker of a poisoned one)."""
    import jax
    from jax.sharding import NamedSharding

    preallocated = not donate and request.out_buffer == OutBuffer.PREALLOCATED
    program = _shard_map_program(
        collective,
        session,
        request,
        size.in_entries,
        size.in_entries if donate else size.out_entries,
        size.n,
        "input" if donate else "output" if preallocated else None,
    )
    in_sharding = NamedSharding(session.mesh, partition_spec(size.in_entries))
    x = place_array(host, in_sharding)
    if donate:
        # On CPU the placed blocks may borrow NumPy's memory, which XLA cannot write into;
        # donate a buffer the runtime owns, as an in-place user would.
        x = jax.device_put(x, in_sharding, may_alias=False)
    if not preallocated:
        compiled, compile_s, cached = compile_timed(program, x)
        return compiled, compile_s, cached, x, None
    out_sharding = NamedSharding(session.mesh, partition_spec(size.out_entries))
    # The result's dtype is not always the input's (axis_index gives int32). The program
    # never reads its out argument, so x stands in for it here.
    out_type = jax.ShapeDtypeStruct(
        size.out_global, jax.eval_shape(program, x, x).dtype, sharding=out_sharding
    )
    poisoned = _poison_filler(out_type)
    compiled, compile_s, cached = compile_timed(program, x, out_type)
    return compiled, compile_s, cached, x, poisoned


@dataclass(frozen=True)
class _Measured:
    """One placement's timed calls and the check of its result, on this process's devices."""

    samples: tuple[float, ...]
    # Did XLA write the result into the donated buffer; None for fresh outputs.
    aliased: bool | None
    wrong: int
    wrong_devices: tuple[int, ...]
    max_err: float
    outputs: dict[int, np.ndarray]  # device id -> its output block
    global_output: np.ndarray | None  # the whole output, where it is shown (out of place only)


def _time_and_check(
    compiled: Any,
    x: Any,
    poisoned: Callable[[], Any] | None,
    donate: bool,
    request: CollectiveRequest,
    expected: Expected,
    collective: Collective,
    show_values: bool,
) -> _Measured:
    """Time the compiled placement and verify a result of it against `expected`."""
    import jax

    global_output = None
    if donate:
        # Verify the first in-place result, then keep feeding outputs back in.
        before = _buffer_pointer(x)
        y = compiled(x)
        after = _buffer_pointer(y)
        aliased: bool | None = before is not None and before == after
        wrong, wrong_devices, max_err, outputs = _check_outputs(y, expected, collective)
        samples, _ = time_iterations(compiled, y, warmup=request.warmup, iters=request.iters, chain=True)
        return _Measured(samples, aliased, wrong, wrong_devices, max_err, outputs, None)
    if poisoned is not None:
        samples, y = time_iterations(compiled, x, warmup=request.warmup, iters=request.iters, out=poisoned())
        # The timed calls all wrote into one buffer, so it would hold the first call's result
        # even if later calls wrote nothing. Verify one more call of the same executable into
        # a freshly poisoned buffer (NaN, or the dtype's largest value).
        y = None  # free the timed result before making that buffer
        out = poisoned()
        before = _buffer_pointer(out)
        y = compiled(x, out)
        aliased = before is not None and before == _buffer_pointer(y)
    else:
        aliased = None
        samples, y = time_iterations(compiled, x, warmup=request.warmup, iters=request.iters)
    # Verify what the program returned: the last timed call's result, or with the
    # preallocated buffer the extra call's.
    wrong, wrong_devices, max_err, outputs = _check_outputs(y, expected, collective)
    if show_values and y.is_fully_addressable:
        global_output = np.asarray(jax.device_get(y))
    return _Measured(samples, aliased, wrong, wrong_devices, max_err, outputs, global_output)


def _shard_map_program(
    collective: Collective,
    session: Session,
    request: CollectiveRequest,
    in_entries: Entries,
    out_entries: Entries,
    n: int,
    donate: str | None,
) -> Any:
    """jit(shard_map(collective)).

    Args:
        donate: "input": the input is donated (in place). "output": the program also takes an
            output buffer of the result's shape and sharding, unused but donated, so XLA writes
            the result into it. None: nothing donated; every call allocates its output.
    """
    import jax

    params = request.params

    def body(x: Any) -> Any:
        return collective.body(x, params, n)

    mapped = jax.shard_map(
        body, mesh=session.mesh, in_specs=partition_spec(in_entries), out_specs=partition_spec(out_entries)
    )
    if donate == "output":
        # keep_unused: jit would otherwise drop the unused buffer, and with it the donation.
        return jax.jit(lambda x, out: mapped(x), donate_argnums=(1,), keep_unused=True)
    return jax.jit(mapped, donate_argnums=(0,) if donate == "input" else ())


def _poison_filler(out_type: Any) -> Callable[[], Any]:
    """A function that makes an output buffer of `out_type` (shape, dtype, sharding) filled with
    a value a result rarely holds: NaN, ints their largest value, bools True.

    An element the program did not write keeps it, and the check against NumPy then counts it
    wrong (unless the expected value happens to be that very value).
    """
    import jax
    import jax.numpy as jnp

    dtype = out_type.dtype
    if jnp.issubdtype(dtype, jnp.inexact):  # NumPy's own check misses bfloat16
        fill: Any = np.nan
    elif dtype == np.bool_:
        fill = True
    else:
        fill = np.iinfo(dtype).max
    return jax.jit(lambda: jnp.full(out_type.shape, fill, dtype), out_shardings=out_type.sharding)


def _check_outputs(
    y: Any, expected: dict, collective: Collective
) -> tuple[int, tuple[int, ...], float, dict[int, np.ndarray]]:
    wrong_total, wrong_devices, max_err = 0, [], 0.0
    outputs = {}
    for shard in y.addressable_shards:
        dev = shard.device.id
        local = np.asarray(shard.data)
        outputs[dev] = local
        want, bound, _ = expected[dev]
        cmp = compare_exact(local, want) if bound is None else compare_within(local, want, bound)
        wrong_total += cmp.wrong
        max_err = max(max_err, cmp.max_abs_err)
        if cmp.wrong:
            wrong_devices.append(dev)
    return wrong_total, tuple(sorted(wrong_devices)), max_err, outputs


def _buffer_pointer(array: Any) -> int | None:
    try:
        return int(array.addressable_shards[0].data.unsafe_buffer_pointer())
    except Exception:  # noqa: BLE001 - not every backend exposes it
        return None


def _roofline_fraction(
    roofline: Roofline | None, roofline_s: float | None, p50: float, busbw: float | None
) -> float | None:
    if roofline is None or roofline.basis is None:
        return None
    if roofline.basis == "host memory":
        return roofline_s / p50 if roofline_s is not None and p50 > 0 else None
    assert roofline.bandwidth_bytes_per_s is not None
    return busbw * 1e9 / roofline.bandwidth_bytes_per_s if busbw is not None else None


def resolve_roofline(session: Session, collective: Collective) -> Roofline:
    """The bandwidth this run is held against (see `Roofline`); measured once per process on CPU."""
    rt = session.runtime
    from shardcli.hardware.profile import profile_for

    profile = profile_for(rt.device_kind)  # --hardware: its measured bus bandwidth
    bus = profile.bus(rt.device_count) if profile is not None else None
    if profile is not None and bus is not None:
        return Roofline("link", bus.busbw, f"{bus.busbw / 1e9:.3g} GB/s busbw ({profile.label}: {bus.how})")
    if rt.platform == "cpu":
        if rt.process_count > 1:
            return Roofline(
                None,
                None,
                "not available: with several processes the data crosses gloo sockets, not one "
                "process's memory",
            )
        from shardcli.playground.roofline import host_copy_bandwidth
        from shardcli.runtime.cache import cache_state

        copy = host_copy_bandwidth(cache_state().directory)
        return Roofline(
            "host memory",
            copy.bytes_per_s,
            copy.describe(),
            min_bytes_rule(collective),
            measured_at=copy.measured_at,
            cached=copy.cached,
            warning=copy.warning,
        )
    from shardcli.hardware.costmodel import lookup_peak

    entry = lookup_peak(rt.device_kind)
    if entry is None:
        return Roofline(
            None, None, f"not available: no link bandwidth in the device table for {rt.device_kind!r}"
        )
    link = entry.link_bytes_per_s
    return Roofline(
        "link",
        link.value,
        f"{link.value / 1e9:g} GB/s link bandwidth (table: {entry.label}, {link.source})",
    )
