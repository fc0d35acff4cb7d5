"""SQL files and schema versions, for every backend.

Each backend package keeps its statements in ``<dialect>/sql/*.sql`` and its numbered
migrations in ``<dialect>/migrations/``. A query starts at a ``-- name: <name>`` line
and runs to the next one; both dialects define the same names in files of the same
names (a test checks it). Which migrations are pending, and the refusal to run on a
schema newer than this Conveyor, are decided here once for every backend.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from importlib import resources
from importlib.abc import Traversable

from .._errors import SchemaError
from .rows import claim_returning

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclasses.dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


@dataclasses.dataclass(frozen=True, slots=True)
class DbHealth:
    reachable: bool
    #: Highest applied migration, None when unknown.
    version: int | None
    latest: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.reachable and self.version == self.latest


@dataclasses.dataclass(frozen=True, slots=True)
class TableDeadRows:
    """One Conveyor table's dead row versions (PostgreSQL's statistics, as last reported)
    and whether this role may VACUUM it."""

    name: str
    dead: int
    live: int
    owned: bool


def _folder(dialect: str, *parts: str) -> Traversable:
    if dialect not in ("sqlite", "postgres"):
        raise ValueError(f"unknown dialect {dialect!r}")
    return resources.files(__package__).joinpath(dialect, *parts)


def load_queries(dialect: str) -> dict[str, str]:
    """Return ``{name: sql}`` for one dialect, from every ``*.sql`` file of its folder
    (one file per area: jobs, control, search, metrics); a name defined twice is an
    error."""
    queries: dict[str, str] = {}
    for entry in sorted(_folder(dialect, "sql").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        parts = _NAME.split(entry.read_text("utf-8"))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in queries:
                raise ValueError(f"query {name!r} defined twice for {dialect}")
            queries[name] = body.strip().rstrip(";")
    _place_rules(queries)
    for fragment in FRAGMENTS:  # written once, placed where {name} stands
        if fragment in queries:
            text = _code(queries.pop(fragment))
            queries = {name: sql.replace("{" + fragment + "}", text)
                       for name, sql in queries.items()}
    queries = {name: sql.replace("{job_columns}", ", ".join(JOB_COLUMNS))
               .replace("{job_columns_new}", ", ".join(f"NEW.{c}" for c in JOB_COLUMNS))
               for name, sql in queries.items()}
    returning = claim_returning(dialect)  # a claim's columns are listed once, in rows.py
    for name in ("job_fetch_available", "job_fetch_available_fair",
                 "job_fetch_available_fair_plain", "job_fetch_available_fair_one"):
        queries[name] = queries[name].replace("{claim_columns}", returning)
    queries.update(routed_claims(queries))
    return queries


#: Named pieces of SQL that are not statements: each is taken out of the queries and put
#: where ``{name}`` stands in the statements of its dialect.
#: A fragment may hold an earlier one of this list (job_ack_completed_update holds
#: job_completed_set).
FRAGMENTS = ("job_insert_rows", "job_claim_lease", "job_claim_commit", "job_completed_set",
             "job_ack_completed_update", "job_ack_retire_rows", "job_task_parts")

#: Every column of ``conveyor_jobs``, in table order: ``conveyor_jobs_history`` has the
#: same ones (schema 12). Placed where ``{job_columns}`` stands; a job that moves to
#: history with some columns changed lists them all. A migration that adds a column adds
#: it here too (tests/test_retire.py compares this with both backends' tables).
JOB_COLUMNS = (
    "id", "task", "queue", "args", "kwargs", "priority", "state", "attempt",
    "max_attempts", "scheduled_at", "created_at", "attempted_at", "finished_at", "errors",
    "result", "tags", "meta", "lease_owner", "lease_token", "lease_expires_at",
    "cancel_requested", "unique_key", "unique_states", "concurrency_key", "holds_slot",
    "ran_on", "run_time", "workflow_id", "batch_id", "deps_pending", "followers",
    "results_arg", "callback_batch_id", "progress", "progress_message", "progress_at",
    "requires", "expires_at", "fair_key",
)

#: A rule with one argument: ``{job_archive_rule:EXPR}`` is its text with EXPR in place
#: of ``{state}`` (the final state of the row it judges).
_RULE = re.compile(r"\{job_archive_rule:([^{}]+)\}")
#: One ``column = value`` a line of ``job_completed_set``.
_ASSIGNMENT = re.compile(r"^\s*([a-z_]+)\s*=\s*(.+?),?\s*$")


def _code(sql: str) -> str:
    """A fragment's SQL without its comment lines."""
    return "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))


def _place_rules(queries: dict[str, str]) -> None:
    """Fill the argument rule ``job_archive_rule`` (history.sql) in, and
    ``{job_columns_completed}``: every column of a row as a plain completion leaves it
    (``job_completed_set``'s values where it writes one, the row's own elsewhere, read
    through the alias ``j``), which a job that goes straight to history is written with."""
    rule = _code(queries.pop("job_archive_rule"))
    written: dict[str, str] = {}
    for line in _code(queries["job_completed_set"]).splitlines():
        if line.strip():
            match = _ASSIGNMENT.match(line)
            if match is None:
                raise ValueError(f"job_completed_set: not 'column = value': {line!r}")
            written[match[1]] = match[2]
    if not written.keys() <= set(JOB_COLUMNS):
        raise ValueError(f"job_completed_set writes unknown columns {written.keys() - set(JOB_COLUMNS)}")
    completed = ", ".join(f"{written[c]} AS {c}" if c in written else f"j.{c}"
                          for c in JOB_COLUMNS)
    for name, sql in queries.items():
        sql = _RULE.sub(lambda m: rule.replace("{state}", m[1]), sql)
        queries[name] = sql.replace("{job_columns_completed}", completed)

#: The plain claim's filter a routed claim replaces (``job_claim_route``).
PLAIN_ROUTE = "AND requires IS NULL"


def routed_claims(queries: dict[str, str]) -> dict[str, str]:
    """``NAME_routed`` for each claim ``job_fetch_available*``: the same statement with
    its "requires IS NULL" (a worker without labels) replaced by ``job_claim_route`` (a
    fragment, taken out of ``queries``), so a worker without labels or task filter keeps
    the plain claim."""
    route = _code(queries.pop("job_claim_route"))
    out: dict[str, str] = {}
    for name, sql in queries.items():
        if name.startswith("job_fetch_available") and not name.endswith("_routed"):
            if sql.count(PLAIN_ROUTE) != 1:
                raise ValueError(f"claim {name!r} must filter {PLAIN_ROUTE!r} exactly once")
            out[f"{name}_routed"] = sql.replace(PLAIN_ROUTE, route)
    return out


def load_migrations(dialect: str) -> list[Migration]:
    """Return every migration of one dialect, ordered by version."""
    found: list[Migration] = []
    for entry in _folder(dialect, "migrations").iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise ValueError(f"{dialect} migrations are not numbered 1..n without gaps")
    return found


def pending_migrations(dialect: str, applied: Iterable[int]) -> list[Migration]:
    """The migrations still to apply, given the versions a database has applied.

    Raises SchemaError when the database is newer than this Conveyor: running old code
    on a newer schema could corrupt it.
    """
    done = set(applied)
    known = load_migrations(dialect)
    if done and max(done) > len(known):
        raise SchemaError(
            f"the database schema is at version {max(done)}, newer than this Conveyor "
            f"knows ({len(known)}); upgrade Conveyor"
        )
    return [m for m in known if m.version not in done]
