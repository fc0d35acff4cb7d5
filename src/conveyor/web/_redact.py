"""The dashboard's redactors: the rule lives in ``conveyor._redact``, shared with the CLI
(``conveyor jobs show`` and ``jobs list`` hide the same secrets the dashboard hides)."""

from __future__ import annotations

from .._redact import MASK, SECRET_KEYS, Redactor, mask, redact_secrets, show_everything

__all__ = ["MASK", "SECRET_KEYS", "Redactor", "mask", "redact_secrets", "show_everything"]
