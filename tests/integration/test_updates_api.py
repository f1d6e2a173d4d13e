"""Updates through the operator API on real Postgres: answered after COMMIT (accepted with
the result, rejected with the reason and nothing applied), an id answered once and fetched by
id, 404 / 409 / 422 / 403 as documented, the wait bounded (504, nothing applied), a wait woken
by an update's signal, and the saga_updates rows (migration 0016)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import pytest
from pydantic import BaseModel

from coordinator.engine import ReplyReceived
from coordinator.language import Update
from coordinator.language.nodes import WaitForSignal
from coordinator.language.saga import Saga, SagaStep
from coordinator.sagas.registry import SagaRegistry
from participant_sdk.protocol import Outcome
from tests.integration.test_api_support import OPERATOR, VIEWER, Api, bearer, open_api
from tests.integration.test_store_support import outbox_commands, reply_to, verify_all

pytestmark = pytest.mark.integration


class Order(BaseModel):
    order_id: str
    address: str


class AddressChange(BaseModel):
    address: str


class Paid(BaseModel):
    amount: int


def _address(ctx: Any) -> str:
    latest = ctx.updates.get("change_address")
    return str(latest["address"] if latest else ctx.input.address)


class AwaitPayment(Saga):
    name = "update_await_payment"
    input_model = Order
    steps = (
        SagaStep("reserve", "stock", "reserve", compensable=True),
        WaitForSignal("pay", "paid", payload=Paid, timeout=timedelta(days=3)),
        SagaStep("ship", "shipping", "ship", compensable=True,
                 payload=lambda ctx: {"address": _address(ctx)}),
    )
    updates = (
        Update("change_address", model=AddressChange,
               validate=lambda ctx, u: "ship" not in ctx.results or "already shipped",
               apply=lambda ctx, u: {"address": u.address, "previous": _address(ctx)}),
        Update("pay", model=Paid, signal="paid",
               validate=lambda ctx, u: u.amount > 0 or "the amount must be positive",
               apply=lambda ctx, u: {"amount": u.amount}),
    )


@pytest.fixture
async def api(fresh_db: str, topic_prefix: str) -> AsyncIterator[Api]:
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[AwaitPayment])
    async with open_api(fresh_db, registry) as api:
        yield api


async def _start(api: Api) -> UUID:
    started = await api.store.start_saga("update_await_payment",
                                         {"order_id": "o-1", "address": "1 Old Road"})
    return started.record.saga_id


async def _answer_all(api: Api) -> list[tuple[str, dict[str, Any]]]:
    sent = []
    for command in await outbox_commands(api.store):
        await api.store.apply(command.saga_id, ReplyReceived(reply=reply_to(command,
                                                                            Outcome.OK)))
        sent.append((command.step, command.payload))
    return sent


async def _rows(api: Api, saga_id: UUID) -> list[dict[str, Any]]:
    async with api.store.pool.acquire() as conn:
        rows = await conn.fetch("SELECT update_id, name, outcome, reason, sender "
                                "FROM saga_updates WHERE saga_id = $1 ORDER BY answered_at, name, "
                                "update_id", saga_id)
    return [dict(r) for r in rows]


def _url(saga_id: UUID, name: str) -> str:
    return f"/sagas/{saga_id}/updates/{name}"


async def test_an_accepted_update_is_answered_with_its_result_and_read_by_later_steps(
    api: Api,
) -> None:
    saga_id = await _start(api)
    assert [s for s, _ in await _answer_all(api)] == ["reserve"]
    sent = await api.post(_url(saga_id, "change_address"),
                          {"update_id": "u-1", "payload": {"address": "2 New Street"}})
    assert sent.status_code == 200, sent.text
    body = sent.json()
    assert {k: body[k] for k in ("outcome", "result", "reason", "duplicate")} == {
        "outcome": "accepted", "result": {"address": "2 New Street", "previous": "1 Old Road"},
        "reason": None, "duplicate": False}
    history = (await api.get(f"/sagas/{saga_id}/history")).json()["entries"]
    assert [e["event"]["update_id"] for e in history
            if e["event"]["type"] == "update_applied"] == ["u-1"]
    paid = await api.post(_url(saga_id, "pay"), {"update_id": "p-1", "payload": {"amount": 5}})
    assert paid.json()["result"] == {"amount": 5}
    # The update's signal woke the wait in the same transaction: ship was sent at once.
    assert await _answer_all(api) == [("ship", {"address": "2 New Street"})]
    assert (await api.get(f"/sagas/{saga_id}")).json()["status"] == "completed"
    assert await _rows(api, saga_id) == [
        {"update_id": "u-1", "name": "change_address", "outcome": "accepted", "reason": None,
         "sender": "api:olga"},
        {"update_id": "p-1", "name": "pay", "outcome": "accepted", "reason": None,
         "sender": "api:olga"}]
    await verify_all(api.store, [saga_id])


async def test_a_rejected_update_applies_nothing_and_its_id_is_answered_once(api: Api) -> None:
    saga_id = await _start(api)
    await _answer_all(api)
    before = (await api.get(f"/sagas/{saga_id}/history")).json()["entries"]
    no = await api.post(_url(saga_id, "pay"), {"update_id": "p-0", "payload": {"amount": 0}})
    assert (no.status_code, no.json()["outcome"], no.json()["reason"]) == (
        200, "rejected", "the amount must be positive")
    assert (await api.get(f"/sagas/{saga_id}/history")).json()["entries"] == before
    assert (await api.get(f"/sagas/{saga_id}")).json()["status"] == "running"
    again = await api.post(_url(saga_id, "pay"), {"update_id": "p-0", "payload": {"amount": 9}})
    assert (again.json()["outcome"], again.json()["duplicate"]) == ("rejected", True)
    ok = {"update_id": "a-1", "payload": {"address": "2 New Street"}}
    first = await api.post(_url(saga_id, "change_address"), ok)
    resent = await api.post(_url(saga_id, "change_address"), ok)
    assert (resent.json()["duplicate"], resent.json()["result"]) == (
        True, first.json()["result"])
    history = (await api.get(f"/sagas/{saga_id}/history")).json()["entries"]
    assert sum(e["event"]["type"] == "update_applied" for e in history) == 1
    fetched = await api.get(f"{_url(saga_id, 'change_address')}/a-1")
    assert (fetched.status_code, fetched.json()["result"]) == (200, first.json()["result"])
    missing = await api.get(f"{_url(saga_id, 'change_address')}/never")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "update_not_found")
    conflict = await api.post(_url(saga_id, "pay"), {"update_id": "a-1",
                                                     "payload": {"amount": 1}})
    assert (conflict.status_code, conflict.json()["error"]["code"]) == (
        409, "update_id_conflict")


async def test_update_errors_are_404_409_422_and_403(api: Api) -> None:
    saga_id = await _start(api)
    ok = {"update_id": "x-1", "payload": {"address": "2 New Street"}}
    unknown = await api.post(_url(uuid4(), "change_address"), ok)
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "saga_not_found")
    nosuch = await api.post(_url(saga_id, "refund"), ok)
    assert (nosuch.status_code, nosuch.json()["error"]["code"]) == (404, "unknown_update")
    assert nosuch.json()["error"]["details"] == {"known": ["change_address", "pay"]}
    bad = await api.post(_url(saga_id, "change_address"),
                         {"update_id": "x-1", "payload": {"address": 7}})
    assert (bad.status_code, bad.json()["error"]["code"]) == (422, "invalid_update_payload")
    for body in ({"payload": {}}, {"update_id": "has space"}, {"update_id": ""},
                 {"update_id": "x", "wait_seconds": 0}, {"update_id": "x", "extra": 1}):
        refused = await api.post(_url(saga_id, "change_address"), body)
        assert refused.status_code == 422, body
    viewer = await api.client.post(_url(saga_id, "change_address"), json=ok,
                                   headers=bearer(VIEWER))
    assert viewer.status_code == 403
    assert await _rows(api, saga_id) == []  # nothing refused was stored
    await _answer_all(api)
    await api.post(_url(saga_id, "pay"), {"update_id": "p-1", "payload": {"amount": 1}})
    await _answer_all(api)
    assert (await api.get(f"/sagas/{saga_id}")).json()["status"] == "completed"
    late = await api.post(_url(saga_id, "change_address"), ok, token=OPERATOR)
    assert (late.status_code, late.json()["error"]["code"]) == (409, "saga_finished")
    assert "takes no more updates" in late.json()["error"]["message"]
    resent = await api.post(_url(saga_id, "pay"), {"update_id": "p-1", "payload": {"amount": 1}})
    assert (resent.status_code, resent.json()["duplicate"]) == (200, True)


async def test_a_busy_saga_times_the_update_out_and_nothing_is_applied(
    api: Api, fresh_db: str,
) -> None:
    saga_id = await _start(api)
    body = {"update_id": "slow-1", "payload": {"address": "2 New Street"},
            "wait_seconds": 0.3}
    holder = await asyncpg.connect(fresh_db)
    try:
        async with holder.transaction():  # as a worker applying a long batch would
            await holder.execute("SELECT 1 FROM sagas WHERE id = $1 FOR UPDATE", saga_id)
            late = await asyncio.wait_for(api.post(_url(saga_id, "change_address"), body),
                                          timeout=10)
    finally:
        await holder.close()
    assert (late.status_code, late.json()["error"]["code"]) == (504, "update_timed_out")
    assert await _rows(api, saga_id) == []
    fetched = await api.get(f"{_url(saga_id, 'change_address')}/slow-1")
    assert fetched.status_code == 404  # not applied, and never will be by itself
    again = await api.post(_url(saga_id, "change_address"), body)  # the same id: applied now
    assert (again.status_code, again.json()["outcome"]) == (200, "accepted")
