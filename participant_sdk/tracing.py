"""Trace context: continue the command's trace, span the handling, inject into the reply.

Uses only the OpenTelemetry API: with no SDK configured every call is a no-op.

sagaflow sends exactly one ``traceparent`` per message (``telemetry`` keeps the aiokafka
instrumentation from appending its own). A message from another sender may still repeat the
header; the first one is the one continued.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from participant_sdk.logging_config import saga_context
from participant_sdk.protocol import CommandEnvelope, Outcome, ReplyEnvelope
from participant_sdk.trace_passthrough import Inherited, default_propagation, inherit

__all__ = ["carrier", "consumer_span", "enabled", "inject_headers", "record_reply"]

_TRACER_NAME = "participant_sdk"

#: What :func:`consumer_span` carries on when not tracing: :func:`inject_headers` returns its
#: headers while its context is the current one.
_inherited: contextvars.ContextVar[Inherited | None] = contextvars.ContextVar(
    "sagaflow_inherited_trace", default=None)


def enabled() -> bool:
    """True when :func:`participant_sdk.telemetry.configure` (or anyone) installed a real
    tracer provider. Here, not in ``telemetry``, so that the hot paths asking it import only
    the OpenTelemetry API, not the SDK."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def carrier(headers: Any) -> dict[str, str]:
    """Kafka headers as a propagation carrier; the first value of a repeated header wins."""
    out: dict[str, str] = {}
    for key, value in headers or ():
        if value is not None and key not in out:
            out[key] = bytes(value).decode("latin-1")
    return out


@contextmanager
def consumer_span(
    command: CommandEnvelope,
    headers: Any,
    *,
    topic: str,
    partition: int,
    offset: int,
    group: str,
    system: str = "kafka",
) -> Iterator[Span]:
    """A CONSUMER span that continues the trace from the command's ``traceparent`` header
    (``system``: ``sagaflow.direct`` for a command that came on the direct lane).

    Log records inside the block carry the command's saga id.
    """
    if not enabled():
        # Not tracing here: carry the command's context on unchanged, so that the reply still
        # continues the saga's trace (as a W3C intermediary that records nothing should).
        inherited = inherit(headers) if default_propagation() else None
        context = (inherited.context if inherited is not None
                   else propagate.extract(carrier(headers)))
        token = otel_context.attach(context)
        inherited_token = _inherited.set(inherited)
        try:
            with saga_context(command.saga_id):
                yield trace.INVALID_SPAN
        finally:
            _inherited.reset(inherited_token)
            otel_context.detach(token)
        return
    parent = propagate.extract(carrier(headers))
    tracer = trace.get_tracer(_TRACER_NAME)
    with tracer.start_as_current_span(
        f"process {topic}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes={
            "messaging.system": system,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": topic,
            "messaging.destination.partition.id": str(partition),
            "messaging.kafka.offset": offset,
            "messaging.consumer.group.name": group,
            "messaging.message.id": str(command.message_id),
            "messaging.kafka.message.key": str(command.saga_id),
            "saga.id": str(command.saga_id),
            "saga.type": command.saga_type,
            "saga.step": command.step,
            "saga.phase": command.phase.value,
            "saga.attempt": command.attempt,
            "saga.participant": command.participant,
            "saga.action": command.action,
        },
    ) as span, saga_context(command.saga_id):
        yield span


def record_reply(span: Span, reply: ReplyEnvelope) -> None:
    """Put the reply's outcome on the span; a failed command gets error status and exception."""
    span.set_attribute("saga.outcome", reply.outcome.value)
    if reply.error is not None:
        span.set_attribute("error.type", reply.error.type or reply.error.kind.value)
        span.set_attribute("saga.error.kind", reply.error.kind.value)
    if reply.outcome is not Outcome.OK:  # rejected for good, or failed (retryable)
        message = reply.error.message if reply.error else None
        span.set_status(Status(StatusCode.ERROR, message))
        # The handler's exception was turned into the reply; record it the semconv way.
        span.add_event("exception", {
            "exception.type": (reply.error.type or reply.error.kind.value) if reply.error
            else reply.outcome.value,
            "exception.message": message or "",
        })


def inject_headers() -> list[tuple[str, bytes]]:
    """The current trace context as Kafka headers (empty when there is none)."""
    inherited = _inherited.get()
    if inherited is not None and otel_context.get_current() is inherited.context:
        return list(inherited.headers)
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return [(key, value.encode()) for key, value in carrier.items()]
