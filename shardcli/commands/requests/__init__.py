"""Each command's flags turned into its frozen request before JAX starts: pure Python.

- `collective`, `playground` (matmul, einsum, reshard), `program` (inspect), `training` (pipeline);
- `parsing`: the parsers they share.

Imports from: playground, program, training, runtime, hardware, specs, errors.
"""
