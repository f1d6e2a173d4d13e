"""A deploy that drops a version its live sagas need: refused, or, when allowed, harmless.

Real Postgres, Kafka and relay; the v2-only worker is a separate ``python -m coordinator
worker`` process, as an operator runs it. A v1 saga is held at its shipping step, then:

- a worker registering only v2 refuses to start: exit 2, one line naming type, version, count;
- with ``SAGAFLOW_ALLOW_UNREGISTERED_VERSIONS=true`` it starts; the shipping reply it receives
  and the saga's timer that comes due are kept (deferred), not applied, dropped or
  dead-lettered;
- a worker that registers v1 then applies the kept reply and the saga completes on v1.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import pytest

from coordinator.runtime.worker import Worker
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from participant_sdk.protocol import command_topic
from tests.integration.test_saga_versions import (
    ShipmentV1,
    ShipmentV2,
    _settings,
    _wait,
    relay,  # noqa: F401  (fixture)
)
from tests.integration.test_store_support import verify_all
from tests.integration.test_worker_support import ScriptedParticipant, ok

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

V2_ONLY = "tests.integration.test_saga_versions:ShipmentV2"


async def _worker_process(dsn: str, bootstrap: str, prefix: str, *, allow: bool
                          ) -> asyncio.subprocess.Process:
    env = {**os.environ, "SAGAFLOW_SAGAS": V2_ONLY, "SAGAFLOW_KAFKA_BOOTSTRAP": bootstrap,
           "SAGAFLOW_TIMER_MAX_IDLE": "0.2s",
           "SAGAFLOW_ALLOW_UNREGISTERED_VERSIONS": "true" if allow else "false"}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "coordinator", "worker", "--dsn", dsn, "--topic-prefix", prefix,
        "--group-id", f"{prefix}-coordinator",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env)


async def _until(what: str, check: object, within: float = 30) -> None:
    deadline = time.monotonic() + within
    while not await check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


async def _timers(conn: asyncpg.Connection, saga_id: uuid.UUID) -> list[asyncpg.Record]:
    return await conn.fetch("SELECT id, kind, due_at, event FROM timers WHERE saga_id = $1 "
                            "ORDER BY id", saga_id)


@pytest.fixture
async def held_v1_saga(relay: None, fresh_db: str, kafka_bootstrap: str, topic_prefix: str,  # noqa: F811
                       ) -> AsyncIterator[uuid.UUID]:
    """A v1 saga whose shipping command went out and is not answered yet."""
    v1 = SagaRegistry(topic_prefix=topic_prefix, sagas=[ShipmentV1])
    payments = ScriptedParticipant(kafka_bootstrap, [command_topic("payments", topic_prefix)], ok)
    await payments.start()
    try:
        async with await SagaStore.open(fresh_db, v1, max_size=2) as store, \
                Worker(_settings(fresh_db, kafka_bootstrap, topic_prefix), v1, name="v1"):
            saga = (await store.start_saga("shipment", {"order_id": "old", "amount": 5})).record
            await _wait(store, saga.saga_id, "the v1 saga never sent its shipping command",
                        step_sent="ship")
        yield saga.saga_id
    finally:
        await payments.stop()


async def test_worker_without_v1_refuses_then_defers_and_a_v1_worker_finishes(
    held_v1_saga: uuid.UUID, fresh_db: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    saga_id = held_v1_saga
    refused = await _worker_process(fresh_db, kafka_bootstrap, topic_prefix, allow=False)
    out, _ = await asyncio.wait_for(refused.communicate(), 60)
    text = out.decode()
    assert refused.returncode == 2, text
    assert "sagas are live on versions this worker does not register: shipment v1 (1 live)" \
        in text, text
    assert "Traceback" not in text and len(text.strip().splitlines()) == 1, text

    conn = await asyncpg.connect(fresh_db)
    shipping = ScriptedParticipant(kafka_bootstrap, [command_topic("shipping", topic_prefix)], ok)
    allowed = await _worker_process(fresh_db, kafka_bootstrap, topic_prefix, allow=True)
    try:
        history_before = await conn.fetchval(
            "SELECT history_seq FROM sagas WHERE id = $1", saga_id)
        # The ship step's deadline timer comes due now, on the worker that lacks v1.
        await conn.execute("UPDATE timers SET due_at = now() WHERE saga_id = $1", saga_id)
        stamped = datetime.now(UTC)
        await shipping.start()  # its reply reaches the v2-only worker

        async def reply_kept() -> bool:
            return any(t["kind"] == "deliver" for t in await _timers(conn, saga_id))

        async def timer_postponed() -> bool:
            real = [t for t in await _timers(conn, saga_id) if t["kind"] != "deliver"]
            return bool(real) and all(t["due_at"] > stamped for t in real)

        await _until("the reply was not kept as a delivery", reply_kept)
        await _until("the due timer was not kept and postponed", timer_postponed)
        row = await conn.fetchrow("SELECT status, history_seq FROM sagas WHERE id = $1", saga_id)
        assert (row["status"], row["history_seq"]) == ("running", history_before)
        assert await conn.fetchval("SELECT count(*) FROM sagaflow_dead_letters") == 0
    finally:
        allowed.send_signal(signal.SIGTERM)
        rest, _ = await asyncio.wait_for(allowed.communicate(), 30)
        await shipping.stop()
    log = rest.decode()
    assert allowed.returncode == 0, log
    assert "starting although sagas are live on unregistered versions: shipment v1" in log, log

    try:
        # A worker with v1 again. Deferred rows retry every 30 s; make them due now.
        await conn.execute("UPDATE timers SET due_at = now() WHERE saga_id = $1 "
                           "AND kind = 'deliver'", saga_id)
        both = SagaRegistry(topic_prefix=topic_prefix, sagas=[ShipmentV1, ShipmentV2])
        async with await SagaStore.open(fresh_db, both, max_size=2) as store, \
                Worker(_settings(fresh_db, kafka_bootstrap, topic_prefix), both, name="v1v2"):
            await _wait(store, saga_id, "the v1 saga did not finish after v1 came back")
            record = await store.get_saga(saga_id)
            assert record is not None and (record.status, record.version) == ("completed", 1)
            await verify_all(store, [saga_id])
        assert await conn.fetchval("SELECT count(*) FROM sagaflow_dead_letters") == 0
        assert await _timers(conn, saga_id) == []
    finally:
        await conn.close()
