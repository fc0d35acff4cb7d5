"""Validation and JSON encoding of everything a job carries. JSON only, never pickle."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ._errors import PayloadTooLargeError
from ._payload_types import DEFAULT_CODEC, TAG_TEXT, TypeCodec, Unstorable

# Names are checked with ``fullmatch``: ``$`` would let a trailing newline through.
TASK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,199}")
QUEUE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
#: Most tags one job carries (its task's and the enqueue's together), and the most
#: characters in one tag; their JSON counts, with meta's, toward max_payload_bytes.
MAX_TAGS = 50
MAX_TAG_CHARS = 100
TAG = re.compile(rf"[^\x00-\x1f]{{1,{MAX_TAG_CHARS}}}")
MAX_ATTEMPTS_LIMIT = 10_000
#: The furthest a job can be put off (delay=, run_at=, a snooze, a backoff): 100 years.
MAX_DELAY_SECONDS = 100 * 365.25 * 86_400
MAX_DELAY_TEXT = "100 years"
#: What an argument may be besides JSON (docs/arguments.md), for error messages.
STORED_TYPES = ("datetime, date, time, timedelta, UUID, Decimal, bytes, set, Enum, "
                "dataclass, Pydantic model")


#: One encoder for every call: ``json.dumps`` with options builds a new one each time.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False)


#: JSON text that neither database stores: PostgreSQL's jsonb refuses the escape \u0000,
#: and a lone surrogate is not UTF-8 at all. Either fails the whole write it is in.
_UNSTORABLE = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000|[\ud800-\udfff]")


def storable(text: str) -> str:
    """JSON ``text`` with NUL escapes and lone surrogates replaced by U+FFFD, so that a
    result or an error can always be written (a failing ack would be retried forever)."""
    if text.isascii() and "\\u0000" not in text:
        return text
    return _UNSTORABLE.sub(lambda m: (m.group(1) or "") + "\ufffd", text)


def _refuse_unstorable(task: str, what: str, text: str) -> None:
    if text != storable(text):
        raise ValueError(
            f"there is a NUL character or a lone surrogate in the {what} of task {task!r}, "
            "which the databases cannot store; encode such text first (e.g. base64)"
        )


def dumps(value: Any) -> str:
    """Compact, strict JSON: NaN and Infinity are refused, as JSON itself does."""
    return _ENCODER.encode(value)


def _unchecked_encoder() -> Callable[[Any], str]:
    """``dumps`` at a third of its cost, for arguments: the C encoder built once, with
    no circular-reference bookkeeping (a cycle raises RecursionError instead, which
    ``encode_arguments`` turns into its own error like any unencodable value)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython always has it
        return dumps
    encode = make(None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",",
                  False, False, False)

    def fast(value: Any) -> str:
        return "".join(encode(value, 0))

    return fast


_dumps_unchecked = _unchecked_encoder()


def check_task_name(name: object) -> str:
    if not isinstance(name, str) or not TASK_NAME.fullmatch(name):
        raise ValueError(
            f"invalid task name {name!r}: use letters, digits, '_', '.', ':' or '-', "
            "starting with a letter or '_', at most 200 characters"
        )
    return name


def check_queue_name(name: object) -> str:
    if name == "":
        raise ValueError(
            "the queue name is empty: give a queue's name (e.g. queue=\"mail\"), "
            "or leave queue= out for the task's own queue"
        )
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
        raise ValueError(
            f"invalid queue name {name!r}: use letters, digits, '_', '.' or '-', "
            "at most 100 characters"
        )
    return name


#: A fair key's length cap (docs/flow-control.md "Fair keys").
MAX_FAIR_KEY_CHARS = 200


def check_fair_key(key: object, what: str = "fair_key") -> str:
    """A fair key: a non-empty string of at most ``MAX_FAIR_KEY_CHARS`` characters
    (the empty key is the storage's own, for a fair queue's jobs without a key)."""
    if not isinstance(key, str):
        raise TypeError(f"{what} must be a string (e.g. str(tenant_id)), got "
                        f"{type(key).__name__} {key!r:.80}")
    if not key or len(key) > MAX_FAIR_KEY_CHARS:
        raise ValueError(f"{what} must be 1 to {MAX_FAIR_KEY_CHARS} characters, got "
                         f"{len(key)}: {key!r:.80}")
    return key


def check_priority(priority: object) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int) or not -32768 <= priority <= 32767:
        raise ValueError(f"priority must be an int between -32768 and 32767, got {priority!r}")
    return priority


def check_max_attempts(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS_LIMIT:
        raise ValueError(f"max_attempts must be an int from 1 to {MAX_ATTEMPTS_LIMIT}, got {value!r}")
    return value


def check_delay(value: object) -> float | None:
    """Seconds from now, from 0 to ``MAX_DELAY_SECONDS``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"delay must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or not 0 <= value <= MAX_DELAY_SECONDS:
        raise ValueError(
            f"delay must be a finite number of seconds from 0 to {MAX_DELAY_SECONDS:.0f} "
            f"({MAX_DELAY_TEXT}), got {value!r}"
        )
    return float(value)


def check_run_at(value: object) -> datetime | None:
    """A timezone-aware datetime no further than ``MAX_DELAY_SECONDS`` from now (a time
    in the past is due at once)."""
    if value is None:
        return None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ValueError(f"run_at must be a timezone-aware datetime, got {value!r}")
    try:
        ahead = (value - datetime.now(UTC)).total_seconds()
    except OverflowError:  # datetime.min or max with an offset
        ahead = math.inf
    if ahead > MAX_DELAY_SECONDS or value.year < 1970:
        raise ValueError(
            f"run_at must be within {MAX_DELAY_TEXT} from now (and after 1970), got "
            f"{value.isoformat()}"
        )
    return value


def check_expires_in(value: object) -> float | None:
    """Seconds from the enqueue until the job expires: more than 0, at most
    ``MAX_DELAY_SECONDS`` (``task.options(expires_in=...)``, ``@app.task(expires_in=...)``)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expires_in must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or not 0 < value <= MAX_DELAY_SECONDS:
        raise ValueError(
            f"expires_in must be a finite number of seconds above 0 and at most "
            f"{MAX_DELAY_SECONDS:.0f} ({MAX_DELAY_TEXT}), got {value!r}")
    return float(value)


def check_expires_at(value: object) -> datetime | None:
    """A timezone-aware datetime no further than ``MAX_DELAY_SECONDS`` from now; a naive
    one is refused (whose clock would it be?). One already past expires the job at once."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise TypeError(f"expires_at must be a timezone-aware datetime, got {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"expires_at must be timezone-aware (naive datetimes are refused: "
                         f"give tzinfo, e.g. datetime.now(UTC)), got {value.isoformat()}")
    try:
        ahead = (value - datetime.now(UTC)).total_seconds()
    except OverflowError:  # datetime.min or max with an offset
        ahead = math.inf
    if ahead > MAX_DELAY_SECONDS or value.year < 1970:
        raise ValueError(f"expires_at must be within {MAX_DELAY_TEXT} from now (and after "
                         f"1970), got {value.isoformat()}")
    return value


def check_tags(tags: object) -> list[str]:
    if isinstance(tags, str) or not isinstance(tags, Sequence):
        raise TypeError(f"tags must be a list of strings, got {_short(tags)}")
    _check_tag_count(len(tags))
    for tag in tags:
        if not isinstance(tag, str) or not TAG.fullmatch(tag):
            raise ValueError(f"invalid tag {_short(tag)}: 1 to {MAX_TAG_CHARS} printable "
                             "characters (MAX_TAG_CHARS)")
    return list(tags)


def _check_tag_count(count: int) -> None:
    if count > MAX_TAGS:
        raise ValueError(f"{count} tags, over the limit of {MAX_TAGS} tags a job (MAX_TAGS)")


def _short(value: object) -> str:
    """``repr(value)``, cut: an error message never carries a megabyte of input."""
    text = repr(value)
    return text if len(text) <= 120 else f"{text[:100]}... ({len(text)} characters)"


def encode_tags_and_meta(task: str, tags: list[str], meta: Mapping[str, Any],
                         max_bytes: int) -> tuple[str, str]:
    """A job's tags (each already checked) and meta as JSON. Both count toward
    ``max_payload_bytes`` together, as the arguments do on their own."""
    _check_tag_count(len(tags))
    tags_json = dumps(tags) if tags else "[]"
    meta_json = "{}" if isinstance(meta, dict) and not meta else encode_meta(
        task, meta, max_bytes)
    size = len(tags_json.encode()) + len(meta_json.encode())
    if size > max_bytes:
        raise PayloadTooLargeError(
            f"tags and meta of task {task!r} are {size} bytes of JSON, over the cap of "
            f"{max_bytes} bytes (ConveyorConfig.max_payload_bytes)")
    return tags_json, meta_json


def _encode_one(task: str, label: str, value: Any) -> str:
    try:
        return dumps(value)
    except (TypeError, ValueError, RecursionError) as exc:  # too deep: refused too
        raise TypeError(
            f"argument {label} of task {task!r} is not JSON-serialisable: {exc}"
        ) from None


def _encode_rich(task: str, label: str, value: Any, codec: TypeCodec) -> Any:
    """One argument as tagged JSON data, or a TypeError naming it and its type."""
    try:
        return codec.encode(value)
    except Unstorable as exc:
        where = f" at {exc.path}" if exc.path else ""
        raise TypeError(
            f"argument {label} of task {task!r} is not JSON-serialisable: type {exc.type_name}"
            f"{where} is neither JSON nor a type Conveyor stores ({STORED_TYPES}); "
            "register it with app.register_type(cls, encode, decode)"
        ) from None
    except Exception as exc:  # NaN, too deep, or a registered encoder that failed
        raise TypeError(
            f"argument {label} of task {task!r} is not JSON-serialisable: {exc}"
        ) from None


def _labels(count: int, names: Sequence[str]) -> list[str]:
    return [f"{names[i]!r} (#{i})" if i < len(names) else f"#{i}" for i in range(count)]


def encode_arguments(
    task: str, args: Sequence[Any], kwargs: Mapping[str, Any], max_bytes: int,
    codec: TypeCodec = DEFAULT_CODEC, names: Sequence[str] = (),
) -> tuple[str, str]:
    """Encode args and kwargs, naming the first argument that cannot be stored.

    Plain JSON goes through the C encoder alone; only arguments it refuses (a date, a
    UUID...) or that hold the reserved tag key take the tagging path (``_payload_types``).
    ``names`` are the positional parameters' names, for the error message."""
    if not kwargs and args and not codec.shadows_json:  # the common case, checked lean
        try:
            args_json = _dumps_unchecked(args)  # a tuple encodes as a list
        except (TypeError, ValueError, RecursionError):
            pass  # the full path below names the argument
        else:
            if (args_json.isascii() and "\\u0000" not in args_json
                    and TAG_TEXT not in args_json and len(args_json) + 2 <= max_bytes):
                return args_json, "{}"
    try:  # no arguments is common enough to skip the encoder for
        args_json = _dumps_unchecked(args) if args else "[]"  # a tuple encodes as a list
        kwargs_json = (_dumps_unchecked(kwargs if type(kwargs) is dict else dict(kwargs))
                       if kwargs else "{}")
        plain = TAG_TEXT not in args_json and TAG_TEXT not in kwargs_json and not codec.shadows_json
    except (TypeError, ValueError, RecursionError):
        plain = False
    if not plain:
        labels = _labels(len(args), names)
        args_json = dumps([_encode_rich(task, labels[i], v, codec) for i, v in enumerate(args)])
        kwargs_json = dumps({k: _encode_rich(task, repr(k), v, codec) for k, v in kwargs.items()})
    _refuse_unstorable(task, "arguments", args_json + kwargs_json)
    size = len(args_json) + len(kwargs_json)
    if not (args_json.isascii() and kwargs_json.isascii()):  # bytes, not characters
        size = len(args_json.encode()) + len(kwargs_json.encode())
    if size > max_bytes:
        raise PayloadTooLargeError(
            f"arguments of task {task!r} are {size} bytes of JSON, over the cap of "
            f"{max_bytes} bytes (ConveyorConfig.max_payload_bytes)"
        )
    return args_json, kwargs_json


def encode_positional_many(calls: Sequence[Sequence[Any]], max_bytes: int,
                           codec: TypeCodec = DEFAULT_CODEC) -> list[str] | None:
    """The ``args_json`` of many calls without keyword arguments (their ``kwargs_json``
    is ``"{}"``), as ``encode_arguments`` gives them, its checks run once over the lot
    (a batch of one task's jobs); None when any call needs ``encode_arguments`` itself,
    which names what it refuses. A check that matches across two calls' texts only
    sends the batch there too."""
    if codec.shadows_json:
        return None
    try:
        texts = list(map(_dumps_unchecked, calls))  # a tuple encodes as a list
    except (TypeError, ValueError, RecursionError):
        return None
    joined = "".join(texts)
    if (joined.isascii() and "\\u0000" not in joined and TAG_TEXT not in joined
            and max(map(len, texts), default=0) + 2 <= max_bytes):
        return texts
    return None


def encode_meta(task: str, meta: Mapping[str, Any], max_bytes: int) -> str:
    if not isinstance(meta, Mapping):
        raise TypeError(f"meta must be a dict, got {type(meta).__name__}")
    text = _encode_one(task, "meta", dict(meta))
    _refuse_unstorable(task, "meta", text)
    if len(text.encode()) > max_bytes:
        raise PayloadTooLargeError(f"meta of task {task!r} is over {max_bytes} bytes")
    return text


def encode_result(value: Any, max_bytes: int, codec: TypeCodec = DEFAULT_CODEC) -> str:
    """A result that JSON cannot carry, or that is too big, is replaced by a note.
    Rich values (datetime, dataclass, model, registered types) are stored as arguments
    are, so that ``job.wait()`` gives them back typed; plain JSON is stored as it is."""
    if value is None:  # most handlers return nothing
        return "null"
    try:
        try:
            text = storable(dumps(value))
        except TypeError:  # not plain JSON: tagged, as arguments are
            text = storable(dumps(codec.encode(value)))
    except Exception as exc:  # NaN, nested too deep, a registered encoder that raised ...
        return storable(dumps({"unserialisable_result": _safe_repr(value),
                               "error": _safe_text(exc)}))
    if len(text.encode()) > max_bytes:
        return dumps({"truncated_result": True, "size": len(text.encode()), "cap": max_bytes})
    return text


def _safe_repr(value: Any) -> str:
    """At most 500 characters of ``repr(value)``, or a stand-in when even that fails (a
    value nested too deep, a ``__repr__`` that raises): a result's note is always written."""
    try:
        return repr(value)[:500]
    except Exception:
        return f"<{type(value).__name__}: repr() failed>"


def _safe_text(exc: BaseException) -> str:
    """Why a result could not be encoded: the message (with its type, beyond the usual
    TypeError and ValueError), or the type alone when str() fails."""
    try:
        text = str(exc)
    except Exception:
        return type(exc).__name__
    return text[:2000] if isinstance(exc, (TypeError, ValueError)) \
        else f"{type(exc).__name__}: {text[:2000]}"


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit // 2] + f"\n... [{len(text) - limit} characters cut] ...\n" + text[-limit // 2 :]
