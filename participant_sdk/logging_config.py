"""Structured logs for every sagaflow process: ``configure_logging()``.

Every record gets ``saga_id`` (from :data:`current_saga_id`, set with :func:`saga_context`
where a saga is being handled) and ``trace_id`` / ``span_id`` (from the current OpenTelemetry
span), by :class:`SagaContextFilter`. ``SAGAFLOW_LOG_FORMAT=json`` writes one JSON object per
line; the default is plain text. ``SAGAFLOW_LOG_LEVEL`` sets the level (INFO).
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TextIO
from uuid import UUID

from opentelemetry import trace

__all__ = [
    "JsonFormatter",
    "PlainFormatter",
    "SagaContextFilter",
    "StartupNoiseFilter",
    "configure_logging",
    "current_saga_id",
    "saga_context",
]

#: The saga the current task is working on ("" when none).
current_saga_id: contextvars.ContextVar[str] = contextvars.ContextVar(
    "sagaflow_saga_id", default=""
)

PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: LogRecord attributes that are not "extra" fields.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


@contextmanager
def saga_context(saga_id: UUID | str | None) -> Iterator[None]:
    """Tag the log records emitted inside the block with ``saga_id``."""
    token = current_saga_id.set(str(saga_id) if saga_id is not None else "")
    try:
        yield
    finally:
        current_saga_id.reset(token)


class SagaContextFilter(logging.Filter):
    """Adds ``saga_id``, ``trace_id`` and ``span_id`` to every record (empty when unknown)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "saga_id", None):
            record.saga_id = current_saga_id.get()
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            record.trace_id = format(ctx.trace_id, "032x")
            record.span_id = format(ctx.span_id, "016x")
        else:
            record.trace_id = getattr(record, "trace_id", "")
            record.span_id = getattr(record, "span_id", "")
        return True


class PlainFormatter(logging.Formatter):
    """The usual one-line format, plus ``saga=... trace=...`` when the record has them."""

    def __init__(self) -> None:
        super().__init__(PLAIN_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        tags = [f"{name}={value}" for name, value in (
            ("saga", getattr(record, "saga_id", "")), ("trace", getattr(record, "trace_id", ""))
        ) if value]
        if not tags:
            return text
        first, sep, rest = text.partition("\n")
        return f"{first} [{' '.join(tags)}]{sep}{rest}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, saga/trace ids, extras."""

    def __init__(self, service: str | None = None) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if self.service:
            out["service"] = self.service
        for key in ("saga_id", "trace_id", "span_id"):
            value = getattr(record, key, "")
            if value:
                out[key] = value
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in out and key not in ("saga_id", "trace_id",
                                                                       "span_id"):
                out[key] = value if isinstance(value, (str, int, float, bool)) else repr(value)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False)


class StartupNoiseFilter(logging.Filter):
    """aiokafka logs ERROR for what it retries while a broker creates topics on first use:
    the offsets topic (``GroupCoordinatorNotAvailableError``), a topic not in the metadata yet,
    a partition whose leader is still being elected (``NotLeaderForPartitionError`` fetching
    offsets). A normal first start shows those as INFO. Every other aiokafka error keeps its
    level. (A topic that never appears, with auto-creation off, leaves the process without
    partitions: ``sagaflow-coordinator topics`` creates them.)"""

    _EXPECTED = ("GroupCoordinatorNotAvailableError", "not found in cluster metadata",
                 "Failed fetch offsets from")

    def filter(self, record: logging.LogRecord) -> bool:
        if (record.levelno == logging.ERROR and record.name.startswith("aiokafka")
                and any(e in record.getMessage() for e in self._EXPECTED)):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def configure_logging(
    service: str | None = None,
    *,
    level: int | str | None = None,
    fmt: str | None = None,
    stream: TextIO | None = None,
) -> logging.Handler:
    """Replace the root logger's handlers with one stderr handler carrying saga/trace ids.

    ``fmt`` is ``"plain"`` or ``"json"`` (default: ``SAGAFLOW_LOG_FORMAT``, else plain);
    ``level`` defaults to ``SAGAFLOW_LOG_LEVEL``, else INFO. Returns the handler installed.
    """
    chosen = (fmt or os.environ.get("SAGAFLOW_LOG_FORMAT") or "plain").strip().lower()
    resolved = level if level is not None else os.environ.get("SAGAFLOW_LOG_LEVEL", "INFO")
    if isinstance(resolved, str):
        resolved = resolved.upper()
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.addFilter(SagaContextFilter())
    handler.addFilter(StartupNoiseFilter())
    if chosen == "json":
        handler.setFormatter(JsonFormatter(service))
    else:
        handler.setFormatter(PlainFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(resolved)
    return handler
