"""The playground's operations: one collective, matmul, einsum, reshard, shard or recipe, run
through `shard_map` and the compiler's own sharding, checked against NumPy, timed and costed.

Each operation is `<name>.py` (it runs and returns frozen results); its cases are entries of a
registry (`collective_cases`, `matmul_cases`, `recipe_cases`). A collective entry's parts live by
kind: `collective_types` (the entry, its params), `collective_layouts` (out_specs, local shapes,
flag checks), `collective_references` (NumPy references, error bounds), `collective_bodies`
(shard_map bodies). A recipe's program is a function of `recipe_programs`, given a `Lab`
(`recipe_lab`: the mesh, the helpers the programs share, the `RecipeOutput`). `collective` runs
every size of a request (`collective_request`: the request and its checks; `collective_size`: one
size; `collective_placement`: one size in one placement, with its `Roofline`). `matmul` runs every
case at every size (`matmul_request`: the request and its plan; `matmul_impl`: one implementation of
one case). `run_settings` holds the dtype, timing and hardware settings matmul and einsum share.
`fit` fits the latency-bandwidth model to a size sweep; `roofline` is a collective's memory roofline
on faked CPUs.

Imports from: program, analysis, runtime, hardware, specs, errors, tile_math.
"""
