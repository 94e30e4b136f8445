"""The house: shardcli's imports point one way (cli -> commands -> render -> core -> pure modules).

The graph is read from the source with `ast`: module-level imports and the imports inside functions
alike (a function-level import hides a circle from Python's import machinery, not from a reader).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "shardcli"


def module_files(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name)."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The module of the package that `import name` runs last (name itself, or its package)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the package's modules it imports, anywhere in its source.

    An import of a package's own `__init__` from inside that package (`from shardcli import
    __version__`) is no edge: Python initialises a parent package before any of its modules, so it
    orders nothing.
    """
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                # `from shardcli.render import human` imports the module shardcli.render.human
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                owner = _owner(target, modules)
                if owner is None or owner == module or module.startswith(owner + "."):
                    continue
                graph[module].add(owner)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle through each strongly connected group of modules (Tarjan), as a path a -> ... -> a."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_circle_in(group, graph) for group in groups]


def _circle_in(group: set[str], graph: dict[str, set[str]]) -> list[str]:
    """The shortest circle from the group's first module back to itself (breadth first)."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v] & group):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    following.append(w)
        frontier = following
    raise AssertionError(f"no circle in {sorted(group)}")


def test_shardcli_has_no_import_circle():
    found = cycles(import_graph(module_files()))
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def _write(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return module_files(tmp_path / "pkg")


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {"__init__.py": "", "a.py": "import pkg.b\n", "b.py": "def f():\n    from pkg import a\n"},
            [["pkg.a", "pkg.b", "pkg.a"]],
            id="function-level-import-closes-a-circle",
        ),
        pytest.param(
            {
                "__init__.py": "",
                "a.py": "from . import b\n",
                "b.py": "from .c import x\n",
                "c.py": "from pkg.a import y\n",
            },
            [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]],
            id="relative-imports-three-modules",
        ),
        pytest.param(
            {"__init__.py": "def f():\n    from pkg import a\n", "a.py": "from pkg import VERSION\n"},
            [],
            id="a-module-importing-its-own-package-is-no-edge",
        ),
        pytest.param(
            {
                "__init__.py": "",
                "sub/__init__.py": "",
                "sub/x.py": "from pkg import y\n",
                "y.py": "import json\n",
            },
            [],
            id="one-way",
        ),
    ],
)
def test_the_cycle_check_finds_circles_and_only_circles(tmp_path, files, expected):
    assert cycles(import_graph(_write(tmp_path, files))) == expected


# --- the layers: each package says what it may import, and the code keeps to it -----------------------

# The modules outside the packages: the surface (the app, the notebook API) and the pure modules.
TOP_MODULES = {
    "shardcli": {"api", "program"},
    "__main__": {"cli"},
    "cli": {"commands", "runtime", "errors"},
    "api": {"render", "program", "runtime", "specs", "errors"},
    "errors": set(),
    "tile_math": set(),
}
_IMPORTS_FROM = re.compile(r"^Imports from: (?P<units>[a-z_, \n]+)\.\s*$", re.MULTILINE)


def _unit(module: str) -> str:
    """The layer a module belongs to: its top package under the root package, or the top module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def declared_imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """package (dotted) -> the units its `__init__` docstring says it may import from."""
    root = min(modules, key=len)
    declared = {}
    for module, path in modules.items():
        if path.name != "__init__.py" or module == root:
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        found = _IMPORTS_FROM.search(doc)
        assert found, f"{path}: the docstring says what the package owns and ends 'Imports from: a, b.'"
        declared[module] = {u.strip() for u in found["units"].replace("\n", " ").split(",")}
    return declared


def layer_violations(modules: dict[str, Path], top_modules: dict[str, set[str]]) -> list[str]:
    """Every import from one unit into another that the importing package's docstring does not allow,
    and every pair of packages that allow each other (the allowed imports must point one way too)."""
    root = min(modules, key=len)
    graph = import_graph(modules)
    declared = declared_imports(modules)
    units = {_unit(m) for m in modules}
    wrong = [
        f"{package} names units that do not exist: {sorted(allowed - units)}"
        for package, allowed in declared.items()
        if not allowed <= units
    ]
    for module, targets in sorted(graph.items()):
        # the innermost package holding the module speaks for it; a top module is in top_modules
        holder = module if module in declared else module.rpartition(".")[0]
        while holder and holder not in declared:
            holder = holder.rpartition(".")[0]
        allowed = declared[holder] if holder else top_modules[module.removeprefix(root + ".")]
        for target in sorted(targets):
            if _unit(target) != _unit(module) and _unit(target) not in allowed:
                wrong.append(f"{module} -> {target} (it may import from: {', '.join(sorted(allowed))})")
    allowed_graph = {p.removeprefix(root + "."): set(a) for p, a in declared.items() if p.count(".") == 1}
    allowed_graph.update({m: set(a) for m, a in top_modules.items() if m not in (root, "__main__")})
    for unit in allowed_graph:
        allowed_graph[unit] &= set(allowed_graph)
    wrong += ["packages that may import each other: " + " -> ".join(c) for c in cycles(allowed_graph)]
    return wrong


def test_every_package_says_what_it_may_import_and_every_import_points_down():
    wrong = layer_violations(module_files(), TOP_MODULES)
    assert not wrong, "imports that the packages' docstrings do not allow:\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {
                "__init__.py": "",
                "low/__init__.py": '"""Low.\n\nImports from: errors.\n"""\n',
                "low/a.py": "from pkg.errors import E\n",
                "high/__init__.py": '"""High.\n\nImports from: low, errors.\n"""\n',
                "high/b.py": "from pkg.low.a import x\n",
                "errors.py": "",
            },
            [],
            id="downward-imports-pass",
        ),
        pytest.param(
            {
                "__init__.py": "",
                "low/__init__.py": '"""Low.\n\nImports from: errors.\n"""\n',
                "low/a.py": "def f():\n    from pkg.high import b\n",
                "high/__init__.py": '"""High.\n\nImports from: low, errors.\n"""\n',
                "high/b.py": "",
                "errors.py": "",
            },
            ["pkg.low.a -> pkg.high.b (it may import from: errors)"],
            id="an-import-pointing-up-inside-a-function",
        ),
        pytest.param(
            {
                "__init__.py": "",
                "low/__init__.py": '"""Low.\n\nImports from: high, errors.\n"""\n',
                "high/__init__.py": '"""High.\n\nImports from: low, errors.\n"""\n',
                "errors.py": "",
            },
            ["packages that may import each other: high -> low -> high"],
            id="two-packages-allowing-each-other",
        ),
    ],
)
def test_the_layer_check_finds_upward_imports(tmp_path, files, expected):
    assert layer_violations(_write(tmp_path, files), {"pkg": set(), "errors": set()}) == expected


def test_the_architecture_page_names_every_package():
    page = (PACKAGE.parent / "docs" / "explanation" / "architecture.md").read_text(encoding="utf-8")
    packages = {
        m.split(".")[1] for m, p in module_files().items() if p.name == "__init__.py" and m.count(".") == 1
    }
    missing = sorted(p for p in packages if f"`{p}/`" not in page)
    assert not missing, f"docs/explanation/architecture.md does not show: {missing}"


def _commands(app) -> list:
    """Every command function of a Typer app, its sub-apps' included."""
    found = [c.callback for c in app.registered_commands]
    for group in app.registered_groups:
        found += _commands(group.typer_instance)
    return found


def test_every_command_is_thin():
    """A command turns flags into a request, calls the package that owns the work, renders, returns:
    its body (the statements after the docstring) stays within 60 lines."""
    import inspect
    import textwrap

    from shardcli.cli import app

    commands = _commands(app)
    assert len(commands) >= 14
    long = {}
    for command in commands:
        function = ast.parse(textwrap.dedent(inspect.getsource(command))).body[0]
        assert isinstance(function, ast.FunctionDef)
        body = function.body[1:] if ast.get_docstring(function) else function.body
        lines = body[-1].end_lineno - body[0].lineno + 1
        if lines > 60:
            long[f"{command.__module__}.{command.__name__}"] = lines
    assert not long, f"command bodies over 60 lines: {long}"
