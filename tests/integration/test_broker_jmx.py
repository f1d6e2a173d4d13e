"""devstack's broker opens its JMX port on 127.0.0.1, and bench.broker_metrics reads the
broker's own request and message counters from it (``python -m bench.kafka_cost --broker-jmx``)."""

from __future__ import annotations

import os
import uuid

import pytest
from aiokafka import AIOKafkaProducer

from bench import broker_metrics
from devstack.acquire import ENV_KAFKA_JMX

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_the_broker_counts_the_produce_requests_and_messages_a_client_sends(
        kafka_bootstrap: str) -> None:
    port = os.environ.get(ENV_KAFKA_JMX)
    assert port, f"{ENV_KAFKA_JMX} is not set: run under `eval \"$(python -m devstack env)\"`"
    before = broker_metrics.read(int(port))
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=0)
    await producer.start()
    try:
        topic = f"jmx-{uuid.uuid4().hex[:8]}"
        for i in range(5):  # one at a time: five Produce requests at least
            await producer.send_and_wait(topic, f"m{i}".encode())
    finally:
        await producer.stop()
    window = broker_metrics.read(int(port)).minus(before)
    assert window.messages_in >= 5
    assert window.requests.get("Produce", 0) >= 5
    assert window.requests.get("Metadata", 0) >= 1
    assert window.bytes_in > 0
