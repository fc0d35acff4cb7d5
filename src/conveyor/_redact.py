"""Hiding secrets before a job is shown: a redactor turns a Job into the Job to display.

One rule for every interface: the dashboard and `conveyor jobs show`/`list` use it.

The default, ``redact_secrets``, masks the value of every mapping key that looks like a
secret (password, token, api_key, authorization, ...) anywhere in args, kwargs, meta
and result. Pass your own to ``create_app(redact=...)``; it runs for every job shown,
in lists and on the detail page.
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


def redact_secrets(job: Job) -> Job:
    """Example: ``create_app(app, redact=redact_secrets)`` (the default)."""
    return dataclasses.replace(job, args=mask(job.args), kwargs=mask(job.kwargs),
                               meta=mask(job.meta), result=mask(job.result))


def show_everything(job: Job) -> Job:
    """A redactor that hides nothing: ``create_app(app, redact=show_everything)``."""
    return job
