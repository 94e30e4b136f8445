"""The envelope every document starts with, and the records several documents share.

The envelope (`ENVELOPE`) and what every run on devices writes after it (`RUN`: the runtime and the
mesh); timing, HLO ops, tiles, checks and a result's values; and what several commands say of a
compiled program: the hardware figures, the fit verdict, the cost model, the program's facts
(`PROGRAM`) and its step-time estimate (`STEP_TIME`). Each command's own records are in
shardcli/results/bodies.py.
"""

from __future__ import annotations

from shardcli.results.shapes import ListOf, MapOf, Maybe, Record

ENVELOPE = Record("schema", "command", "shardcli_version")

DISTRIBUTED = Record("coordinator", "auto", "coordinator_bind")
RUNTIME = Record(
    "platform",
    "device_kind",
    "device_count",
    "devices_present",
    "faked",
    "note",
    "process_count",
    "process_index",
    ("distributed", Maybe(DISTRIBUTED)),
    "process_timing",
    "compile_cache",
    "jax_version",
    # what compiled the run's programs, package -> version: {"jax": ..., "jaxlib": ...}, and libtpu
    # or jax-cuda12-plugin / jax-cuda13-plugin for a --target (or real TPUs, GPUs)
    ("compiler", MapOf(None)),
)
MESH_DEVICE = Record("id", "coords", "process_index", "platform", "device_kind")
MESH = Record("shape", "axes", "axis_types", "mode", ("devices", ListOf(MESH_DEVICE)))
# What every run on devices writes after the envelope.
RUN = ENVELOPE.extended(("runtime", RUNTIME), ("mesh", MESH))

STATS = Record("min", "p50", "p90", "max", "mean", "stdev")
SAMPLES = Record("compile_s", "warmup", "samples_s", ("stats_s", STATS))
PROCESS_SAMPLES = Record("process_index").extended(*SAMPLES.fields.items())
TIMING = SAMPLES.extended(
    "compile_cached", "blocking", "across_processes", ("processes", Maybe(ListOf(PROCESS_SAMPLES)))
)
HLO_OP = Record("op", "count", "result_bytes")
TILE = Record("index", "device_ids")
CHECK = Record("what", "ok", "detail")

# A small result's values (null where it is over 256 elements or --no-show-values): the global array
# and each device's block, with the block's global index ranges.
VALUE_BLOCK = Record("device_id", "index", "values")
RESULT_VALUES = Record("global_values", ("blocks", ListOf(VALUE_BLOCK)))

HARDWARE = Record("peak_flop_per_s", "peak_source", "link_bytes_per_s", "link_source")
# A compile-only target's verdict: the program's memory per chip against the chip's HBM.
# A GPU target's pool as JAX's GPU client makes it (shardcli/hardware/gpu_memory.py): the allocator, the
# fraction of the GPU's memory (null: "platform", no pool), the XLA_* variables read (NAME=value).
GPU_POOL = Record("allocator", "fraction", "preallocate", "environment", "device_bytes")
# status: "fits", "at risk" (a GPU pool with under 10% spare; fits stays true) or "does not fit".
# margin_bytes, advice and gpu_pool are null on a TPU.
FIT_VERDICT = Record(
    "fits",
    "status",
    "capacity_bytes",
    "capacity_source",
    "needed_bytes",
    "arguments_bytes",
    "temporaries_bytes",
    "compiler_message",
    "margin_bytes",
    "advice",
    ("gpu_pool", Maybe(GPU_POOL)),
    "text",
)
COMM = Record("op", "axis", "group_size", "bytes_per_device")
COST_MODEL = Record(
    "flops_per_device",
    ("comm", ListOf(COMM)),
    "comm_bytes_per_device",
    "t_math_s",
    "t_comm_s",
    "t_bound_s",
    "t_sum_s",
    "dominant",
)
FLOP_FIT = Record("model", "alpha_us", "rate_tflops", "r2", "max_rel_residual", "points")

# What program_analysis reads from a compiled program (einsum, reshard; inspect to come).
PROGRAM_COLLECTIVE = Record(
    "kind",
    "mesh_axes",
    "axis_slices",
    "group_size",
    "shape",
    "result_bytes",
    "sent_bytes",
    "runs",
    "runs_known",
    "op_name",
    "source",
    "operand",  # the argument (pytree path) whose value it moves, or null where it moves a computed one
    "stack",  # the user's frames that led to it, "file:line", innermost first (source first)
    "role",  # what it is for (analysis.roles.ROLES: fsdp-gather, partial-sum, reshard, ...), or null
)
MEMORY = Record(
    "argument_bytes",
    "output_bytes",
    "temp_bytes",
    "alias_bytes",
    "code_bytes",
    "total_bytes",
    "host_bytes",  # in the host's memory (pinned_host): offloaded activations, arguments, outputs
    "host_transfer_bytes",  # moved between the device and the host per run
)
PROGRAM_LOOP = Record("name", "trips", "runs", "body_flops", "body_bytes", "op_name", "source")
# One group of library kernel calls (analysis/kernels.py): cuBLAS GEMMs, cuDNN attention, convolutions.
PROGRAM_KERNELS = Record("target", "kind", "dtype", "calls", "flops", "bytes_accessed")
PROGRAM = Record(
    ("collectives", ListOf(PROGRAM_COLLECTIVE)),
    ("memory", Maybe(MEMORY)),
    "flops_per_device",
    "bytes_accessed_per_device",
    "sent_bytes_per_device",
    "xla_flops_per_device",
    "xla_bytes_accessed_per_device",
    ("loops", ListOf(PROGRAM_LOOP)),
    ("kernels", ListOf(PROGRAM_KERNELS)),
    "trips_known",
    "missing",
)
# The step-time estimate (analysis/step_time.py): each roofline term with its source.
STEP_TERM = Record("name", "amount", "rate", "seconds", "source")
# A GPU's per-op roofline: the library kernels bound by maths or HBM, every other op together.
STEP_OPS = Record(
    "kernel_calls",
    "kernels_math_s",
    "kernels_hbm_s",
    "other_flops",
    "other_bytes",
    "other_s",
    "other_bound",
    # the least the step takes for what it launches (a step of many small kernels), and its counts
    "launch_s",
    "kernel_launches",
    "loop_trips",
    "buffers",
    "launch_source",
    "dot_efficiency",
    "dot_efficiency_source",
    "hbm_efficiency",
    "hbm_efficiency_source",
)
STEP_TIME = Record(
    "chip",
    "method",
    ("ops", Maybe(STEP_OPS)),
    ("math", STEP_TERM),
    ("hbm", STEP_TERM),
    ("comm", ListOf(STEP_TERM)),
    ("host", Maybe(STEP_TERM)),  # transfers to and from the host's memory; null where none
    "t_comm_s",
    "t_exposed_s",  # the communication the compiled schedule does not hide (analysis/exposed.py)
    "bound_s",
    "sum_s",
    "dominant",
    "efficiency",
    "efficiency_source",
    "estimate_s",
    "compiler_seconds",
    "compiler_note",
    "notes",
)
