"""The one reading of compiled programs that every command shares.

- `program`: what the compiler made of a program (`ProgramAnalysis`: collectives with their mesh
  axes and source lines, memory, FLOPs and bytes, loops counted per trip), from what JAX returns
  first (`memory_analysis`, `cost_analysis`) and from the HLO text only for what JAX does not give;
- `hlo/`: reading that text (its computations, loops and trip counts, arrays, source lines);
  `collectives`, `kernels` (a GPU's library calls) and `loops` (costs per trip) read it for them;
- `step_time`: the one step-time estimate, `op_roofline` its sum over ops' own rooflines (GPUs,
  profiled CPUs), `axis_links` the bandwidth of each mesh axis;
  `findings`, `summary`: the classic sharding mistakes and the first screen; `report`: what a run
  shows besides its numbers;
- `target`: compiling for a TPU or GPU you do not own, and the fit verdict.

Imports from: runtime, hardware, specs, errors, tile_math.
"""
