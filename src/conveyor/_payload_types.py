"""Rich argument values as tagged JSON: the tag format, and the types that use it.

JSON has no dates, UUIDs or decimals, and pickle is out (a row in the database must
never run code when it is read). A value JSON cannot carry is stored as a small object
under one reserved key, ``{"__conveyor__": "<tag>", "v": <JSON>}``, and read back as
the Python value. The tags are a stable, documented format (docs/arguments.md):

======================  =============================================================
tag                     ``v``
======================  =============================================================
``datetime``            ``datetime.isoformat()`` (an offset when aware; naive stays naive)
``date`` ``time``       ``isoformat()``
``timedelta``           ``[days, seconds, microseconds]``
``uuid``                the canonical 36-character text
``decimal``             ``str(value)`` (exact, ``NaN`` and ``Infinity`` included)
``bytes``               standard base64
``set`` ``frozenset``   the encoded members, sorted by their JSON text (stable keys)
``dict``                a user's own dict that has the key ``__conveyor__`` (escaped)
``encrypted``           the sealed arguments of an ``encrypt=True`` task
any other               a type registered with ``app.register_type(..., tag=...)``
======================  =============================================================

Enums, dataclasses and Pydantic models need no tag: they are stored as their plain JSON
form (the member's value, a dict of fields, ``model_dump(mode="json")``) and rebuilt
from the handler's annotations (``_payload_hints``). Tuples are lists, as in JSON.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import math
import re
from collections.abc import Callable, Mapping
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from ._errors import ConveyorError

#: The reserved key. A user's dict that has it is stored escaped (the ``dict`` tag).
TAG = "__conveyor__"
#: How the key looks in JSON text: a document without it holds no tag to read back.
TAG_TEXT = f'"{TAG}"'
BUILTIN_TAGS = frozenset({"datetime", "date", "time", "timedelta", "uuid", "decimal", "bytes",
                          "set", "frozenset", "dict", "encrypted"})
TAG_NAME = re.compile(r"[a-z][a-z0-9_.:-]{0,63}")  # fullmatch: no trailing newline
MAX_DEPTH = 200


class ArgumentsError(ConveyorError):
    """A job's stored arguments cannot be turned into the handler's arguments.

    ``permanent`` is False when another worker (or this one, once configured) may
    succeed: a type tag or an encryption key this process does not know yet."""

    def __init__(self, message: str, *, permanent: bool = True) -> None:
        super().__init__(message)
        self.permanent = permanent


@dataclasses.dataclass(frozen=True, slots=True)
class CustomType:
    """A type registered by the app: ``encode`` gives JSON-able data, ``decode`` takes it back."""

    cls: type[Any]
    tag: str
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


class Unstorable(TypeError):
    """A value (at ``path`` inside an argument) that no rule can store."""

    def __init__(self, path: str, value: object) -> None:
        kind = type(value)
        super().__init__(f"{kind.__module__}.{kind.__qualname__}" if kind.__module__ != "builtins"
                         else kind.__qualname__)
        self.path, self.type_name = path, str(self)


def _iso(value: date | time) -> str:
    return value.isoformat()


#: Exact type -> (tag, encode). Looked up by ``type(value)`` first: subclasses go the
#: slower ``isinstance`` way (datetime before date: a datetime is a date).
_SCALARS: dict[type[Any], tuple[str, Callable[[Any], Any]]] = {
    datetime: ("datetime", _iso),
    date: ("date", _iso),
    time: ("time", _iso),
    timedelta: ("timedelta", lambda v: [v.days, v.seconds, v.microseconds]),
    UUID: ("uuid", str),
    Decimal: ("decimal", str),
    bytes: ("bytes", lambda v: base64.b64encode(v).decode("ascii")),
    bytearray: ("bytes", lambda v: base64.b64encode(v).decode("ascii")),
}


def _timedelta(v: Any) -> timedelta:
    days, seconds, micros = v
    return timedelta(days=days, seconds=seconds, microseconds=micros)


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "datetime": datetime.fromisoformat,
    "date": date.fromisoformat,
    "time": time.fromisoformat,
    "timedelta": _timedelta,
    "uuid": UUID,
    "decimal": Decimal,
    "bytes": lambda v: base64.b64decode(v.encode("ascii"), validate=True),
}


_JSON_TYPES = frozenset({str, int, float, bool, type(None), list, tuple, dict})


def _key_text(key: Any, path: str) -> Any:
    """A dict key as JSON keeps it: str, int, float, bool and None as they are (JSON
    writes them as text), the rich scalars as their text form, enums as their value."""
    if key is None or isinstance(key, str | int | float):
        return key
    if isinstance(key, enum.Enum):
        return _key_text(key.value, path)
    if isinstance(key, datetime | date | time):
        return key.isoformat()
    if isinstance(key, UUID | Decimal):
        return str(key)
    raise Unstorable(f"{path} (a key)", key)


class TypeCodec:
    """Turns argument values into tagged JSON data and back; one per app, with the
    types the app registered (``app.register_type``)."""

    def __init__(self) -> None:
        self._by_type: dict[type[Any], CustomType] = {}
        self._by_tag: dict[str, CustomType] = {}
        #: A registered type is a str, int, float, list, tuple or dict subclass, which the
        #: plain JSON encoder would take as its base type: every enqueue must tag.
        self.shadows_json = False

    def register(self, cls: type[Any], encode: Callable[[Any], Any],
                 decode: Callable[[Any], Any], tag: str | None = None) -> None:
        if not isinstance(cls, type):
            raise TypeError(f"register_type takes a class, got {cls!r}")
        if not callable(encode) or not callable(decode):
            raise TypeError("register_type needs encode and decode functions")
        tag = cls.__name__.lower() if tag is None else tag
        if not isinstance(tag, str) or not TAG_NAME.fullmatch(tag):
            raise ValueError(f"invalid type tag {tag!r}: lowercase letters, digits, '_', '.', ':' "
                             "or '-', starting with a letter, at most 64 characters")
        if cls in _JSON_TYPES:
            raise ValueError(f"{cls.__name__} is plain JSON; register a subclass of it instead")
        if tag in BUILTIN_TAGS:
            raise ValueError(f"type tag {tag!r} is built in; choose another tag=")
        if tag in self._by_tag or cls in self._by_type:
            raise ValueError(f"{cls.__qualname__} or tag {tag!r} is already registered")
        custom = CustomType(cls, tag, encode, decode)
        self._by_type[cls] = self._by_tag[tag] = custom
        self.shadows_json |= issubclass(cls, str | int | float | list | tuple | dict)

    def custom_for(self, cls: Any) -> CustomType | None:
        return self._by_type.get(cls) if isinstance(cls, type) else None

    # -- encoding ------------------------------------------------------------------------------

    def encode(self, value: Any, path: str = "", depth: int = 0) -> Any:
        """``value`` as JSON-able data with tags; raises ``Unstorable`` naming where."""
        kind = type(value)
        if value is None or kind is str or kind is int or kind is bool:
            return value
        if kind is float:
            if not math.isfinite(value):
                raise ValueError(f"{value!r} at {path or 'the top'} is not valid JSON")
            return value
        if depth > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels at {path}")
        if kind is list or kind is tuple:
            return [self.encode(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
        if kind is dict:
            return self._encode_dict(value, path, depth)
        scalar = _SCALARS.get(kind)
        if scalar is not None and kind not in self._by_type:  # a registered type wins
            return {TAG: scalar[0], "v": scalar[1](value)}
        return self._encode_other(value, path, depth)

    def _encode_dict(self, value: Mapping[Any, Any], path: str, depth: int) -> Any:
        out = {_key_text(k, path): self.encode(v, f"{path}[{k!r}]", depth + 1)
               for k, v in value.items()}
        return {TAG: "dict", "v": out} if TAG in out else out

    def _encode_other(self, value: Any, path: str, depth: int) -> Any:
        custom = self._by_type.get(type(value))
        if custom is None and self._by_type:
            custom = next((c for c in self._by_type.values() if isinstance(value, c.cls)), None)
        if custom is not None:
            return {TAG: custom.tag, "v": self.encode(custom.encode(value), f"{path}<{custom.tag}>",
                                                      depth + 1)}
        if isinstance(value, enum.Enum):
            return self.encode(value.value, path, depth + 1)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
            return self._encode_dict(fields, path, depth)
        dump = getattr(value, "model_dump", None)  # a Pydantic (v2) model
        if dump is not None and callable(getattr(type(value), "model_validate", None)):
            return self.encode(dump(mode="json"), path, depth + 1)
        for cls, (tag, encode) in _SCALARS.items():  # subclasses (e.g. pendulum.DateTime)
            if isinstance(value, cls):
                return {TAG: tag, "v": encode(value)}
        if isinstance(value, str | int | float):  # str and int subclasses (not enums)
            return self.encode({str: str, int: int, float: float}[_base(value)](value), path, depth)
        if isinstance(value, list | tuple):
            return [self.encode(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
        if isinstance(value, Mapping):
            return self._encode_dict(value, path, depth)
        if isinstance(value, set | frozenset):
            members = sorted((self.encode(v, f"{path}{{}}", depth + 1) for v in value), key=_sort_key)
            return {TAG: "frozenset" if isinstance(value, frozenset) else "set", "v": members}
        raise Unstorable(path, value)

    # -- decoding ------------------------------------------------------------------------------

    def untag(self, value: Any) -> Any:
        """Tagged data back to Python values (no annotations needed). Enums, dataclasses
        and models stay plain JSON here; the handler's annotations rebuild them."""
        kind = type(value)
        if kind is list:  # rebuilt only when a member changed: plain data is not copied
            for index, member in enumerate(value):
                if type(member) is list or type(member) is dict:
                    new = self.untag(member)
                    if new is not member:
                        return value[:index] + [self.untag(v) for v in value[index:]]
            return value
        if kind is not dict:
            return value
        tag = value.get(TAG)
        if tag is not None:
            return self._untag(tag, value.get("v"))
        for member in value.values():
            if type(member) is list or type(member) is dict:
                new = self.untag(member)
                if new is not member:
                    return {k: self.untag(v) for k, v in value.items()}
        return value

    def _untag(self, tag: Any, v: Any) -> Any:
        if tag == "dict" and isinstance(v, dict):
            return {k: self.untag(x) for k, x in v.items()}
        if tag in ("set", "frozenset") and isinstance(v, list):
            members = (_hashable(self.untag(x)) for x in v)
            return set(members) if tag == "set" else frozenset(members)
        decode = _DECODERS.get(tag) if isinstance(tag, str) else None
        try:
            if decode is not None:
                return decode(v)
            custom = self._by_tag.get(tag) if isinstance(tag, str) else None
            if custom is not None:
                return custom.decode(self.untag(v))
        except Exception as exc:
            raise ArgumentsError(f"a stored {tag!r} value cannot be read back: "
                                 f"{type(exc).__name__}: {exc}") from None
        if tag == "encrypted":
            raise ArgumentsError("encrypted arguments inside other arguments cannot be read")
        raise ArgumentsError(
            f"unknown type tag {tag!r}: the job was enqueued by code that registered it "
            "(app.register_type); register it in this worker's app too", permanent=False)


def has_tag(value: list[Any] | dict[str, Any]) -> bool:
    """Whether stored data holds a tag anywhere (the worker's fast path: most jobs do not)."""
    if type(value) is dict:
        if TAG in value:
            return True
        members: Any = value.values()
    else:
        members = value
    for member in members:
        kind = type(member)
        if (kind is dict or kind is list) and has_tag(member):
            return True
    return False


def _base(value: str | int | float) -> type[Any]:
    return str if isinstance(value, str) else int if isinstance(value, int) else float


def _sort_key(encoded: Any) -> str:
    return json.dumps(encoded, sort_keys=True, default=str)


def _hashable(value: Any) -> Any:
    """Set members come back hashable: lists as tuples, dicts are refused by set()."""
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


#: The codec of code that has no app at hand (the built-in types only).
DEFAULT_CODEC = TypeCodec()
