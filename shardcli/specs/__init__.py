"""Flags and files become frozen data here, before JAX is touched: pure Python, unit-testable.

- `values`: shapes, dtypes, inits, byte sizes and sweeps, tolerances (`--shape 1024,512 --dtype bfloat16`);
- `meshes`: meshes and shardings (`--mesh 2x4 --axes data,model`, `--spec data,None`);
- `arguments`: abstract arguments (`--arg f32[8,512]@data,None`);
- `runs`: how a run goes: platform, mode, output format, processes, the files it writes;
- `einsum`, `decoder`, `model`: the einsum subscripts, `plan`'s decoder and `model`'s shape as data;
- `files`: reading a JSON file someone else may have written; which files are shardcli's own.

Imports from: errors.
"""
