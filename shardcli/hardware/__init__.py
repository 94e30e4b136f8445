"""The hardware shardcli knows without owning it: one table of chips, each figure with its source.

- `chips`: per-chip figures (peak FLOP/s, HBM, links) of every accelerator, with sources;
- `hosts`: GPU host types (DGX H100/H200, Google Cloud's A3 machines) and the NICs between them;
- `targets`: compile-only targets (`tpu-v5e:16x16`, `gpu-h200:4x8`, `gpu-h100-a3mega:32x8`) as data;
- `compilers`: which compiler plugins (libtpu, the CUDA plugin) are installed, and their versions;
- `calibration`: how far real steps fall short of the roofline, per platform, measured;
- `gpu_memory`: what JAX lets one program use of a GPU's memory;
- `costmodel`: the roofline cost model (FLOPs / peak, bytes / link bandwidth);
- `profile`: a hardware profile `shardcli calibrate` measured, as data (`--hardware FILE`);
- `builtin_profiles`: the built-in GPU efficiencies and launch costs, read from the profile
  calibrate measured on an H200 (`profiles/nvidia-h200.json`);
- `gpu_specs/`: the GPU descriptions XLA's GPU compiler is given for a compile-only target.

Pure Python, no JAX.

Imports from: specs, errors.
"""
