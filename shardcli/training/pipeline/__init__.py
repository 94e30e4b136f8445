"""MPMD pipeline parallelism: each stage on its own sub-mesh, with a recorded timeline.

- `request`: `shardcli pipeline`'s request and its checks before any device is touched;
- `schedules`: pipeline schedules as plain data (GPipe, 1F1B);
- `stages`: what both pipelines share: the plan, the stages' programs and their checks;
- `threads`: the pipeline in one process, a thread per stage; `processes`: over several processes.

Imports from: analysis, runtime, specs, errors.
"""
