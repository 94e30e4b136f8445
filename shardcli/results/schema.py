"""The JSON documents shardcli writes: their schema version and the keys of every record in them.

One owner for the shape of `--format json`. The writers (shardcli/render) build each record through
the `Record` that names its keys, `shardcli compare` names the keys it reads through `DocumentKind.key`,
and the contract tests check real documents with `document_problems`. (Reading a JSON file safely is
another job: shardcli/specs/files.py.) Pure Python, without NumPy or JAX, so `compare` imports it for free.

A document kind is one entry in `DOCUMENTS`: its name, the `command` values its documents carry,
and the record of its body (the keys after the envelope). A new command's document is its records
and that entry:

    INSPECT_BODY = Record(("config", INSPECT_CONFIG), ("program", PROGRAM), ("summary", ...))
    DocumentKind("inspect", ("inspect",), INSPECT_BODY)  # in the tuple that builds DOCUMENTS

Its writer calls `render.jsonout.document("inspect", session, {"config": INSPECT_CONFIG(...), ...})`,
and tests/test_json_schema.py runs it once (REAL_DOCUMENTS) and pins its keys (PINNED_KEYS).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# Raise it when a key of a document kind scripts already read is renamed, added or removed.
# 2: matmul's config has compile_target and each impl its fit (--target); einsum, reshard and inspect
# documents are new (and, before any release of them, a program's loops, XLA's once-counted figures
# and what is missing; inspect's step-time estimate). 3: each matmul, einsum and reshard impl has its
# result's `values` (global and per device, null for results over 256 elements; reshard's
# `values_before` too); before any release of 3, a program's collective names the argument it moves
# (operand), inspect's findings carry count, paths and source, and its collectives come grouped by
# (kind, mesh axes, line) too (collective_groups). 4: a program's library kernels (cuBLAS, cuDNN) and
# the step-time estimate's method and per-op roofline (a GPU); inspect's module (inspect PATH.hlo.txt);
# a fit verdict (matmul, einsum, reshard, inspect) has its status ("at risk" on a GPU), margin_bytes,
# advice and gpu_pool; inspect --run's donation; every run's runtime names the compiler that judged it
# (runtime.compiler: jax, jaxlib, and libtpu or a CUDA plugin for a --target). 5: a program's
# collective carries the user's frames that led to it (stack, innermost first; source is the first);
# a GPU's per-op estimate has the least its launches take (step_time.ops.launch_s and its counts);
# plan's config.rank (its order), its chip's usable_bytes and network_bytes_per_s.
SCHEMA_VERSION = 5


class SchemaError(ValueError):
    """A document or record does not have the keys the schema gives it: a bug in shardcli."""


# --- shapes ---------------------------------------------------------------------------------------


class Record:
    """A JSON object with a fixed set of keys, in order; some keys hold a nested shape.

    `Record("op", "count", ("stats_s", STATS))`: a plain key holds any JSON value, a (key, shape)
    pair holds a value of that shape. Calling a record builds one, as a TypedDict does:
    `HLO_OP(op="all-reduce", count=1, result_bytes=64)`, in the record's key order.
    """

    def __init__(self, *fields: str | tuple[str, Shape]) -> None:
        self.fields: dict[str, Shape] = dict((f, None) if isinstance(f, str) else f for f in fields)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self.fields)

    def key(self, *path: str) -> str:
        """The last key of `path`, once every key on it is found here (through lists and maps).

        Raises:
            SchemaError: a key on the path is not in the schema.
        """
        shape: Shape = self
        for i, name in enumerate(path):
            record = _record_in(shape)
            if record is None or name not in record.fields:
                raise SchemaError(f"the schema has no '{'.'.join(path[: i + 1])}'")
            shape = record.fields[name]
        return path[-1]

    def extended(self, *fields: str | tuple[str, Shape]) -> Record:
        """This record's keys followed by more."""
        return Record(*self.fields.items(), *fields)

    def __call__(self, **values: Any) -> dict[str, Any]:
        """One record with exactly these keys, in the schema's order.

        Raises:
            SchemaError: a key is missing or is not in the schema.
        """
        problem = _key_problem("a record", self, values)
        if problem is not None:
            raise SchemaError(problem)
        return {k: values[k] for k in self.fields}

    def __repr__(self) -> str:
        return f"Record{self.keys}"


@dataclass(frozen=True)
class ListOf:
    """A JSON list whose items all have one shape."""

    item: Shape


@dataclass(frozen=True)
class MapOf:
    """A JSON object with free keys (axis names, placements) whose values all have one shape."""

    value: Shape


@dataclass(frozen=True)
class Maybe:
    """A shape, or null where there is none (a run not run, no roofline)."""

    shape: Shape


@dataclass(frozen=True)
class Tagged:
    """A JSON object whose `tag` key names which record it is (`{"kind": "table", ...}`)."""

    tag: str
    variants: Mapping[str, Record]


# A nested value's shape; None is a plain value (number, string, bool, null, or a free list or map).
Shape = Record | ListOf | MapOf | Maybe | Tagged | None


def _inside(shape: ListOf | MapOf | Maybe) -> Shape:
    if isinstance(shape, ListOf):
        return shape.item
    return shape.value if isinstance(shape, MapOf) else shape.shape


def _record_in(shape: Shape) -> Record | None:
    """The record a path steps into: through lists, maps and nulls."""
    while isinstance(shape, ListOf | MapOf | Maybe):
        shape = _inside(shape)
    return shape if isinstance(shape, Record) else None


def _key_problem(where: str, record: Record, value: Mapping[str, Any]) -> str | None:
    missing = [k for k in record.fields if k not in value]
    extra = [k for k in value if k not in record.fields]
    parts = [f"missing {', '.join(map(repr, missing))}"] if missing else []
    parts += [f"unexpected {', '.join(map(repr, extra))}"] if extra else []
    return f"{where}: {'; '.join(parts)}" if parts else None


_KINDS: dict[type, str] = {dict: "an object", list: "a list"}


def _kind_of(value: Any) -> str:
    return "null" if value is None else _KINDS.get(type(value), "a value")


def problems(value: Any, shape: Shape, where: str = "") -> list[str]:
    """Every place `value` differs from `shape`: a key missing or unexpected, or no object or list.

    Args:
        value: parsed JSON.
        shape: what it should be.
        where: the path of `value`, for the messages (`sizes[0].placements[1]`).

    Returns:
        One line per problem, each starting with its path; empty when the value fits.
    """
    here = where or "the document"
    if shape is None:
        return []
    if isinstance(shape, Maybe):
        return [] if value is None else problems(value, shape.shape, where)
    if isinstance(shape, ListOf):
        if not isinstance(value, list):
            return [f"{here}: {_kind_of(value)} where a list should be"]
        return [p for i, item in enumerate(value) for p in problems(item, shape.item, f"{where}[{i}]")]
    if not isinstance(value, dict):
        return [f"{here}: {_kind_of(value)} where an object should be"]
    if isinstance(shape, MapOf):
        return [p for k, v in value.items() for p in problems(v, shape.value, f"{where}.{k}" if where else k)]
    if isinstance(shape, Tagged):
        tag = value.get(shape.tag)
        record = shape.variants.get(tag) if isinstance(tag, str) else None
        if record is None:
            return [f"{here}: '{shape.tag}' is {tag!r}, not one of {', '.join(shape.variants)}"]
        shape = record
    found = _key_problem(here, shape, value)
    nested = [
        p
        for k, sub in shape.fields.items()
        if sub is not None and k in value
        for p in problems(value[k], sub, f"{where}.{k}" if where else k)
    ]
    return ([found] if found else []) + nested


# --- records --------------------------------------------------------------------------------------

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
DIMS = Record("I", "J", "K")

SHARD_ARRAY = Record("shape", "dtype", "init", "nbytes", "spec", "jax_type", "values")
SHARD = Record("device_id", "coords", "process_index", "index", "local_shape", "nbytes", "values")
VERIFIED = Record("ok", "wrong_devices")
# A small result's values (null where it is over 256 elements or --no-show-values): the global array
# and each device's block, with the block's global index ranges.
VALUE_BLOCK = Record("device_id", "index", "values")
RESULT_VALUES = Record("global_values", ("blocks", ListOf(VALUE_BLOCK)))
SHARD_BODY = Record(
    ("array", SHARD_ARRAY),
    ("tiles", ListOf(TILE)),
    "replication",
    ("shards", ListOf(SHARD)),
    ("verified", VERIFIED),
)

ROOFLINE = Record("basis", "bandwidth_gbps", "source", "min_bytes_rule", "measured_at", "cached")
ALLOCATOR = Record("mode", "applied", "note")
COLLECTIVE_CONFIG = Record(
    "collective",
    "params",
    "dtype",
    "init",
    "placement",
    "out_buffer",
    "warmup",
    "iters",
    "group_size",
    "groups",
    "busbw_factor",
    "expected_hlo_op",
    ("roofline", Maybe(ROOFLINE)),
    ("allocator", Maybe(ALLOCATOR)),
)
COLLECTIVE_PLACEMENT = Record(
    "placement",
    "not_run",
    ("timing", Maybe(TIMING)),
    "algbw_gbps",
    "busbw_gbps",
    "wrong",
    "wrong_devices",
    "max_abs_err",
    "out_buffer",
    "aliased",
    ("hlo_collectives", ListOf(HLO_OP)),
    "roofline_fraction",
)
MIN_BYTES = Record("read", "written")
COLLECTIVE_DEVICE_VALUES = Record("device_id", "coords", "group", "position", "input", "output")
COLLECTIVE_VALUES = Record("global_input", "global_output", ("devices", ListOf(COLLECTIVE_DEVICE_VALUES)))
COLLECTIVE_SIZE = Record(
    "bytes_per_device",
    "count",
    "global_shape",
    "local_shape",
    "out_global_shape",
    "out_local_shape",
    "in_spec",
    "out_spec",
    "algbw_bytes",
    "sent_bytes_per_device",
    "tolerance",
    "wrong",
    "missing_hlo_op",
    ("min_bytes", Maybe(MIN_BYTES)),
    "roofline_time_s",
    ("placements", ListOf(COLLECTIVE_PLACEMENT)),
    ("values", Maybe(COLLECTIVE_VALUES)),
)
FIT = Record("model", "alpha_us", "beta_gbps", "r2", "max_rel_residual", "points")
COLLECTIVE_SUMMARY = Record(
    "avg_busbw_gbps", "avg_over", "min_busbw_gbps", "below_min_busbw", "wrong", ("fit", MapOf(Maybe(FIT)))
)
COLLECTIVES_SUMMARY = Record("wrong")  # several collectives in one run
COLLECTIVE_BODY = Record(
    ("config", COLLECTIVE_CONFIG),
    ("sizes", ListOf(COLLECTIVE_SIZE)),
    ("summary", COLLECTIVE_SUMMARY),
)

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
MATMUL_CONFIG = Record(
    "cases",
    "impls",
    ("dims", DIMS),
    "scales",
    "dtype",
    "init",
    "warmup",
    "iters",
    "x_axis",
    "y_axis",
    "compile_target",
    ("hardware", HARDWARE),
)
MATMUL_ARRAY = Record("name", "shape", "spec", "local_shape")
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
XLA_COST = Record("flops_per_device", "bytes_accessed_per_device")
MATMUL_IMPL = Record(
    "impl",
    "status",
    "message",
    "expected_refusal",
    "out_spec",
    ("hlo_collectives", ListOf(HLO_OP)),
    ("xla_cost", XLA_COST),
    ("timing", Maybe(TIMING)),
    "achieved_flop_per_s",
    "achieved_flop_per_s_per_device",
    "time_over_model_bound",
    "max_rel_err",
    "wrong",
    "wrong_devices",
    ("fit", Maybe(FIT_VERDICT)),
    ("values", Maybe(RESULT_VALUES)),
)
MATMUL_RUN = Record(
    "case",
    "notation",
    "scale",
    ("dims", DIMS),
    "skipped",
    ("operands", ListOf(MATMUL_ARRAY)),
    ("result", MATMUL_ARRAY),
    "model_flops",
    "tolerance",
    "tolerance_text",
    ("model", Maybe(COST_MODEL)),
    ("impls", ListOf(MATMUL_IMPL)),
    "wrong",
)
REFUSED = Record("case", "impl", "expected", "message")
SKIPPED = Record("case", "why")
FLOP_FIT = Record("model", "alpha_us", "rate_tflops", "r2", "max_rel_residual", "points")
MATMUL_SUMMARY = Record(
    "wrong", ("refused", ListOf(REFUSED)), ("skipped", ListOf(SKIPPED)), ("fit", MapOf(Maybe(FLOP_FIT)))
)
MATMUL_BODY = Record(("config", MATMUL_CONFIG), ("runs", ListOf(MATMUL_RUN)), ("summary", MATMUL_SUMMARY))

SHARDING_SECTION = Record("kind", "title", "shape", "spec", ("tiles", ListOf(TILE)))
TABLE_SECTION = Record("kind", "title", "columns", "rows")
TEXT_SECTION = Record("kind", "title", "lines")
SECTION = Tagged("kind", {"sharding": SHARDING_SECTION, "table": TABLE_SECTION, "text": TEXT_SECTION})
RECIPE = Record("name", "summary", "default")
RECIPE_BODY = Record(("recipe", RECIPE), ("sections", ListOf(SECTION)), ("checks", ListOf(CHECK)), "ok")
# `shardcli recipe list --format json`: a bare list, with no envelope (no run, no devices).
RECIPE_ENTRY = Record("name", "summary", "default", "needs")
RECIPE_LIST = Record(("recipes", ListOf(RECIPE_ENTRY)))

MODEL = Record("kind", "formula", "depth", "batch")
MODEL_PARAM = Record("name", "shape", "annotation", "resolved", "sharding", "ok", ("tiles", ListOf(TILE)))
MODEL_STEP = Record("step", "loss", "seconds")
MODEL_BODY = Record(
    ("model", MODEL),
    "rules",
    "activation_sharding",
    ("params", ListOf(MODEL_PARAM)),
    "state_arrays",
    "compile_s",
    "compile_cached",
    ("steps", ListOf(MODEL_STEP)),
    "final_loss",
    "output_sharding",
    ("collectives", MapOf(ListOf(HLO_OP))),
    "checkpoint",
    "saved_mesh",
    ("checks", ListOf(CHECK)),
    "ok",
)

PIPELINE_CONFIG = Record(
    "stages",
    "layers",
    "layers_per_stage",
    "width",
    "batch",
    "microbatches",
    "microbatch_size",
    "schedule",
    "forward_only",
    "impls",
    "spmd_schedule",
    "steps_per_stage",
)
BUBBLE = Record("measured", "textbook")
PIPELINE_STAGE = Record("stage", "device_ids", "sub_mesh", "layers", "compute_s", "transfer_s")
PIPELINE_EVENT = Record("stage", "kind", "microbatch", "start_s", "end_s")
MPMD = Record(
    "makespan_s",
    "compile_s",
    "loss",
    ("bubble", BUBBLE),
    ("stages", ListOf(PIPELINE_STAGE)),
    ("events", ListOf(PIPELINE_EVENT)),
)
SPMD = Record("step_s", "compile_s", "loss")
PIPELINE_BODY = Record(
    ("config", PIPELINE_CONFIG),
    "reference_loss",
    ("mpmd", Maybe(MPMD)),
    ("spmd", Maybe(SPMD)),
    ("checks", ListOf(CHECK)),
    "ok",
)

COMPARE_FILE = Record("file", "shardcli_version", "platform", "device_kind", "dtype")
COMPARE_ROW = Record("keys", "base", "new", "ratio", "status")
COMPARE_BODY = Record(
    "compared_command",
    "what",
    "mesh",  # "2x4 (data=2, model=4)": the mesh both files ran on, as people read it
    ("base", COMPARE_FILE),
    ("new", COMPARE_FILE),
    "metric",
    "unit",
    "better",
    "tolerance",
    ("rows", ListOf(COMPARE_ROW)),
    "compared",
    "regressions",
    "worst_ratio",
)


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
)
MEMORY = Record("argument_bytes", "output_bytes", "temp_bytes", "alias_bytes", "code_bytes", "total_bytes")
PROGRAM_LOOP = Record("name", "trips", "runs", "body_flops", "body_bytes", "op_name", "source")
# One group of library kernel calls (core/hlo_kernels.py): cuBLAS GEMMs, cuDNN attention, convolutions.
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
# The step-time estimate (core/step_time.py): each roofline term with its source.
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
    "t_comm_s",
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

EINSUM_CONFIG = Record(
    "subscripts",
    "canonical",
    "shapes",
    "in_specs",
    "out_spec",
    "impls",
    "dtype",
    "init",
    "scales",
    "warmup",
    "iters",
    "compile_target",
    ("hardware", HARDWARE),
)
EINSUM_ARRAY = Record("name", "subscripts", "shape", "spec")
EINSUM_IMPL = Record(
    "impl",
    "status",
    "message",
    "out_spec",
    ("program", Maybe(PROGRAM)),
    ("model", Maybe(COST_MODEL)),
    ("timing", Maybe(TIMING)),
    "achieved_flop_per_s",
    "max_rel_err",
    "wrong",
    "wrong_devices",
    ("fit", Maybe(FIT_VERDICT)),
    ("values", Maybe(RESULT_VALUES)),
)
EINSUM_SIZE = Record(
    "scale",
    "subscripts",
    ("operands", ListOf(EINSUM_ARRAY)),
    ("result", EINSUM_ARRAY),
    "model_flops",
    "tolerance_text",
    ("impls", ListOf(EINSUM_IMPL)),
    "wrong",
)
EINSUM_REFUSED = Record("scale", "impl", "message")
EINSUM_SUMMARY = Record("wrong", ("refused", ListOf(EINSUM_REFUSED)), ("fit", MapOf(Maybe(FLOP_FIT))))
EINSUM_BODY = Record(("config", EINSUM_CONFIG), ("sizes", ListOf(EINSUM_SIZE)), ("summary", EINSUM_SUMMARY))

INSPECT_ARRAY = Record("name", "dtype", "shape", "spec", "bytes", "bytes_per_device", "replication")
FINDING = Record("kind", "message", "count", "paths", "source")
INSPECT_COLLECTIVE_GROUP = Record(
    "kind", "mesh_axes", "source", "op", "count", "runs", "runs_known", "sent_bytes", "result_bytes"
)
# inspect PATH.hlo.txt: what a compiled module's text says of itself (null for a program compiled here).
INSPECT_MODULE = Record("path", "platform", "partitions", "argument_count", "argument_bytes_per_device")
# inspect --run: how the step's donated arrays were given to each call (fed back from the results of
# the call before, or copied afresh before it, untimed)
DONATION = Record("method", "donated_arrays", "fed_back_arrays", "fed_back_by", "copied_arrays")
INSPECT_BODY = Record(
    "target",
    "compile_target",
    ("module", Maybe(INSPECT_MODULE)),
    ("arguments", ListOf(INSPECT_ARRAY)),
    ("results", ListOf(INSPECT_ARRAY)),
    ("program", Maybe(PROGRAM)),
    ("model", Maybe(COST_MODEL)),
    ("hardware", HARDWARE),
    ("fit", Maybe(FIT_VERDICT)),
    ("step_time", Maybe(STEP_TIME)),
    ("collective_groups", ListOf(INSPECT_COLLECTIVE_GROUP)),
    ("findings", ListOf(FINDING)),
    "lower_s",
    "compile_s",
    ("timing", Maybe(TIMING)),
    ("donation", Maybe(DONATION)),
)

RESHARD_CONFIG = Record(
    "shape", "dtype", "init", "nbytes", "from_spec", "to_spec", "impls", "warmup", "iters", "compile_target"
)
RESHARD_DEVICE = Record("device_id", "before", "after", "receive_bytes")
RESHARD_IMPL = Record(
    "impl",
    "status",
    "message",
    "out_spec",
    ("program", Maybe(PROGRAM)),
    ("timing", Maybe(TIMING)),
    "algbw_gbps",
    "wrong",
    "wrong_devices",
    ("fit", Maybe(FIT_VERDICT)),
    ("values_before", Maybe(RESULT_VALUES)),
    ("values", Maybe(RESULT_VALUES)),
)
RESHARD_SUMMARY = Record("wrong", "needs_communication", "min_receive_bytes_per_device")
RESHARD_BODY = Record(
    ("config", RESHARD_CONFIG),
    ("devices", ListOf(RESHARD_DEVICE)),
    ("impls", ListOf(RESHARD_IMPL)),
    ("summary", RESHARD_SUMMARY),
)


# `shardcli plan`: every candidate layout, modelled, and compiled where it ranked high enough.
PLAN_MODEL = Record("name", "layers", "d_model", "heads", "kv_heads", "head_dim", "mlp_dim", "vocab", "seq")
PLAN_CONFIG = Record(
    ("model", PLAN_MODEL.extended("activation", "tied_embeddings", "parameters", "source")),
    "target",
    "chips",
    "compiler",  # the target's compiler, package -> version: jax, jaxlib, libtpu (or a CUDA plugin)
    "global_batch",
    "per_device_batch",
    "remat",
    "rule_sets",
    "sequence",
    "compile",
    "method",
    "rank",  # how compiled layouts are ordered: throughput or step
)
PLAN_CHIP = Record(
    "peak_flop_per_s",
    "hbm_bytes_per_s",
    "hbm_bytes",
    "link_bytes_per_s",
    "torus",  # GPUs: [hosts, GPUs per host]
    "wraparound",
    "usable_bytes",  # what one program may use: the HBM, or on a GPU JAX's memory pool
    "network_bytes_per_s",  # GPUs: one GPU's share of the network between hosts; null on a TPU
)
PLAN_MODELLED = Record("memory_bytes", "fits", "flops", "t_math_s", "t_comm_s", "comm_bytes", "bound")
PLAN_TRAFFIC = Record("axes", "sent_bytes", "collectives", "top_kind", "top_op")
PLAN_COMPILED = Record(
    "fits",
    "needed_bytes",
    "capacity_bytes",
    "argument_bytes",
    "temp_bytes",
    "flops",
    "bytes_accessed",
    ("traffic", ListOf(PLAN_TRAFFIC)),
    "method",
    "compile_s",
    "fit_text",
    "notes",
)
PLAN_ESTIMATE = Record(
    "step_s",
    "t_math_s",
    "t_hbm_s",
    "t_comm_s",
    "bound",
    "t_bound_s",
    "t_sum_s",
    "efficiency",
    "efficiency_source",
)
PLAN_CANDIDATE = Record(
    "rank",
    "layout",
    "mesh",
    "rule_set",
    "rules",
    "remat",
    "global_batch",
    "per_device_batch",
    "status",
    "why",
    ("model", PLAN_MODELLED),
    ("compiled", Maybe(PLAN_COMPILED)),
    ("estimate", Maybe(PLAN_ESTIMATE)),
    "tokens_per_s_per_chip",
    "mfu",
)
PLAN_WINNER = Record("layout", "mesh_shape", "mesh_axes", "rules", "remat", "global_batch", "inspect_command")
PLAN_SUMMARY = Record(
    "candidates", "compiled", "cached", "modelled", "pruned", "fits", "interrupted", "compile_s"
)
PLAN_PROGRAM_CANDIDATE = Record(
    "rank",
    "layout",
    "mesh",
    "rule_set",
    "rules",
    "argument_bytes",
    "status",
    "why",
    ("compiled", Maybe(PLAN_COMPILED)),
    ("estimate", Maybe(PLAN_ESTIMATE)),
)
PLAN_PROGRAM_BODY = Record(
    (
        "config",
        Record(
            "program",
            "inputs",
            "target",
            "chips",
            "compiler",  # as in plan's config
            "rules",
            "compile",
            "cache",
            "named_leaves",
            "leaves",
        ),
    ),
    ("candidates", ListOf(PLAN_PROGRAM_CANDIDATE)),
    ("winner", Maybe(Record("layout", "mesh_shape", "mesh_axes", "rules", "inspect_command"))),
    ("summary", Record("candidates", "compiled", "cached", "fits", "interrupted", "compile_s")),
)
PLAN_BODY = Record(
    ("config", PLAN_CONFIG),
    ("chip", PLAN_CHIP),
    "calibration",
    ("candidates", ListOf(PLAN_CANDIDATE)),
    ("unbuildable", ListOf(Record("layout", "why"))),
    ("winner", Maybe(PLAN_WINNER)),
    ("summary", PLAN_SUMMARY),
)


# `shardcli run FILE.py:FN`: the inputs, probes and results device by device, and the result's check.
RUN_CONFIG = Record("function", "args", "inputs", "init", "show_values", "tolerance")
RUN_BLOCK = Record("device_ids", "coords", "index", "values")
RUN_ARRAY = Record("name", "dtype", "shape", "spec", "filled_with", "values", ("blocks", ListOf(RUN_BLOCK)))
RUN_PROBE = Record("name", "manual_axes", ("blocks", ListOf(RUN_BLOCK)))
RUN_CHECK = Record("name", "compared", "wrong", "max_abs_err", "bound", "reference", "note")
RUN_BODY = Record(
    ("config", RUN_CONFIG),
    ("inputs", ListOf(RUN_ARRAY)),
    ("probes", ListOf(RUN_PROBE)),
    ("results", ListOf(RUN_ARRAY)),
    ("checks", ListOf(RUN_CHECK)),
    "ok",
)

# --- documents ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DocumentKind:
    """One kind of JSON document: the commands that write it and the keys of its body.

    Attributes:
        name: the kind's name in DOCUMENTS.
        commands: the `command` values its documents carry (`model train`, `model restore`).
        body: the keys after the envelope (and after runtime and mesh, for a run on devices).
        on_devices: whether it carries the run's `runtime` and `mesh` (compare's does not).
    """

    name: str
    commands: tuple[str, ...]
    body: Record
    on_devices: bool = True

    @property
    def record(self) -> Record:
        """Every key of the document, the envelope's first."""
        return (RUN if self.on_devices else ENVELOPE).extended(*self.body.fields.items())

    def key(self, *path: str) -> str:
        """The last key of `path` from the document's top (`key("sizes", "placements", "placement")`).

        Raises:
            SchemaError: a key on the path is not in this kind's schema.
        """
        return self.record.key(*path)


COLLECTIVE = DocumentKind("collective", ("collective",), COLLECTIVE_BODY)
DOCUMENTS: dict[str, DocumentKind] = {
    kind.name: kind
    for kind in (
        DocumentKind("mesh", ("mesh",), Record()),
        DocumentKind("shard", ("shard",), SHARD_BODY),
        COLLECTIVE,
        # several collectives in one run: each one's document, in order
        DocumentKind(
            "collectives",
            ("collective",),
            Record(("collectives", ListOf(COLLECTIVE.record)), ("summary", COLLECTIVES_SUMMARY)),
        ),
        DocumentKind("matmul", ("matmul",), MATMUL_BODY),
        DocumentKind("einsum", ("einsum",), EINSUM_BODY),
        DocumentKind("reshard", ("reshard",), RESHARD_BODY),
        DocumentKind("inspect", ("inspect",), INSPECT_BODY),
        DocumentKind("run", ("run",), RUN_BODY),
        DocumentKind("recipe", ("recipe",), RECIPE_BODY),
        DocumentKind("model", ("model train", "model restore"), MODEL_BODY),
        DocumentKind("pipeline", ("pipeline",), PIPELINE_BODY),
        DocumentKind("compare", ("compare",), COMPARE_BODY, on_devices=False),
        DocumentKind("plan", ("plan",), PLAN_BODY, on_devices=False),  # compile-only, one mesh per layout
        DocumentKind("plan-program", ("plan",), PLAN_PROGRAM_BODY, on_devices=False),  # the user's program
    )
}


def kinds_of(command: str) -> list[DocumentKind]:
    """The document kinds whose documents carry this `command`."""
    return [kind for kind in DOCUMENTS.values() if command in kind.commands]


def _kind_for(command: Any, keys: Iterable[str]) -> DocumentKind | None:
    """The kind of a document with this command and these top-level keys (the first, if none fits)."""
    kinds = kinds_of(command) if isinstance(command, str) else []
    keys = set(keys)
    return next((k for k in kinds if set(k.record.fields) == keys), kinds[0] if kinds else None)


def document(command: str, **parts: Any) -> dict[str, Any]:
    """A whole document: the envelope (schema version, command, shardcli version), then `parts`.

    Args:
        command: what the document's `command` says (`collective`, `model train`).
        parts: every other top-level key of the document's kind (`runtime`, `mesh`, `config`, ...).

    Raises:
        SchemaError: no kind has this command, or the parts are not its keys.
    """
    from shardcli import __version__

    values = {"schema": SCHEMA_VERSION, "command": command, "shardcli_version": __version__, **parts}
    kind = _kind_for(command, values)
    if kind is None:
        raise SchemaError(f"no document kind is written by command {command!r}; add one to DOCUMENTS")
    return kind.record(**values)


def document_problems(doc: Any, kind: str | None = None) -> list[str]:
    """Where a document differs from its kind's schema (empty when it fits exactly).

    Args:
        doc: a parsed document.
        kind: a name in DOCUMENTS; by default the kind its `command` and top-level keys name.
    """
    if not isinstance(doc, dict):
        return [f"the document: {_kind_of(doc)} where an object should be"]
    found = DOCUMENTS[kind] if kind is not None else _kind_for(doc.get("command"), doc)
    if found is None:
        return [f"command: no document kind is written by {doc.get('command')!r}"]
    if doc.get("schema") != SCHEMA_VERSION:
        return [f"schema: {doc.get('schema')!r}, not {SCHEMA_VERSION}"]
    return problems(doc, found.record)


def check_document(doc: Any, kind: str | None = None) -> None:
    """Raise unless the document has exactly the keys of its kind's schema.

    Raises:
        SchemaError: with every problem `document_problems` finds, one per line.
    """
    found = document_problems(doc, kind)
    if found:
        raise SchemaError("\n".join(found))
