"""Row decoding for every backend, with one JSON policy: a value that cannot be read
(written around the API) becomes None (or the column's empty value), never an error
that would block the queue; text that is not UTF-8 arrives as U+FFFD (each backend's
connection sees to that). Job records are built at a tenth of the dataclass cost, and
JSON and timestamps are decoded with shortcuts for the common values.

``Job`` is a frozen, slotted dataclass: its generated ``__init__`` sets each of its two
dozen fields through ``object.__setattr__``, about 6 µs per job on a slow core, more
than a no-op job costs everything else. ``make_job`` fills an identical, unfrozen twin
class and then switches the instance's class to ``Job``; the result is a genuine Job
(equal, frozen, picklable). A self-check at import falls back to ``Job(...)``. The
same goes for ``JobInsert`` (one per enqueued job) and ``JobAck`` (one per outcome).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from .._job import Job, JobState, JsonText
from .._job import loads as loads  # its home is the model; storage code imports it here
from .control_types import LeaderRow, NodeRow, QueueRow, ScheduleRow
from .job_types import JobAck, JobInsert

STATES: dict[str, JobState] = {state.value: state for state in JobState}
T = TypeVar("T")


def _compile_builder(cls: type[T]) -> Callable[..., T]:
    """A function with the parameters and defaults of ``cls(...)`` (a frozen, slotted
    dataclass) that fills an unfrozen twin with the same slots, then makes it a ``cls``."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    twin = type(f"_{cls.__name__}Twin", (), {"__slots__": cls.__slots__})  # type: ignore[attr-defined]
    env: dict[str, Any] = {"_new": object.__new__, "_Twin": twin, "_Cls": cls,
                           "_MISSING": dataclasses.MISSING}
    params, body = [], []
    for f in fields:
        if f.default is not dataclasses.MISSING:
            env[f"_d_{f.name}"] = f.default
            params.append(f"{f.name}=_d_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"_f_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_MISSING")
            body.append(f"    if {f.name} is _MISSING: {f.name} = _f_{f.name}()\n")
        else:
            params.append(f.name)
    required = [p for p in params if "=" not in p]
    optional = [p for p in params if "=" in p]
    source = (f"def build({', '.join(required + ['*'] * bool(optional) + optional)}):\n"
              + "".join(body) + "    o = _new(_Twin)\n"
              + "".join(f"    o.{f.name} = {f.name}\n" for f in fields)
              + "    o.__class__ = _Cls\n    return o\n")
    exec(source, env)  # generated from the class's own fields, so it follows the model
    builder: Callable[..., T] = env["build"]
    return builder


def fast_constructor(cls: type[T]) -> Callable[..., T]:
    """``cls(...)`` at a fraction of the cost, checked once: falls back to ``cls``."""
    sample: dict[str, Any] = {f.name: f"x{i}" for i, f in enumerate(dataclasses.fields(cls))}  # type: ignore[arg-type]
    try:
        builder = _compile_builder(cls)
        built = builder(**sample)
        if type(built) is cls and built == cls(**sample):
            return builder
    except Exception:  # pragma: no cover - a model this trick cannot mirror
        pass
    return cls  # pragma: no cover


def fast_replacer(cls: type[T], *names: str) -> Callable[..., T]:
    """``dataclasses.replace(obj, name=value, ...)`` for the ``names`` given positionally,
    at the cost of ``fast_constructor`` (checked once: falls back to ``replace``)."""
    fields = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    twin = type(f"_{cls.__name__}Twin", (), {"__slots__": cls.__slots__})  # type: ignore[attr-defined]
    env: dict[str, Any] = {"_new": object.__new__, "_Twin": twin, "_Cls": cls}
    source = (f"def replace(_obj, {', '.join(names)}):\n    o = _new(_Twin)\n"
              + "".join(f"    o.{f} = {f if f in names else '_obj.' + f}\n" for f in fields)
              + "    o.__class__ = _Cls\n    return o\n")

    def slow(obj: T, *values: Any) -> T:
        return dataclasses.replace(obj, **dict(zip(names, values, strict=True)))  # type: ignore[type-var]

    try:
        exec(source, env)  # generated from the class's own fields, so it follows the model
        sample = cls(**{f: f"x{i}" for i, f in enumerate(fields)})
        values = [f"y{i}" for i in range(len(names))]
        if env["replace"](sample, *values) == slow(sample, *values):
            replacer: Callable[..., T] = env["replace"]
            return replacer
    except Exception:  # pragma: no cover - a model this trick cannot mirror
        pass
    return slow  # pragma: no cover


make_job: Callable[..., Job] = fast_constructor(Job)
make_insert: Callable[..., JobInsert] = fast_constructor(JobInsert)
make_ack: Callable[..., JobAck] = fast_constructor(JobAck)
#: A JobInsert like another but with other arguments: ``(insert, args_json, kwargs_json)``.
insert_with_arguments: Callable[..., JobInsert] = fast_replacer(
    JobInsert, "args_json", "kwargs_json")


class Timestamps:
    """Unix seconds to aware datetimes, memoised: a batch shares a few distinct values."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[float, datetime] = {}

    def __call__(self, value: Any) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, datetime):
            return utc(value)
        found = self._seen.get(value)
        if found is None:
            found = self._seen[value] = datetime.fromtimestamp(float(value), UTC)
        return found


def jobs_from_rows(columns: Sequence[str], rows: Iterable[Sequence[Any]],
                   json_text: bool) -> list[Job]:
    """Jobs from tuple rows of ``SELECT *`` / ``RETURNING *`` (``columns`` in order)."""
    at = {name: i for i, name in enumerate(columns)}
    ts = Timestamps()
    js = loads if json_text else _same
    i_id, i_task, i_queue, i_args, i_kwargs = (at[c] for c in ("id", "task", "queue", "args",
                                                                "kwargs"))
    i_prio, i_state, i_att, i_max = (at[c] for c in ("priority", "state", "attempt",
                                                      "max_attempts"))
    i_sched, i_created, i_tried, i_fin = (at[c] for c in ("scheduled_at", "created_at",
                                                           "attempted_at", "finished_at"))
    i_err, i_res, i_tags, i_meta = (at[c] for c in ("errors", "result", "tags", "meta"))
    i_owner, i_token, i_exp, i_cancel = (at[c] for c in ("lease_owner", "lease_token",
                                                          "lease_expires_at", "cancel_requested"))
    i_ukey, i_ckey = at["unique_key"], at["concurrency_key"]
    i_ran, i_run = at.get("ran_on"), at.get("run_time")  # schema 6
    i_wf, i_batch, i_deps = at.get("workflow_id"), at.get("batch_id"), at.get("deps_pending")
    i_prog, i_pmsg = at.get("progress"), at.get("progress_message")  # schema 11
    i_req = at.get("requires")  # schema 18
    i_expires = at.get("expires_at")  # schema 19
    i_fair = at.get("fair_key")  # schema 20
    i_dup = at.get("duplicate")  # job_replace_unique says which rows it replaced
    return [
        make_job(id=r[i_id], task=r[i_task], queue=r[i_queue], args=js(r[i_args]),
                 kwargs=js(r[i_kwargs]), priority=r[i_prio], state=STATES[r[i_state]],
                 attempt=r[i_att], max_attempts=r[i_max], scheduled_at=ts(r[i_sched]),
                 created_at=ts(r[i_created]), attempted_at=ts(r[i_tried]),
                 finished_at=ts(r[i_fin]), errors=js(r[i_err], []), result=js(r[i_res]),
                 tags=js(r[i_tags], []), meta=js(r[i_meta], {}), lease_owner=r[i_owner],
                 lease_token=r[i_token], lease_expires_at=ts(r[i_exp]),
                 cancel_requested=bool(r[i_cancel]), unique_key=r[i_ukey],
                 concurrency_key=r[i_ckey],
                 ran_on=None if i_ran is None else r[i_ran],
                 run_time=None if i_run is None else r[i_run],
                 workflow_id=None if i_wf is None else r[i_wf],
                 batch_id=None if i_batch is None else r[i_batch],
                 deps_pending=0 if i_deps is None else r[i_deps],
                 progress=None if i_prog is None else r[i_prog],
                 progress_message=None if i_pmsg is None else r[i_pmsg],
                 requires=None if i_req is None else js(r[i_req]),
                 expires_at=None if i_expires is None else ts(r[i_expires]),
                 fair_key=None if i_fair is None else r[i_fair],
                 duplicate=False if i_dup is None else bool(r[i_dup]))
        for r in rows
    ]


#: The columns a claim returns, in this order; ``claim_returning`` renders them into
#: both dialects' ``job_fetch_available``. The other Job fields are the same for every
#: claimed job (``CLAIM_CONSTANTS``); columns no Job field holds are never read.
CLAIM_COLUMNS = (
    "id", "task", "queue", "args", "kwargs", "priority", "attempt", "max_attempts",
    "scheduled_at", "created_at", "attempted_at", "errors", "tags", "meta", "lease_token",
    "lease_expires_at", "cancel_requested", "unique_key", "concurrency_key", "ran_on",
    "run_time", "workflow_id", "batch_id", "deps_pending", "progress", "progress_message",
    "requires",
    "expires_at",
    "fair_key",
)
#: JSON columns, read as text on both dialects and decoded by the Job on first access.
CLAIM_JSON = frozenset({"args", "kwargs", "errors", "tags", "meta", "requires"})
#: Timestamp columns: unix seconds on SQLite, converted once per distinct value.
CLAIM_TIMES = frozenset({"scheduled_at", "created_at", "attempted_at", "lease_expires_at",
                         "expires_at"})
#: Of those, the ones NULL for almost every job (decoded without the memo's lookup).
CLAIM_RARE_TIMES = frozenset({"expires_at"})
#: Job fields a claim does not read, as Python expressions (``owner``: the claimer's
#: id, which the claim writes into ``lease_owner``). A claimed job is running, not
#: finished, and has no result yet.
CLAIM_CONSTANTS = {"state": "_RUNNING", "finished_at": "None", "result": "None",
                   "lease_owner": "owner", "duplicate": "False", "_waiter": "None"}


#: SQLite returns the claim columns that hold one usual value for nearly every job as one
#: column (``rare``): NULL while each holds the value given here (SQL; None: NULL), else
#: a JSON array of them. Each column a claim returns is a Python object made on the
#: storage thread, a drain's busiest part: these ten cost it 1 µs per job of its 7. Not
#: the REAL columns: SQLite's JSON writes 15 digits (a unix time would lose its µs).
CLAIM_PACKED: dict[str, str | None] = {
    "errors": "'[]'", "cancel_requested": "0", "unique_key": None, "concurrency_key": None,
    "ran_on": None, "workflow_id": None, "batch_id": None, "deps_pending": "0",
    "progress_message": None, "requires": None}
#: What a Job holds for each when ``rare`` is NULL (Python; a new list per job).
_PACKED_USUAL = {"errors": "[]", "cancel_requested": "False", "deps_pending": "0"}


def claim_columns(dialect: str) -> tuple[str, ...]:
    """The columns of a claim's rows in ``dialect``, in order (SQLite: ``rare`` last)."""
    if dialect != "sqlite":
        return CLAIM_COLUMNS
    return (*(c for c in CLAIM_COLUMNS if c not in CLAIM_PACKED), "rare")


def claim_returning(dialect: str) -> str:
    """The RETURNING list of a claim (``{claim_columns}`` in its SQL): JSON columns as
    text on PostgreSQL too, so that decoding waits for the handler."""
    if dialect == "sqlite":
        usual = " AND ".join(f"({c} IS NULL)" if v is None else f"({c} = {v})"  # not
                             for c, v in CLAIM_PACKED.items())  # routed_claims' filter
        return (", ".join(claim_columns(dialect)[:-1]) + f", CASE WHEN {usual} THEN NULL"
                f" ELSE json_array({', '.join(CLAIM_PACKED)}) END AS rare")
    return ", ".join(f"j.{c}::text AS {c}" if c in CLAIM_JSON else f"j.{c}"
                     for c in CLAIM_COLUMNS)


def _slot(c: str, v: str, seconds: bool, indent: str = "        ") -> str:
    """The generated lines that set Job field ``c`` from the value named ``v``."""
    if c in CLAIM_JSON:  # loads's shortcuts; the rest is decoded on first read
        return (f"{indent}o.{c} = {v} if {v} is None else [] if {v} == '[]' else {{}} "
                f"if {v} == '{{}}' else _Text({v})\n")
    if c in CLAIM_RARE_TIMES and seconds:  # NULL for almost every job: no memo
        return f"{indent}o.{c} = {v} if {v} is None else _from(float({v}), _utc)\n"
    if c in CLAIM_TIMES and seconds:
        return (f"{indent}t = seen.get({v})\n{indent}if t is None and {v} is not None:\n"
                f"{indent}    t = seen[{v}] = _from(float({v}), _utc)\n{indent}o.{c} = t\n")
    if c == "cancel_requested":
        return f"{indent}o.{c} = True if {v} else False\n"
    return f"{indent}o.{c} = {v}\n"


def _packed_slots(i: int, seconds: bool) -> str:
    """The lines that set the CLAIM_PACKED fields from ``rare`` (column ``i``)."""
    usual = "".join(f"            o.{c} = {_PACKED_USUAL.get(c, 'None')}\n"
                    for c in CLAIM_PACKED)
    packed = "".join(f"            x = v[{j}]\n" + _slot(c, "x", seconds, " " * 12)
                     for j, c in enumerate(CLAIM_PACKED))
    return (f"        v = r[{i}]\n        if v is None:\n{usual}        else:\n"
            f"            v = _loads(v)\n{packed}")


def _compile_claimed(seconds: bool) -> Callable[[Iterable[Sequence[Any]], str], list[Job]]:
    """``claimed(rows, owner)``: Jobs from claim rows (``claim_columns`` in order), each
    slot set straight from its column, as ``make_job`` does without the keyword call.
    ``seconds``: timestamps arrive as unix seconds and the usual values packed (SQLite),
    else datetimes, every column its own (PostgreSQL)."""
    names = {f.name for f in dataclasses.fields(Job)}
    if names != set(CLAIM_COLUMNS) | CLAIM_CONSTANTS.keys():  # a new field needs a place
        raise RuntimeError(f"claim columns out of step with Job: {names ^ set(CLAIM_COLUMNS)}")
    twin = type("_ClaimedTwin", (), {"__slots__": Job.__slots__})
    env: dict[str, Any] = {"_new": object.__new__, "_Twin": twin, "_Job": Job,
                           "_Text": JsonText, "_RUNNING": JobState.RUNNING,
                           "_utc": UTC, "_from": datetime.fromtimestamp, "_loads": json.loads}
    body = []
    for i, c in enumerate(claim_columns("sqlite" if seconds else "postgres")):
        body.append(_packed_slots(i, seconds) if c == "rare"
                    else f"        v = r[{i}]\n" + _slot(c, "v", seconds))
    body += [f"        o.{name} = {value}\n" for name, value in CLAIM_CONSTANTS.items()]
    source = ("def claimed(rows, owner):\n    seen = {}\n    out = []\n    add = out.append\n"
              "    for r in rows:\n        o = _new(_Twin)\n" + "".join(body)
              + "        o.__class__ = _Job\n        add(o)\n    return out\n")
    exec(source, env)  # generated from the column lists, so it follows them
    claimed: Callable[[Iterable[Sequence[Any]], str], list[Job]] = env["claimed"]
    return claimed


#: Jobs from claim rows: ``claimed_from_seconds`` on SQLite, ``claimed_from_datetimes``
#: on PostgreSQL; arguments and the other JSON columns are decoded on first access.
claimed_from_seconds = _compile_claimed(seconds=True)
claimed_from_datetimes = _compile_claimed(seconds=False)


def _same(value: Any, unreadable: Any = None) -> Any:
    return value


def job_from_row(row: Mapping[str, Any], json_text: bool) -> Job:
    """One Job from a mapping row (``sqlite3.Row`` or a psycopg dict row), decoded by
    ``jobs_from_rows``; ``json_text`` says JSON columns arrive as text (SQLite)."""
    columns = list(row.keys())
    return jobs_from_rows(columns, [[row[c] for c in columns]], json_text)[0]


def sort_for_claim(jobs: list[Job]) -> list[Job]:
    """RETURNING order is not guaranteed; run claimed jobs in claim order."""
    jobs.sort(key=lambda j: (-j.priority, j.scheduled_at, j.id))
    return jobs


def utc(value: datetime) -> datetime:
    """A time read from PostgreSQL, in ``datetime.UTC``: Conveyor's own sessions run in
    UTC, a caller's own connection may run in another zone (the same instant)."""
    return value if value.tzinfo is UTC else value.astimezone(UTC)


def ts(value: Any) -> datetime | None:
    """A timestamp column (unix seconds on SQLite, a datetime on PostgreSQL), in UTC."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return utc(value)
    return datetime.fromtimestamp(float(value), UTC)


def _when(value: Any) -> datetime:
    found = ts(value)
    assert found is not None
    return found


def _json(value: Any, json_text: bool, unreadable: Any = None) -> Any:
    return loads(value, unreadable) if json_text else value


def queue_row(r: Any) -> QueueRow:
    return QueueRow(
        name=r["name"], paused=bool(r["paused"]), concurrency=r["concurrency"],
        scope=r["scope"], rate_limit=r["rate_limit"], updated_at=_when(r["updated_at"]),
        backoff=r["backoff"], completed_retention=_seconds(r["completed_retention"]),
        discarded_retention=_seconds(r["discarded_retention"]),
    )


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


def node_row(r: Any, json_text: bool) -> NodeRow:
    return NodeRow(
        id=r["id"], hostname=r["hostname"], pid=int(r["pid"]),
        queues=_json(r["queues"], json_text, {}), tasks=_json(r["tasks"], json_text, []),
        started_at=_when(r["started_at"]), heartbeat_at=_when(r["heartbeat_at"]),
        ttl=float(r["ttl"]), alive=bool(r["alive"]),
        labels=_json(r["labels"], json_text, {}), version=r["version"],
        serves=_json(r["serves"], json_text),
    )


def leader_row(r: Any) -> LeaderRow:
    return LeaderRow(
        name=r["name"], node_id=r["node_id"], term=int(r["term"]),
        elected_at=_when(r["elected_at"]), expires_at=_when(r["expires_at"]),
    )


def schedule_row(r: Any, json_text: bool) -> ScheduleRow:
    return ScheduleRow(
        name=r["name"], task=r["task"], cron=r["cron"], timezone=r["timezone"],
        args=_json(r["args"], json_text, []), kwargs=_json(r["kwargs"], json_text, {}),
        queue=r["queue"], priority=r["priority"], misfire=r["misfire"],
        backfill=int(r["backfill"]), paused=bool(r["paused"]),
        last_tick=ts(r["last_tick"]), last_job_id=r["last_job_id"],
        created_at=_when(r["created_at"]),
    )


def plain_completed(ack: JobAck) -> bool:
    """An ack the narrow ``job_ack_completed`` statement can write."""
    return (ack.state is JobState.COMPLETED and ack.error_json is None and ack.delay is None
            and ack.attempt_delta == 0)
