"""Hiding secrets before a job is shown: a redactor turns a Job into the Job to display.

One rule for every interface: the dashboard and `conveyor jobs show`/`list` use it.

The default, ``redact_secrets``, masks the value of every mapping key that looks like a
secret (password, token, api_key, authorization, ...) anywhere in args, kwargs, meta
and result, and erases those values (of 4 characters or more) wherever the job's own
code echoed them: its errors and its progress message. Pass your own to
``create_app(redact=...)``; it runs for every job shown, in lists and on the detail page.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from ._job import Job

Redactor = Callable[[Job], Job]

MASK = "[redacted]"
SECRET_KEYS = re.compile(
    r"pass(word|wd|phrase)?|secret|token|api[_-]?key|auth(orization)?|credential|"
    r"private[_-]?key|session|cookie|ssn|card[_-]?number|cvv",
    re.IGNORECASE,
)


def mask(value: Any, keys: re.Pattern[str] = SECRET_KEYS) -> Any:
    """``value`` with the values of secret-looking keys replaced, at any depth."""
    if isinstance(value, dict):
        return {k: MASK if isinstance(k, str) and keys.search(k) else mask(v, keys)
                for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v, keys) for v in value]
    return value


#: Shorter secret values are not erased from free text (they would erase common words).
MIN_ECHOED = 4


def secret_values(value: Any, keys: re.Pattern[str] = SECRET_KEYS,
                  under_secret: bool = False) -> set[str]:
    """The texts (strings and numbers) held under secret-looking keys, at any depth."""
    if isinstance(value, dict):
        return set().union(*(secret_values(v, keys, under_secret or (
            isinstance(k, str) and keys.search(k) is not None)) for k, v in value.items()))
    if isinstance(value, list):
        return set().union(*(secret_values(v, keys, under_secret) for v in value))
    if under_secret and isinstance(value, str | int | float) and not isinstance(value, bool):
        return {str(value)} if len(str(value)) >= MIN_ECHOED else set()
    return set()


def erase(value: Any, secrets: set[str]) -> Any:
    """``value`` with every occurrence of ``secrets`` in its strings masked, at any depth."""
    if isinstance(value, str):
        for secret in sorted(secrets, key=len, reverse=True):
            value = value.replace(secret, MASK)
        return value
    if isinstance(value, dict):
        return {k: erase(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [erase(v, secrets) for v in value]
    return value


def redact_secrets(job: Job) -> Job:
    """Example: ``create_app(app, redact=redact_secrets)`` (the default)."""
    secrets = secret_values([job.args, job.kwargs, job.meta, job.result])
    return dataclasses.replace(
        job, args=mask(job.args), kwargs=mask(job.kwargs), meta=mask(job.meta),
        result=mask(job.result), errors=erase(mask(job.errors), secrets),
        progress_message=erase(job.progress_message, secrets))


def show_everything(job: Job) -> Job:
    """A redactor that hides nothing: ``create_app(app, redact=show_everything)``."""
    return job
