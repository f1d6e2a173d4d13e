"""The participant's cheap trace pass-through gives what OpenTelemetry's propagators give."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from opentelemetry import propagate, trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from participant_sdk.protocol import CommandEnvelope, Phase
from participant_sdk.trace_passthrough import default_propagation, inherit
from participant_sdk.tracing import carrier, consumer_span, inject_headers

TRACE, SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
VALID = f"00-{TRACE}-{SPAN}-01".encode()

CASES: list[list[tuple[str, Any]]] = [
    [],
    [("saga-message-id", b"x")],
    [("traceparent", VALID)],
    [("traceparent", None), ("traceparent", VALID)],
    [("traceparent", VALID), ("traceparent", f"00-{'1' * 32}-{'2' * 16}-00".encode())],
    [("traceparent", f" \t00-{TRACE}-{SPAN}-00 ".encode())],
    [("traceparent", f"01-{TRACE}-{SPAN}-03-future-fields".encode())],
    [("traceparent", f"00-{TRACE}-{SPAN}-01-extra".encode())],
    [("traceparent", f"ff-{TRACE}-{SPAN}-01".encode())],
    [("traceparent", f"00-{'0' * 32}-{SPAN}-01".encode())],
    [("traceparent", f"00-{TRACE}-{'0' * 16}-01".encode())],
    [("traceparent", f"00-{TRACE.upper()}-{SPAN}-01".encode())],
    [("traceparent", b"garbage")],
    [("traceparent", bytearray(VALID))],
]
GENERAL_ONLY: list[list[tuple[str, Any]]] = [
    [("traceparent", VALID), ("tracestate", b"vendor=1")],
    [("traceparent", VALID), ("baggage", b"k=v")],
]


def _general(headers: Any) -> tuple[Any, list[tuple[str, bytes]]]:
    context = propagate.extract(carrier(headers))
    out: dict[str, str] = {}
    propagate.inject(out, context=context)
    span = trace.get_current_span(context).get_span_context()
    return span, sorted((k, v.encode()) for k, v in out.items())


@pytest.mark.parametrize("headers", CASES)
def test_inherit_matches_the_propagators(headers: list[tuple[str, Any]]) -> None:
    assert default_propagation()
    inherited = inherit(headers)
    assert inherited is not None
    span, expected = _general(headers)
    assert trace.get_current_span(inherited.context).get_span_context() == span
    assert sorted(inherited.headers) == expected


@pytest.mark.parametrize("headers", GENERAL_ONLY)
def test_tracestate_and_baggage_take_the_general_path(headers: list[tuple[str, Any]]) -> None:
    assert inherit(headers) is None


def _command() -> CommandEnvelope:
    return CommandEnvelope(
        message_id=uuid.uuid4(), saga_id=uuid.uuid4(), saga_type="t", step="s",
        phase=Phase.TRY, attempt=1, participant="p", action="a", reply_to="r")


@pytest.mark.parametrize("headers", [*CASES, *GENERAL_ONLY])
def test_consumer_span_carries_the_context_on(headers: list[tuple[str, Any]]) -> None:
    span, expected = _general(headers)
    with consumer_span(_command(), headers, topic="t", partition=0, offset=1, group="g"):
        assert trace.get_current_span().get_span_context() == span  # handlers and logs
        assert sorted(inject_headers()) == expected
        inside: dict[str, str] = {}
        propagate.inject(inside)  # what a handler forwarding the context gets
        assert sorted((k, v.encode()) for k, v in inside.items()) == expected
    assert inject_headers() == []


def test_other_propagators_take_the_general_path() -> None:
    before = propagate.get_global_textmap()
    propagate.set_global_textmap(TraceContextTextMapPropagator())
    try:
        assert not default_propagation()
        with consumer_span(_command(), [("traceparent", VALID), ("baggage", b"k=v")],
                           topic="t", partition=0, offset=1, group="g"):
            assert inject_headers() == [("traceparent", VALID)]  # no baggage: not propagated
    finally:
        propagate.set_global_textmap(before)
    assert default_propagation()
