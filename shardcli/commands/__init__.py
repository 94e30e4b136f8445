"""One module per subcommand: flags -> frozen spec -> capability package -> render -> exit code.

`options` declares the flags the device commands share. A command's flags become its frozen request
before JAX starts, in pure Python: `collective_requests` (collective), `playground_requests` (matmul,
einsum, reshard), `program_requests` (inspect) and `training_requests` (pipeline), with the parsers
they share in `request_parsing`.

Imports from: render, plan, playground, training, program, analysis, runtime, hardware, results, specs,
errors, tile_math.
"""
