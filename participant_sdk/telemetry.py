"""One tracing setup for every sagaflow process: ``configure(service_name)``.

Called by the coordinator worker CLI, the relay CLI and :func:`run_participant` (the SDK is the
one package all three may import). Configuration comes from the standard ``OTEL_*`` variables:

* ``OTEL_SDK_DISABLED=true`` -> nothing is installed.
* ``OTEL_TRACES_EXPORTER`` -> ``otlp`` (HTTP/protobuf), ``console`` or ``none``; several may be
  comma-separated. Unset, an exporter is installed only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set.
* ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` override the service name given here.
* ``OTEL_TRACES_SAMPLER`` (if set) replaces sagaflow's sampler; ``OTEL_BSP_*`` tune batching.

With nothing configured no tracer provider is installed: the OpenTelemetry API stays a no-op and
the instrumentations are not even loaded, so tracing costs a few no-op calls per message.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
)
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import Attributes

from participant_sdk.tracing import enabled  # re-exported: configure() and enabled() go together

__all__ = ["UnparentedClientSpanSampler", "configure", "enabled", "sagaflow_sampler"]

log = logging.getLogger(__name__)

_lock = threading.Lock()
_provider: TracerProvider | None = None

_TRUE = {"1", "true", "yes", "on"}


class UnparentedClientSpanSampler(Sampler):
    """Root sampler that drops CLIENT, PRODUCER and CONSUMER spans that start a trace.

    Inside sagaflow processes every span that belongs to a saga has a parent (the saga's stored
    context, a command's or a reply's ``traceparent``). A client span without one is background
    work of an instrumentation: the relay's outbox poll, the worker's timer query, an empty
    Kafka fetch. Sampling those would make one useless trace per poll.
    """

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        if kind in (SpanKind.CLIENT, SpanKind.PRODUCER, SpanKind.CONSUMER):
            return SamplingResult(Decision.DROP)
        return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)

    def get_description(self) -> str:
        return "UnparentedClientSpanSampler"


def sagaflow_sampler() -> Sampler:
    """Follow the parent's decision; start traces only from SERVER and INTERNAL spans."""
    return ParentBased(root=UnparentedClientSpanSampler())


def _exporters() -> list[SpanExporter]:
    names = os.environ.get("OTEL_TRACES_EXPORTER")
    if names is None:
        endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        names = "otlp" if endpoint else "none"
    exporters: list[SpanExporter] = []
    for name in (n.strip().lower() for n in names.split(",")):
        if name in ("", "none"):
            continue
        if name in ("otlp", "otlp_proto_http"):
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporters.append(OTLPSpanExporter())
        elif name == "console":
            exporters.append(ConsoleSpanExporter())
        else:
            log.warning("OTEL_TRACES_EXPORTER %r is not supported here; ignored", name)
    return exporters


def _instrument(provider: TracerProvider) -> None:
    from opentelemetry.instrumentation.aiokafka import AIOKafkaInstrumentor
    from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor

    instrumentors: tuple[Any, ...] = (
        AsyncPGInstrumentor(),  # type: ignore[no-untyped-call]
        AIOKafkaInstrumentor(),
    )
    for instrumentor in instrumentors:
        if not instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.instrument(tracer_provider=provider)
    _uninstrument_kafka_send()


def _uninstrument_kafka_send() -> None:
    """Keep exactly one ``traceparent`` on every message sagaflow sends.

    The relay and the participant put the saga's trace context on their messages themselves.
    The aiokafka instrumentation's ``send`` wrapper would append a second ``traceparent`` for
    its own send span, which has no parent there and so is unsampled; a client that keeps the
    last header would continue that dead trace. The consumer side stays instrumented.
    """
    import aiokafka
    from opentelemetry.instrumentation.utils import unwrap

    unwrap(aiokafka.AIOKafkaProducer, "send")


def configure(service_name: str, *, instrument: bool = True) -> TracerProvider | None:
    """Install a tracer provider from the ``OTEL_*`` environment; None when tracing is off.

    Idempotent: a second call returns the provider of the first. ``instrument`` also turns on
    the asyncpg and aiokafka instrumentations (FastAPI apps are instrumented per app, by
    ``coordinator.observability.mount_observability``).
    """
    global _provider
    with _lock:
        if _provider is not None:
            return _provider
        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
            return None
        exporters = _exporters()
        if not exporters:
            return None
        attributes: dict[str, str] = {}
        if not os.environ.get("OTEL_SERVICE_NAME"):
            attributes[SERVICE_NAME] = service_name
        resource = Resource.create(attributes)  # merges OTEL_RESOURCE_ATTRIBUTES/SERVICE_NAME
        sampler = None if os.environ.get("OTEL_TRACES_SAMPLER") else sagaflow_sampler()
        provider = TracerProvider(resource=resource, sampler=sampler)
        for exporter in exporters:
            provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        if instrument:
            _instrument(provider)
        _provider = provider
        log.info("tracing on: service %s, exporters %s", resource.attributes.get(SERVICE_NAME),
                 [type(e).__name__ for e in exporters])
        return provider
