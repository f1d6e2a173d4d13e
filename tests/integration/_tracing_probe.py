"""Run in a subprocess by test_tracing_apply.py: it installs a global tracer provider, which a
test process must not do (the provider is process-wide and can be set once)."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from coordinator.runtime.functions.handlers import handle_reply_batch
from coordinator.store import SagaStore
from participant_sdk.protocol import Outcome, encode, envelope_headers
from participant_sdk.telemetry import sagaflow_sampler
from tests.integration.test_store_support import make_registry, migrated, outbox_commands, reply_to


@dataclass
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]


async def main(dsn: str, prefix: str) -> dict[str, Any]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sagaflow_sampler())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("probe")
    await migrated(dsn)
    out: dict[str, Any] = {}
    async with await SagaStore.open(dsn, make_registry(prefix), max_size=2) as store:
        with tracer.start_as_current_span("client") as client:
            started = await store.start_saga("tcc_order", {"order_id": "o", "amount": 1})
        out["client_span"] = format(client.get_span_context().span_id, "016x")
        out["stored"] = started.record.trace_context
        async with store.pool.acquire() as conn:
            out["first_headers"] = json.loads(await conn.fetchval(
                "SELECT headers::text FROM sagaflow_outbox ORDER BY id LIMIT 1"))
        (command,) = await outbox_commands(store)
        # What a participant does: a span continuing the command, injected into the reply.
        parent = propagate.extract({"traceparent": out["first_headers"]["traceparent"]})
        with tracer.start_as_current_span("participant", context=parent) as part:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
        out["participant_span"] = format(part.get_span_context().span_id, "016x")
        reply = reply_to(command, Outcome.OK)
        headers = envelope_headers(reply) + [(k, v.encode()) for k, v in carrier.items()]
        # A second traceparent, as the aiokafka instrumentation appends: the first one wins.
        headers.append(("traceparent",
                        b"00-11111111111111111111111111111111-2222222222222222-00"))
        record = Record(f"{prefix}.replies", 0, 7, str(reply.saga_id).encode(), encode(reply),
                        headers)
        await handle_reply_batch(store, [record])
        async with store.pool.acquire() as conn:
            out["next_headers"] = json.loads(await conn.fetchval(
                "SELECT headers::text FROM sagaflow_outbox ORDER BY id LIMIT 1"))
    provider.force_flush()
    out["spans"] = [
        {"name": s.name, "kind": s.kind.name,
         "span_id": format(s.context.span_id, "016x"),
         "trace_id": format(s.context.trace_id, "032x"),
         "parent": format(s.parent.span_id, "016x") if s.parent else None,
         "status": s.status.status_code.name, "attributes": dict(s.attributes or {})}
        for s in exporter.get_finished_spans()
    ]
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2])), default=str))
