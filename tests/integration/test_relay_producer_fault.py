"""A producer whose idempotence state breaks is replaced; its rows are re-sent, not dead-lettered.

OutOfOrderSequenceNumber, UnknownProducerId or a fenced epoch say nothing about the row being
sent. The fault is injected into the first producer (its sends fail from the 7th on, as the
broker would report them); everything else is real Kafka and Postgres.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import OutOfOrderSequenceNumber
from prometheus_client import CollectorRegistry

from outbox_relay import Relay, RelaySettings, count_dead_letters, install
from outbox_relay.relay import producer_config
from tests.integration.test_relay_helpers import (
    check_per_key_order,
    consume,
    fast_settings,
    message,
    wait_outbox_empty,
    write,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


class _Breaks(AIOKafkaProducer):  # type: ignore[misc]
    """From its ``fail_at``-th send on, fails every send without sending it, as a producer
    whose sequence state broke does (the broker refuses all its later batches)."""

    def __init__(self, fail_at: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sends = 0
        self.fail_at = fail_at

    async def send(self, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        self.sends += 1
        if self.sends >= self.fail_at:
            failed: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            failed.set_exception(OutOfOrderSequenceNumber())
            return failed
        return await super().send(*args, **kwargs)  # type: ignore[no-any-return]


async def test_producer_state_error_replaces_the_producer_and_loses_nothing(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}.cmd"
    conn = await asyncpg.connect(fresh_db)
    await install(conn, shard_count=16)
    msgs = [message(topic, f"saga-{k}", seq) for seq in range(20) for k in range(5)]
    await write(fresh_db, msgs)
    made: list[AIOKafkaProducer] = []

    def factory(settings: RelaySettings) -> AIOKafkaProducer:
        config = producer_config(settings)
        producer = _Breaks(7, **config) if not made else AIOKafkaProducer(**config)
        made.append(producer)
        return producer

    try:
        async with Relay(
            fast_settings(fresh_db, kafka_bootstrap, batch_size=10),
            registry=CollectorRegistry(),
            producer_factory=factory,
        ):
            await wait_outbox_empty(fresh_db, 30)
        assert await count_dead_letters(conn) == 0
        assert len(made) == 2, "the broken producer was not replaced"
        # Read everything there is (re-sent rows may be duplicated): stop on the timeout.
        received = await consume(kafka_bootstrap, [topic], 2 * len(msgs), 5)
        seqs = check_per_key_order(received)
        assert {k: sorted(set(v)) for k, v in seqs.items()} == {
            f"saga-{k}": list(range(20)) for k in range(5)
        }
        assert {r.message_id for r in received} == {str(m.message_id) for m in msgs}
    finally:
        await conn.close()
