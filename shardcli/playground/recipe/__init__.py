"""`shardcli recipe`: the classic sharding lessons, each a small JAX program, verified.

- `run`: one recipe run; `cases`: the registry (name, line, default mesh);
- `programs`: the programs; `lab`: what they share (the result types, seeds, helpers).

Imports from: analysis, runtime, specs, errors, tile_math.
"""
