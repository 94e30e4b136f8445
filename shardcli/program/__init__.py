"""The user's own program: loading it, its inputs, compiling it as `jax.jit` would, inspecting and running it.

- `user_code`: loading `FILE.py:NAME` and `package.module:NAME`, and reporting its errors;
- `inputs`: its arguments as `jax.jit(...).lower` takes them, on the run's mesh;
- `logical_axes`: arguments named by logical axes, laid out by rules;
- `jit`: the compile `jax.jit(fn).lower(*args).compile()` would make, and nothing else;
- `inspect`: `shardcli inspect` and `shardcli.inspect`; `module`: a module compiled elsewhere;
- `argument_facts`: each argument leaf described (shape, sharding, tiles, bytes) and checked;
- `fix_check`, `fix_commands`: a finding's fix compiled again and checked, and the command that applies it;
- `step_run`: its step run as its training loop runs it (`inspect --run`);
- `run`, `run_inputs`, `run_request`, `probe`: `shardcli run FILE.py:FN` and `shardcli.probe`.

Imports from: analysis, runtime, hardware, specs, errors, tile_math.
"""
