"""One module per subcommand: flags -> frozen spec -> capability package -> render -> exit code.

`options` declares the flags the device commands share. A command's flags become its frozen request
before JAX starts, in pure Python: `requests.collective` (collective), `requests.playground` (matmul,
einsum, reshard), `requests.program` (inspect) and `requests.training` (pipeline), with the parsers
they share in `requests.parsing`.

Imports from: render, plan, playground, training, program, analysis, runtime, hardware, results, specs,
errors, tile_math.
"""
