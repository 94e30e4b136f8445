"""`shardcli plan`: which layout, on a target you do not own, ranked by the one step-time estimate.

A candidate layout is an inspect of a program on a target: `candidates` enumerates the layouts,
`analytic` ranks them before compiling, `selection` picks the next compile, `compiles` compiles one
(`compiled_figures`: what is kept of it; `compile_cache`: its cache on disk), `estimate` gives its
step time from `analysis.step_time`, `search` runs the whole plan. `decoder` is shardcli's own
decoder train step; `user_program` plans the user's program (`program_rows`: its request, rows and
result; `own_layout`: one that lays itself out).

Imports from: program, analysis, runtime, hardware, specs, errors.
"""
