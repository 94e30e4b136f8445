"""One module per subcommand: flags -> frozen spec -> capability package -> render -> exit code.

`options` declares the flags the device commands share; `requests` turns a command's flags into its
frozen request before JAX starts.

Imports from: render, plan, playground, training, program, analysis, runtime, hardware, results, specs,
errors, tile_math.
"""
