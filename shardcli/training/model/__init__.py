"""`shardcli model`: a sharded Flax NNX model, initialised sharded, trained, saved and restored.

- `mlp`: the model, its state from shapes, its shardings and batch; `train`: `model train`;
- `reference`: the float64 NumPy reference and the checks; `checkpoint`: saving with orbax and
  `model restore`; `folder`: a checkpoint folder's files, one writer at a time, read through digests.

Imports from: analysis, runtime, specs, errors, tile_math.
"""
