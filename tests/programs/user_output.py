"""Every way a program prints, and a callback that raises or exits, for `run` and `inspect --run`.

Each function doubles its argument; what it prints is marked `MARK-...` so a test can find it on
stdout (where it must never be under --format json) or stderr.
"""

import os
import sys

import jax
from jax.experimental import io_callback


def _show(total):
    print("MARK-callback", total)


def _show_io(total):
    print("MARK-io-callback", total)
    return total


def _boom(total):
    raise ValueError(f"MARK-boom {total}")


def _leave(total):
    sys.exit(5)


def python_print(x):
    print("MARK-print")
    return x * 2


def debug_print(x):
    jax.debug.print("MARK-debug {s}", s=x.sum())
    return x * 2


def callback_print(x):
    jax.debug.callback(_show, x.sum())
    return x * 2


def io_callback_print(x):
    total = io_callback(_show_io, jax.ShapeDtypeStruct((), x.dtype), x.sum())
    return x * 2 + total * 0


def os_write(x):
    os.write(1, b"MARK-fd1\n")
    jax.debug.callback(lambda total: os.write(1, b"MARK-fd1-callback\n"), x.sum())
    return x * 2


def raising_callback(x):
    jax.debug.callback(_boom, x.sum())
    return x * 2


def exiting_callback(x):
    jax.debug.callback(_leave, x.sum())
    return x * 2
