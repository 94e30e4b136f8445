"""The playground's operations: one collective, matmul, einsum, reshard, shard or recipe, run
through `shard_map` and the compiler's own sharding, checked against NumPy, timed and costed.

- `collective/`, `matmul/`, `recipe/`: an operation with a registry of cases, each a package whose
  `run` runs a request and whose `cases` is the registry (`--help` lists its names);
- `einsum`, `reshard`, `shard`: the user's own einsum, resharding and placement;
- `run_settings`: the dtype, timing and hardware settings matmul and einsum share;
- `fit`: the latency-bandwidth model fitted to a size sweep; `roofline`: a collective's memory
  roofline on faked CPUs;
- `calibrate`: `shardcli calibrate`'s measurements of this machine's devices, with the playground's
  own matmul and collective runs.

Imports from: program, analysis, runtime, hardware, specs, errors, tile_math.
"""
