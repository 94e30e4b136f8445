"""Training across devices and processes: `shardcli model` and `shardcli pipeline`.

- `model`: a sharded Flax NNX model and its train state from shapes alone, with the checks of its
  shardings; `model_train` initialises it sharded and trains it, `model_reference` is its float64
  NumPy reference and the checks against it, `model_checkpoint` saves and restores it with orbax;
- `checkpoints`: a checkpoint folder's files, one writer at a time, read back through digests;
- `pipeline`: MPMD pipeline parallelism across sub-meshes, in one process or over several.

Imports from: analysis, runtime, specs, errors, tile_math.
"""
