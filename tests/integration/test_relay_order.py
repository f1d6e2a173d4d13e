"""Per-key order and no skipped rows, with writers that commit out of id order."""

from __future__ import annotations

import asyncio
import random

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from outbox_relay import Relay, enqueue
from tests.integration.test_relay_helpers import (
    check_per_key_order,
    consume,
    fast_settings,
    message,
    wait_outbox_empty,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.mark.usefixtures("outbox_admin")
async def test_order_per_key_with_late_committing_writers(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}.cmd"
    keys = [f"saga-{i}" for i in range(40)]
    per_key = 25
    registry = CollectorRegistry()
    relay = Relay(fast_settings(fresh_db, kafka_bootstrap, batch_size=50), registry=registry)
    await relay.start()
    try:
        # A transaction that takes its ids first and commits last.
        late = await asyncpg.connect(fresh_db)
        late_tx = late.transaction()
        await late_tx.start()
        await enqueue(late, [message(topic, "late-key", s) for s in range(5)])

        async def writer(key_group: list[str]) -> None:
            conn = await asyncpg.connect(fresh_db)
            try:
                for seq in range(per_key):
                    # One transaction per step per key, as the coordinator does.
                    for key in key_group:
                        async with conn.transaction():
                            await enqueue(conn, [message(topic, key, seq)])
                    if random.random() < 0.2:
                        await asyncio.sleep(0.005)
            finally:
                await conn.close()

        groups = [keys[i::4] for i in range(4)]
        await asyncio.gather(*(writer(g) for g in groups))
        # Every committed row (all with ids above the open transaction's) gets published ...
        await wait_outbox_empty(fresh_db, 30)
        # ... and the late rows are not skipped once they commit.
        await late_tx.commit()
        await late.close()
        await wait_outbox_empty(fresh_db, 30)
        total = len(keys) * per_key + 5
        received = await consume(kafka_bootstrap, [topic], total, 30)
        seqs = check_per_key_order(received)
        assert set(seqs) == {*keys, "late-key"}
        assert all(len(set(v)) == per_key for k, v in seqs.items() if k != "late-key")
        assert sorted(set(seqs["late-key"])) == list(range(5))
        assert len({r.message_id for r in received}) == total
        published = registry.get_sample_value("sagaflow_relay_rows_published_total")
        assert published == total
        assert registry.get_sample_value("sagaflow_relay_owned_shards") == 16
    finally:
        await relay.stop()


async def test_stop_is_idempotent_and_start_twice_raises(
    fresh_db: str, kafka_bootstrap: str
) -> None:
    relay = Relay(fast_settings(fresh_db, kafka_bootstrap))
    async with relay:
        with pytest.raises(Exception, match="already started"):
            await relay.start()
    await relay.stop()
