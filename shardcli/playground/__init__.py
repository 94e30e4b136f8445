"""The playground's operations: one collective, matmul, einsum, reshard, shard or recipe, run
through `shard_map` and the compiler's own sharding, checked against NumPy, timed and costed.

Each operation is `<name>.py` (it runs and returns frozen results); its cases are entries of a
registry (`collective_cases`, `matmul_cases`, `recipe_cases`, `recipe_programs`). `fit` fits the
latency-bandwidth model to a size sweep; `roofline` is a collective's memory roofline on faked CPUs.

Imports from: program, analysis, runtime, hardware, specs, errors, tile_math.
"""
