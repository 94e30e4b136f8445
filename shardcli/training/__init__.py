"""Training across devices and processes: `shardcli model` and `shardcli pipeline`.

- `model/`: a sharded Flax NNX model, initialised sharded, trained, checkpointed and restored;
- `pipeline/`: MPMD pipeline parallelism across sub-meshes, in one process or over several.

Imports from: analysis, runtime, specs, errors, tile_math.
"""
