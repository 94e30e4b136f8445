"""The one reading of compiled programs that every command shares.

What the compiler made of a program: `program` (ProgramAnalysis: collectives with their mesh axes and
source lines, memory, FLOPs and bytes, loops counted per trip), read from what JAX returns first
(`memory_analysis`, `cost_analysis`) and from the HLO text only for what JAX does not give:
`hlo` (the text's computations and instructions, who calls whom), `hlo_trips` (while loops and their
trip counts), `hlo_arrays` (element and array types, their bytes), `hlo_sources` (the source lines of
its stack frames), `hlo_header` (what a module's text says of itself), `collectives`, `kernels` (a
GPU's library calls), `loops`. Then `step_time` (the one step-time estimate), `findings` and
`summary` (the classic sharding mistakes, the first screen), `report` (what a run shows besides its
numbers) and `target` (compiling for a TPU or GPU you do not own, and the fit verdict).

Imports from: runtime, hardware, specs, errors, tile_math.
"""
