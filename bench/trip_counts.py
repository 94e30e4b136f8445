"""Trip-counted FLOPs and bytes of looped programs against the unrolled compile of the same program.

XLA's `cost_analysis()` counts a loop body once; `program_analysis` multiplies each body by its
trip count. This prints, per program and platform, the trip-counted figures over the unrolled
program's (1.000 is exact) beside XLA's own once-counted ones:

    python bench/trip_counts.py            # CPU, and tpu-v5e:2x2 where libtpu is installed

The programs are tests/looped_programs.py's, the ones tests/test_trip_counts.py checks.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the first program on the CPU only (CI)")
    args = parser.parse_args()
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", 4)
    import looped_programs as lp

    print(f"{'program':<24} {'platform':<12} {'FLOPs':>7} {'XLA FLOPs':>10} {'bytes':>7} {'XLA bytes':>10}")
    platforms, cases = (["cpu"], lp.CASES[:1]) if args.quick else (lp.platforms(), lp.CASES)
    for platform in platforms:
        for case in cases:
            looped, unrolled = lp.compare(case, platform)
            ref_f, ref_b = unrolled.flops or 1.0, unrolled.bytes_accessed or 1.0
            print(
                f"{case.name:<24} {platform:<12} {(looped.flops or 0) / ref_f:>7.3f} "
                f"{(looped.xla_flops or 0) / ref_f:>10.3f} {(looped.bytes_accessed or 0) / ref_b:>7.3f} "
                f"{(looped.xla_bytes_accessed or 0) / ref_b:>10.3f}"
            )


if __name__ == "__main__":
    main()
