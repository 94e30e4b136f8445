"""Each command's document records: the keys of every body after the envelope, and their own records.

One block per command, its body last (`SHARD_BODY`, `COLLECTIVE_BODY`, ..., `RUN_BODY`); what several
commands share (timing, a compiled program, the fit verdict) is in shardcli/results/records.py, and the
document kinds that join each body to the envelope are in shardcli/results/documents.py.
"""

from __future__ import annotations

from shardcli.results.records import (
    CHECK,
    COST_MODEL,
    FIT_VERDICT,
    FLOP_FIT,
    HARDWARE,
    HLO_OP,
    PROGRAM,
    RESULT_VALUES,
    STEP_TIME,
    TILE,
    TIMING,
)
from shardcli.results.shapes import ListOf, MapOf, Maybe, Record, Tagged

SHARD_ARRAY = Record("shape", "dtype", "init", "nbytes", "spec", "jax_type", "values")
SHARD = Record("device_id", "coords", "process_index", "index", "local_shape", "nbytes", "values")
VERIFIED = Record("ok", "wrong_devices")
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

DIMS = Record("I", "J", "K")
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
# A finding's fix: the change it proposes, the shardcli command line that applies it, and the
# figures of the program compiled again with it (null where no fix is offered).
FIX_FIGURES = Record("total_bytes", "argument_bytes", "temp_bytes", "collectives", "sent_bytes", "step_s")
FIX = Record("change", "arguments", "jax", "command", ("before", FIX_FIGURES), ("checked", FIX_FIGURES))
FINDING = Record("kind", "message", "count", "paths", "source", ("fix", Maybe(FIX)))
# exposed_s, hidden_s: seconds per step the compiled schedule leaves exposed and hides behind the ops
# beside the group's collectives (analysis/exposed.py); null where the step estimate is unknown
INSPECT_COLLECTIVE_GROUP = Record(
    "kind",
    "mesh_axes",
    "source",
    "op",
    "count",
    "runs",
    "runs_known",
    "sent_bytes",
    "result_bytes",
    "role",
    "exposed_s",
    "hidden_s",
)
# inspect PATH.hlo.txt: what a compiled module's text says of itself (null for a program compiled here).
INSPECT_MODULE = Record("path", "platform", "partitions", "argument_count", "argument_bytes_per_device")
# inspect --run: how the step's donated arrays were given to each call (fed back from the results of
# the call before, or copied afresh before it, untimed)
DONATION = Record("method", "donated_arrays", "fed_back_arrays", "fed_back_by", "copied_arrays")
INSPECT_BODY = Record(
    "target",
    "compile_target",
    # what the compile changed from JAX's defaults, option -> value: a GPU target's
    # {"xla_gpu_enable_triton_gemm": false}, else {}; null for a module compiled elsewhere
    "compile_options",
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
    ("model", PLAN_MODEL.extended("activation", "tied_embeddings", "attention", "parameters", "source")),
    "target",
    "slices",  # --slices: TPU slices of the target's topology, joined over the data-center network (1)
    "chips",  # every chip, of every slice
    "compiler",  # the target's compiler, package -> version: jax, jaxlib, libtpu (or a CUDA plugin)
    "compile_options",  # what its compiles change from JAX's defaults, option -> value (as inspect's)
    "global_batch",
    "per_device_batch",
    "remat",
    "rule_sets",
    "sequence",
    "mesh",  # --mesh: axis -> size of the one mesh tried, or null (every mesh)
    "compile",
    "method",
    "rank",  # how compiled layouts are ordered: throughput or step
    "pipeline",  # --pipeline: {stages: [S...], microbatches (null: 4 x S), schedule}, or null
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
PLAN_MODELLED = Record(
    "memory_bytes", "fits", "flops", "t_math_s", "t_comm_s", "t_host_s", "comm_bytes", "bound"
)
PLAN_TRAFFIC = Record("axes", "sent_bytes", "collectives", "top_kind", "top_op")
PLAN_COMPILED = Record(
    "fits",
    "needed_bytes",
    "capacity_bytes",
    "argument_bytes",
    "temp_bytes",
    "host_bytes",
    "host_transfer_bytes",
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
    "t_host_s",
    "t_comm_s",
    "bound",
    "t_bound_s",
    "t_sum_s",
    "efficiency",
    "efficiency_source",
)
# --pipeline: a pipelined candidate's stages, microbatches, schedule and bubble (`plan.pipeline`)
PLAN_PIPELINE = Record(
    "stages",
    "microbatches",
    "schedule",  # 1f1b, gpipe or circular
    "repeats",  # the circular pipeline's repeats (1 otherwise)
    "bubble_fraction",  # (S - 1)/(R x M + S - 1) of the step
    "bubble_s",  # (S - 1) x the stage's microbatch / R; null until compiled
    "stage_step_s",  # one microbatch's forward and backward on one stage, from its compile
    "transfer_bytes",  # one device's activations at a stage boundary, one microbatch, one way
    "exposed_transfer_s",  # the stage transfers on the step's critical path
    "in_flight",  # microbatches whose activations the first stage holds
)
PLAN_CANDIDATE = Record(
    "rank",
    "layout",
    "mesh",
    "crosses_slices",  # the mesh axes across slices -> how many slices each spans ({} on one slice)
    ("pipeline", Maybe(PLAN_PIPELINE)),  # --pipeline: null for an unpipelined candidate
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
            "compile_options",  # as in plan's config
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
