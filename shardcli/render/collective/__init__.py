"""`shardcli collective` for people and scripts.

- `screen`: the report (header, pictures, verdict); `tables`: its tables; `charts`: sweep charts;
- `documents`: its JSON document and CSV rows.

Imports from: playground, analysis, runtime, results, specs, errors, tile_math.
"""
