"""The one render layer: rich renderables for people, JSON documents for scripts.

One module per command (`matmul`, `recipe`, `plan`, ...; `inspect_json` for the inspect report's
JSON, `plan_program` for a user program's plan, `plan_pipeline` for `plan --pipeline`'s pipelined
layouts), `collective/` a package of its own (its screen, tables, charts and JSON/CSV documents);
`console` (the two streams, `--save`, number formats), `layout` (tables, grids and prose that fit the
console), `human`, `jsonout` and `program` are what they share.

Imports from: plan, playground, training, program, analysis, runtime, hardware, results, specs, errors,
tile_math.
"""
