"""The one render layer: rich renderables for people, JSON documents for scripts.

One module per command (`matmul`, `recipe`, `plan`, ...), `collective/` a package of its own (its
screen, tables, charts and JSON/CSV documents); `console`, `human`, `jsonout` and `program` are
what they share.

Imports from: plan, playground, training, program, analysis, runtime, hardware, results, specs, errors,
tile_math.
"""
