"""The API's data definitions, written once: what the handlers check requests against
and what ``/api/v1/openapi.json`` says (JSON Schema 2020-12, as OpenAPI 3.1 takes it).

A job request is a table of ``Field``s; each option field is passed by name to
``task.options(...)``, so a new enqueue option is one more row here. Answers (a job, a
queue) are described from the dataclasses the handlers serialize, so the document
follows the code.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ..._job import MAX_ID
from ..._routing import MAX_REQUIRES, check_requires
from ._http import bad_parameter, invalid


def json_schema(tp: Any) -> dict[str, Any]:
    """A Python type hint as JSON Schema (``{}`` for Any or anything unusual)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        parts = [json_schema(a) for a in args if a is not type(None)]
        nullable = type(None) in args
        if len(parts) == 1 and isinstance(parts[0].get("type"), str) and nullable:
            return {**parts[0], "type": [parts[0]["type"], "null"]}
        return {"anyOf": parts + ([{"type": "null"}] if nullable else [])}
    if origin in (list, tuple, typing.Sequence):
        return {"type": "array", "items": json_schema(args[0]) if args else {}}
    if origin in (dict, typing.Mapping) or tp is dict:
        return {"type": "object"}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"type": "string", "enum": [m.value for m in tp]}
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if tp in simple:
        return {"type": simple[tp]}
    if tp is datetime:
        return {"type": "string", "format": "date-time"}
    return {}


def record_schema(cls: type[Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The object a dataclass becomes in an answer (every field present)."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)
             if not f.name.startswith("_") and f.name not in skip]
    return {"type": "object", "required": names,
            "properties": {name: json_schema(hints[name]) for name in names}}


# -- checks: a JSON value to what the app takes, or TypeError/ValueError saying why -------

def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("must be a string")
    return value


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("must be an integer")
    return value


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("must be a number")
    return value


def _array(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError("must be an array")
    return value


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError("must be an object")
    return value


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError("must be an array of strings")
    return value


def _ids(value: Any) -> list[int]:
    if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise TypeError("must be an array of job ids (integers)")
    return value


def _labels(value: Any) -> dict[str, str]:
    """Worker labels a job requires, checked as ``options(requires=...)`` checks them."""
    if not isinstance(value, dict):
        raise TypeError("must be an object of label keys to string values")
    try:
        return check_requires(value) or {}
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc).removeprefix("requires=: ")) from None


def _timestamp(value: Any) -> datetime:
    text = _string(value)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError("must be an ISO 8601 date-time, e.g. 2026-12-01T09:00:00Z") from None
    if when.tzinfo is None:
        raise ValueError("must carry a timezone (Z or +01:00)")
    return when


@dataclasses.dataclass(frozen=True, slots=True)
class Field:
    """One member of a job request: its schema, its check, where it goes."""

    name: str
    schema: dict[str, Any]
    doc: str
    check: Callable[[Any], Any]
    #: Passed to ``task.options(name=value)`` (else task, args or kwargs).
    option: bool = True
    required: bool = False


JOB_FIELDS: tuple[Field, ...] = (
    Field("task", {"type": "string"}, "The task's name.", _string, option=False,
          required=True),
    Field("args", {"type": "array"}, "Positional arguments (default []).", _array,
          option=False),
    Field("kwargs", {"type": "object"}, "Keyword arguments (default {}).", _object,
          option=False),
    Field("queue", {"type": "string"}, "Queue (default: the task's own).", _string),
    Field("priority", {"type": "integer"}, "Higher runs first (-32768..32767).", _integer),
    Field("delay", {"type": "number", "minimum": 0}, "Seconds from now before it may run.",
          _number),
    Field("run_at", {"type": "string", "format": "date-time"},
          "When it may run (with a timezone); not with delay.", _timestamp),
    Field("max_attempts", {"type": "integer", "minimum": 1}, "Attempts before discard.",
          _integer),
    Field("expires_in", {"type": "number", "exclusiveMinimum": 0},
          "Seconds from now: not started by then, it never runs (cancelled, reason "
          "expired).", _number),
    Field("expires_at", {"type": "string", "format": "date-time"},
          "When it expires (with a timezone); not with expires_in.", _timestamp),
    Field("unique_key", {"type": "string"},
          "At most one live job per key: a duplicate returns the existing job.", _string),
    Field("tags", {"type": "array", "items": {"type": "string"}}, "Tags, added to the task's.",
          _strings),
    Field("requires", {"type": "object", "additionalProperties": {"type": "string"},
                       "maxProperties": MAX_REQUIRES},
          "Worker labels the job requires, e.g. {\"gpu\": \"a100\"}: only workers started "
          "with them run it (default: the task's own; {} for any worker).", _labels),
    Field("depends_on", {"type": "array", "items": {"type": "integer"}},
          "Ids of jobs this one waits on (state pending until they are final).", _ids),
)


def job_request_schema() -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False,
            "required": [f.name for f in JOB_FIELDS if f.required],
            "properties": {f.name: {**f.schema, "description": f.doc} for f in JOB_FIELDS}}


@dataclasses.dataclass(frozen=True, slots=True)
class JobRequest:
    task: Any
    args: list[Any]
    kwargs: dict[str, Any]
    options: dict[str, Any]


def parse_job_request(doc: Any, prefix: str = "") -> JobRequest:
    """A job request checked field by field (422 naming the first bad one)."""
    if not isinstance(doc, dict):
        raise invalid(prefix.rstrip(".") or "body", "a job request is a JSON object")
    fields = {f.name: f for f in JOB_FIELDS}
    for name in doc:
        if name not in fields:
            raise invalid(f"{prefix}{name}", f"unknown field {name[:100]!r}; known: "
                          f"{', '.join(fields)}")
    values: dict[str, Any] = {}
    for field in JOB_FIELDS:
        if doc.get(field.name) is None:
            if field.required:
                raise invalid(f"{prefix}{field.name}", f"{field.name} is required")
            continue
        try:
            values[field.name] = field.check(doc[field.name])
        except (TypeError, ValueError) as exc:
            raise invalid(f"{prefix}{field.name}", f"{field.name} {exc}") from None
    options = {f.name: values[f.name] for f in JOB_FIELDS if f.option and f.name in values}
    return JobRequest(values["task"], values.get("args", []), values.get("kwargs", {}), options)


# -- query and path parameters -----------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class Param:
    """A query or path parameter: its schema (for the document) and its reader."""

    name: str
    where: str
    schema: dict[str, Any]
    doc: str
    read: Callable[[str], Any]
    default: Any = None


def positive(text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 19 or not 0 < int(text) <= MAX_ID:
        raise ValueError("must be a whole number from 1")
    return int(text)


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    def read(text: str) -> int:
        value = positive(text) if text.strip() != "0" else 0
        if not low <= value <= high:
            raise ValueError(f"must be from {low} to {high}")
        return value

    return read


def bounded_seconds(high: float) -> Callable[[str], float]:
    def read(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError("must be a number of seconds") from None
        if not math.isfinite(value) or not 0 <= value <= high:
            raise ValueError(f"must be from 0 to {high:g} seconds")
        return value

    return read


def one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    def read(text: str) -> str:
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text

    return read


def checked(check: Callable[[object], Any]) -> Callable[[str], Any]:
    """A name checked by the app's own rule (queue, task, tag)."""
    def read(text: str) -> Any:
        return check(text)

    return read


def read_params(params: tuple[Param, ...], query: Mapping[str, str],
                path: Mapping[str, str]) -> dict[str, Any]:
    """Each declared parameter read (400 naming a bad one); unknown query parameters
    are refused too, so a misspelt filter never silently lists everything."""
    declared = {p.name for p in params if p.where == "query"}
    for name in query:
        if name not in declared:
            known = ", ".join(sorted(declared)) or "none"
            raise bad_parameter(name[:100], f"unknown parameter; known: {known}")
    out: dict[str, Any] = {}
    for param in params:
        raw = (query if param.where == "query" else path).get(param.name)
        if raw is None or raw == "":
            out[param.name] = param.default
            continue
        try:
            out[param.name] = param.read(raw)
        except (TypeError, ValueError) as exc:
            raise bad_parameter(param.name, str(exc)) from None
    return out


def parameter_doc(param: Param) -> dict[str, Any]:
    schema = dict(param.schema)
    if param.default is not None:
        schema["default"] = param.default
    return {"name": param.name, "in": param.where, "required": param.where == "path",
            "description": param.doc, "schema": schema}
