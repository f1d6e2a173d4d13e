"""Done when: a saga declared only in YAML, uploaded over the API to a running stack (real
Postgres, relay, Kafka, a worker started before the upload), completes, rolls back and is
repaired like a class-defined one."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from coordinator.runtime.worker import Worker
from coordinator.runtime.worker.definitions import DefinitionsLoop
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from participant_sdk.protocol import (
    CommandEnvelope,
    ErrorKind,
    Outcome,
    Phase,
    ReplyEnvelope,
    command_topic,
)
from tests.integration.test_api_support import ADMIN, OPERATOR, app_client, bearer
from tests.integration.test_saga_versions import (
    PARTICIPANTS,
    _settings,
    _wait,
    relay,  # noqa: F401  (fixture)
)
from tests.integration.test_store_support import verify_all
from tests.integration.test_worker_support import ScriptedParticipant, reply_to

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ORDER_YAML = (Path(__file__).resolve().parents[2] / "examples" / "order_saga.yaml").read_text()
ORDER = {"order_id": "o-1", "customer_id": "c-1", "amount_cents": 900, "sku": "a",
         "quantity": 2, "address": "x"}
refused_cancels: set[uuid.UUID] = set()


def _script(command: CommandEnvelope) -> list[ReplyEnvelope]:
    """Stock runs out for sku 'gone'; the first cancel of a 'stubborn' customer's payment is
    refused (the saga goes dead until an operator retries it)."""
    if command.payload.get("sku") == "gone" and command.phase is Phase.TRY:
        return [reply_to(command, Outcome.REJECTED)]
    if (command.phase is Phase.CANCEL and command.payload.get("customer") == "stubborn"
            and command.saga_id not in refused_cancels):
        refused_cancels.add(command.saga_id)
        return [reply_to(command, (Outcome.REJECTED, ErrorKind.BUSINESS))]
    return [reply_to(command, Outcome.OK)]


async def _until(store: SagaStore, saga_id: uuid.UUID, status: str) -> None:
    deadline = time.monotonic() + 40
    while (record := await store.get_saga(saga_id)) is None or record.status != status:
        assert time.monotonic() < deadline, f"{saga_id}: {record and record.status}"
        await asyncio.sleep(0.1)


async def test_a_yaml_saga_uploaded_to_a_running_stack_runs_like_a_class(
    relay: None, fresh_db: str, kafka_bootstrap: str, topic_prefix: str  # noqa: F811
) -> None:
    participants = ScriptedParticipant(
        kafka_bootstrap, [command_topic(p, topic_prefix) for p in PARTICIPANTS], _script)
    settings = _settings(fresh_db, kafka_bootstrap, topic_prefix)
    worker_registry = SagaRegistry(topic_prefix=topic_prefix)  # knows no saga at all
    await participants.start()
    try:
        async with Worker(settings, worker_registry) as worker, \
                await SagaStore.open(fresh_db, SagaRegistry(topic_prefix=topic_prefix),
                                     max_size=3) as store, app_client(store) as api:
            assert worker.definitions is not None
            worker.definitions.poll = 0.2  # the test need not wait the default 5 s
            assert isinstance(worker.definitions, DefinitionsLoop)
            uploaded = await api.post("/saga-definitions", content=ORDER_YAML.encode(),
                                      headers={**bearer(ADMIN),
                                               "Content-Type": "application/yaml"})
            assert uploaded.status_code == 201, uploaded.text

            async def start(**changes: object) -> uuid.UUID:
                r = await api.post("/sagas", json={"type": "order",
                                                   "input": {**ORDER, **changes}},
                                   headers=bearer(OPERATOR))
                assert r.status_code == 201, r.text
                return uuid.UUID(r.json()["saga_id"])

            good = await start()
            rolled_back = await start(order_id="o-2", sku="gone")
            stubborn = await start(order_id="o-3", sku="gone", customer_id="stubborn")
            await _wait(store, good, "the YAML saga did not complete")
            await _wait(store, rolled_back, "the YAML saga did not roll back")
            await _until(store, stubborn, "dead")
            repaired = await api.post(f"/sagas/{stubborn}/retry",
                                      json={"reason": "payments fixed the release"},
                                      headers=bearer(OPERATOR))
            assert repaired.status_code == 200, repaired.text
            await _until(store, stubborn, "compensated")
            ended = {s: await store.get_saga(s) for s in (good, rolled_back, stubborn)}
            await verify_all(store, ended)
        assert ("order", 1) in worker_registry  # picked up without a restart
    finally:
        await participants.stop()
    assert [ended[s].status for s in (good, rolled_back, stubborn)] == [  # type: ignore[union-attr]
        "completed", "compensated", "compensated"]
    sent = {(c.saga_id, c.step, c.phase.value) for c in participants.received}
    assert (good, "create_shipment", "action") in sent
    assert (good, "reserve_funds", "confirm") in sent
    assert (rolled_back, "reserve_funds", "cancel") in sent
    assert (rolled_back, "create_shipment", "action") not in sent
    shipped = next(c for c in participants.received
                   if c.saga_id == good and c.step == "create_shipment")
    assert shipped.payload == {"address": "x", "items": ["a", "a"]}
