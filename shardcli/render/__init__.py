"""The one render layer: rich renderables for people, JSON documents for scripts.

One module per command (`collective`, `matmul`, `recipe`, ...); `shardcli collective`'s tables,
charts and JSON/CSV are `collective_tables`, `collective_charts` and `collective_json`.

Imports from: plan, playground, training, program, analysis, runtime, hardware, results, specs, errors,
tile_math.
"""
