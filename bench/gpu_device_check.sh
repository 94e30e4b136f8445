#!/usr/bin/env bash
# The checks that need a real GPU, run on one by hand (CI has none): each training-program style
# inspected on the GPU's own compiler and run (`--run`: timed, donations fed back), the 1.24B Llama
# example's FLOPs, fit verdict and step-time estimate next to its measured step.
#
#   bash bench/gpu_device_check.sh            # outputs under $OUT (default /tmp/gpu-check)
#
# Wheels in .whl/ (haliax, penzai and what they need, for a host without a registry) are installed
# into /tmp/site first where present.
set -u
export PYTHONUNBUFFERED=1 COLUMNS=100
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
export PYTHONPATH=$PWD
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=$PWD:/tmp/site
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import jax; print('jax', jax.__version__, jax.devices())" 2>&1 | tail -1

check() {  # NAME ARGS...: one shardcli run, its output kept and its exit code printed
  local name=$1
  shift
  local start=$SECONDS
  python3 -m shardcli "$@" --no-color >"$OUT/$name.txt" 2>"$OUT/$name.err"
  echo "== $name: exit $? in $((SECONDS - start)) s: shardcli $*"
  grep -v -E "^ |^$|^(arguments|results|and [0-9]+ more|not shown)" "$OUT/$name.txt" | head -24
  tail -3 "$OUT/$name.err"
}

for style in equinox_scanned haliax_named penzai_named equinox_mlp scanned_llama; do
  check "$style" inspect "tests/programs/$style.py:train_step" --inputs "tests/programs/$style.py:inputs" \
    --mesh 1x1 --axes data,model --run --warmup 1 --iters 3
done
check llama1b inspect examples/llama.py:train_step --inputs examples/llama.py:inputs \
  --mesh 1x1 --axes data,model --run --warmup 1 --iters 3
