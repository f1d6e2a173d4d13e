"""Two versions of one saga on the real stack: a v1 saga started before a deploy runs to its
end on v1's steps while the redeployed worker starts new sagas on v2, whose steps differ.

Relay, worker and a scripted participant talk through real Kafka; state is in real Postgres.
The v1 saga is held at its shipping step (nobody consumes the shipping topic yet) while the
worker is replaced by one that knows v1 and v2, as a rolling deploy would do.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from coordinator.config.settings import CoordinatorSettings
from coordinator.language.saga import Saga, SagaStep, TccStep
from coordinator.runtime.worker import Worker
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from outbox_relay import Relay, RelaySettings
from participant_sdk.protocol import CommandEnvelope, command_topic, reply_topic
from tests.integration.test_store_support import (
    DEADLINE,
    FAST,
    FAST_ROLLBACK,
    OrderInput,
    migrated,
    verify_all,
)
from tests.integration.test_worker_support import ScriptedParticipant, create_topics, ok

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

PARTICIPANTS = ("payments", "inventory", "shipping")


def _tcc(name: str, participant: str, action: str) -> TccStep:
    return TccStep(name, participant, action, retry=FAST, confirm_retry=FAST_ROLLBACK,
                   cancel_retry=FAST_ROLLBACK, deadline=DEADLINE, rollback_deadline=DEADLINE)


class ShipmentV1(Saga):
    """v1: take the payment (TCC), then ship (a saga step)."""

    name = "shipment"
    version = 1
    input_model = OrderInput
    steps = (
        _tcc("pay", "payments", "charge"),
        SagaStep("ship", "shipping", "ship", compensable=True, retry=FAST,
                 compensation_retry=FAST_ROLLBACK, deadline=DEADLINE,
                 rollback_deadline=DEADLINE),
    )


class ShipmentV2(Saga):
    """v2: hold stock first, then take the payment; no shipping step at all."""

    name = "shipment"
    version = 2
    input_model = OrderInput
    steps = (_tcc("hold", "inventory", "reserve"), _tcc("pay", "payments", "charge"))


def _settings(dsn: str, bootstrap: str, prefix: str) -> CoordinatorSettings:
    return CoordinatorSettings(
        dsn=dsn, kafka_bootstrap=bootstrap, topic_prefix=prefix,
        group_id=f"{prefix}-coordinator", timer_max_idle=timedelta(milliseconds=300),
        pool_max_size=3, shutdown_grace=timedelta(seconds=5),
    )


@pytest.fixture
async def relay(fresh_db: str, kafka_bootstrap: str, topic_prefix: str) -> AsyncIterator[None]:
    await migrated(fresh_db)
    await create_topics(kafka_bootstrap, {
        reply_topic(topic_prefix): 2, **{command_topic(p, topic_prefix): 1 for p in PARTICIPANTS},
    })
    async with Relay(RelaySettings(postgres_dsn=fresh_db, kafka_bootstrap=kafka_bootstrap,
                                   poll_interval=timedelta(milliseconds=30), shard_count=4)):
        yield


async def _wait(store: SagaStore, saga_id: uuid.UUID, what: str, *, within: float = 40,
                step_sent: str | None = None) -> None:
    """Until the saga ended (or, with ``step_sent``, that step's command went out)."""
    deadline = time.monotonic() + within
    while True:
        record = await store.get_saga(saga_id)
        if record is not None:
            if step_sent is not None and record.state.steps[step_sent].outstanding is not None:
                return
            if step_sent is None and record.status not in ("running", "compensating"):
                return
        assert time.monotonic() < deadline, f"{what}: {record and record.status}"
        await asyncio.sleep(0.1)


async def test_v1_saga_finishes_on_v1_while_v2_takes_new_starts(
    relay: None, fresh_db: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    settings = _settings(fresh_db, kafka_bootstrap, topic_prefix)
    before = SagaRegistry(topic_prefix=topic_prefix, sagas=[ShipmentV1])
    after = SagaRegistry(topic_prefix=topic_prefix, sagas=[ShipmentV1, ShipmentV2])
    payments_and_stock = ScriptedParticipant(
        kafka_bootstrap, [command_topic(p, topic_prefix) for p in ("payments", "inventory")], ok)
    shipping = ScriptedParticipant(kafka_bootstrap, [command_topic("shipping", topic_prefix)], ok)
    await payments_and_stock.start()
    try:
        async with await SagaStore.open(fresh_db, before, max_size=2) as old_api:
            async with Worker(settings, before, name="v1-only"):
                old = (await old_api.start_saga("shipment", {"order_id": "old", "amount": 5})
                       ).record
                await _wait(old_api, old.saga_id, "v1 saga never reached its shipping step",
                            step_sent="ship")
        # The deploy: the v1-only worker is gone; its successor knows both versions.
        async with await SagaStore.open(fresh_db, after, max_size=2) as new_api, \
                Worker(settings, after, name="v1-and-v2"):
            new = (await new_api.start_saga("shipment", {"order_id": "new", "amount": 7})).record
            assert (old.version, new.version) == (1, 2)
            await _wait(new_api, new.saga_id, "the v2 saga did not finish")
            assert (await new_api.get_saga(old.saga_id)).status == "running"  # type: ignore[union-attr]
            await shipping.start()  # now the v1 saga can ship and finish
            await _wait(new_api, old.saga_id, "the v1 saga did not finish")
            ended = {s: await new_api.get_saga(s) for s in (old.saga_id, new.saga_id)}
            await verify_all(new_api, ended)
    finally:
        await shipping.stop()
        await payments_and_stock.stop()
    finished_old, finished_new = ended[old.saga_id], ended[new.saga_id]
    assert finished_old is not None and finished_new is not None
    assert (finished_old.status, finished_old.version) == ("completed", 1)
    assert (finished_new.status, finished_new.version) == ("completed", 2)
    assert list(finished_old.state.steps) == ["pay", "ship"]
    assert list(finished_new.state.steps) == ["hold", "pay"]

    def sent(commands: list[CommandEnvelope], saga_id: uuid.UUID) -> list[tuple[str, str]]:
        return [(c.step, c.phase.value) for c in commands if c.saga_id == saga_id]

    assert sent(shipping.received, old.saga_id) == [("ship", "action")]
    assert sent(shipping.received, new.saga_id) == []
    assert sent(payments_and_stock.received, old.saga_id) == [("pay", "try"), ("pay", "confirm")]
    v2_sent = sent(payments_and_stock.received, new.saga_id)
    assert v2_sent[:2] == [("hold", "try"), ("pay", "try")]  # one after the other
    assert sorted(v2_sent[2:]) == [("hold", "confirm"), ("pay", "confirm")]  # at once
