"""Loading the user's own code (`FILE.py:NAME`, `package.module:NAME`) and reporting its errors.

`shardcli inspect` imports and runs the named file as `python FILE.py` would (its folder first on
sys.path). An error raised inside the user's file is theirs: it is reported with their own
traceback, cut to the frames in their files, then one line, exit 2 (`UserCodeError`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardcli.errors import ShardcliError


class UserCodeError(ShardcliError):
    """An error inside the user's own code: their traceback (their frames only), then one line."""

    def __init__(self, message: str, user_traceback: str) -> None:
        super().__init__(message)
        self.user_traceback = user_traceback


@dataclass(frozen=True)
class UserObject:
    """What `FILE.py:NAME` named: the object, and the files its traceback frames may come from."""

    target: str
    value: Any
    roots: tuple[str, ...]  # the user's file, or the package's folder


def _split(target: str, flag: str, what: str) -> tuple[str, str]:
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise ShardcliError(
            f"{flag} {target!r} is not FILE.py:{what} or package.module:{what}; "
            f"e.g. model.py:train_step or mypkg.model:train_step"
        )
    return where, name


def load(target: str, flag: str = "inspect", what: str = "FUNCTION") -> UserObject:
    """Import the file or module of `target` and return the object it names.

    Raises:
        ShardcliError: the file, module or name is missing (one line).
        UserCodeError: importing the user's file raised.
    """
    where, name = _split(target, flag, what)
    if where.endswith(".py") or os.sep in where or "/" in where:
        path = os.path.abspath(where)
        if not os.path.isfile(path):
            raise ShardcliError(f"{flag} {target!r}: no file {where}; give the path of a Python file")
        roots: tuple[str, ...] = (path,)
        module_name = f"_shardcli_user_{os.path.splitext(os.path.basename(path))[0]}"
        module = sys.modules.get(module_name)
        if module is None or getattr(module, "__file__", None) != path:
            folder = os.path.dirname(path)
            if folder not in sys.path:
                sys.path.insert(0, folder)
            spec = importlib.util.spec_from_file_location(module_name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException as error:
                sys.modules.pop(module_name, None)
                raise user_error(error, roots, f"importing {where} raised") from None
    else:
        if importlib.util.find_spec(where.split(".")[0]) is None:
            raise ShardcliError(f"{flag} {target!r}: no module {where.split('.')[0]!r} on the Python path")
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as error:
            raise ShardcliError(f"{flag} {target!r}: {error}") from None
        except BaseException as error:
            raise user_error(error, (_package_root(where),), f"importing {where} raised") from None
        roots = (_package_root(where),)
    if not hasattr(module, name):
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        known = f"; it defines {', '.join(public[:12])}" if public else ""
        raise ShardcliError(f"{flag} {target!r}: {where} has no {name!r}{known}")
    return UserObject(target=target, value=getattr(module, name), roots=roots)


def _package_root(module: str) -> str:
    spec = importlib.util.find_spec(module.split(".")[0])
    origin = spec.origin if spec is not None and spec.origin else module
    return os.path.dirname(os.path.abspath(origin))


def is_users(filename: str, roots: tuple[str, ...]) -> bool:
    path = os.path.abspath(filename)
    return any(path == root or path.startswith(root + os.sep) for root in roots)


def raised_in(error: BaseException, roots: tuple[str, ...]) -> bool:
    """Whether any frame of the error's traceback (or its causes') is in the user's files."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if any(is_users(f.filename, roots) for f in traceback.extract_tb(error.__traceback__)):
            return True
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return False


def user_error(error: BaseException, roots: tuple[str, ...], what: str) -> UserCodeError:
    """The user's traceback, cut to their frames, and one line saying what raised."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if is_users(f.filename, roots)]
    lines = ["Traceback (most recent call last; your frames only):\n", *traceback.format_list(frames)]
    lines += traceback.format_exception_only(type(error), error)
    first = (str(error).strip().splitlines() or [""])[0]
    return UserCodeError(f"{what} {type(error).__name__}: {first}".rstrip(": "), "".join(lines))


def call_user(fn: Callable[..., Any], roots: tuple[str, ...], what: str, *args: Any) -> Any:
    """Call the user's function; an error raised in their files is a UserCodeError."""
    try:
        return fn(*args)
    except ShardcliError:
        raise
    except Exception as error:
        if raised_in(error, roots):
            raise user_error(error, roots, what) from None
        raise
