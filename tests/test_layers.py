"""The import contract of ``src/conveyor``: layers, interfaces, faces, no cycles.

Every module of the package is named once in ``LAYERS``, in exactly one layer (a new
module fails here until it is given one on purpose). A module imports only its own layer
and the ones below it (imports under ``TYPE_CHECKING`` and inside functions count too).
An interface (``cli``, ``web``, ``contrib``, ``testing``, ``otel``) reaches the core
through the app layer: it imports neither storage nor the runtime, nor another
interface's private modules (a public face such as ``conveyor.web.create_app`` is fine).
Outside storage, only the ``conveyor._storage`` face is imported; one backend never
imports the other. The graph of modules has no cycle. Only storage imports a database
driver or holds SQL. Each rule has a test that shows it can fail.
"""

from __future__ import annotations

import ast
import collections
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "conveyor"

#: Lowest first; every module of ``src/conveyor`` by name, once.
LAYERS: dict[str, tuple[str, ...]] = {
    # records, rules and helpers that know no database and no app
    "model": (
        "conveyor._chunk", "conveyor._clock", "conveyor._config", "conveyor._context", "conveyor._cron",
        "conveyor._dependencies", "conveyor._errors", "conveyor._format", "conveyor._job",
        "conveyor._limits", "conveyor._logfields", "conveyor._metric_schema",
        "conveyor._payload", "conveyor._payload_crypt", "conveyor._payload_hints",
        "conveyor._payload_types", "conveyor._portal", "conveyor._redact", "conveyor._routing",
        "conveyor._version",
    ),
    # one protocol, two backends; the rest of the package sees only its face
    "storage": (
        "conveyor._storage",
        "conveyor._storage.base", "conveyor._storage.clock", "conveyor._storage.cluster",
        "conveyor._storage.composition", "conveyor._storage.control_types",
        "conveyor._storage.cooldown_types", "conveyor._storage.fair_storage",
        "conveyor._storage.fairness", "conveyor._storage.freelist",
        "conveyor._storage.gcra", "conveyor._storage.hooks", "conveyor._storage.inserted",
        "conveyor._storage.job_types",
        "conveyor._storage.edit_types",
        "conveyor._storage.limiter_types",
        "conveyor._storage.lazy_inserts",
        "conveyor._storage.metric_types", "conveyor._storage.protocol",
        "conveyor._storage.rows", "conveyor._storage.schema", "conveyor._storage.testdb",
        "conveyor._storage.toolkit", "conveyor._storage.unique", "conveyor._storage.wake",
        "conveyor._storage.workflow", "conveyor._storage.workflow_types",
        "conveyor._storage.postgres",
        "conveyor._storage.postgres.batch", "conveyor._storage.postgres.connection",
        "conveyor._storage.postgres.copy_insert", "conveyor._storage.postgres.fair",
        "conveyor._storage.postgres.listener",
        "conveyor._storage.postgres.pools", "conveyor._storage.postgres.schema",
        "conveyor._storage.postgres.storage", "conveyor._storage.postgres.workflow",
        "conveyor._storage.sqlite",
        "conveyor._storage.sqlite.batch", "conveyor._storage.sqlite.connection",
        "conveyor._storage.sqlite.fair", "conveyor._storage.sqlite.file",
        "conveyor._storage.sqlite.retiring",
        "conveyor._storage.sqlite.storage", "conveyor._storage.sqlite.workflow",
    ),
    # what an app is made of (tasks, hooks), and the choke point every write passes
    "registry": (
        "conveyor._hooks", "conveyor._observed", "conveyor._registry", "conveyor._task",
        "conveyor._task_inserts", "conveyor._task_options",
        "conveyor._task_retry", "conveyor._workflow",
    ),
    "runtime": (
        "conveyor._runtime",
        "conveyor._runtime.acker", "conveyor._runtime.admission", "conveyor._runtime.archiver",
        "conveyor._runtime.chunks",
        "conveyor._runtime.cooldown", "conveyor._runtime.cron", "conveyor._runtime.drain_result",
        "conveyor._runtime.eager",
        "conveyor._runtime.execution", "conveyor._runtime.executor", "conveyor._runtime.handoff",
        "conveyor._runtime.hardlimit",
        "conveyor._runtime.heartbeat", "conveyor._runtime.inprocess",
        "conveyor._runtime.leader", "conveyor._runtime.metrics", "conveyor._runtime.producer",
        "conveyor._runtime.progress", "conveyor._runtime.pruner", "conveyor._runtime.expirer",
        "conveyor._runtime.queue_settings", "conveyor._runtime.recycler", "conveyor._runtime.rescuer",
        "conveyor._runtime.service", "conveyor._runtime.shutdown", "conveyor._runtime.signals",
        "conveyor._runtime.stager",
        "conveyor._runtime.vacuumer",
        "conveyor._runtime.worker",
    ),
    # the application core: every operator read and action, written once
    "app": (
        "conveyor._app",
        "conveyor._app.app", "conveyor._app.base", "conveyor._app.caller",
        "conveyor._app.composition", "conveyor._app.control", "conveyor._app.jobs",
        "conveyor._app.maintenance", "conveyor._app.named", "conveyor._app.operations",
        "conveyor._app.pipeline",
        "conveyor._app.gcpause", "conveyor._app.edits", "conveyor._app.limiters", "conveyor._app.permits",
        "conveyor._app.results", "conveyor._app.search", "conveyor._app.tasks",
        "conveyor._app.testing",
        "conveyor._app.reads", "conveyor._app.reads.composition", "conveyor._app.reads.jobs",
        "conveyor._app.reads.metrics", "conveyor._app.reads.overview",
        "conveyor._app.reads.series",
        "conveyor._explain",
    ),
    "interfaces": (
        "conveyor", "conveyor.__main__", "conveyor.otel",
        "conveyor.cli",
        "conveyor.cli._base", "conveyor.cli._demo_target", "conveyor.cli._loading",
        "conveyor.cli._logging", "conveyor.cli._render", "conveyor.cli._retry",
        "conveyor.cli._supervisor", "conveyor.cli.batches", "conveyor.cli.bench",
        "conveyor.cli.limiters",
        "conveyor.cli.dashboard", "conveyor.cli.demo", "conveyor.cli.enqueue",
        "conveyor.cli.jobs", "conveyor.cli.maintenance", "conveyor.cli.migrate",
        "conveyor.cli.queues", "conveyor.cli.schedules", "conveyor.cli.status",
        "conveyor.cli.worker", "conveyor.cli.workflows",
        "conveyor.web",
        "conveyor.web._asgi", "conveyor.web._charts", "conveyor.web._context",
        "conveyor.web._exposition", "conveyor.web._failures",
        "conveyor.web._format", "conveyor.web._graph", "conveyor.web._jobs",
        "conveyor.web._limiters",
        "conveyor.web._overview", "conveyor.web._query", "conveyor.web._queues",
        "conveyor.web._schedules", "conveyor.web._security", "conveyor.web._settings",
        "conveyor.web._workers", "conveyor.web._workflows",
        "conveyor.web.api", "conveyor.web.api._context", "conveyor.web.api._http", "conveyor.web.api._jobs",
        "conveyor.web.api._queues", "conveyor.web.api._routes", "conveyor.web.api._schema",
        "conveyor.testing", "conveyor.testing.pytest_plugin",
        "conveyor.contrib", "conveyor.contrib.asgi", "conveyor.contrib.prometheus",
        "conveyor.contrib.sentry",
        "conveyor.contrib.django", "conveyor.contrib.django._results",
        "conveyor.contrib.django._runner", "conveyor.contrib.django.apps",
        "conveyor.contrib.django.backend", "conveyor.contrib.django.dashboard",
        "conveyor.contrib.django.management", "conveyor.contrib.django.management.commands",
        "conveyor.contrib.django.management.commands.conveyor_worker",
        "conveyor.contrib.django.migrations", "conveyor.contrib.django.migrations.0001_initial",
        "conveyor.contrib.django.models", "conveyor.contrib.django.worker_apps",
    ),
}
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


#: Each module's layer, as its index in ``LAYERS`` (lowest first).
LAYER_OF = {module: index for index, modules in enumerate(LAYERS.values()) for module in modules}
NAMES = tuple(LAYERS)


def membership_problems(modules: Iterable[str], layers: Mapping[str, tuple[str, ...]]
                        ) -> list[str]:
    """Modules named in no layer or more than once, and names that are no module."""
    listed = [module for members in layers.values() for module in members]
    problems = [f"{module} is named {n} times in LAYERS"
                for module, n in sorted(collections.Counter(listed).items()) if n > 1]
    problems += [f"{module} is in no layer: add it to LAYERS in {__file__}"
                 for module in sorted(set(modules) - set(listed))]
    problems += [f"{module} is in LAYERS but is no module of src/conveyor: remove it"
                 for module in sorted(set(listed) - set(modules))]
    return problems


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


def test_every_module_is_named_in_one_layer() -> None:
    problems = membership_problems(MODULES, LAYERS)
    assert not problems, "\n".join(problems)


def test_the_membership_check_can_fail() -> None:
    assert membership_problems(["a", "b", "c"], {"x": ("a", "a"), "y": ("b", "gone")}) == [
        "a is named 2 times in LAYERS", f"c is in no layer: add it to LAYERS in {__file__}",
        "gone is in LAYERS but is no module of src/conveyor: remove it"]


def goes_up(module: str, target: str) -> bool:
    """Does ``module`` import a module of a layer above its own? (A module in no layer
    is the membership test's to report.)"""
    return module in LAYER_OF and target in LAYER_OF and LAYER_OF[target] > LAYER_OF[module]


def test_layers_only_import_downwards() -> None:
    wrong = [f"{path.relative_to(SRC)}:{line}: {module} ({NAMES[LAYER_OF[module]]}) imports "
             f"{target} ({NAMES[LAYER_OF[target]]})"
             for module, path in MODULES.items() for target, line in imports(module, path)
             if target != module and goes_up(module, target)]
    assert not wrong, "imports that go up a layer:\n" + "\n".join(wrong)


@pytest.mark.parametrize(("module", "target", "up"), [
    ("conveyor._storage.base", "conveyor._app", True),
    ("conveyor._runtime.worker", "conveyor.web", True),
    ("conveyor._job", "conveyor._storage", True),
    ("conveyor.cli.jobs", "conveyor._app", False),
    ("conveyor._app.jobs", "conveyor._runtime", False),
])
def test_the_direction_check_can_fail(module: str, target: str, up: bool) -> None:
    assert goes_up(module, target) is up


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
    found = cycles(graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


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
#: The one storage module the rest of the package imports.
STORAGE_FACE = "conveyor._storage"
BACKENDS = ("conveyor._storage.sqlite", "conveyor._storage.postgres")


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
    into_contrib = (_within(target, ("conveyor.contrib",))
                    and not _within(module, ("conveyor.contrib",)))
    return _within(target, BELOW_THE_APP) or private_of_another or into_contrib


def behind_the_storage_face(module: str, target: str) -> bool:
    """Does ``module``, outside storage, import a storage module other than its face?"""
    return (not _within(module, (STORAGE_FACE,)) and _within(target, (STORAGE_FACE,))
            and target != STORAGE_FACE)


def across_backends(module: str, target: str) -> bool:
    """Does a module of one backend import a module of the other?"""
    mine = [b for b in BACKENDS if _within(module, (b,))]
    return bool(mine) and _within(target, BACKENDS) and not _within(target, (mine[0],))


def wrong_imports(rule: Callable[[str, str], bool]) -> list[str]:
    """``path:line: module imports target`` for every import ``rule`` refuses."""
    return sorted({f"{path.relative_to(SRC)}:{line}: {module} imports {target}"
                   for module, path in MODULES.items()
                   for target, line in imports(module, path) if rule(module, target)})


def test_interfaces_reach_the_core_through_the_app_layer() -> None:
    wrong = wrong_imports(crosses)
    assert not wrong, "interfaces importing storage, the runtime or another interface's " \
        "private modules (use conveyor._app / a public face):\n" + "\n".join(wrong)


@pytest.mark.parametrize(("module", "target", "crossing"), [
    ("conveyor.cli.status", "conveyor.web._data", True),  # what made a core install crash
    ("conveyor.web._series", "conveyor._runtime.metrics", True),
    ("conveyor.web._query", "conveyor._storage", True),
    ("conveyor.testing", "conveyor._runtime.inprocess", True),
    ("conveyor.contrib.asgi", "conveyor.web._security", True),
    ("conveyor.web._overview", "conveyor.contrib.prometheus", True),  # a public face, but below
    ("conveyor.contrib.asgi", "conveyor.web", False),
    ("conveyor.contrib.django.management.commands.conveyor_worker", "conveyor.cli._base", True),
    ("conveyor.contrib.django.apps", "conveyor.contrib.django._app", False),
    ("conveyor.contrib.django.management.commands.conveyor_worker", "conveyor.cli", False),
    ("conveyor.cli.dashboard", "conveyor.web", False),
    ("conveyor.cli.status", "conveyor._app.reads", False),
    ("conveyor._app.reads.metrics", "conveyor._storage", False),  # the app layer may
])
def test_the_interface_check_can_fail(module: str, target: str, crossing: bool) -> None:
    assert crosses(module, target) is crossing


def test_storage_is_imported_through_its_face() -> None:
    wrong = wrong_imports(behind_the_storage_face)
    assert not wrong, f"imports of storage modules other than {STORAGE_FACE}:\n" + \
        "\n".join(wrong)


@pytest.mark.parametrize(("module", "target", "behind"), [
    ("conveyor._app.testdb", "conveyor._storage.testdb", True),  # the shim it once was
    ("conveyor._observed", "conveyor._storage.job_types", True),
    ("conveyor.cli.bench", "conveyor._storage.protocol", True),
    ("conveyor._app.jobs", "conveyor._storage", False),
    ("conveyor._storage.sqlite.storage", "conveyor._storage.base", False),  # inside storage
])
def test_the_storage_face_check_can_fail(module: str, target: str, behind: bool) -> None:
    assert behind_the_storage_face(module, target) is behind


def test_one_backend_never_imports_the_other() -> None:
    wrong = wrong_imports(across_backends)
    assert not wrong, "a backend importing the other:\n" + "\n".join(wrong)


@pytest.mark.parametrize(("module", "target", "across"), [
    ("conveyor._storage.sqlite.storage", "conveyor._storage.postgres.pools", True),
    ("conveyor._storage.postgres", "conveyor._storage.sqlite.connection", True),
    ("conveyor._storage.postgres.batch", "conveyor._storage.postgres.storage", False),
    ("conveyor._storage.sqlite.batch", "conveyor._storage.base", False),
    ("conveyor._storage", "conveyor._storage.sqlite", False),  # the face picks a backend
])
def test_the_backend_check_can_fail(module: str, target: str, across: bool) -> None:
    assert across_backends(module, target) is across


def test_drivers_only_in_storage() -> None:
    storage = LAYER_OF[STORAGE_FACE]
    wrong = [
        f"{path.relative_to(SRC)}:{line}: imports {target}"
        for module, path in MODULES.items() if LAYER_OF.get(module) != storage
        for target, line in imports(module, path)
        if target.split(".")[0] in DRIVERS
    ]
    assert not wrong, "database drivers outside conveyor._storage:\n" + "\n".join(wrong)


def test_sql_only_in_storage() -> None:
    storage = LAYER_OF[STORAGE_FACE]
    wrong = []
    for module, path in MODULES.items():
        if LAYER_OF.get(module) == storage:
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
