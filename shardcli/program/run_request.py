"""`shardcli run`'s flags as frozen data, parsed before JAX starts (no NumPy, no JAX here).

An argument is `--arg 'DTYPE[SHAPE]@SPEC=INIT'`: inspect's abstract argument (`specs.AbstractArg`)
with the values it is filled with after `=`: `arange`, `ones`, `zeros`, `random` or a `.npy` file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from shardcli.errors import ShardcliError
from shardcli.specs.arguments import AbstractArg, parse_abstract_arg
from shardcli.specs.meshes import MeshSpec
from shardcli.specs.runs import RunOptions
from shardcli.specs.values import INITS

# Arrays of at most this many elements show their values unless --no-show-values.
SHOW_VALUES_MAX = 256


@dataclass(frozen=True)
class RunArg:
    """One concrete argument: its type and sharding, and what fills it (an init or a .npy file)."""

    arg: AbstractArg
    init: str | None = None  # None: the command's --init
    values_file: str | None = None

    def filled_with(self, default: str) -> str:
        return self.values_file or self.init or default

    def describe(self) -> str:
        fill = self.values_file or self.init
        return self.arg.describe() + (f"={fill}" if fill else "")


@dataclass(frozen=True)
class RunRequest:
    """`shardcli run FILE.py:FN`: the function, its concrete inputs, the mesh and what to show."""

    target: str  # FILE.py:FUNCTION or package.module:FUNCTION
    args: tuple[RunArg, ...]
    inputs: str | None  # FILE.py:NAME: NAME(mesh) returns the arguments (arrays or abstract ones)
    mesh: MeshSpec
    init: str = "arange"  # what fills an argument given without =INIT, and abstract --inputs leaves
    show_values: bool | None = None  # None: arrays of up to SHOW_VALUES_MAX elements
    options: RunOptions = field(default_factory=RunOptions)


def parse_run_arg(text: str, mesh: MeshSpec, flag: str = "--arg") -> RunArg:
    """`f32[32]@x=arange`, `i32[4,4]@x,None=ones`, `f32[8]=values.npy`; `=INIT` left out: --init.

    The type and spec never hold `=`, so the first `=` ends them: a file path after it may hold
    `=` of its own (`f32[8]=runs/lr=0.1/x.npy`).

    Raises:
        ShardcliError: a malformed argument, an unknown init, a values file that is not there, a
            typed PRNG key (run fills and shows numbers).
    """
    head, sep, fill = text.partition("=")
    if not sep:
        return _checked(RunArg(parse_abstract_arg(text, mesh, flag)), text, flag)
    fill = fill.strip()
    if fill.endswith(".npy"):
        if not os.path.isfile(fill):
            raise ShardcliError(f"{flag} {text!r}: no file {fill}; give the path of a .npy file")
        return _checked(RunArg(parse_abstract_arg(head, mesh, flag), values_file=fill), text, flag)
    if fill not in INITS:
        raise ShardcliError(
            f"{flag} {text!r}: ={fill} is not valid; give one of {', '.join(INITS)} or a .npy file, "
            f"e.g. 'f32[32]@x=arange'"
        )
    return _checked(RunArg(parse_abstract_arg(head, mesh, flag), init=fill), text, flag)


def _checked(arg: RunArg, text: str, flag: str) -> RunArg:
    if arg.arg.key is not None:
        raise ShardcliError(
            f"{flag} {text!r}: run fills its arguments with numbers and a typed PRNG key has none to "
            f"show; pass an integer seed and make the key inside the function (jax.random.key(seed))"
        )
    return arg


def check_init(init: str) -> str:
    """--init: what fills arguments given without =INIT.

    Raises:
        ShardcliError: not an init shardcli knows.
    """
    if init not in INITS:
        raise ShardcliError(f"--init {init!r} is not supported; choose one of {', '.join(INITS)}")
    return init
