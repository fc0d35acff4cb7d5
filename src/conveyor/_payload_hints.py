"""Handing stored arguments to a handler as the types its annotations name.

A task's annotations are read once (``typing.get_type_hints``) and compiled into one
converter per parameter. A converter takes the untagged JSON data and returns the
annotated type: ``datetime``, ``date``, ``time``, ``timedelta``, ``UUID``, ``Decimal``,
``bytes``, enums, dataclasses, Pydantic models, types registered on the app, and
containers of them (``list[X]``, ``tuple[X, ...]``, ``set[X]``, ``dict[K, V]``,
``X | None``, unions). Plain JSON values for plain annotations pass as they are:
Conveyor converts, it does not validate. A value that cannot become the annotated type
raises ``ArgumentsError`` (the job is discarded with that message).
"""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
import enum
import inspect
import types
import typing
from collections.abc import Callable
from datetime import date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID

from ._payload_types import ArgumentsError, TypeCodec, has_tag

Converter = Callable[[Any], Any]
_PLAIN = (str, int, float, bool, type(None), list, dict)


def _from_text(cls: Any, parse: Callable[[str], Any]) -> Converter:
    def convert(value: Any) -> Any:
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            return parse(value)
        raise TypeError(f"expected {cls.__name__} data, got {type(value).__name__}")
    return convert


def _decimal(value: Any) -> Decimal:
    if isinstance(value, Decimal):
        return value
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise TypeError(f"expected a number or text, got {type(value).__name__}")
    try:
        return Decimal(str(value))
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a decimal number") from None


def _timedelta(value: Any) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=value)  # a plain number of seconds
    raise TypeError(f"expected a timedelta or seconds, got {type(value).__name__}")


_SIMPLE: dict[Any, Converter] = {
    datetime: _from_text(datetime, datetime.fromisoformat),
    date: _from_text(date, date.fromisoformat),
    time: _from_text(time, time.fromisoformat),
    UUID: _from_text(UUID, UUID),
    Decimal: _decimal,
    timedelta: _timedelta,
}


class HintCompiler:
    """Builds converters for annotations, with the app's registered types."""

    def __init__(self, codec: TypeCodec) -> None:
        self._codec = codec
        self._seen: dict[Any, Converter | None] = {}

    def compile(self, hint: Any) -> Converter | None:
        """A converter for ``hint``, or None when values pass as they are."""
        try:
            hash(hint)
        except TypeError:
            return self._compile(hint)
        if hint not in self._seen:
            self._seen[hint] = None  # a recursive dataclass meets itself: pass through
            self._seen[hint] = self._compile(hint)
        return self._seen[hint]

    def _compile(self, hint: Any) -> Converter | None:
        origin, params = typing.get_origin(hint), typing.get_args(hint)
        if origin is typing.Annotated:
            return self.compile(params[0])
        if origin is typing.Union or origin is types.UnionType:
            return self._union(params)
        if origin is not None:
            return self._generic(origin, params)
        supertype = getattr(hint, "__supertype__", None)  # typing.NewType
        if supertype is not None:
            return self.compile(supertype)
        custom = self._codec.custom_for(hint)
        if custom is not None:  # a registered type wins over the built-in rules
            return _instance_or(hint, custom.decode)
        if hint in _SIMPLE:
            return _SIMPLE[hint]
        if hint in _PLAIN or hint is Any or not isinstance(hint, type):
            return None  # plain JSON, Any, TypeVars, Literal, NewType...: as stored
        if issubclass(hint, enum.Enum):
            return _instance_or(hint, hint)
        if dataclasses.is_dataclass(hint):
            return self._dataclass(hint)
        validate = getattr(hint, "model_validate", None)
        if callable(validate):  # a Pydantic (v2) model
            return _instance_or(hint, validate)
        if hint in (tuple, set, frozenset):
            return _instance_or(hint, hint)
        return None

    def _union(self, params: tuple[Any, ...]) -> Converter | None:
        members = [p for p in params if p is not type(None)]
        converters = [self.compile(p) for p in members]
        if all(c is None for c in converters):
            return None
        exact = tuple(p for p in members if isinstance(p, type))
        if len(members) == 1:
            only = converters[0]
            assert only is not None
            return lambda v: None if v is None else only(v)

        real = [c for c in converters if c is not None]
        lenient = len(real) < len(converters)  # a plain member takes what no other fits

        def convert(value: Any) -> Any:
            if value is None or (exact and type(value) in exact):
                return value
            errors = []
            for c in real:
                try:
                    return c(value)
                except (TypeError, ValueError, ArgumentsError) as exc:
                    errors.append(str(exc))
            if lenient:
                return value
            raise TypeError("no member of the union fits: " + "; ".join(errors))
        return convert

    def _generic(self, origin: Any, params: tuple[Any, ...]) -> Converter | None:
        if origin in (list, cabc.Sequence, cabc.MutableSequence, cabc.Iterable, cabc.Collection):
            return self._items(list, params[0] if params else Any)
        if origin in (set, frozenset, cabc.Set, cabc.MutableSet):
            return self._items(frozenset if origin is frozenset else set, params[0] if params else Any)
        if origin is tuple:
            if len(params) == 2 and params[1] is Ellipsis:
                return self._items(tuple, params[0])
            return self._fixed_tuple(params)
        if origin in (dict, cabc.Mapping, cabc.MutableMapping):
            return self._mapping(*(params or (Any, Any)))
        return None

    def _items(self, make: Callable[[Any], Any], item: Any) -> Converter | None:
        inner = self.compile(item)
        if inner is None and make is list:
            return None

        def convert(value: Any) -> Any:
            if not isinstance(value, list | tuple | set | frozenset):
                raise TypeError(f"expected a list, got {type(value).__name__}")
            return make(value if inner is None else (inner(v) for v in value))
        return convert

    def _fixed_tuple(self, params: tuple[Any, ...]) -> Converter:
        inner = [self.compile(p) for p in params]

        def convert(value: Any) -> Any:
            if not isinstance(value, list | tuple) or len(value) != len(inner):
                raise TypeError(f"expected a list of {len(inner)}, got {value!r:.80}")
            return tuple(v if c is None else c(v) for c, v in zip(inner, value, strict=False))
        return convert

    def _mapping(self, key: Any, val: Any) -> Converter | None:
        keys, values = _KEYS.get(key) or self.compile(key), self.compile(val)
        if keys is None and values is None:
            return None

        def convert(value: Any) -> Any:
            if not isinstance(value, dict):
                raise TypeError(f"expected a dict, got {type(value).__name__}")
            return {k if keys is None else keys(k): v if values is None else values(v)
                    for k, v in value.items()}
        return convert

    def _dataclass(self, cls: type[Any]) -> Converter:
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        hints = safe_hints(cls)
        converters = {name: self.compile(hints.get(name, Any)) for name in fields}

        def convert(value: Any) -> Any:
            if isinstance(value, cls):
                return value
            if not isinstance(value, dict):
                raise TypeError(f"expected a dict of fields, got {type(value).__name__}")
            unknown = sorted(set(value) - set(fields))
            if unknown:
                raise TypeError(f"no field {', '.join(map(repr, unknown))} in {cls.__qualname__}")
            return cls(**{k: v if converters[k] is None else converters[k](v)  # type: ignore[misc]
                          for k, v in value.items()})
        return convert


def _number_key(make: Callable[[str], Any]) -> Converter:
    def convert(key: Any) -> Any:
        return make(key) if isinstance(key, str) else key
    return convert


#: JSON keys are text: the keys of ``dict[int, X]`` come back from it.
_KEYS: dict[Any, Converter] = {int: _number_key(int), float: _number_key(float)}


def _instance_or(cls: type[Any], make: Callable[[Any], Any]) -> Converter:
    def convert(value: Any) -> Any:
        return value if isinstance(value, cls) else make(value)
    return convert


def safe_hints(obj: Any) -> dict[str, Any]:
    """``typing.get_type_hints``, one name at a time when some cannot be resolved (a
    name imported under TYPE_CHECKING): an unresolved annotation is ``Any``."""
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except Exception:
        pass
    raw = getattr(obj, "__annotations__", {}) or {}
    module = inspect.getmodule(obj)
    space = dict(vars(module)) if module is not None else {}
    hints: dict[str, Any] = {}
    for name, ann in raw.items():
        try:
            one = types.SimpleNamespace(__annotations__={name: ann})
            hints[name] = typing.get_type_hints(one, globalns=space, include_extras=True)[name]
        except Exception:
            hints[name] = Any
    return hints


@dataclasses.dataclass(frozen=True, slots=True)
class _Param:
    name: str
    hint: Any
    convert: Converter | None


class CallPlan:
    """How one task's stored arguments become its handler's: each value untagged, then
    converted to its parameter's annotation (built once per task, on first use)."""

    def __init__(self, task: str, fn: Callable[..., Any], codec: TypeCodec) -> None:
        self.task, self._codec = task, codec
        compiler = HintCompiler(codec)
        hints = safe_hints(fn)
        self._positional: list[_Param] = []
        self._named: dict[str, _Param] = {}
        self._rest: _Param | None = None
        self._extra: _Param | None = None
        kinds = inspect.Parameter
        for p in inspect.signature(fn).parameters.values():
            hint = hints.get(p.name, Any)
            try:
                param = _Param(p.name, hint, compiler.compile(hint))
            except Exception:  # an annotation we cannot follow must not block the job
                param = _Param(p.name, hint, None)
            if p.kind is kinds.VAR_POSITIONAL:
                self._rest = param
            elif p.kind is kinds.VAR_KEYWORD:
                self._extra = param
            else:
                if p.kind is not kinds.KEYWORD_ONLY:
                    self._positional.append(param)
                if p.kind is not kinds.POSITIONAL_ONLY:
                    self._named[p.name] = param
        params = [*self._positional, *self._named.values(), self._rest, self._extra]
        #: No annotation asks for a conversion: only tags need reading back.
        self._trivial = all(p is None or p.convert is None for p in params)

    def apply(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """Raises ``ArgumentsError`` naming the argument that cannot be converted."""
        if self._trivial and not self._tagged(args, kwargs):
            return args, kwargs  # the common case: nothing to read back, nothing copied
        positional, count = self._positional, len(self._positional)
        out_args = [self._one(positional[i] if i < count else self._rest, f"#{i}", v)
                    for i, v in enumerate(args)]
        out_kwargs = {k: self._one(self._named.get(k) or self._extra, repr(k), v)
                      for k, v in kwargs.items()}
        return out_args, out_kwargs

    @staticmethod
    def _tagged(args: list[Any], kwargs: dict[str, Any]) -> bool:
        for value in args:
            kind = type(value)
            if (kind is list or kind is dict) and has_tag(value):
                return True
        for value in kwargs.values():
            kind = type(value)
            if (kind is list or kind is dict) and has_tag(value):
                return True
        return False

    def _one(self, param: _Param | None, label: str, value: Any) -> Any:
        name = f"{param.name!r} ({label})" if param is not None else label
        try:
            kind = type(value)
            if kind is list or kind is dict:
                value = self._codec.untag(value)
            if param is None or param.convert is None:
                return value
            return param.convert(value)
        except ArgumentsError as exc:
            raise ArgumentsError(f"argument {name} of task {self.task!r}: {exc}",
                                 permanent=exc.permanent) from None
        except Exception as exc:
            assert param is not None
            raise ArgumentsError(
                f"argument {name} of task {self.task!r} cannot be made a "
                f"{_hint_name(param.hint)}: {type(exc).__name__}: {exc}") from None


def _hint_name(hint: Any) -> str:
    return hint.__qualname__ if isinstance(hint, type) else str(hint).replace("typing.", "")
