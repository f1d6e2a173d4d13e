"""Participant health from Kafka's admin API, on the real broker: a participant's command topic
with no consumer is reported down (since when, with its lag), a live one is not, the API and
the metric say the same, and readers share one admin query per few seconds (issue 42)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from prometheus_client import CollectorRegistry

from coordinator.api import ApiSettings, TokenAuth, create_app
from coordinator.observability.participants import ParticipantHealthMonitor, participant_topics
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from tests.integration.test_api_support import TOKENS, VIEWER, bearer
from tests.integration.test_business_keys import Trip
from tests.integration.test_store_support import ManualClock, migrated

pytestmark = pytest.mark.integration


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 10, 42, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


async def _send(bootstrap: str, topic: str, n: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for i in range(n):
            await producer.send_and_wait(topic, b"command", key=f"saga-{i}".encode())
    finally:
        await producer.stop()


@pytest.fixture
async def monitor(kafka_bootstrap: str, topic_prefix: str
                  ) -> AsyncIterator[tuple[ParticipantHealthMonitor, Clock, CollectorRegistry]]:
    clock, registry = Clock(), CollectorRegistry()
    topics = participant_topics([SagaRegistry(topic_prefix=topic_prefix,
                                              sagas=[Trip]).latest("trip")])
    # A group of this test's own (the participant's name would be shared between tests).
    found = ParticipantHealthMonitor(kafka_bootstrap, lambda: topics,
                                     groups={"hotels": f"{topic_prefix}-hotels"},
                                     registry=registry, clock=clock)
    yield found, clock, registry
    await found.close()


async def test_a_topic_without_consumer_is_down_and_a_live_consumer_clears_it(
    monitor: tuple[ParticipantHealthMonitor, Clock, CollectorRegistry],
    kafka_bootstrap: str, topic_prefix: str,
) -> None:
    health, clock, registry = monitor
    topic = f"{topic_prefix}.hotels.commands"
    await _send(kafka_bootstrap, topic, 3)
    (first,) = await health.snapshot()
    assert (first.participant, first.topic, first.group) == ("hotels", topic,
                                                              f"{topic_prefix}-hotels")
    assert first.problem is None and first.down and first.members == 0 and first.lag == 3
    assert first.no_consumer_since == clock.now
    assert await health.snapshot() is not None
    assert (await health.snapshot())[0] is first  # within the ttl: no new admin query
    labels = {"participant": "hotels", "topic": topic}
    assert registry.get_sample_value("sagaflow_command_topic_consumers", labels) == 0
    assert registry.get_sample_value("sagaflow_command_topic_lag_messages", labels) == 3

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka_bootstrap,
                                group_id=f"{topic_prefix}-hotels", enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        got = 0
        while got < 3:
            batches = await consumer.getmany(timeout_ms=5000)
            got += sum(len(b) for b in batches.values())
        await consumer.commit()
        clock.now += timedelta(seconds=6)
        (live,) = await health.snapshot()
        assert live.members == 1 and not live.down and live.lag == 0
        assert live.no_consumer_since is None and live.state == "Stable"
        assert registry.get_sample_value("sagaflow_command_topic_consumers", labels) == 1
    finally:
        await consumer.stop()
    clock.now += timedelta(seconds=6)
    (again,) = await health.snapshot()
    assert again.down and again.no_consumer_since == clock.now


async def test_kafka_not_answering_is_a_problem_on_each_entry(topic_prefix: str) -> None:
    topics = {"hotels": f"{topic_prefix}.hotels.commands"}
    health = ParticipantHealthMonitor("127.0.0.1:1", lambda: topics)  # nothing listens there
    try:
        (entry,) = await health.snapshot()
    finally:
        await health.close()
    assert entry.problem is not None and "Kafka did not answer" in entry.problem
    assert not entry.down  # unknown is not "down"


async def test_the_api_lists_participants_with_their_consumers(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str,
) -> None:
    await migrated(fresh_db)
    await _send(kafka_bootstrap, f"{topic_prefix}.hotels.commands", 2)
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[Trip])
    settings = ApiSettings(kafka_bootstrap=kafka_bootstrap,
                           participant_groups={"hotels": f"{topic_prefix}-hotels"})
    async with await SagaStore.open(fresh_db, registry, max_size=4, clock=ManualClock()
                                    ) as store:
        app = create_app(settings, store=store, auth=TokenAuth.parse(TOKENS), run_jobs=False)
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
            answer = await client.get("/participants", headers=bearer(VIEWER))
            assert answer.status_code == 200, answer.text
            (hotels,) = answer.json()
            assert hotels["topic"] == f"{topic_prefix}.hotels.commands"
            assert hotels["members"] == 0 and hotels["lag"] == 2
            assert hotels["no_consumer_since"] is not None and hotels["problem"] is None
            assert (await client.get("/participants")).status_code == 401
            metrics = (await client.get("/metrics")).text
            assert ('sagaflow_command_topic_consumers{participant="hotels",'
                    f'topic="{topic_prefix}.hotels.commands"}} 0.0') in metrics
