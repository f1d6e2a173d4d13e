"""Trace context: continue the command's trace, span the handling, inject into the reply.

Uses only the OpenTelemetry API: with no SDK configured every call is a no-op.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from participant_sdk.protocol import CommandEnvelope, Outcome, ReplyEnvelope

_TRACER_NAME = "participant_sdk"


def _carrier(headers: Any) -> dict[str, str]:
    return {
        key: bytes(value).decode("latin-1")
        for key, value in headers or ()
        if value is not None
    }


@contextmanager
def consumer_span(
    command: CommandEnvelope,
    headers: Any,
    *,
    topic: str,
    partition: int,
    offset: int,
    group: str,
) -> Iterator[Span]:
    """A CONSUMER span that continues the trace from the command's ``traceparent`` header."""
    parent = propagate.extract(_carrier(headers))
    tracer = trace.get_tracer(_TRACER_NAME)
    with tracer.start_as_current_span(
        f"process {topic}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes={
            "messaging.system": "kafka",
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
    ) as span:
        yield span


def record_reply(span: Span, reply: ReplyEnvelope) -> None:
    span.set_attribute("saga.outcome", reply.outcome.value)
    if reply.error is not None:
        span.set_attribute("error.type", reply.error.type or reply.error.kind.value)
    if reply.outcome is Outcome.FAILED:
        span.set_status(Status(StatusCode.ERROR, reply.error.message if reply.error else None))


def inject_headers() -> list[tuple[str, bytes]]:
    """The current trace context as Kafka headers (empty when tracing is off)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return [(key, value.encode()) for key, value in carrier.items()]
