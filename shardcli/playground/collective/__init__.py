"""`shardcli collective`: one collective through shard_map, checked against NumPy, timed, swept.

- `run`: the sizes of a request, the memory check, average busbw, the latency-bandwidth fit;
- `request`: the request and its validation; `size`: one size in every placement; `placement`: one
  placement compiled, timed and checked into a poisoned buffer;
- the registry: `cases` (name -> entry, byte counts), `entries` (its types), `bodies` (shard_map
  bodies), `references` (NumPy references, error bounds), `layouts` (specs, local shapes).

Imports from: program, analysis, runtime, hardware, specs, errors, tile_math.
"""
