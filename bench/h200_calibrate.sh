#!/usr/bin/env bash
# Issue 53's H200 run, as it was run on a lent H200 (the device tool; jax and its CUDA plugin as
# that machine has them): shardcli calibrate's profile of the GPU, examples/llama.py's train step
# run and estimated with it, the microbenchmarks of bench/gpu_estimate.py and the step's GEMM shapes.
#     OUT=/some/folder bash bench/h200_calibrate.sh
set -x
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv
python3 -c "import jax, jaxlib; print(jax.__version__, jaxlib.__version__, jax.devices())"
timeout 200 python3 -m shardcli calibrate --mesh 1 --out "$OUT/h200.json" 2>&1 | tee "$OUT/calibrate.log"
timeout 170 python3 -m shardcli inspect examples/llama.py:train_step --inputs examples/llama.py:inputs \
    --mesh 1x1 --axes data,model --run --hardware "$OUT/h200.json" --format json \
    > "$OUT/llama.json" 2> "$OUT/llama.err"
tail -5 "$OUT/llama.err"
timeout 70 python3 bench/gpu_gemm_shapes.py 2>&1 | tee "$OUT/gemm_shapes.log"
PYTHONPATH=. timeout 100 python3 bench/gpu_estimate.py --gpu 2>&1 | tee "$OUT/gpu_estimate.log"
