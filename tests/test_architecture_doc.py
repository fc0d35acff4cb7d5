"""docs/architecture.md stays true to the code where it lists what a contributor must
write: the methods of a backend, the runtime services, the tables that place a dashboard
page and a CLI command. Each list is derived from the code, so a new hook, protocol
method or service fails here until the page names it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conveyor._storage.fair_storage import FairStorage
from conveyor._storage.protocol import Storage

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "architecture.md").read_text()
RUNTIME = ROOT / "src" / "conveyor" / "_runtime"


def row(first_cell: str) -> str:
    """The text of the "Where to add" row whose first cell is ``first_cell``."""
    match = re.search(r"^\| \*\*" + re.escape(first_cell) + r"\*\*.*$", DOC, re.MULTILINE)
    assert match, f"docs/architecture.md has no row for {first_cell!r}"
    return match.group(0)


def backend_writes() -> set[str]:
    """The hooks every backend supplies (abstract in the shared classes) and the protocol
    methods no shared class implements."""
    shared = {name for cls in FairStorage.__mro__ for name in vars(cls)}
    public = {name for name in vars(Storage) if not name.startswith("_")}
    return set(FairStorage.__abstractmethods__) | (public - shared)


def services() -> set[str]:
    """Modules of ``_runtime`` that define a ``Service`` subclass."""
    found = set()
    for path in RUNTIME.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(b, ast.Name) and b.id == "Service" for b in node.bases):
                found.add(path.stem)
    return found


def test_the_backend_row_names_everything_a_backend_writes() -> None:
    text = row("a backend")
    missing = sorted(name for name in backend_writes() if f"`{name}`" not in text)
    assert not missing, f"the backend row of docs/architecture.md misses {missing}"
    assert len(backend_writes()) > 20  # the derivation finds the hooks and the methods


def test_every_runtime_service_is_named() -> None:
    found = services()
    assert {"vacuumer", "cooldown", "stager"} <= found
    text = row("a runtime service") + DOC.split("## The pieces")[0]
    missing = sorted(name for name in found if name not in text)
    assert not missing, f"docs/architecture.md does not name the services {missing}"


def test_page_command_and_action_rows_name_their_lists() -> None:
    assert "`NAV`" in row("a dashboard page") and "`PAGE_GROUPS`" in row("a dashboard page")
    assert "`COMMANDS`" in row("a CLI command")
    assert "source" in row("an operator action")
