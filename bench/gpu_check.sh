#!/usr/bin/env bash
# Run shardcli's commands on a machine with one GPU, each through `--platform gpu` (and auto), and
# keep what each printed. Usage: bash bench/gpu_check.sh OUTDIR [PYTHON]
# Needs shardcli importable by PYTHON (installed, or PYTHONPATH=the checkout) and a JAX with a GPU
# plugin. Every run's exit code is listed in OUTDIR/summary.txt; the script exits 1 if any run's
# exit code differs from the expected one, or if any run printed a Python traceback.
set -uo pipefail
out=${1:?usage: bash bench/gpu_check.sh OUTDIR [PYTHON]}
py=${2:-python3}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
failures=0
n=0

# expect CODE NAME ARGS...: run `shardcli ARGS`, keep stdout+stderr in OUTDIR/NN-NAME.txt.
expect() {
    local want=$1 name=$2
    shift 2
    n=$((n + 1))
    local file
    file=$(printf '%s/%02d-%s.txt' "$out" "$n" "$name")
    local start code
    start=$SECONDS
    "$py" -m shardcli "$@" >"$file" 2>&1
    code=$?
    local verdict=ok
    if [ "$code" != "$want" ]; then verdict=UNEXPECTED; failures=$((failures + 1))
    elif grep -q Traceback "$file"; then verdict=TRACEBACK; failures=$((failures + 1)); fi
    printf '%-10s rc=%s (want %s) %4ss  shardcli %s\n' "$verdict" "$code" "$want" \
        "$((SECONDS - start))" "$*" | tee -a "$summary"
}

"$py" - <<'PY' | tee "$out/00-env.txt"
import jax, jaxlib, numpy, typer, rich, importlib.metadata as md
print("jax", jax.__version__, "jaxlib", jaxlib.__version__, "numpy", numpy.__version__,
      "typer", md.version("typer"), "rich", md.version("rich"))
print("devices", jax.devices(), "default backend", jax.default_backend())
PY

expect 0 version --version
expect 0 mesh-gpu mesh --mesh 1 --platform gpu --no-color
expect 0 mesh-auto mesh --mesh 1 --no-color
expect 2 mesh-gpu-too-many mesh --mesh 2 --platform gpu --no-color
expect 0 mesh-auto-fallback mesh --mesh 2x4 --axes data,model --no-color
# The GPU hidden: JAX's CUDA plugin fails to start; shardcli says so in its note or its error.
CUDA_VISIBLE_DEVICES= expect 0 mesh-gpu-hidden-auto mesh --mesh 2 --no-color
CUDA_VISIBLE_DEVICES= expect 2 mesh-gpu-hidden-gpu mesh --mesh 1 --platform gpu --no-color
expect 0 shard-gpu shard --mesh 1 --shape 8x8 --spec x --platform gpu --no-color
for op in psum all_gather psum_scatter ppermute all_to_all; do
    expect 0 "coll-$op" collective "$op" --mesh 1 --platform gpu --size 1M --no-color
done
expect 0 coll-sweep collective psum,all_gather --mesh 1 --platform gpu --sizes 1K:256M:x4 --no-color
expect 0 coll-sweep-json collective psum --mesh 1 --platform gpu --sizes 1M,64M --format json
expect 0 coll-bf16 collective psum --mesh 1 --platform gpu --size 64M --dtype bfloat16 --no-color
expect 0 coll-fresh collective psum --mesh 1 --platform gpu --size 64M --out-buffer fresh --no-color
expect 0 matmul-all matmul --case all --impl all --mesh 1 --platform gpu --no-color -q
expect 0 matmul-big matmul --case allreduce --mesh 1 --platform gpu --dtype bfloat16 --dims 8192,8192,8192 --impl all --no-color
expect 0 matmul-sweep matmul --case allreduce --mesh 1 --platform gpu --dtype bfloat16 --dims 1024,1024,1024 --sizes 1:8 --no-color -q
expect 0 matmul-json matmul --case all --mesh 1 --platform gpu --format json
for recipe in elementwise reduce three-ways normalize rng-fold sharded-mac; do
    expect 0 "recipe-$recipe" recipe "$recipe" --mesh 1x1 --platform gpu --no-color
done
expect 0 recipe-axis-index recipe axis-index --mesh 1x1x1 --platform gpu --no-color
expect 0 recipe-pipeline-ring recipe pipeline-ring --mesh 1 --platform gpu --no-color
expect 2 pipeline-one-gpu pipeline --mesh 2x1 --microbatches 4 --schedule gpipe --platform gpu --no-color
expect 0 pipeline-auto-cpu pipeline --mesh 2x1 --microbatches 4 --schedule gpipe --no-color
expect 0 model-train model train --mesh 1x1 --axes data,model --platform gpu --checkpoint "$out/ckpt" --no-color
expect 0 model-restore model restore "$out/ckpt" --mesh 1x1 --axes data,model --platform gpu --no-color -q
rm -rf "$out/ckpt"
expect 0 model-deep model train --mesh 1x1 --axes data,model --depth 4096 --batch 64 --steps 5 --platform gpu --no-color -q
echo "$failures unexpected of $n" | tee -a "$summary"
[ "$failures" = 0 ]
