"""Arguments encrypted at rest, for tasks registered with ``encrypt=True``.

The keys come from the environment, ``CONVEYOR_ENCRYPTION_KEYS``: Fernet keys
(``cryptography``, the ``conveyor[encryption]`` extra), separated by commas. The first
one encrypts; every one of them decrypts, so a key is rotated by putting the new key
first and keeping the old one after it until no job sealed with it is left.

A sealed job stores one tagged object as its only positional argument and no keyword
arguments: ``[{"__conveyor__": "encrypted", "key": "<fingerprint>", "v": "<token>"}]``.
The token is Fernet (AES-128-CBC with HMAC-SHA256) over
``{"t": task, "a": args, "k": kwargs}``: the task name inside the authenticated
plaintext stops a token from being moved to another task's job. ``key`` is the first
12 hex digits of the SHA-256 of the key, to tell an operator which key a job needs.
Only the worker decrypts (and the handler sees plaintext); the dashboard, the CLI,
``get_job`` and ``explain_job`` show the marker.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Any

from ._errors import ConveyorError
from ._payload_types import TAG, ArgumentsError

ENV = "CONVEYOR_ENCRYPTION_KEYS"
MARKER = "encrypted"
INSTALL = "pip install 'conveyor[encryption]'"
NEW_KEY = ('python -c "from cryptography.fernet import Fernet; '
           'print(Fernet.generate_key().decode())"')


class EncryptionError(ConveyorError):
    """Encryption is asked for but cannot be done: the extra or the keys are missing."""


def require() -> None:
    """Fail at ``@app.task(encrypt=True)`` when ``cryptography`` is not installed."""
    try:
        import cryptography.fernet  # noqa: F401
    except ImportError:
        raise EncryptionError(
            f"encrypt=True needs the cryptography package: {INSTALL}") from None


def fingerprint(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:12]


class Keyring:
    """The keys of ``CONVEYOR_ENCRYPTION_KEYS``, the first one encrypting."""

    def __init__(self, text: str) -> None:
        from cryptography.fernet import Fernet

        keys = [k.strip().encode("ascii", "replace") for k in text.split(",") if k.strip()]
        if not keys:
            raise EncryptionError(f"{ENV} is not set: encrypted arguments need a key. Make "
                                  f"one with {NEW_KEY} and set {ENV}=<key>")
        self.fernets: dict[str, Any] = {}
        for index, key in enumerate(keys, 1):
            try:
                fernet = Fernet(key)
            except (ValueError, TypeError):
                raise EncryptionError(
                    f"{ENV}: key #{index} is not a Fernet key (32 url-safe base64-encoded "
                    f"bytes); make one with {NEW_KEY}") from None
            self.fernets.setdefault(fingerprint(key), fernet)
        self.primary = next(iter(self.fernets))
        #: For unique keys of sealed jobs: a plain hash of the arguments could be guessed.
        self.digest_key = hashlib.sha256(b"conveyor unique|" + keys[0]).digest()


_cache: tuple[str, Keyring] | None = None


def keyring() -> Keyring:
    """The keys of the environment as it is now (parsed again only when it changed)."""
    global _cache
    text = os.environ.get(ENV, "")
    if _cache is not None and _cache[0] == text:
        return _cache[1]
    require()
    ring = Keyring(text)
    _cache = (text, ring)
    return ring


def seal(task: str, args_json: str, kwargs_json: str) -> tuple[str, str]:
    """The stored (args, kwargs) JSON of a sealed job."""
    ring = keyring()
    plain = f'{{"t":{json.dumps(task)},"a":{args_json},"k":{kwargs_json}}}'
    token = ring.fernets[ring.primary].encrypt(plain.encode()).decode("ascii")
    marker = {TAG: MARKER, "key": ring.primary, "v": token}
    return json.dumps([marker], separators=(",", ":")), "{}"


def unique_digest(args_json: str, kwargs_json: str) -> str:
    """A keyed hash of the plaintext arguments, for ``Unique`` without a key function."""
    mac = hmac.new(keyring().digest_key, f"{args_json}|{kwargs_json}".encode(), "sha256")
    return mac.hexdigest()


def sealed_key(args: Any, kwargs: Any) -> str | None:
    """The key fingerprint when these stored arguments are sealed, else None."""
    if type(args) is list and len(args) == 1 and not kwargs and type(args[0]) is dict:
        marker = args[0]
        if marker.get(TAG) == MARKER:
            return str(marker.get("key") or "?")
    return None


def unseal(task: str, marker: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The plaintext (args, kwargs) of a sealed job, or ``ArgumentsError``: not permanent
    when this worker lacks the extra or the key (another worker, or this one once
    configured, can still run it), permanent when the token does not verify."""
    try:
        ring = keyring()
    except EncryptionError as exc:
        raise ArgumentsError(f"the arguments are encrypted and cannot be read here: {exc}",
                             permanent=False) from None
    key = str(marker.get("key"))
    fernet = ring.fernets.get(key)
    if fernet is None:
        raise ArgumentsError(
            f"the arguments are encrypted with key {key}, which is not among this worker's "
            f"{ENV} (fingerprints {', '.join(ring.fernets)}): add that key back (after the "
            "first one) and retry the job", permanent=False)
    from cryptography.fernet import InvalidToken

    try:
        plain = json.loads(fernet.decrypt(str(marker.get("v", "")).encode("ascii", "replace")))
    except (InvalidToken, ValueError):
        raise ArgumentsError(f"the encrypted arguments do not verify with key {key}: "
                             "the stored token was changed or damaged") from None
    if not isinstance(plain, dict) or plain.get("t") != task:
        raise ArgumentsError("the encrypted arguments belong to another task "
                             f"({plain.get('t') if isinstance(plain, dict) else '?'!r})")
    args, kwargs = plain.get("a"), plain.get("k")
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ArgumentsError("the encrypted arguments are not an array and an object")
    return args, kwargs
