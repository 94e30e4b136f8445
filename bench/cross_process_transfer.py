"""Can JAX move an array to another process's devices outside a collective? (Why `launch -- pipeline`
sends activations with a ppermute over the joint mesh.)

Starts two local processes joined by jax.distributed (gloo on loopback, two faked CPU devices each).
Process 0 holds an array on its two devices; both then try
1. `jax.device_put` onto process 1's devices (what one process does between sub-meshes), and
2. a `ppermute` over the joint mesh of both sub-meshes (what shardcli does between processes),
and print what happened.

A child that fails (a traceback, no answer in 120 s) makes the script exit 1 with its error output.
`--quick` (CI) runs the same check: it is already the smallest setting (a 4-float array, seconds).

Usage:
    python bench/cross_process_transfer.py [--quick]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys

CHILD = r"""
import sys
pid, port = int(sys.argv[1]), sys.argv[2]
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.config.update("jax_num_cpu_devices", 2)
jax.config.update("jax_platforms", "cpu")
jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=pid)
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

devices = np.array(jax.devices()).reshape(2, 2)
src, dst = (NamedSharding(Mesh(devices[k], ("x",)), P("x")) for k in (0, 1))
x = jax.make_array_from_callback((4,), src, lambda i: np.arange(4.0, dtype=np.float32)[i], dtype=np.float32)
try:
    jax.device_put(x, dst).block_until_ready()
    print(f"process {pid}: device_put across processes: ok", flush=True)
except Exception as error:
    first = str(error).split(". ")[0]
    print(f"process {pid}: device_put across processes: {type(error).__name__}: {first}", flush=True)
joint = Mesh(devices, ("pair", "x"))
send = jax.jit(jax.shard_map(lambda b: jax.lax.ppermute(b, "pair", [(0, 1)]), mesh=joint,
                             in_specs=P("pair", "x"), out_specs=P("pair", "x")))
blocks = [jax.device_put(np.asarray(s.data)[None], s.device) for s in x.addressable_shards] if pid == 0 else [
    jax.device_put(np.zeros((1, 2), np.float32), d) for d in devices[1]]
moved = send(jax.make_array_from_single_device_arrays((2, 4), NamedSharding(joint, P("pair", "x")), blocks))
got = [np.asarray(s.data)[0].tolist() for s in moved.addressable_shards if s.device in set(devices[1])]
what = f"received {got}" if pid == 1 else "sent"
print(f"process {pid}: ppermute over the joint mesh: {what}", flush=True)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="the same check (already seconds-long: a 4-float array); for CI"
    )
    parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(k), port],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in (0, 1)
    ]
    failed = 0
    for k, child in enumerate(children):
        try:
            out, err = child.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
            err += "\n(no answer in 120 s)"
        # gloo writes its connection chatter to the same descriptor
        sys.stdout.write("".join(line for line in out.splitlines(True) if not line.startswith("[Gloo]")))
        if child.returncode != 0:
            failed = 1
            sys.stderr.write(f"process {k} exited {child.returncode}:\n{err[-2000:]}\n")
    return failed


if __name__ == "__main__":
    raise SystemExit(main())
