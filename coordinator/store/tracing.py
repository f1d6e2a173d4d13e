"""Coordinator spans: starting a saga and applying replies.

The parent chain of one saga (one trace)::

    API request (FastAPI SERVER span, or the caller's span)
    └─ saga start <type>               INTERNAL, SagaStore.start_saga; its context is stored in
       │                               sagas.trace_context and on the first commands' rows
       └─ send <commands topic>        PRODUCER, relay, one per outbox row
          └─ process <commands topic>  CONSUMER, participant: try/confirm/cancel/action/compensate
             └─ process <replies topic>  CONSUMER, coordinator applying that reply; the commands
                │                        the reply causes carry THIS span's context
                └─ send <commands topic> ... and so on until the saga ends.

A reply without a ``traceparent`` (a participant without tracing) gets no apply span: the
commands it causes carry the saga's stored context (the start span), as do commands written by
timers (retries after a backoff, deadlines), so the trace never breaks.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, ParamSpec, TypeVar

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from participant_sdk.protocol import HEADER_TRACEPARENT, ReplyEnvelope
from participant_sdk.tracing import carrier, enabled

if TYPE_CHECKING:
    from coordinator.store.records import ApplyResult, StartResult

__all__ = ["TRACER_NAME", "ReplySpans", "traced_start"]

TRACER_NAME: Final = "sagaflow.coordinator"

P = ParamSpec("P")
R = TypeVar("R")


def traced_start(
    fn: Callable[P, Awaitable[StartResult]],
) -> Callable[P, Awaitable[StartResult]]:
    """Wrap ``SagaStore.start_saga`` in a ``saga start <type>`` span that becomes the saga's
    stored trace context (a root span when the caller has none: one trace per saga)."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> StartResult:
        if not enabled():
            return await fn(*args, **kwargs)
        saga_type = str(args[1] if len(args) > 1 else kwargs.get("saga_type", "?"))
        tracer = trace.get_tracer(TRACER_NAME)
        with tracer.start_as_current_span(
            f"saga start {saga_type}", kind=SpanKind.INTERNAL,
            attributes={"saga.type": saga_type, "db.system.name": "postgresql",
                        "db.operation.name": "start_saga"},
        ) as span:
            result = await fn(*args, **kwargs)
            record = result.record
            span.set_attributes({
                "saga.id": str(record.saga_id),
                "saga.version": record.version,
                "saga.status": record.status,
                "saga.created": result.created,
            })
            return result

    return wrapper


def _attributes(record: Any, reply: ReplyEnvelope, group: str | None) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": record.topic,
        "messaging.destination.partition.id": str(record.partition),
        "messaging.kafka.offset": record.offset,
        "messaging.message.id": str(reply.message_id),
        "messaging.kafka.message.key": str(reply.saga_id),
        "saga.id": str(reply.saga_id),
        "saga.step": reply.step,
        "saga.phase": reply.phase.value,
        "saga.attempt": reply.attempt,
        "saga.participant": reply.participant,
        "saga.reply.outcome": reply.outcome.value,
        "db.system.name": "postgresql",
        "db.operation.name": "apply_reply",
    }
    if group:
        attrs["messaging.consumer.group.name"] = group
    if reply.error is not None:
        attrs["saga.error.kind"] = reply.error.kind.value
    return attrs


class ReplySpans:
    """One ``process <replies topic>`` CONSUMER span per reply of a batch.

    :meth:`start` opens the span (parent: the reply's ``traceparent``) and returns the context
    the commands caused by the reply must carry; :meth:`finish` ends every span with the
    store's verdict once the batch's transaction committed (or :meth:`fail` if it did not).
    With tracing off it does nothing and :meth:`start` returns None.
    """

    def __init__(self, *, group: str | None = None) -> None:
        self._on = enabled()
        self._group = group
        self._spans: list[Span | None] = []
        self._tracer = trace.get_tracer(TRACER_NAME) if self._on else None

    def start(self, record: Any, reply: ReplyEnvelope) -> dict[str, str] | None:
        if self._tracer is None:
            return None
        headers = carrier(record.headers)
        if HEADER_TRACEPARENT not in headers:
            self._spans.append(None)
            return None
        parent = propagate.extract(headers)
        span = self._tracer.start_span(
            f"process {record.topic}", context=parent, kind=SpanKind.CONSUMER,
            attributes=_attributes(record, reply, self._group),
        )
        self._spans.append(span)
        out: dict[str, str] = {}
        propagate.inject(out, context=trace.set_span_in_context(span))
        return out

    def skip(self) -> None:
        """Keep positions aligned with the store's results for an event without a span."""
        if self._on:
            self._spans.append(None)

    def finish(self, results: Sequence[ApplyResult]) -> None:
        for span, result in zip(self._spans, results, strict=False):
            if span is None:
                continue
            span.set_attribute("saga.apply.outcome", result.outcome.value)
            if result.saga_type is not None:
                span.set_attribute("saga.type", result.saga_type)
            if result.version is not None:
                span.set_attribute("saga.version", result.version)
            if result.status is not None:
                span.set_attribute("saga.status", result.status)
            if result.outcome.value in ("rejected", "not_found"):
                span.set_status(Status(StatusCode.ERROR, result.reason))
                span.add_event("exception", {"exception.type": "ReplyNotApplied",
                                             "exception.message": result.reason or ""})
            elif result.status == "dead":
                span.set_status(Status(StatusCode.ERROR, "saga is dead"))
            span.end()
        self._spans.clear()

    def fail(self, exc: BaseException) -> None:
        for span in self._spans:
            if span is None:
                continue
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            span.end()
        self._spans.clear()

