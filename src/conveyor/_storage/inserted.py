"""The Jobs an insert returns, built from what was sent and what the database assigned
(ids, states, due and creation times) instead of reading the rows back:
``jobs_from_inserts`` (one Job per insert) and ``jobs_from_run`` (a run of inserts that
share all but their arguments). Compiled from ``Job``'s own fields, like the claim's
builder in ``rows.py``; apart from it because only the backends' insert paths use them,
which keeps ``rows.py`` (rows read back, the fast constructors) within the size guideline.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from .._job import Job, JsonText
from .job_types import JobInsert
from .rows import STATES, Timestamps

#: Job fields of a freshly inserted job, as expressions over the insert ``j``, its id
#: ``i``, state ``s``, due time ``due`` and creation time ``made``; every other field
#: takes its default. JSON fields keep the text that was sent: decoded on first access.
_INSERTED_FIELDS = {
    "id": "i", "task": "j.task", "queue": "j.queue", "priority": "j.priority",
    "state": "_STATES[s]", "attempt": "0", "max_attempts": "j.max_attempts",
    "scheduled_at": "due if type(due) is _dt else ts(due)",
    "created_at": "made if type(made) is _dt else ts(made)", "errors": "_list",
    "concurrency_key": "j.concurrency_key", "fair_key": "j.fair_key",
}
#: JSON fields of an insert: the empty values most jobs carry are made without a
#: ``JsonText``; any other value is decoded on first read.
_INSERTED_JSON = {"args": "args_json", "kwargs": "kwargs_json", "tags": "tags_json",
                  "meta": "meta_json"}


def _builder_env() -> tuple[tuple[dataclasses.Field[Any], ...], dict[str, Any]]:
    """Job's fields and the names a generated builder uses (a twin class with Job's
    slots, filled and then made a Job, as ``rows.fast_constructor`` does)."""
    twin = type("_InsertedTwin", (), {"__slots__": Job.__slots__})
    return dataclasses.fields(Job), {
        "_new": object.__new__, "_Twin": twin, "_Job": Job, "_Text": JsonText,
        "_STATES": STATES, "_dt": datetime, "Timestamps": Timestamps,
        "_list": JsonText("[]"), "_dict": JsonText("{}")}


def _compile_inserted() -> Callable[..., list[Job]]:
    """``inserted(inserts, ids, states, scheduled, created)``: each Job's slots set
    straight from what was sent, as ``claimed_from_seconds`` does for a claim."""
    fields, env = _builder_env()
    body = []
    for f in fields:
        if f.name in _INSERTED_JSON:
            body.append(f"        v = j.{_INSERTED_JSON[f.name]}\n        o.{f.name} = _list "
                        f"if v == '[]' else _dict if v == '{{}}' else _Text(v)\n")
        elif f.name in _INSERTED_FIELDS:
            body.append(f"        o.{f.name} = {_INSERTED_FIELDS[f.name]}\n")
        elif f.default is not dataclasses.MISSING:
            env[f"_d_{f.name}"] = f.default
            body.append(f"        o.{f.name} = _d_{f.name}\n")
        else:  # pragma: no cover - a new field without a default needs a place above
            raise RuntimeError(f"inserted Jobs have no value for field {f.name!r}")
    source = ("def inserted(inserts, ids, states, scheduled, created):\n"
              "    ts = Timestamps()\n    out = []\n    add = out.append\n"
              "    for j, i, s, due, made in zip(inserts, ids, states, scheduled, created,"
              " strict=True):\n        o = _new(_Twin)\n" + "".join(body)
              + "        o.__class__ = _Job\n        add(o)\n    return out\n")
    exec(source, env)  # generated from Job's own fields, so it follows the model
    inserted: Callable[..., list[Job]] = env["inserted"]
    return inserted


def _compile_run_jobs() -> Callable[..., list[Job]]:
    """``jobs_from_run(base, args, ids, state, due, made)``: the Jobs of a run of
    inserts (``lazy_inserts.InsertRun``) as ``jobs_from_inserts`` makes them, with what
    they share (all but the id and the arguments) worked out once for the run."""
    fields, env = _builder_env()
    shared, each = [], []
    for f in fields:
        if f.name == "id":
            each.append("        o.id = i\n")
            continue
        if f.name == "args":
            each.append("        o.args = _list if a == '[]' else _dict if a == '{}' "
                        "else _Text(a)\n")
            continue
        if f.name in _INSERTED_JSON:
            value = (f"_list if j.{_INSERTED_JSON[f.name]} == '[]' else _dict if "
                     f"j.{_INSERTED_JSON[f.name]} == '{{}}' else _Text(j.{_INSERTED_JSON[f.name]})")
        elif f.name in _INSERTED_FIELDS:
            value = _INSERTED_FIELDS[f.name]
        elif f.default is not dataclasses.MISSING:
            env[f"_d_{f.name}"] = f.default
            value = f"_d_{f.name}"
        else:  # pragma: no cover - a new field without a default needs a place above
            raise RuntimeError(f"inserted Jobs have no value for field {f.name!r}")
        shared.append(f"    c_{f.name} = {value}\n")
        each.append(f"        o.{f.name} = c_{f.name}\n")
    source = ("def jobs_from_run(j, args, ids, s, due, made):\n    ts = Timestamps()\n"
              + "".join(shared) + "    out = []\n    add = out.append\n"
              "    for i, a in zip(ids, args, strict=True):\n        o = _new(_Twin)\n"
              + "".join(each) + "        o.__class__ = _Job\n        add(o)\n    return out\n")
    exec(source, env)  # generated from Job's own fields, so it follows the model
    built: Callable[..., list[Job]] = env["jobs_from_run"]
    return built


#: The Jobs of a run of inserts, from what the database assigned them (ids; the state,
#: due and creation times they share): ``jobs_from_run(base, args, ids, state, due,
#: made)``, each ``base`` with one of ``args`` as its arguments, as ``jobs_from_inserts``.
jobs_from_run: Callable[[JobInsert, Sequence[str], Sequence[int], str, Any, Any],
                        list[Job]] = _compile_run_jobs()


#: The Jobs a plain insert wrote, from what was sent and what the database assigned
#: (ids, states, due and creation times), without reading the rows back:
#: ``jobs_from_inserts(inserts, ids, states, scheduled, created)``. Arguments, tags and
#: meta keep the JSON text that was sent, decoded on first access (the values
#: ``get_job`` would decode from the same text).
jobs_from_inserts: Callable[[Sequence[JobInsert], Sequence[int], Sequence[str],
                             Sequence[Any], Sequence[Any]], list[Job]] = _compile_inserted()
