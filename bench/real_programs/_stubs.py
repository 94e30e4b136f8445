"""Stand-ins for heavy modules a program imports at top level but its train step never calls
(data loaders, cloud clients): `stub("tensorflow", "grain")` makes `import tensorflow` (and any
`tensorflow.x.y`) succeed with placeholders. Used only by the corpus wrappers."""

from __future__ import annotations

import abc
import importlib.abc
import importlib.machinery
import sys
import types


class _StubMeta(abc.ABCMeta):
    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _StubMeta(name, (_Stub,), {})

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator: leave the function as it is
        return super().__call__()

    def __iter__(cls):
        return iter(())

    def __bool__(cls):
        return False


class _Stub(metaclass=_StubMeta):
    def __getattr__(self, name):
        return _StubMeta(name, (_Stub,), {})


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _StubMeta(name, (_Stub,), {})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots):
        self.roots = set(roots)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "99.0.0"
        return module

    def exec_module(self, module):
        pass


def stub(*roots: str) -> None:
    sys.meta_path.append(_Finder(roots))  # last: only modules that are not installed
