"""A version guard on the real stack: v1 of a saga is changed in place (its shipping step
replaced behind ``Patched``) while a saga is shipping on the old code. That saga keeps the old
step, a new saga takes the new one, and the store's replay of both agrees with their
snapshots (the decision is recorded on the history row's event).

Relay, worker and scripted participants talk through real Kafka; state is in real Postgres.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest

from coordinator.language.nodes import Patched
from coordinator.language.saga import Saga, SagaStep
from coordinator.runtime.worker import Worker
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from coordinator.versioning.drain import drain_report
from participant_sdk.protocol import CommandEnvelope, command_topic
from tests.integration.test_saga_versions import _settings, _tcc, _wait, relay  # noqa: F401
from tests.integration.test_store_support import (
    DEADLINE,
    FAST,
    FAST_ROLLBACK,
    OrderInput,
    verify_all,
)
from tests.integration.test_worker_support import ScriptedParticipant, ok

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def _ship(name: str, action: str) -> SagaStep:
    return SagaStep(name, "shipping", action, compensable=True, retry=FAST,
                    compensation_retry=FAST_ROLLBACK, deadline=DEADLINE,
                    rollback_deadline=DEADLINE)


class Shipment(Saga):
    """v1 as first deployed: pay, then ship."""

    name = "shipment"
    version = 1
    input_model = OrderInput
    steps = (_tcc("pay", "payments", "charge"), _ship("ship", "ship"))


class ShipmentGuarded(Saga):
    """The same v1 after the change "express": shipping goes express from now on."""

    name = "shipment"
    version = 1
    input_model = OrderInput
    steps = (_tcc("pay", "payments", "charge"),
             Patched("express", new=_ship("ship_express", "express"), old=_ship("ship", "ship")))


async def test_a_guard_keeps_the_old_path_for_a_saga_in_flight(
    relay: None, fresh_db: str, kafka_bootstrap: str, topic_prefix: str  # noqa: F811
) -> None:
    settings = _settings(fresh_db, kafka_bootstrap, topic_prefix)
    before = SagaRegistry(topic_prefix=topic_prefix, sagas=[Shipment])
    after = SagaRegistry(topic_prefix=topic_prefix, sagas=[ShipmentGuarded])
    payments = ScriptedParticipant(
        kafka_bootstrap, [command_topic(p, topic_prefix) for p in ("payments", "inventory")], ok)
    shipping = ScriptedParticipant(kafka_bootstrap, [command_topic("shipping", topic_prefix)], ok)
    await payments.start()
    try:
        async with await SagaStore.open(fresh_db, before, max_size=2) as old_api:
            async with Worker(settings, before, name="unguarded"):
                old = (await old_api.start_saga("shipment", {"order_id": "old", "amount": 5})
                       ).record
                await _wait(old_api, old.saga_id, "the saga never reached its shipping step",
                            step_sent="ship")
        # The deploy: the same version, now with the guard.
        async with await SagaStore.open(fresh_db, after, max_size=2) as api, \
                Worker(settings, after, name="guarded"):
            new = (await api.start_saga("shipment", {"order_id": "new", "amount": 7})).record
            await _sent(api, new.saga_id, "ship_express")
            guards_in_flight = await _guards(api, after)
            await shipping.start()
            for saga_id in (old.saga_id, new.saga_id):
                await _wait(api, saga_id, "a saga did not finish")
            guards_after = await _guards(api, after)
            ended = {s: await api.get_saga(s) for s in (old.saga_id, new.saga_id)}
            await verify_all(api, ended)
            recorded = await _recorded_patches(api, old.saga_id)
    finally:
        await shipping.stop()
        await payments.stop()
    finished_old, finished_new = ended[old.saga_id], ended[new.saga_id]
    assert finished_old is not None and finished_new is not None
    assert (finished_old.status, finished_old.state.patches) == ("completed", {"express": "old"})
    assert (finished_new.status, finished_new.state.patches) == ("completed", {"express": "new"})
    assert recorded == [{"express": "old"}]  # on one history row: the ship reply's
    # The drain report: the old saga has not reached the guard yet (it decides on its reply),
    # the new one took the new path; once both are done, the guard can be retired.
    assert guards_in_flight == {"express": {"old": 0, "new": 1, "undecided": 1}}
    assert guards_after == {"express": {"old": 0, "new": 0, "undecided": 0}}

    def sent(saga_id: uuid.UUID) -> set[str]:
        commands: list[CommandEnvelope] = shipping.received
        return {c.step for c in commands if c.saga_id == saga_id}

    assert (sent(old.saga_id), sent(new.saga_id)) == ({"ship"}, {"ship_express"})


async def _sent(store: SagaStore, saga_id: uuid.UUID, step: str, within: float = 40) -> None:
    """Until ``step`` (a node entered only when its guard takes the new path) was sent."""
    deadline = time.monotonic() + within
    while True:
        record = await store.get_saga(saga_id)
        node = None if record is None else record.state.steps.get(step)
        if node is not None and node.outstanding is not None:
            return
        assert time.monotonic() < deadline, f"{step} never sent: {record and record.status}"
        await asyncio.sleep(0.1)


async def _guards(store: SagaStore, registry: SagaRegistry) -> dict[str, dict[str, int]]:
    async with store.pool.acquire() as conn:
        (v1,) = await drain_report(conn, registry, "shipment")
    return v1.guards


async def _recorded_patches(store: SagaStore, saga_id: uuid.UUID) -> list[object]:
    async with store.pool.acquire() as conn:
        rows = await conn.fetch("SELECT event FROM saga_history WHERE saga_id = $1 ORDER BY seq",
                                saga_id)
    return [e["patches"] for e in (json.loads(r["event"]) for r in rows) if "patches" in e]
