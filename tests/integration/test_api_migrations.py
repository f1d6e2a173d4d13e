"""The migration dry run over the API, on a real Postgres: one v1 saga can move to v2, one
cannot (its command is out on a node v2 renames), finished sagas are not listed, and nothing
is written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, ClassVar
from uuid import UUID, uuid4

import pytest

from coordinator.api import RepairJobRunner
from coordinator.engine import ReplyReceived
from coordinator.language.saga import Migration, Saga, SagaStep
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from participant_sdk.protocol import CommandEnvelope, Outcome
from tests.integration.test_api_support import VIEWER, Api, open_api, pump
from tests.integration.test_store_support import (
    FAST,
    OrderInput,
    outbox_commands,
    reply_to,
)

pytestmark = pytest.mark.integration


def _step(name: str, participant: str) -> SagaStep:
    return SagaStep(name, participant, "do", compensable=True, retry=FAST)


class ShipV1(Saga):
    name = "mig_order"
    version = 1
    input_model = OrderInput
    steps = (_step("pay", "payments"), _step("ship", "shipping"))


class ShipV2(Saga):
    name = "mig_order"
    version = 2
    input_model = OrderInput
    steps = (_step("pay", "payments"), _step("dispatch", "shipping"))
    migrate_from: ClassVar[Any] = {1: Migration(ShipV1, renames={"ship": "dispatch"})}


@pytest.fixture
async def api(fresh_db: str, topic_prefix: str) -> AsyncIterator[Api]:
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[ShipV1, ShipV2])
    async with open_api(fresh_db, registry) as api:
        yield api


async def _two_v1_sagas(store: SagaStore) -> tuple[UUID, UUID, list[CommandEnvelope]]:
    """One paying (its command not answered yet), one shipping; the pending commands."""
    waiting = (await store.start_saga("mig_order", {"order_id": "a", "amount": 1},
                                      version=1)).record.saga_id
    shipping = (await store.start_saga("mig_order", {"order_id": "b", "amount": 2},
                                       version=1)).record.saga_id
    held = []
    for command in await outbox_commands(store):
        if command.saga_id == shipping:
            await store.apply(shipping, ReplyReceived(reply=reply_to(command, Outcome.OK)))
        else:
            held.append(command)
    return waiting, shipping, held


async def test_dry_run_reports_per_saga_whether_it_can_move(api: Api) -> None:
    store = api.store
    waiting, shipping, _ = await _two_v1_sagas(store)
    seq_before = {s: (await store.get_saga(s)).history_seq  # type: ignore[union-attr]
                  for s in (waiting, shipping)}
    body = {"saga_type": "mig_order", "from_version": 1, "to_version": 2}
    r = await api.post("/migrations/dry-run", body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert (out["total"], out["can_move"], out["cannot_move"], out["migration"]) == (
        2, 1, 1, "v1->v2")
    verdicts = {i["saga_id"]: (i["can_move"], i["problems"]) for i in out["items"]}
    assert verdicts == {
        str(waiting): (True, []),
        str(shipping): (False, ["ship: a command or timer is outstanding on a node that is "
                                "renamed or changed in the new version"]),
    }
    # A dry run writes nothing.
    for saga_id, seq in seq_before.items():
        record = await store.get_saga(saga_id)
        assert record is not None and (record.history_seq, record.version) == (seq, 1)
    # Operator role; clear errors for a bad request.
    assert (await api.post("/migrations/dry-run", body, token=VIEWER)).status_code == 403
    back = await api.post("/migrations/dry-run", {**body, "from_version": 2, "to_version": 1})
    assert back.status_code == 422 and back.json()["error"]["code"] == "no_migration"
    unknown = await api.post("/migrations/dry-run", {**body, "to_version": 9})
    assert unknown.status_code == 422
    assert unknown.json()["error"]["code"] == "unknown_saga_version"


async def test_the_migration_job_moves_who_can_and_they_finish_on_v2(api: Api) -> None:
    store = api.store
    seen: list[Any] = []
    store.add_change_listener(seen.extend)
    waiting, shipping, held = await _two_v1_sagas(store)
    # A checkpoint taken on v1: verify later replays from it across the Migrated event.
    assert await store.compact(waiting) > 0
    body = {"saga_type": "mig_order", "from_version": 1, "to_version": 2,
            "reason": "ship renamed"}
    r = await api.post("/migrations", body)
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    assert r.headers["location"] == f"/migrations/{job_id}" and r.json()["total"] == 2
    assert await RepairJobRunner(store).run_once()
    job = (await api.get(f"/migrations/{job_id}")).json()
    assert (job["status"], job["counts"]) == ("done", {"applied": 1, "refused": 1})
    refused = next(i for i in job["items"] if i["outcome"] == "refused")
    assert refused["saga_id"] == str(shipping) and "outstanding" in refused["message"]
    moved = await store.get_saga(waiting)
    assert moved is not None and moved.version == 2
    history = (await api.get(f"/sagas/{waiting}/history")).json()["entries"]
    assert [(e["event"]["type"], e["actor"]) for e in history][-1] == (
        "migrated", "operator:olga")
    # Written through the store: its clock (a manual one here), its change listeners.
    assert history[-1]["recorded_at"] == api.clock().isoformat().replace("+00:00", "Z")
    assert any(c.saga.saga_id == waiting and c.event.type == "migrated" for c in seen)
    # The held pay reply lands on v2; both sagas finish, each on its own version.
    for command in held:
        await store.apply(command.saga_id, ReplyReceived(reply=reply_to(command, Outcome.OK)))
    for _ in range(4):
        await pump(store, api.clock, script=lambda command: Outcome.OK)
    done = {s: await store.get_saga(s) for s in (waiting, shipping)}
    assert all(d is not None and d.status == "completed" for d in done.values())
    assert list(done[waiting].state.steps) == ["pay", "dispatch"]  # type: ignore[union-attr]
    assert (done[shipping].version, list(done[shipping].state.steps)) == (  # type: ignore[union-attr]
        1, ["pay", "ship"])
    for saga_id in (waiting, shipping):  # replay across the Migrated event
        result = await store.verify(saga_id)
        assert result.ok, result.differences
    assert (await store.verify(waiting)).from_seq > 0  # ... from the v1 checkpoint
    # An unknown job, or a repair job's id, is a 404 here.
    assert (await api.get(f"/migrations/{uuid4()}")).status_code == 404
