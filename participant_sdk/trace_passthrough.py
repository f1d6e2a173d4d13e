"""The command's trace context carried on cheaply when this process records no spans.

With no tracer provider installed, :func:`participant_sdk.tracing.consumer_span` only carries
the command's W3C context on: it is attached while the command runs (log records and any
``propagate.inject`` in a handler see it) and written on the reply. OpenTelemetry's general
propagation (a composite propagator, a carrier getter, regular expressions, the baggage
parser, then the same again to inject) cost ~45 us per command for that; the usual headers
(a ``traceparent`` alone) are parsed here in a few, into exactly the context and the reply
header the propagators would make. Anything else (``tracestate``, ``baggage``, propagators
other than the default ``tracecontext,baggage``) takes the general path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["Inherited", "default_propagation", "inherit"]

_FORMAT = TraceContextTextMapPropagator._TRACEPARENT_HEADER_FORMAT_RE
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16
_DEFAULT = [TraceContextTextMapPropagator, W3CBaggagePropagator]


@dataclass(frozen=True, slots=True)
class Inherited:
    """The context to attach while the command runs and the reply's trace headers."""

    context: Context
    headers: tuple[tuple[str, bytes], ...]


#: No usable ``traceparent``: what ``propagate.extract`` returns then (an empty context).
_NOTHING = Inherited(Context(), ())

_checked: list[Any] = [None, False]


def default_propagation() -> bool:
    """True when the global propagator is OpenTelemetry's default (``tracecontext,baggage``),
    the only one :func:`inherit` stands in for (checked again when it is replaced)."""
    textmap = propagate.get_global_textmap()
    if textmap is not _checked[0]:
        kinds = [type(p) for p in getattr(textmap, "_propagators", ())]
        _checked[:] = [textmap, type(textmap) is CompositePropagator and kinds == _DEFAULT]
    return bool(_checked[1])


def inherit(headers: Any) -> Inherited | None:
    """The context and reply headers the default propagators would make from ``headers``
    (Kafka headers; the first of a repeated one counts), or None for the general path."""
    traceparent: bytes | None = None
    for key, value in headers or ():
        if value is None:
            continue
        if key == "traceparent":
            if traceparent is None:
                traceparent = bytes(value)
        elif key in ("tracestate", "baggage"):
            return None
    if traceparent is None:
        return _NOTHING
    match = _FORMAT.search(traceparent.decode("latin-1"))
    if match is None:
        return _NOTHING
    version, trace_id, span_id, flags, rest = match.groups()
    if (trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN or version == "ff"
            or (version == "00" and rest)):
        return _NOTHING
    span = NonRecordingSpan(SpanContext(
        trace_id=int(trace_id, 16), span_id=int(span_id, 16), is_remote=True,
        trace_flags=TraceFlags(int(flags, 16))))
    header = f"00-{trace_id}-{span_id}-{flags}".encode()
    return Inherited(trace.set_span_in_context(span, Context()), (("traceparent", header),))
