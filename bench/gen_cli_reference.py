"""Regenerate the console examples of README.md and the docs site (docs/**/*.md) from the app itself.

Each generated part lies between `<!-- NAME:start -->` and `<!-- NAME:end -->` markers, in any of
those files (a part may appear in several; each is run once):
- `quickstart-*`, `example-*`: the shell sessions in EXAMPLES and what they print. Each line runs in
  one bash session in a fresh temporary folder (with `examples/` linked in and `shardcli` on PATH),
  stdout and stderr together, and is shown as `$ LINE` followed by its output; the folder's path
  reads as /home/me/shardcli. Those in VOLATILE print timings: `--check` compares them as a reader
  would (`masked`: every number a token whatever its width, table rules and all whitespace, line
  breaks included, collapsed), and where a timing's width moved a column or a line break it
  renders them again a few columns narrower and wider (TIMING_SLACK) before calling them stale;
  those in CHARTS also draw charts or timelines whose shape follows the timings, and `--check`
  leaves out the lines that draw them; those in STATED run several processes, whose timing and order
  decide the details of a check, and `--check` compares what they state (each check's verdict and
  subject).
- `ci-run`: the text of `.ci/run`, so the docs show exactly what CI runs.

The command reference is not here: docs/hooks/generate.py builds it from the app (with
`command_paths` and `run_shardcli` below) every time the site is built.

`--check` also fails on a console example that no marker covers (a fenced block with a `$ ` line),
so every example in README and docs is produced here. tests/test_docs.py checks each block in CI
(`check_block`, one test a block) and the markers (`marker_problems`).

Everything is rendered 100 columns wide without color, in fresh processes. Run it on a machine
without accelerators, so the examples show faked CPU devices as a new user's laptop would, and with
the JAX the examples are made with (EXAMPLES_JAX, the oldest of the window: Python 3.11). Under
another JAX, `--check` reads the versions a header names as the same, and for the few examples the
compiler changes (COMPILER_DEPENDENT) compares only what each command prints first.

Usage:
    python bench/gen_cli_reference.py           # rewrite the generated parts
    python bench/gen_cli_reference.py --check   # exit 1 if any is out of date or not generated
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CI_RUN = ROOT / ".ci" / "run"
# Runs the app under the name users type, whichever way this script was started.
RUN_APP = "from shardcli.cli import app; app(prog_name='shardcli')"
COLUMNS = 100  # the width every example is generated at
PLAIN_ENV = {"COLUMNS": str(COLUMNS), "NO_COLOR": "1", "TERM": "dumb"}
# --check's second look at a VOLATILE example that differs at COLUMNS: the widths at which its
# timings, a few digits wider or narrower than when it was generated, lay it out as they did then
# (a table keeps or leaves out a column, a header wraps, by the width of what is in it).
TIMING_SLACK = (-4, 4, -8, 8, -12, 12)
# Where a session's temporary folder appears in its output.
SHOWN_CWD = "/home/me/shardcli"
# The lessons' shell snippets: MinText's and intro_to_distributed's 16 numbers, and the cuts that keep
# a command's numbers without its timings.
_PI = "3,1,4,1,5,9,2,6,5,3,5,8,9,7,1,2"
_BEFORE_AFTER = "| sed '/^compiled HLO/,$d'"
_COMPILED_AND_C = "| sed '/^timing and verification/,$d'"
_NO_ARGUMENTS = "| sed '/^arguments/,/^$/d'"  # inspect's screen without its arguments and results
# Each example: the lines of one shell session (a string is one line).
EXAMPLES: dict[str, str | list[str]] = {
    "quickstart-mesh": "shardcli mesh --mesh 2x4 --axes data,model --no-color",
    "quickstart-shard": "shardcli shard --mesh 2x4 --axes data,model --shape 8x8 --spec data,model "
    "--no-color --no-show-values",
    "readme-shard": "shardcli shard --mesh 2x4 --axes data,model --shape 8x8 --spec data,model "
    "--no-color --no-show-values | sed '/^jax.debug/,/^$/d'",
    "quickstart-launch": "shardcli launch -n 2 -- mesh --mesh 2x2 --axes host,local --no-color",
    "quickstart-recipe": "shardcli recipe axis-index --mesh 2x2 --axes data,model --no-color",
    "example-shard-json": "shardcli shard --mesh 2x4 --axes data,model --shape 8x8 --spec model --format json"
    " | jq -c '{spec: .array.spec, replication, tile0: .tiles[0], verified}'",
    "example-bad-input": ["shardcli mesh --mesh 0", "echo $?"],
    "example-collective": "shardcli collective psum --mesh 4 --values 3,1,4,1,5,9,2,6 --dtype int32 "
    "--no-color",
    # the header's provenance under -v, its lines the tutorial names (the roofline's, measured or read
    # from the cache, left out)
    "example-collective-verbose": "shardcli collective psum --mesh 4 --values 3,1,4,1,5,9,2,6 --dtype int32 "
    "--no-color -v | sed -n '/^timing  /,/^verify/p;/^allocator/,/^$/p'",
    "readme-collective": "shardcli collective psum --mesh 4 --values 3,1,4,1,5,9,2,6 --dtype int32 "
    "--no-color -q",
    "example-collective-sweep": "shardcli collective all_gather --mesh 8 --sizes 64K:1M:x4 --no-color -q",
    "example-collective-json": "shardcli collective psum --mesh 8 --sizes 1M --format json --iters 5 | jq -c "
    "'{busbw: .sizes[0].placements[0].busbw_gbps, p50_s: .sizes[0].placements[0].timing.stats_s.p50, "
    "wrong: .summary.wrong, out_buffer: .sizes[0].placements[0].out_buffer, "
    "aliased: .sizes[0].placements[0].aliased, hlo: .sizes[0].placements[0].hlo_collectives}'",
    "example-matmul": "shardcli matmul --case allreduce --mesh 2x4 --axes data,model --impl all --no-color",
    "example-matmul-cases": "shardcli matmul --mesh 2x4 --axes data,model --no-color -q",
    "example-einsum": "shardcli einsum 'bsd,df->bsf' --shape 8x128x512 --shape 512x2048 --in data,None,None "
    "--in None,model --out data,None,model --mesh 2x4 --axes data,model --no-color",
    "example-einsum-lesson": "shardcli einsum 'bsd,df->bsf' --shape 8x128x512 --shape 512x2048 "
    "--in data,None,model --in model,None --mesh 2x4 --axes data,model --no-color --quiet",
    "example-reshard": "shardcli reshard --shape 8x1024 --from data,model --to model,data --mesh 2x4 "
    "--axes data,model --no-color",
    "readme-matmul": "shardcli matmul --case allreduce --mesh 2x4 --axes data,model --impl all --no-color -q",
    # a real model's first screen (the inspect tutorial; the README's without its arguments): a
    # 1.24B-parameter Llama
    "tutorial-inspect-llama": "shardcli inspect examples/llama.py:train_step "
    "--inputs examples/llama.py:inputs --mesh 2x4 --axes data,model --no-color -q",
    "readme-inspect": "shardcli inspect examples/llama.py:train_step --inputs examples/llama.py:inputs "
    f"--mesh 2x4 --axes data,model --no-color -q {_NO_ARGUMENTS} | head -9",
    "readme-tpu": "shardcli inspect examples/transformer.py:block --inputs examples/transformer.py:inputs "
    f"--target tpu-v5e:4x4 --axes data,model --no-color -q {_NO_ARGUMENTS}",
    "readme-step-time": "shardcli inspect examples/layers.py:train_step --inputs examples/layers.py:inputs "
    "--target tpu-v5e:4x4 --axes data,model --format json | jq '{flops: .program.flops_per_device, "
    "xla_flops: .program.xla_flops_per_device, trips: [.program.loops[].trips], step_time: (.step_time | "
    "{estimate_s, dominant, math_s: .math.seconds, hbm_s: .hbm.seconds, "
    "comm_s: ([.comm[] | {(.name): .seconds}] | add)})}'",
    "tutorial-inspect-mlp": "shardcli inspect examples/mlp.py:train_step --mesh 2x2x2 --axes data,model,seq "
    "--arg 'f32[256,1024]@data,None' --arg 'f32[1024,4096]@None,model' --arg 'f32[4096,1024]@model,None' "
    "--no-color",
    "tutorial-inspect-transformer": "shardcli inspect examples/transformer.py:block "
    "--inputs examples/transformer.py:inputs --mesh 2x4 --axes data,model --no-color -q",
    "tutorial-inspect-mistakes": [
        "shardcli inspect examples/mistakes.py:matmul --mesh 8 --axes data --arg 'f32[64,1024]@data,None' "
        "--arg 'f32[1024,1024]@data,None' --no-color -q | sed -n '/^warning/,$p'",
        "shardcli inspect examples/mistakes.py:layout_change --mesh 2x4 --axes data,model "
        "--arg 'f32[64,64]@data,None' --no-color -q --wide | sed -n '/^warning/,$p'",
        "shardcli inspect examples/mistakes.py:matmul --mesh 2x4 --axes data,model --arg "
        "'f32[64,1024]@data,None' "
        "--arg 'f32[1024,1024]' --no-color -q | sed -n '/^warning/,$p'",
    ],
    # a finding with its fix, checked by a compile: the program that does not fit a TPU, and the
    # change after which it fits
    "readme-fix": "shardcli inspect examples/mistakes.py:matmul --inputs examples/mistakes.py:replicated "
    "--target tpu-v5e:4x4 --axes data,model --no-color -q | sed -n '/^warning/,$p'",
    "readme-real-model": "shardcli inspect examples/llama.py:train_step --inputs "
    "examples/llama.py:tiny_inputs --axes data,model --no-color -q | head -8",
    "tutorial-inspect-real-model": "shardcli inspect examples/llama.py:train_step --inputs "
    "examples/llama.py:tiny_inputs --axes data,model --format json | jq -c '.program.memory, "
    '[.arguments[] | select(.name | startswith("params.layers.w_")) | {name, spec}]\'',
    "tutorial-inspect-errors": [
        "shardcli inspect examples/mlp.py:train --arg 'f32[8,8]'",
        "shardcli inspect examples/mlp.py:train_step --arg 'f32[8,8]@nosuch'",
        "echo $?",
    ],
    "tutorial-inspect-compare": [
        "shardcli inspect examples/mlp.py:train_step --mesh 2x4 --axes data,model --arg "
        "'f32[256,1024]@data,None' "
        "--arg 'f32[1024,4096]@None,model' --arg 'f32[4096,1024]@model,None' --format json > sharded.json",
        "shardcli inspect examples/mlp.py:train_step --mesh 2x4 --axes data,model --arg "
        "'f32[256,1024]@data,None' "
        "--arg 'f32[1024,4096]' --arg 'f32[4096,1024]' --format json > replicated.json",
        "shardcli compare sharded.json replicated.json --metric memory --no-color",
        "echo $?",
    ],
    "tutorial-tpu-mesh": "shardcli mesh --target tpu-v5e:4x4 --axes data,model --no-color | tail -18",
    "tutorial-tpu-pod": "shardcli inspect examples/transformer.py:block --inputs "
    "examples/transformer.py:inputs "
    "--target tpu-v5e:16x16 --axes data,model --no-color -q",
    "tutorial-tpu-oom": [
        "shardcli inspect examples/mistakes.py:matmul --inputs examples/mistakes.py:replicated "
        "--target tpu-v5e:4x4 --axes data,model --no-color -q",
        "echo $?",
    ],
    "tutorial-tpu-einsum": "shardcli einsum 'bsd,df->bsf' --shape 64x2048x8192 --shape 8192x32768 "
    "--in data,None,model --in model,None --target tpu-v5e:4x4 --axes data,model --dtype bfloat16 "
    "--no-color -q",
    "tutorial-gpu": "shardcli inspect examples/transformer.py:block --inputs examples/transformer.py:inputs "
    "--target gpu-h100:8 --mesh 2x4 --axes data,model --no-color -q",
    "tutorial-gpu-module": "shardcli inspect examples/gpu_h200/llama1b.hlo.txt.gz --target gpu-h200:1 "
    "--no-color",
    # an MLP step near JAX's default pool on one H100, then the fraction its verdict advises
    "tutorial-gpu-pool": [
        f"{env}shardcli inspect examples/mlp.py:train_step --arg 'f32[49152,16384]' --arg 'f32[16384,65536]' "
        f"--arg 'f32[65536,16384]' --target gpu-h100:1 --no-color -q{cut}"
        for env, cut in (
            ("", " | sed '/^step time/,$d'"),
            ("XLA_PYTHON_CLIENT_MEM_FRACTION=.8 ", " | sed '/^step time/,$d'"),
            ("XLA_PYTHON_CLIENT_PREALLOCATE=no ", ""),
        )
    ]
    + ["echo $?"],
    "readme-run": "shardcli run examples/lessons.py:sum_then_psum --mesh 4 --axes x --arg 'i32[16]@x=arange' "
    "--no-color",
    # ProJAX In [51] as the notebook runs it (the run tutorial and the lessons page)
    "tutorial-run-psum": "shardcli run examples/lessons.py:sum_then_psum --mesh 8 --axes x "
    "--arg 'i32[32]@x=arange' --no-color",
    "tutorial-run-sin": "shardcli run examples/lessons.py:sin_per_shard --mesh 8 --axes x "
    "--arg 'i32[32]@x=arange' --no-color -q",
    "tutorial-run-per-shard": "shardcli run examples/lessons.py:sum_per_shard --mesh 8 --axes x "
    "--arg 'i32[32]@x=arange' --no-color -q",
    "tutorial-run-layer": "shardcli run examples/lessons.py:layer_sharded --mesh 8 --axes x "
    "--inputs examples/lessons.py:layer_inputs --no-color -q",
    "tutorial-run-wrong": [
        "shardcli run examples/lessons.py:plus_axis_index --mesh 4 --axes x --arg 'i32[8]@x=zeros' "
        "--no-color -q",
        "echo $?",
    ],
    "tutorial-run-json": "shardcli run examples/lessons.py:sum_then_psum --mesh 8 --axes x "
    "--arg 'i32[32]@x=arange' --format json | jq -c '{result: .results[0].values, "
    "per_shard: [.probes[0].blocks[].values], ok}'",
    "tutorial-recipe-three-ways": "shardcli recipe three-ways --mesh 8 --axes x --no-color | tail -16",
    "tutorial-pipeline-launch": "shardcli launch -n 2 -- pipeline --mesh 4x2 --axes stage,model --layers 4 "
    "--width 16 --batch 8 --microbatches 4 --no-color 2>/dev/null | tail -24",
    "example-pipeline": "shardcli pipeline --mesh 4x2 --microbatches 8 --schedule 1f1b --impl both "
    "--no-color -q",
    "example-model": [
        "shardcli model train --mesh 2x4 --axes data,model --depth 1024 --batch 8 --steps 5 "
        "--checkpoint ckpt --no-color -q",
        "shardcli model restore ckpt --mesh 4x2 --axes data,model --no-color -q",
    ],
    "example-compare": [
        "shardcli collective psum --mesh 8 --sizes 64K:1M:x4 --format json > before.json",
        "jq '.sizes[1].placements[0].busbw_gbps *= 0.5' before.json > after.json   # as if 256K got slower",
        "shardcli compare before.json after.json --no-color",
        "echo $?",
        "shardcli compare before.json after.json --format json "
        "| jq -c '{regressions, worst_ratio, row1: .rows[1]}'",
    ],
    # a tiny decoder on 4 chips: three compiles of a few seconds (a 7B model's are minutes each)
    "readme-plan": "shardcli plan --preset tiny --target tpu-v5e:2x2 --batch 2 --compile 3",
    # remat policies by MaxText's names, two of them offloading to the host's memory: three compiles
    "tutorial-plan-remat": "shardcli plan --preset tiny --target tpu-v5e:2x2 --mesh fsdp=4 --batch 2 "
    "--remat minimal,minimal_offloaded,custom:decoder_layer_input=offload --compile 3 --no-color",
    # the same on two GPU hosts of 4 (XLA's GPU compiler, no GPU): each compile some seconds
    "tutorial-plan-gpu": "shardcli plan --preset tiny --target gpu-h100:2x4 --batch 2 --remat full "
    "--compile 3",
    # one published layout (JAX-Toolbox's Llama2-7B on 8 H100: fsdp 8, 2 per GPU): one compile, ~10 s
    "tutorial-plan-published": "shardcli plan --preset llama2-7b --target gpu-h100:8 --mesh fsdp=8 --batch 2 "
    "--remat minimal -q",
    # your own program (NNX, logical axis names), then its winner compiled again by inspect --rules
    "tutorial-plan-program": [
        "shardcli plan examples/nnx_mlp.py:train_step --inputs examples/nnx_mlp.py:inputs "
        "--target tpu-v5e:2x2 --compile 3 --no-color",
        "shardcli inspect examples/nnx_mlp.py:train_step --inputs examples/nnx_mlp.py:inputs "
        "--target tpu-v5e:2x2 --mesh 4 --axes tensor --rules mlp=tensor --no-color -q "
        "| sed -n '/^memory/,/^$/p'",
    ],
    "example-compare-errors": [
        "shardcli collective psum --mesh 8 --size 64K --iters 2 --format json > before.json",
        "shardcli collective psum --mesh 4 --size 64K --iters 2 --format json > m4.json",
        "shardcli compare before.json m4.json",
        "shardcli matmul --case allreduce --mesh 4 --iters 2 --format json > mm.json",
        "shardcli compare mm.json mm.json --metric busbw",
        "shardcli compare before.json nope.json",
    ],
    **{
        # docs/tutorials/lessons.md: each tutorial lesson's command, cut to the part with its numbers
        # (no timings: tests/test_lessons.py compares the same numbers exactly).
        "lesson-mintext-mesh": "shardcli mesh --mesh 2x2 --axes x,y --no-color",
        "lesson-mintext-shards": "shardcli shard --mesh 2x2 --axes x,y --shape 8192x8192 --spec x,y "
        "--dtype int8 --no-color -q",
        "lesson-mintext-strategies": [
            "shardcli shard --mesh 2x2 --axes x,y --shape 8x8 --spec x,None --no-color --no-show-values "
            "| sed -n '/^tiles/,/^$/p'",
            "shardcli shard --mesh 2x2 --axes x,y --shape 8x8 --spec None,y --no-color --no-show-values "
            "| sed -n '/^tiles/,/^$/p'",
        ],
        "lesson-mintext-case2-blocks": "shardcli shard --mesh 2x2 --axes x,y --shape 4x4 --spec None,x "
        "--no-color -q",
        "lesson-mintext-all-gather": f"shardcli collective all_gather --mesh 4 --axes i --values 3,9,5,2 "
        f"--dtype int32 --no-color -q {_BEFORE_AFTER}",
        "lesson-mintext-case2": "shardcli matmul --case allgather --mesh 2x2 --axes x,y --dims 4,4,4 "
        f"--init arange --no-color -q {_COMPILED_AND_C}",
        "lesson-mintext-psum": f"shardcli collective psum --mesh 4 --axes i --values {_PI} --dtype int32 "
        f"--no-color -q {_BEFORE_AFTER}",
        "lesson-mintext-case3": "shardcli matmul --case allreduce --mesh 2x2 --axes x,y --dims 4,4,4 "
        f"--init arange --no-color -q {_COMPILED_AND_C}",
        "lesson-mintext-psum-scatter": f"shardcli collective psum_scatter --mesh 4 --axes i --values {_PI} "
        f"--dtype int32 --no-color -q {_BEFORE_AFTER}",
        "lesson-mintext-case4": [
            "shardcli matmul --case illegal --mesh 2x2 --axes x,y --dims 4,4,4 --no-color -q",
            "shardcli matmul --case gather-b --mesh 2x2 --axes x,y --dims 4,4,4 --init arange --no-color -q "
            "| sed -n '/^what the compiler/,/^$/p;/^C: global/,/^$/p'",
        ],
        "lesson-mintext-all-to-all": f"shardcli collective all_to_all --mesh 4 --axes i --values {_PI} "
        f"--dtype int32 --no-color -q {_BEFORE_AFTER}",
        "lesson-projax-arange": "shardcli shard --mesh 2x4 --axes x,y --shape 4x8 --spec x,y --no-color "
        "| sed '/^jax.debug/,/^$/d'",
        "lesson-projax-sum": "shardcli einsum 'ij->j' --shape 4x8 --in x,y --mesh 2x4 --axes x,y "
        "--init arange --no-color -q | sed -n '/^collectives the compiler/,/^$/p;/^C: global/,/^$/p'",
        "lesson-projax-constraint": "shardcli recipe reduce --mesh 2x4 --axes x,y --shape 4x8 --init arange "
        "--no-color | sed -n '/^compiled collectives (forced)/,$p'",
        "lesson-projax-elementwise": "shardcli recipe elementwise --mesh 8 --axes x --shape 32 --init arange "
        "--no-color | sed -n '/^per device/,$p'",
        "lesson-projax-shard-sums": [
            "shardcli einsum 'ij->i' --shape 8x4 --in x,None --mesh 8 --axes x --init arange --no-color -q "
            "| sed -n '/^C: global/,/^$/p'",
            "shardcli einsum 'i->' --shape 32 --in x --mesh 8 --axes x --init arange --no-color -q "
            "| sed -n '/^collectives the compiler/,/^$/p;/^C: global/,/^$/p'",
        ],
        "lesson-intro-scatter": "shardcli collective psum_scatter --mesh 4x2 --axes i,j --axis i --shape 4x4 "
        f"--values {_PI} --spec i,None --scatter-dim 1 --dtype int32 --no-color -q {_BEFORE_AFTER}",
        "lesson-intro-ppermute": "shardcli collective ppermute --mesh 4 --axes i --values 0,1,2,3 "
        f"--dtype int32 --no-color -q {_BEFORE_AFTER}",
        "lesson-intro-axis-index": "shardcli recipe axis-index --mesh 4x2 --axes i,j --no-color "
        "| sed -n '/^axis_index per device/,$p'",
        "lesson-flax-kernel": [
            "shardcli shard --mesh 2x4 --axes data,model --shape 1024x1024 --spec None,model --no-color "
            "| sed -n '/^tiles/,/^$/p'",
            "shardcli einsum 'bd,df->bf' --shape 8x1024 --shape 1024x1024 --in data,model --in model,None "
            "--impl auto --mesh 2x4 --axes data,model --format json "
            "| jq -c '.sizes[0] | {shape: .result.shape, out_spec: .impls[0].out_spec}'",
        ],
    },
}
# Examples whose output holds timings (and figures measured from them): --check compares them with
# every digit masked and runs of spaces joined, so a new run's times do not make a page stale,
# while a changed table, picture or message still does.
VOLATILE = {
    "quickstart-launch",  # its pids and port
    # inspect's header says how long lowering and compiling took
    "tutorial-inspect-mlp",
    "tutorial-inspect-transformer",
    "tutorial-tpu-pod",
    "tutorial-tpu-einsum",
    "tutorial-gpu",
    "readme-inspect",
    "tutorial-inspect-llama",
    "readme-real-model",
    "readme-tpu",
    "example-collective",
    "readme-collective",
    "example-collective-sweep",
    "example-collective-json",
    "example-matmul",
    "example-matmul-cases",
    "readme-matmul",
    "example-einsum",
    "example-einsum-lesson",
    "example-reshard",
    "example-pipeline",
    "tutorial-pipeline-launch",
    "example-model",
    "example-compare",
    "readme-plan",  # compile seconds
    "tutorial-plan-remat",
    "tutorial-plan-program",
    "tutorial-plan-gpu",
    "tutorial-plan-published",
}
# Examples that draw charts or timelines from their timings: --check also leaves out those lines.
CHARTS = {"example-collective-sweep", "example-pipeline", "tutorial-pipeline-launch"}
# Examples whose processes' timing or order decides details inside a check's parentheses (which layer
# and which of its parameters had the largest error, in which process): --check compares what they
# state, each check's verdict and subject (`ok   mpmd: the loss matches`), as `stated` reads them.
STATED = {"tutorial-pipeline-launch"}
# Examples that need the `tpu` extra (libtpu): where it cannot be installed, --check skips them.
NEEDS_TPU = {
    "readme-fix",
    "readme-plan",
    "tutorial-plan-remat",
    "tutorial-plan-program",
    "readme-tpu",
    "readme-step-time",
    "tutorial-tpu-mesh",
    "tutorial-tpu-pod",
    "tutorial-tpu-oom",
    "tutorial-tpu-einsum",
}
# Examples that need the `gpu` extra (JAX's CUDA plugin): skipped the same way where it is missing.
NEEDS_GPU = {
    "tutorial-gpu",
    "tutorial-gpu-pool",
    "tutorial-gpu-module",
    "tutorial-plan-gpu",
    "tutorial-plan-published",
}
# JAX's GPU allocator variables, which change a GPU target's fit verdict (shardcli/hardware/gpu_memory.py)
GPU_POOL_VARIABLES = (
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    # the other JAX GPU client settings shardcli checks before the CUDA plugin starts
    "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB",
    "XLA_PYTHON_CLIENT_ABORT_COLLECTIVES_ON_FAILURE",
    "XLA_PYTHON_CLIENT_USE_TFRT_GPU_CLIENT",
)
CHART_GLYPHS = re.compile(r"[┤│└·]")
# The JAX the examples are made with: the oldest of shardcli's JAX window (pyproject.toml), what
# Python 3.11 gets; each report's header names it (its compiler row). Made under another JAX, the
# examples would change with the compiler, so the script rewrites them only under this one.
EXAMPLES_JAX = "0.10.2"
# Examples whose output another JAX of the window changes beyond the versions it names, as seen with
# jax 0.12.0.1. Under another JAX, --check runs them and compares, for each command, the first line
# it prints (numbers masked, XLA's own log lines left out), and that none prints a traceback.
COMPILER_DEPENDENT = {
    "readme-inspect": "an all-reduce attributed to convert_element_type, one more reshard all-gather, and "
    "XLA's warning of an involuntary full rematerialization on stderr",
    "tutorial-inspect-llama": "as readme-inspect",
    "tutorial-inspect-real-model": "2.2 MiB of temporaries, not 2.8 MiB; XLA's rematerialization warning",
    "readme-step-time": "XLA's FLOP count moves in the fifth digit",
    "example-reshard": "the compiler's all-to-all runs over model alone, not data+model",
    "tutorial-gpu-module": "the CUDA plugin 0.12 prints nothing at start-up without a GPU (the note)",
    "tutorial-gpu-pool": "XLA's cost analysis counts 15.8 GFLOP besides the cuBLAS calls, not 15",
    "tutorial-plan-gpu": "the GPU compiler's figures move (its kernels, the step estimates)",
    "tutorial-plan-published": "as tutorial-plan-gpu",
    "tutorial-plan-remat": "the TPU compiler's schedule exposes other bytes: the two remat policies' order flips",
}
# A line C++ logging writes (absl: `W1127 16:56:53.623271   24996 spmd_partitioner.cc:666] ...`).
NATIVE_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\]")
# The versions a report's compiler row names (`compiler  jax 0.10.2, jaxlib 0.10.2, libtpu 0.0.52`).
_VERSIONS = re.compile(r"\b(jax|jaxlib|libtpu|jax-cuda1\d-plugin) [0-9][0-9.a-z]*")
# `plan`'s one line per compile on stderr where stderr is no terminal (as here): a terminal shows a
# transient progress bar instead, so the examples leave them out.
PROGRESS_LINE = re.compile(r"^shardcli plan: compiling \d+/\d+: .* \([0-9,]+ s so far\)$")
GENERATED_NOTE = "<!-- generated by bench/gen_cli_reference.py; do not edit by hand -->"


def command_paths() -> list[list[str]]:
    """Every registered command, in registration order; a group's subcommands follow it."""
    import typer.main

    from shardcli.cli import app

    paths: list[list[str]] = []
    for name, command in typer.main.get_command(app).commands.items():
        paths.append([name])
        paths.extend([name, sub] for sub in getattr(command, "commands", {}))
    return paths


def run_shardcli(args: list[str]) -> str:
    """What `shardcli ARGS` prints, without trailing spaces or surrounding blank lines.

    Raises:
        subprocess.CalledProcessError: when the command fails.
    """
    env = plain_env()
    out = subprocess.run(
        [sys.executable, "-c", RUN_APP, *args],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=ROOT,
    ).stdout
    return "\n".join(line.rstrip() for line in out.splitlines()).strip("\n")


def plain_env(columns: int = COLUMNS) -> dict[str, str]:
    """This environment, rendering plain text `columns` wide, on faked CPU devices unless told."""
    env = {**os.environ, **PLAIN_ENV, "COLUMNS": str(columns)}
    for name in ("FORCE_COLOR", "JAX_PLATFORMS", "XLA_FLAGS", *GPU_POOL_VARIABLES):
        env.pop(name, None)
    return env


def run_session(lines: list[str], columns: int = COLUMNS) -> str:
    """What each line of one bash session prints, as `$ LINE` and its output (`columns` wide).

    Raises:
        RuntimeError: when bash itself fails (a line failing is part of the example).
    """
    with tempfile.TemporaryDirectory(prefix="shardcli-docs-") as tmp:
        work = Path(tmp)
        (work / "bin").mkdir()
        shim = work / "bin" / "shardcli"
        shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -c "{RUN_APP}" "$@"\n')
        shim.chmod(0o755)
        (work / "run").mkdir()
        if (ROOT / "examples").is_dir():
            (work / "run" / "examples").symlink_to(ROOT / "examples")
        script = ["exec 2>&1", "__rc=0"]
        for i, line in enumerate(lines):
            script += [f"echo '@@@ {i}'", f"(exit $__rc); {line}", "__rc=$?"]
        env = {**plain_env(columns), "PATH": f"{work / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        done = subprocess.run(
            ["bash", "-c", "\n".join(script)], capture_output=True, text=True, env=env, cwd=work / "run"
        )
        if done.returncode != 0:
            raise RuntimeError(f"bash failed ({done.returncode}): {done.stdout[-2000:]}")
        out = done.stdout.replace(str((work / "run").resolve()), SHOWN_CWD).replace(
            str(work / "run"), SHOWN_CWD
        )
        # launch's log folder is a new temporary one every run
        out = re.sub(r"(/shardcli-launch-)[A-Za-z0-9_]+", r"\1XXXXXXXX", out)
    chunks = re.split(r"^@@@ (\d+)\n", out, flags=re.MULTILINE)[1:]
    shown = []
    for i, line in enumerate(lines):
        text = chunks[2 * i + 1] if 2 * i + 1 < len(chunks) else ""
        text = "\n".join(row.rstrip() for row in text.splitlines() if not PROGRESS_LINE.match(row)).strip(
            "\n"
        )
        shown.append(f"$ {line}" + (f"\n{text}" if text else ""))
    return "\n".join(shown)


def example(lines: str | list[str]) -> Callable[..., str]:
    """A console block showing a session's lines and their output."""

    def block(columns: int = COLUMNS) -> str:
        return f"```console\n{run_session([lines] if isinstance(lines, str) else lines, columns)}\n```"

    return block


def ci_run() -> str:
    """The CI script, verbatim."""
    return f"```bash\n{CI_RUN.read_text(encoding='utf-8').rstrip()}\n```"


BLOCKS: dict[str, Callable[..., str]] = {
    **{name: example(lines) for name, lines in EXAMPLES.items()},
    "ci-run": ci_run,
}


# Box-drawing characters: a table's rules and borders, whose lengths follow its columns' widths.
_RULES = re.compile(r"[\u2500-\u257f]+")


# Lines that a run prints or not by its timings: matmul's and einsum's note where p50 beat the model's
# bound (whether it did depends on the machine's load), as masked() reads them: its one line, or
# under -v its reasons.
_TIMING_NOTES = re.compile(
    r"p#/bound under #x (?:\(.*?under other load\)|for #runs?: the bound is a model, not a floor "
    r"\(-v says why\)) ?"
)


def masked(text: str, charts: bool = False) -> str:
    """What a reader would call the same output, whatever the timings: every number (with its unit's
    prefix) as `#`, no compile-cache marks, every rule of a table as one `-`, and all whitespace
    (table padding, line ends, where a line wraps) as one space. With `charts`, the lines that draw a
    chart or timeline are left out."""
    lines = text.replace(" (cache)", "").replace("(cache)", "").splitlines()
    if charts:
        lines = [line for line in lines if not CHART_GLYPHS.search(line)]
    text = "\n".join(line for line in lines if line.strip())
    # A number with its unit's prefix (`4 MiB` and `512 KiB`, `2.4 ms` and `381 us`, `1.4 GB/s`) is
    # one `#`: a unit that changes with the figure is not a change in what the output says.
    text = re.sub(r"[0-9][0-9.,]*(?:e[-+]?[0-9]+)?(?: ?(?:[kKMGTP]i?|[m\u00b5un])(?=[A-Za-z/]))?", "#", text)
    text = _RULES.sub("-", text)
    text = re.sub(r"# ", "#", re.sub(r"\s+", " ", text)).strip()
    return _TIMING_NOTES.sub("", text).strip()


def same(name: str, old: str, new: str, jax_version: str = EXAMPLES_JAX) -> bool:
    """Whether a block's new text says what its old one says (for VOLATILE ones: but for times),
    whatever versions of JAX and its compilers it names; under a JAX other than EXAMPLES_JAX, for a
    COMPILER_DEPENDENT block, what each of its commands prints first."""
    old, new = _VERSIONS.sub(r"\1 #", old), _VERSIONS.sub(r"\1 #", new)
    if name in COMPILER_DEPENDENT and jax_version != EXAMPLES_JAX:
        return "Traceback" not in new and _first_lines(old) == _first_lines(new)
    if name in STATED:
        return stated(old) == stated(new)
    if name in VOLATILE or name in CHARTS:
        return masked(old, name in CHARTS) == masked(new, name in CHARTS)
    return old == new


# Where a check's line starts, in masked text: its verdict, or the run's verdict.
_CHECK = re.compile(r"(?=\b(?:ok|FAIL|verified:) )")


def stated(text: str) -> list[str]:
    """What a block states, whatever its processes' timing and order: its masked text without charts,
    and of each check its verdict and subject, the details in parentheses left out."""
    head, *checks = _CHECK.split(masked(text, charts=True))
    return [head.strip(), *(check.split("(")[0].strip() for check in checks)]


def _first_lines(block: str) -> list[str]:
    """Each `$ COMMAND` of a console block and the first line it printed (masked), native log lines
    left out."""
    firsts: list[str] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            firsts.append(line)
        elif firsts and firsts[-1].startswith("$ ") and line.strip() and not NATIVE_LOG.match(line):
            firsts.append(masked(line))
    return firsts


def same_at_some_width(name: str, old: str, jax_version: str = EXAMPLES_JAX) -> bool:
    """For a VOLATILE block that differs at COLUMNS: whether it reads the same at a width a few
    columns either side, where this run's timings take the room the generated ones took."""
    if (name not in VOLATILE and name not in CHARTS) or (
        name in COMPILER_DEPENDENT and jax_version != EXAMPLES_JAX
    ):
        return False
    return any(same(name, old, BLOCKS[name](COLUMNS + delta)) for delta in TIMING_SLACK)


MARKER = re.compile(r"<!-- ([a-z0-9-]+):start -->")


def doc_files() -> list[Path]:
    """README.md and every page of the docs site."""
    pages = sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.relative_to(DOCS).parts)
    return [README, *pages] if README.exists() else pages


def current(text: str, name: str) -> str:
    """What lies between the `name` markers now."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    return text.partition(start)[2].partition(end)[0].strip("\n")


def fill(text: str, name: str, body: str) -> str:
    """Replace what lies between the `name` markers with `body`.

    Raises:
        ValueError: when the markers are missing.
    """
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    head, sep, rest = text.partition(start)
    _, sep2, tail = rest.partition(end)
    if not sep or not sep2:
        raise ValueError(f"markers {start} ... {end} not found")
    return f"{head}{start}\n{body}\n{end}{tail}"


def unchecked_examples(text: str) -> list[str]:
    """The first line of each fenced block with a `$ ` line that no marker covers."""
    found, inside, covered, block = [], False, False, []
    for line in text.splitlines():
        if MARKER.search(line):
            covered = True
        elif re.search(r"<!-- [a-z0-9-]+:end -->", line):
            covered = False
        elif line.startswith("```"):
            if inside and not covered and any(b.startswith("$ ") for b in block):
                found.append(next(b for b in block if b.startswith("$ ")))
            inside, block = not inside, []
        elif inside:
            block.append(line)
    return found


def missing_for(name: str) -> str | None:
    """What this machine lacks to run block `name` (libtpu, a CUDA plugin), as the pip command that
    installs it; None where it can run here."""
    if name in NEEDS_TPU and importlib.util.find_spec("libtpu") is None:
        return "no libtpu: pip install -e '.[tpu]'"
    if name in NEEDS_GPU and not any(
        importlib.util.find_spec(m) for m in ("jax_cuda12_plugin", "jax_cuda13_plugin")
    ):
        return "no CUDA plugin: pip install -e '.[gpu]' or '.[gpu-cuda13]'"
    return None


def marker_problems(texts: dict[Path, str]) -> list[str]:
    """A marker naming no block, and a console example no marker covers, in each file."""
    problems = [
        f"{p.relative_to(ROOT)}: no block named {n!r}"
        for p, t in texts.items()
        for n in MARKER.findall(t)
        if n not in BLOCKS
    ]
    return problems + [
        f"{p.relative_to(ROOT)}: a console example no test checks: {line[:80]}"
        for p, t in texts.items()
        for line in unchecked_examples(t)
    ]


def block_names(texts: dict[Path, str]) -> list[str]:
    """Every generated block the files name, sorted."""
    return sorted({n for text in texts.values() for n in MARKER.findall(text)} & set(BLOCKS))


def refreshed(name: str, texts: dict[Path, str], body: str, check: bool, jax_version: str) -> list[Path]:
    """The files whose block `name` is out of date against `body`, each text in `texts` rewritten in
    place with it (unless `check`, where a VOLATILE block that reads the same a few columns wider or
    narrower is not out of date)."""
    stale: list[Path] = []
    for path, text in texts.items():
        if f"<!-- {name}:start -->" not in text:
            continue
        if same(name, current(text, name), body, jax_version):
            continue  # for a VOLATILE block: only its times differ, so keep it as it is
        if check and same_at_some_width(name, current(text, name), jax_version):
            continue  # its timings' width moved a column or a line break, nothing else
        texts[path] = fill(text, name, body)
        stale.append(path)
    return stale


def check_block(name: str) -> list[str]:
    """`--check --only NAME` in-process: the files where block `name` is out of date (tests/test_docs.py
    runs one test a block)."""
    from importlib.metadata import version

    texts = {path: path.read_text(encoding="utf-8") for path in doc_files()}
    stale = refreshed(name, texts, BLOCKS[name](), True, version("jax"))
    return [f"{p.relative_to(ROOT)}:{name}" for p in stale]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a generated part is out of date")
    parser.add_argument("--only", help="comma-separated block names: regenerate or check only these")
    parser.add_argument("--quick", action="store_true", help="--check of one fast block only (CI)")
    args = parser.parse_args()
    if args.quick:
        args.check, args.only = True, "example-bad-input"
    from importlib.metadata import version

    jax_version = version("jax")

    texts = {path: path.read_text(encoding="utf-8") for path in doc_files()}
    problems = marker_problems(texts)
    names = [n for n in block_names(texts) if not args.only or n in args.only.split(",")]
    for name in [n for n in names if missing_for(n)]:
        sys.stderr.write(f"skipped ({missing_for(name)}): {name}\n")
    names = [n for n in names if not missing_for(n)]
    if not args.check and jax_version != EXAMPLES_JAX and set(names) - {"ci-run"}:
        sys.stderr.write(
            f"the examples are made with jax {EXAMPLES_JAX} (Python 3.11, .ci/constraints-oldest.txt), "
            f"this is jax {jax_version}: run it there, or --check here\n"
        )
        return 2
    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
        try:
            bodies = dict(zip(names, pool.map(lambda n: BLOCKS[n](), names), strict=True))
        except (subprocess.CalledProcessError, RuntimeError) as e:
            sys.stderr.write(f"an example failed to run: {e}\n")
            return 2
    before = dict(texts)
    stale = [
        f"{path.relative_to(ROOT)}:{name}"
        for name in names
        for path in refreshed(name, texts, bodies[name], args.check, jax_version)
    ]
    for line in problems:
        sys.stderr.write(f"{line}\n")
    if args.check:
        if stale:
            sys.stderr.write(f"out of date: {', '.join(stale)}; run python bench/gen_cli_reference.py\n")
        if stale or problems:
            return 1
        print(f"{len(names)} generated parts in {len(texts)} files are up to date")
        return 0
    for path, text in texts.items():
        if text != before[path]:
            path.write_text(text, encoding="utf-8")
    print(f"rewrote {', '.join(stale)}" if stale else "generated parts already up to date")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
