"""What JAX lets one program use of a GPU's memory, and the GPU fit verdict against it. Pure Python.

A compiled program's memory per device (`memory_analysis()`: arguments + outputs + temporaries +
code - aliased) is held against what JAX's GPU client will hand out on that GPU, not against the
datasheet: by default a preallocated BFC pool of 75% of the memory the driver reports. Three
environment variables change that, read here as JAX reads them (shardcli reads its own
environment: set them as they will be on the GPU machine):

- `XLA_PYTHON_CLIENT_MEM_FRACTION=.9` (or its newer name `XLA_CLIENT_MEM_FRACTION`, not both): the
  pool is that fraction of the GPU's memory.
- `XLA_PYTHON_CLIENT_PREALLOCATE=false`: the same BFC allocator, grown as buffers come, up to the
  same fraction.
- `XLA_PYTHON_CLIENT_ALLOCATOR=platform`: no pool, each buffer straight from the driver, so the
  whole memory; `cuda_async` (CUDA's stream-ordered pool) and `vmm` (XLA's virtual-memory
  allocator) are capped at the fraction; `bfc` and `default` are the BFC pool.

Sources (read 2026-11):
- jaxlib's `xla_client.generate_pjrt_gpu_plugin_options` (jax 0.10.2 and 0.12.0.1 alike): the names
  above; ALLOCATOR lower-cased, default "default", anything but default, platform, bfc, cuda_async
  or vmm (0.12 also "address") raises ValueError; the fraction is `float()` of the variable, an
  empty one unset, both names set a ValueError; PREALLOCATE off only for "false", "False" or "0".
- XLA, xla/pjrt/plugin/xla_gpu/xla_gpu_allocator_config.h (`GpuAllocatorConfig`): memory_fraction
  0.75 ("the default value of XLA_CLIENT_MEM_FRACTION"), preallocate true.
- XLA, xla/pjrt/gpu/gpu_helpers.cc `CreateBFCAllocator`: `allocator_memory = total_memory *
  memory_fraction` (total_memory from the driver, what nvidia-smi shows) is the BFC allocator's
  limit with or without preallocation (`allow_growth = !preallocate`); se_gpu_pjrt_client.cc
  `GetStreamExecutorGpuDeviceAllocator`: default and bfc build that allocator, cuda_async caps its
  pool at `total_memory * memory_fraction` (and falls back to BFC if CUDA refuses), vmm is created
  with the same memory_fraction, platform calls the driver's allocate/free directly.
- JAX's docs, "GPU memory allocation": 75% of the total GPU memory preallocated; PREALLOCATE=false
  is more prone to fragmentation; ALLOCATOR=platform is very slow. The docs of JAX's main branch
  describe a newer "0.75+" default (preallocate 75%, grow towards all of it); jax 0.12.0.1 sends no
  such policy (its xla_client passes a bare float) and its CUDA plugin has no
  --xla_gpu_memory_fraction_policy flag, so for the JAX versions shardcli runs the pool is fixed.

"At risk": on an H200 (jax 0.11.2), shardcli's llama2-7b train step (remat full, batch 1x4096)
needed 102.8 GiB (75.3 of arguments, 27.5 of temporaries) of the default 105.3 GiB pool and ran out
of memory on its first call, allocating its temporaries ("Out of memory while trying to allocate
27.50GiB with allocator GPU_0_bfc"). A BFC pool never moves what it holds, and XLA takes a step's
temporaries as one buffer, so they need one free piece of their size after the arguments are in;
the arrays made before the step (and what making them freed) had cut the pool up, and 2.5 GiB spare
(2.4% of the pool, 9% of the temporaries) was not enough. shardcli calls a program that fits with
less than 10% of the pool spare "at risk": four times the spare that failed, from one measured
failure, not a measured threshold. It exits 0 (the program fits as computed) and says so in the
verdict; it does not fit exits 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from shardcli.errors import ShardcliError

FRACTION_VARIABLE = "XLA_PYTHON_CLIENT_MEM_FRACTION"
NEW_FRACTION_VARIABLE = "XLA_CLIENT_MEM_FRACTION"  # the newer name; JAX refuses both at once
PREALLOCATE_VARIABLE = "XLA_PYTHON_CLIENT_PREALLOCATE"
ALLOCATOR_VARIABLE = "XLA_PYTHON_CLIENT_ALLOCATOR"
VARIABLES = (FRACTION_VARIABLE, NEW_FRACTION_VARIABLE, PREALLOCATE_VARIABLE, ALLOCATOR_VARIABLE)

DEFAULT_FRACTION = 0.75  # XLA's GpuAllocatorConfig.memory_fraction
# A pool with less than this share of itself spare after the program is in: at risk (see above).
AT_RISK_SHARE = 0.10
# The largest fraction shardcli suggests: what is left (4 GiB of an H100, 7 GiB of an H200) holds
# the CUDA context, cuBLAS/cuDNN workspaces and NCCL's buffers, which live outside the pool.
MAX_SUGGESTED_FRACTION = 0.95

# Each allocator JAX accepts, in words; "address" (jax 0.12) is left out: no source here says what
# it caps a program at.
ALLOCATORS = {
    "default": "JAX's BFC pool",
    "bfc": "JAX's BFC pool",
    "cuda_async": "CUDA's async allocator",
    "vmm": "XLA's VMM allocator",
    "platform": "no pool",
}
_PREALLOCATE = {"true": True, "True": True, "1": True, "false": False, "False": False, "0": False}

STATUSES = ("fits", "at risk", "does not fit")


@dataclass(frozen=True)
class GpuPool:
    """How JAX's GPU client will hand out one GPU's memory, from the environment."""

    allocator: str  # a key of ALLOCATORS
    fraction: float  # of the GPU's memory; unused by "platform"
    preallocate: bool
    fraction_variable: str | None  # the variable that set the fraction; None: XLA's default
    settings: tuple[str, ...] = ()  # the variables that were set, as NAME=value

    @property
    def pooled(self) -> bool:
        return self.allocator != "platform"

    def limit_bytes(self, device_bytes: int) -> int:
        """What one program may use of a GPU with `device_bytes`."""
        return int(device_bytes * self.fraction) if self.pooled else device_bytes

    def words(self, label: str, device_bytes: int) -> str:
        """`JAX's BFC pool: 75% of the H200 SXM's 140.4 GiB by default` (or `with NAME=value`)."""
        from shardcli.specs.values import format_bytes

        memory = f"the {label}'s {format_bytes(device_bytes)}"
        kind = ALLOCATORS[self.allocator]
        if not self.pooled:
            core = f"{kind}: each buffer from the driver, out of {memory}"
        else:
            up_to = "" if self.allocator in ("default", "bfc") and self.preallocate else "up to "
            core = f"{kind}: {up_to}{self.fraction * 100:g}% of {memory}"
            if not self.preallocate:
                core += ", grown as needed"
        return f"{core} {'with ' + ' and '.join(self.settings) if self.settings else 'by default'}"


def read_gpu_pool(environ: Mapping[str, str]) -> GpuPool:
    """The pool JAX's GPU client makes under `environ`, read as jaxlib reads it.

    Raises:
        ShardcliError: a value JAX refuses or reads otherwise than it looks (one line).
    """
    settings = tuple(f"{name}={environ[name]}" for name in VARIABLES if environ.get(name))
    raw_allocator = environ.get(ALLOCATOR_VARIABLE)
    allocator = "default" if raw_allocator is None else raw_allocator.lower()
    if allocator not in ALLOCATORS:
        known = ", ".join(ALLOCATORS)
        why = (
            "shardcli has no source for what that allocator caps a program at"
            if allocator == "address"
            else "JAX refuses it"
        )
        raise ShardcliError(
            f"{ALLOCATOR_VARIABLE}={raw_allocator!r}: {why}; for a GPU fit verdict use one of {known} "
            "(or unset it: JAX's BFC pool)"
        )
    new, old = environ.get(NEW_FRACTION_VARIABLE, ""), environ.get(FRACTION_VARIABLE, "")
    if new and old:
        raise ShardcliError(
            f"{NEW_FRACTION_VARIABLE} and {FRACTION_VARIABLE} are both set ({new!r}, {old!r}): JAX "
            "refuses that; keep one of them"
        )
    name, text = (NEW_FRACTION_VARIABLE, new) if new else (FRACTION_VARIABLE, old)
    fraction = DEFAULT_FRACTION
    if text:
        try:
            fraction = float(text)
        except ValueError:
            fraction = math.nan
        if not 0 < fraction <= 1:  # nan included
            raise ShardcliError(
                f"{name}={text!r}: give a fraction of the GPU's memory above 0 and at most 1, such as "
                f".9 (JAX's default is {DEFAULT_FRACTION:g})"
            )
    raw = environ.get(PREALLOCATE_VARIABLE, "")
    if raw and raw not in _PREALLOCATE:
        raise ShardcliError(
            f"{PREALLOCATE_VARIABLE}={raw!r}: JAX reads only false, False and 0 as off and anything else "
            "as on; set it to false or true"
        )
    return GpuPool(
        allocator=allocator,
        fraction=fraction,
        preallocate=_PREALLOCATE.get(raw, True),
        fraction_variable=name if text else None,
        settings=settings,
    )


# The variables jaxlib's generate_pjrt_gpu_plugin_options reads as `int()` when the CUDA plugin
# starts (jax 0.10.2 and 0.12.0.1 alike), whether or not a GPU is there: a value `int()` refuses
# raises inside the plugin, and JAX prints its traceback and starts without it.
COLLECTIVE_MEMORY_VARIABLE = "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB"  # empty: unset
SWITCH_VARIABLES = ("XLA_PYTHON_CLIENT_ABORT_COLLECTIVES_ON_FAILURE", "XLA_PYTHON_CLIENT_USE_TFRT_GPU_CLIENT")
# The allocators any JAX in shardcli's window accepts; 0.12's "address" is accepted where its jaxlib is.
_CLIENT_ALLOCATORS = ("default", "platform", "bfc", "cuda_async", "vmm")


def check_gpu_client_variables(
    environ: Mapping[str, str], *, address_allocator: bool = False, gpu: bool = True
) -> None:
    """Refuse, before the CUDA plugin starts, a JAX GPU client variable it cannot read.

    JAX's CUDA plugin reads these as it starts, for any run where it is installed (a TPU or CPU run
    too); a value it cannot read raises inside the plugin: a traceback on stderr, then the run goes
    on without the plugin (a GPU target then "does not know" its topology).

    Args:
        environ: the environment the plugin will read.
        address_allocator: this jaxlib accepts XLA_PYTHON_CLIENT_ALLOCATOR=address (jax 0.12).
        gpu: the run is on a GPU (a target's or real ones): a memory fraction must be one JAX's pool
            can take (above 0, at most 1); elsewhere only one the plugin cannot read is refused.

    Raises:
        ShardcliError: the first variable the plugin would refuse, with its value and what is valid.
    """
    raw = environ.get(ALLOCATOR_VARIABLE)
    allowed = (*_CLIENT_ALLOCATORS, "address") if address_allocator else _CLIENT_ALLOCATORS
    if raw is not None and raw.lower() not in allowed:
        raise ShardcliError(
            f"{ALLOCATOR_VARIABLE}={raw!r}: JAX refuses it (its CUDA plugin reads it as it starts); give one "
            f"of {', '.join(allowed)}, or unset it (JAX's BFC pool)"
        )
    new, old = environ.get(NEW_FRACTION_VARIABLE, ""), environ.get(FRACTION_VARIABLE, "")
    fractions = {k: v for k, v in environ.items() if k in (FRACTION_VARIABLE, NEW_FRACTION_VARIABLE)}
    if (new or old) and (gpu or (new and old) or not _reads_as_float(new or old)):
        read_gpu_pool(fractions)  # its one line for the value (or for both names set)
    size = environ.get(COLLECTIVE_MEMORY_VARIABLE, "")
    if size and not _reads_as_int(size):
        raise ShardcliError(
            f"{COLLECTIVE_MEMORY_VARIABLE}={size!r}: JAX's CUDA plugin reads it as a whole number of MiB; "
            "give one, such as 0, or unset it"
        )
    for name in SWITCH_VARIABLES:
        value = environ.get(name)
        if value is not None and not _reads_as_int(value):
            raise ShardcliError(
                f"{name}={value!r}: JAX's CUDA plugin reads it as a whole number (0 off, any other on); "
                "give 0 or 1, or unset it"
            )


def _reads_as_float(text: str) -> bool:
    """Whether Python's `float()`, which jaxlib calls, reads `text`."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _reads_as_int(text: str) -> bool:
    """Whether Python's `int()`, which jaxlib calls, reads `text`."""
    try:
        int(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class GpuFit:
    """A program's memory per GPU against what JAX will hand out there."""

    status: str  # one of STATUSES
    pool: GpuPool
    label: str  # "H200 SXM"
    device_bytes: int  # the GPU's memory as the driver reports it
    limit_bytes: int  # what the pool lets one program use
    margin_bytes: int  # spare under this is at risk
    advice: str | None  # the setting that would make it fit, or that none would; None when it fits


def classify(needed_bytes: int, limit_bytes: int) -> str:
    """`fits`, `at risk` (fits with under AT_RISK_SHARE of the limit spare) or `does not fit`."""
    if needed_bytes > limit_bytes:
        return "does not fit"
    return "at risk" if limit_bytes - needed_bytes < AT_RISK_SHARE * limit_bytes else "fits"


def fraction_text(fraction: float) -> str:
    """.85, .9, 1: as people type it after `=`."""
    text = f"{fraction:g}"
    return text[1:] if text.startswith("0.") else text


def advise(needed_bytes: int, device_bytes: int, pool: GpuPool) -> str | None:
    """The smallest fraction (in steps of .05, at most MAX_SUGGESTED_FRACTION) at which the program
    fits with its margin, or why no setting does; None when it fits as it is."""
    from shardcli.specs.values import format_bytes

    limit = pool.limit_bytes(device_bytes)
    if classify(needed_bytes, limit) == "fits":
        return None
    need, whole = format_bytes(needed_bytes), format_bytes(device_bytes)
    if not pool.pooled:
        if needed_bytes > device_bytes:
            return f"no setting makes it fit: it needs {need} of the GPU's {whole}"
        return "no setting leaves more spare: the platform allocator already gives it the whole GPU"
    name = pool.fraction_variable or FRACTION_VARIABLE
    for percent in range(5, round(MAX_SUGGESTED_FRACTION * 100) + 1, 5):
        fraction = percent / 100
        if fraction <= pool.fraction:
            continue
        larger = int(device_bytes * fraction)
        if classify(needed_bytes, larger) == "fits":
            return f"{name}={fraction_text(fraction)} makes it fit (a {format_bytes(larger)} pool)"
    top = int(device_bytes * MAX_SUGGESTED_FRACTION)
    if needed_bytes <= top and pool.fraction < MAX_SUGGESTED_FRACTION:
        spare = format_bytes(top - needed_bytes)
        return (
            f"{name}={fraction_text(MAX_SUGGESTED_FRACTION)} holds it with {spare} spare, still at risk; "
            "no setting leaves the margin"
        )
    if needed_bytes <= top:
        return "no setting leaves the margin"
    return (
        f"no setting makes it fit: it needs {need} of the GPU's {whole}, more than "
        f"{fraction_text(MAX_SUGGESTED_FRACTION)} of it (the rest is CUDA's and NCCL's)"
    )


def judge_gpu_fit(needed_bytes: int, device_bytes: int, label: str, pool: GpuPool) -> GpuFit:
    """The verdict of a program needing `needed_bytes` per GPU on a `label` GPU under `pool`."""
    limit = pool.limit_bytes(device_bytes)
    return GpuFit(
        status=classify(needed_bytes, limit),
        pool=pool,
        label=label,
        device_bytes=device_bytes,
        limit_bytes=limit,
        margin_bytes=math.ceil(AT_RISK_SHARE * limit),
        advice=advise(needed_bytes, device_bytes, pool),
    )
