"""JAX on the run's devices: starting it, its mesh and arrays, timing, checking, processes.

- `devices`: starting JAX on real accelerators or N faked CPU devices;
- `cluster`: joining and leaving a multi-process run (`jax.distributed`);
- `memory`: whether a run's arrays fit its host and devices;
- `session`: a run's devices and mesh, what every device command starts from;
- `mesh`, `arrays`: building a mesh from a MeshSpec; input arrays and their NumPy references;
- `timing`, `verify`, `program_run`: compile apart, time the steady state, check against NumPy;
- `processes`: combining what each process saw into one answer;
- `calibrate`: measured peak FLOP/s and copy bandwidth where no nominal figure exists;
- `cache`: JAX's persistent compilation cache;
- `launcher`: `shardcli launch`, N local processes joined by jax.distributed;
- `allocator`, `stdout`, `interrupts`: the process around the run: malloc, standard output, signals.

Imports from: hardware, specs, errors, tile_math.
"""
