"""`shardcli matmul`: sharded-matmul cases, three ways each, verified, timed and costed.

- `run`: every case at every size; `request`: the request; `impl`: the three ways of building a case;
- `cases`: the registry of cases (operand specs, shard_map body, FLOP and byte model).

Imports from: program, analysis, runtime, hardware, specs, errors, tile_math.
"""
