"""The import contract of ``src/conveyor``: layers, no cycles, drivers and SQL in storage.

Every module belongs to one layer; a module imports only its own layer and the ones
below it (imports under ``TYPE_CHECKING`` and inside functions count too). The graph of
modules has no cycle. Only the storage package imports a database driver or holds SQL.
A new module that no rule places fails here: put it in ``LAYERS`` on purpose.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "conveyor"

#: Lowest first. A module belongs to the first layer with a prefix that matches it
#: (a prefix matches the module itself and everything below it).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("model", (
        "conveyor._job", "conveyor._dependencies", "conveyor._errors", "conveyor._config",
        "conveyor._payload",
        "conveyor._cron", "conveyor._limits", "conveyor._context", "conveyor._portal",
        "conveyor._logfields", "conveyor._redact", "conveyor._clock", "conveyor._version",
        "conveyor._metric_schema", "conveyor._format",
    )),
    ("storage", ("conveyor._storage",)),
    # what an app is made of (tasks, hooks), and the choke point every write passes
    ("registry", ("conveyor._task", "conveyor._hooks", "conveyor._registry", "conveyor._observed",
                  "conveyor._workflow")),
    ("runtime", ("conveyor._runtime",)),
    ("app", ("conveyor._app", "conveyor._explain")),
    ("interfaces", (
        "conveyor.cli", "conveyor.web", "conveyor.otel", "conveyor.contrib",
        "conveyor.testing", "conveyor.__main__", "conveyor",
    )),
)
DRIVERS = ("psycopg", "psycopg_pool", "sqlite3")
#: Statements as they start inside a string literal (not prose such as "select a queue").
SQL = re.compile(r"^\s*(SELECT\s.+\sFROM\s|INSERT\s+INTO\s|UPDATE\s+\w+\s+SET\s|DELETE\s+FROM\s|"
                 r"CREATE\s+(TABLE|INDEX|VIEW)\s|PRAGMA\s)", re.IGNORECASE | re.DOTALL)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def layer_of(module: str) -> int:
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or (prefix != PACKAGE and module.startswith(prefix + ".")):
                return index
            if prefix != PACKAGE and module.startswith(prefix) and module[len(prefix)] == "_":
                return index  # conveyor._app_flow under conveyor._app
    raise AssertionError(f"{module} is in no layer: add it to LAYERS in {__file__}")


def imports(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import in the file, resolved to a module of
    this package where it names one (``from . import x`` names module ``x`` when
    ``x`` is a module, else the package)."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                yield (candidate if candidate in MODULES else target), node.lineno


def graph() -> dict[str, set[str]]:
    return {
        module: {target for target, _ in imports(module, path)
                 if target in MODULES and target != module}
        for module, path in MODULES.items()
    }


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


def test_layers_only_import_downwards() -> None:
    wrong = []
    for module, path in MODULES.items():
        mine = layer_of(module)
        for target, line in imports(module, path):
            if target in MODULES and target != module and layer_of(target) > mine:
                wrong.append(f"{path.relative_to(SRC)}:{line}: {module} "
                             f"({LAYERS[mine][0]}) imports {target} ({LAYERS[layer_of(target)][0]})")
    assert not wrong, "imports that go up a layer:\n" + "\n".join(wrong)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles() -> None:
    assert cycles(graph()) == []


def test_the_cycle_check_can_fail() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


#: The interfaces. Each reaches the core through the app layer (``conveyor._app``,
#: ``conveyor._app.operations``) and the model, never through storage or the runtime, and
#: uses another interface only through its public face (``conveyor.web.create_app``,
#: not ``conveyor.web._security``). The integrations (``conveyor.contrib``) may use the
#: other interfaces' faces; no other interface imports an integration.
INTERFACES = ("conveyor.cli", "conveyor.web", "conveyor.otel", "conveyor.testing",
              "conveyor.contrib", "conveyor.__main__")
BELOW_THE_APP = ("conveyor._storage", "conveyor._runtime")
#: Imports that still cross (issue 27), each to be removed with its import: the test
#: fails when one no longer crosses, so this list only shrinks.
STILL_CROSSING: set[tuple[str, str]] = set()


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _interface_of(module: str) -> str:
    """``conveyor.web``, ``conveyor.cli``, ...; each contrib integration is its own."""
    parts = module.split(".")
    return ".".join(parts[:3] if parts[1:2] == ["contrib"] else parts[:2])


def crosses(module: str, target: str) -> bool:
    """Does ``module``'s import of ``target`` go around the app layer?"""
    if not _within(module, INTERFACES):
        return False
    private_of_another = (_within(target, INTERFACES)
                          and _interface_of(target) != _interface_of(module)
                          and any(p.startswith("_") for p in target.split(".")[2:]))
    # The integrations sit on the other interfaces (contrib.asgi mounts the dashboard,
    # the Django command runs the worker), never under them: web -> contrib.prometheus
    # once made every CLI command need prometheus-client.
    into_contrib = _within(target, ("conveyor.contrib",)) and not _within(module, ("conveyor.contrib",))
    return _within(target, BELOW_THE_APP) or private_of_another or into_contrib


def crossing_imports() -> set[tuple[str, str]]:
    """(interface module, target) for every import that goes around the app layer."""
    return {(module, target) for module, path in MODULES.items()
            for target, _ in imports(module, path) if crosses(module, target)}


def test_interfaces_reach_the_core_through_the_app_layer() -> None:
    found = crossing_imports()
    new = sorted(found - STILL_CROSSING)
    assert not new, "interfaces importing storage, the runtime or another interface's " \
        "private modules (use conveyor._app / a public face):\n" + "\n".join(map(str, new))
    gone = sorted(STILL_CROSSING - found)
    assert not gone, "no longer crossing: remove from STILL_CROSSING:\n" + "\n".join(map(str, gone))


@pytest.mark.parametrize(("module", "target", "crossing"), [
    ("conveyor.cli.status", "conveyor.web._data", True),  # what made a core install crash
    ("conveyor.web._series", "conveyor._runtime.metrics", True),
    ("conveyor.web._query", "conveyor._storage", True),
    ("conveyor.contrib.asgi", "conveyor.web._security", True),
    ("conveyor.web._overview", "conveyor.contrib.prometheus", True),  # a public face, but below
    ("conveyor.contrib.asgi", "conveyor.web", False),
    ("conveyor.contrib.django.apps", "conveyor.contrib.django._app", False),
    ("conveyor.cli.dashboard", "conveyor.web", False),
    ("conveyor.cli.status", "conveyor._app.reads", False),
    ("conveyor._app.reads.metrics", "conveyor._storage", False),  # the app layer may
])
def test_the_interface_check_can_fail(module: str, target: str, crossing: bool) -> None:
    assert crosses(module, target) is crossing


def test_drivers_only_in_storage() -> None:
    storage = layer_of("conveyor._storage")
    wrong = [
        f"{path.relative_to(SRC)}:{line}: imports {target}"
        for module, path in MODULES.items() if layer_of(module) != storage
        for target, line in imports(module, path)
        if target.split(".")[0] in DRIVERS
    ]
    assert not wrong, "database drivers outside conveyor._storage:\n" + "\n".join(wrong)


def test_sql_only_in_storage() -> None:
    storage = layer_of("conveyor._storage")
    wrong = []
    for module, path in MODULES.items():
        if layer_of(module) == storage:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.match(node.value):
                wrong.append(f"{path.relative_to(SRC)}:{node.lineno}: {node.value[:60]!r}")
    assert not wrong, "SQL outside conveyor._storage:\n" + "\n".join(wrong)


@pytest.mark.parametrize("text", ["SELECT id FROM conveyor_jobs", "delete from t where x",
                                  "UPDATE conveyor_jobs SET state = 'x'"])
def test_the_sql_check_can_fail(text: str) -> None:
    assert SQL.match(text)


def test_no_stub_hosts() -> None:
    """Mixins that repeat their host's methods as NotImplementedError stubs are gone; an
    abstract method of a real base class (``@abstractmethod``) may raise it."""
    wrong = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            abstract = any("abstractmethod" in ast.unparse(d) for d in node.decorator_list)
            raises = any(isinstance(n, ast.Raise) and n.exc is not None
                         and "NotImplementedError" in ast.unparse(n.exc) for n in ast.walk(node))
            if raises and not abstract:
                wrong.append(f"{path.relative_to(SRC)}:{node.lineno}: {node.name}")
    assert not wrong, "NotImplementedError stubs:\n" + "\n".join(wrong)
