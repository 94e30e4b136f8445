"""Reading compiled HLO text: what JAX does not return as objects, read in one place.

- `module`: the module's computations and instructions, and who calls whom;
- `trips`: loops and their trip counts; `arrays`: element types, shapes and bytes;
- `sources`: each instruction's source line and the user's call stack; `header`: platform,
  partitions and the entry's arrays; `groups`: a collective's replica groups in every spelling;
- `ops`: what one of XLA's own ops computes and reads (a dot's FLOPs, a fusion's slices of its
  parameters, and the bytes XLA's cost analysis charges beyond those slices).

Imports from: specs, errors.
"""
