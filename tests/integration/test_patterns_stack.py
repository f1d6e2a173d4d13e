"""A saga built by the pattern library on the real stack: the order template (payment, a
for-each of stock reservations, shipping) through real Postgres, the relay, Kafka and a
worker, answered by scripted participants; one order completes, one rolls back."""

from __future__ import annotations

import pytest

from coordinator.runtime.worker import Worker
from coordinator.sagas.patterns import order_saga
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from participant_sdk.protocol import CommandEnvelope, Outcome, ReplyEnvelope, command_topic
from tests.integration.test_saga_versions import (
    PARTICIPANTS,
    _settings,
    _wait,
    relay,  # noqa: F401  (fixture)
)
from tests.integration.test_store_support import verify_all
from tests.integration.test_worker_support import ScriptedParticipant, reply_to

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

ShopOrder = order_saga("shop_order", version=2, lines_at_once=2)


def _script(command: CommandEnvelope) -> list[ReplyEnvelope]:
    """Stock runs out for sku 'gone'; everything else succeeds."""
    out_of_stock = command.payload.get("sku") == "gone" and command.phase.is_forward
    return [reply_to(command, Outcome.REJECTED if out_of_stock else Outcome.OK)]


async def test_order_pattern_runs_on_the_real_stack(
    relay: None, fresh_db: str, kafka_bootstrap: str, topic_prefix: str  # noqa: F811
) -> None:
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[ShopOrder])
    participants = ScriptedParticipant(
        kafka_bootstrap, [command_topic(p, topic_prefix) for p in PARTICIPANTS], _script)
    order = {"order_id": "o1", "customer_id": "c1", "amount_cents": 900, "address": "x",
             "lines": [{"sku": "a", "quantity": 1}, {"sku": "b", "quantity": 1},
                       {"sku": "c", "quantity": 3}]}
    await participants.start()
    try:
        async with await SagaStore.open(fresh_db, registry, max_size=2) as store, \
                Worker(_settings(fresh_db, kafka_bootstrap, topic_prefix), registry):
            good = (await store.start_saga("shop_order", order)).record.saga_id
            bad = (await store.start_saga("shop_order", {
                **order, "order_id": "o2", "lines": [{"sku": "a", "quantity": 1},
                                                     {"sku": "gone", "quantity": 1}]})
                   ).record.saga_id
            await _wait(store, good, "the order did not complete")
            await _wait(store, bad, "the out-of-stock order did not roll back")
            ended = {s: await store.get_saga(s) for s in (good, bad)}
            await verify_all(store, ended)
    finally:
        await participants.stop()
    assert ended[good].status == "completed"  # type: ignore[union-attr]
    assert ended[bad].status == "compensated"  # type: ignore[union-attr]
    sent = {(c.saga_id, c.step, c.phase.value) for c in participants.received}
    assert (good, "ship", "action") in sent and (good, "lines[2].reserve_stock", "confirm") in sent
    assert (bad, "hold_payment", "cancel") in sent and (bad, "ship", "action") not in sent
