"""The real services answer: Postgres stores rows, Kafka keeps and hands out messages, Jaeger
stores spans. If these fail, every other integration test would fail for the same reason."""

from __future__ import annotations

import asyncio
import time
import uuid

import asyncpg
import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

pytestmark = pytest.mark.integration


async def test_postgres_round_trip(fresh_db: str) -> None:
    conn = await asyncpg.connect(fresh_db)
    try:
        await conn.execute("CREATE TABLE smoke (id uuid PRIMARY KEY, body text NOT NULL)")
        row_id = uuid.uuid4()
        await conn.execute("INSERT INTO smoke (id, body) VALUES ($1, $2)", row_id, "hello")
        assert await conn.fetchval("SELECT body FROM smoke WHERE id = $1", row_id) == "hello"
    finally:
        await conn.close()


async def test_kafka_produce_consume_commit(kafka_bootstrap: str, topic_prefix: str) -> None:
    topic, group = f"{topic_prefix}.smoke", f"{topic_prefix}-group"
    key, value = b"saga-1", uuid.uuid4().bytes
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=True
    )
    await producer.start()
    try:
        sent = await producer.send_and_wait(topic, value, key=key)
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        msg = await asyncio.wait_for(consumer.getone(), timeout=30)
        assert (msg.key, msg.value) == (key, value)
        tp = TopicPartition(topic, sent.partition)
        await consumer.commit({tp: msg.offset + 1})
        assert await consumer.committed(tp) == msg.offset + 1
    finally:
        await consumer.stop()


async def test_jaeger_stores_otlp_span(jaeger_otlp: str, jaeger_query: str) -> None:
    service = f"smoke-{uuid.uuid4().hex[:8]}"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    exporter = OTLPSpanExporter(endpoint=f"{jaeger_otlp}/v1/traces", timeout=10)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        with provider.get_tracer("tests.smoke").start_as_current_span("smoke") as span:
            trace_id = format(span.get_span_context().trace_id, "032x")
    finally:
        provider.shutdown()

    deadline = time.monotonic() + 30
    async with httpx.AsyncClient(base_url=jaeger_query, timeout=5) as client:
        while True:
            resp = await client.get(f"/api/traces/{trace_id}")
            if resp.status_code == 200 and resp.json().get("data"):
                break
            assert time.monotonic() < deadline, f"trace {trace_id} not in Jaeger: {resp.text}"
            await asyncio.sleep(0.5)
    spans = resp.json()["data"][0]["spans"]
    assert [s["operationName"] for s in spans] == ["smoke"]
