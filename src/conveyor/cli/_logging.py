"""The worker's log formats: text (with the job's fields) or one JSON object per line.

Both escape control characters (``_render.safe``): a task name, an error or an argument
carrying ESC or CR cannot rewrite the operator's terminal.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from .._logfields import JobFields
from ._render import safe, safe_json

LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]

#: Fields the runtime passes with ``extra=`` and both formats show when present.
JOB_FIELDS = ("job_id", "task", "queue", "attempt")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, and the job's fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in JOB_FIELDS:
            value = record.__dict__.get(field)
            if value is not None:
                doc[field] = value
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        # json escapes C0 controls (ESC is \u001b); safe_json escapes DEL, C1 and bidi
        return safe_json(json.dumps(doc, default=str, ensure_ascii=False))


class TextFormatter(logging.Formatter):
    """``time level logger: message [job_id=.. task=..]``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        return safe(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return safe(super().formatException(ei), multiline=True)

    def formatStack(self, stack_info: str) -> str:
        return safe(super().formatStack(stack_info), multiline=True)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = [f"{f}={safe(record.__dict__[f])}" for f in JOB_FIELDS
                  if record.__dict__.get(f) is not None]
        if not fields:
            return line
        head, newline, rest = line.partition("\n")  # keep a traceback below the fields
        return f"{head} [{' '.join(fields)}]{newline}{rest}"


def configure_logging(level: str, fmt: str) -> None:
    """Send the ``conveyor`` loggers to stderr in the chosen format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(JobFields())
    logger = logging.getLogger("conveyor")
    for old in list(logger.handlers):
        if getattr(old, "_conveyor_cli", False):
            logger.removeHandler(old)
    handler._conveyor_cli = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
