"""Training across devices and processes: `shardcli model` and `shardcli pipeline`.

- `model`: a sharded Flax NNX model, initialised sharded, trained, checkpointed and restored;
- `checkpoints`: a checkpoint folder's files, one writer at a time, read back through digests;
- `pipeline`: MPMD pipeline parallelism across sub-meshes, in one process or over several.

Imports from: analysis, runtime, specs, errors, tile_math.
"""
