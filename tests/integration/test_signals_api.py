"""Signals through the operator API on real Postgres: kept until a wait takes it, applied
once per id, 404 / 409 / 422 as documented, signal-with-start in one transaction, and the
saga_signals rows (migration 0007) telling who sent what and which wait took it."""

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
from coordinator.language.nodes import WaitForSignal
from coordinator.language.saga import Saga, SagaStep
from coordinator.sagas.registry import SagaRegistry
from participant_sdk.protocol import Outcome
from tests.integration.test_api_support import OPERATOR, VIEWER, Api, bearer, open_api
from tests.integration.test_store_support import (
    outbox_commands,
    reply_to,
    verify_all,
)

pytestmark = pytest.mark.integration


class Order(BaseModel):
    order_id: str


class Paid(BaseModel):
    amount: int


class Progress(BaseModel):
    order_id: str
    status: str
    paid: int | None


class AwaitPayment(Saga):
    name = "await_payment"
    input_model = Order
    queries = {
        "progress": lambda q: Progress(order_id=q.input.order_id, status=q.status,
                                       paid=(q.results.get("pay") or {}).get("amount")),
        "broken": lambda q: {"not": "a model"},
    }
    steps = (
        SagaStep("reserve", "stock", "reserve", compensable=True),
        WaitForSignal("pay", "paid", payload=Paid, timeout=timedelta(days=3)),
        SagaStep("ship", "shipping", "ship", compensable=True,
                 payload=lambda ctx: {"amount": ctx.results["pay"]["amount"]}),
    )


@pytest.fixture
async def api(fresh_db: str, topic_prefix: str) -> AsyncIterator[Api]:
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[AwaitPayment])
    async with open_api(fresh_db, registry) as api:
        yield api


async def _start(api: Api) -> UUID:
    started = await api.store.start_saga("await_payment", {"order_id": "o-1"})
    return started.record.saga_id


async def _answer_all(api: Api) -> list[str]:
    """Answer every command in the outbox OK; the steps answered."""
    steps = []
    for command in await outbox_commands(api.store):
        await api.store.apply(command.saga_id, ReplyReceived(reply=reply_to(command,
                                                                            Outcome.OK)))
        steps.append(command.step)
    return steps


async def _signal_rows(api: Api, saga_id: UUID) -> list[dict[str, Any]]:
    async with api.store.pool.acquire() as conn:
        rows = await conn.fetch("SELECT signal_id, name, sender, consumed_by FROM saga_signals "
                                "WHERE saga_id = $1 ORDER BY received_at", saga_id)
    return [dict(r) for r in rows]


async def test_a_signal_before_its_wait_is_kept_then_taken_when_the_wait_is_reached(
    api: Api,
) -> None:
    saga_id = await _start(api)
    sent = await api.post(f"/sagas/{saga_id}/signals/paid",
                          {"signal_id": "pay-1", "payload": {"amount": 42}})
    assert sent.status_code == 202, sent.text
    assert sent.json() == {"saga_id": str(saga_id), "signal_id": "pay-1", "name": "paid",
                           "duplicate": False, "started": False}
    assert await _signal_rows(api, saga_id) == [
        {"signal_id": "pay-1", "name": "paid", "sender": "api:olga", "consumed_by": None}]
    assert await _answer_all(api) == ["reserve"]  # the wait is reached and takes the signal
    assert (await _signal_rows(api, saga_id))[0]["consumed_by"] == "pay"
    [ship] = await outbox_commands(api.store, delete=False)
    assert (ship.step, ship.payload) == ("ship", {"amount": 42})
    await verify_all(api.store, [saga_id])


async def test_a_resent_signal_is_applied_once(api: Api) -> None:
    saga_id = await _start(api)
    await _answer_all(api)  # waiting now
    body = {"signal_id": "same", "payload": {"amount": 1}}
    first = await api.post(f"/sagas/{saga_id}/signals/paid", body)
    again = await api.post(f"/sagas/{saga_id}/signals/paid", body)
    assert (first.status_code, first.json()["duplicate"]) == (202, False)
    assert (again.status_code, again.json()["duplicate"]) == (202, True)
    history = (await api.get(f"/sagas/{saga_id}/history")).json()["entries"]
    assert sum(e["event"]["type"] == "signal_received" for e in history) == 1
    assert await _answer_all(api) == ["ship"]


async def test_signal_errors_are_404_409_422_and_403(api: Api) -> None:
    saga_id = await _start(api)
    unknown = await api.post(f"/sagas/{uuid4()}/signals/paid", {"payload": {"amount": 1}})
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "saga_not_found")
    nosuch = await api.post(f"/sagas/{saga_id}/signals/refund", {})
    assert (nosuch.status_code, nosuch.json()["error"]["code"]) == (404, "unknown_signal")
    assert nosuch.json()["error"]["details"] == {"known": ["paid"]}
    bad = await api.post(f"/sagas/{saga_id}/signals/paid", {"payload": {"amount": "lots"}})
    assert (bad.status_code, bad.json()["error"]["code"]) == (422, "invalid_signal_payload")
    viewer = await api.client.post(f"/sagas/{saga_id}/signals/paid", json={},
                                   headers=bearer(VIEWER))
    assert viewer.status_code == 403
    assert await _signal_rows(api, saga_id) == []  # nothing refused was stored
    await api.post(f"/sagas/{saga_id}/signals/paid",
                   {"signal_id": "ok-1", "payload": {"amount": 1}})
    assert await _answer_all(api) == ["reserve"]
    assert await _answer_all(api) == ["ship"]
    assert (await api.get(f"/sagas/{saga_id}")).json()["status"] == "completed"
    late = await api.post(f"/sagas/{saga_id}/signals/paid", {"payload": {"amount": 1}},
                          token=OPERATOR)
    assert (late.status_code, late.json()["error"]["code"]) == (409, "saga_finished")
    resent = await api.post(f"/sagas/{saga_id}/signals/paid",  # a late resend: same answer
                            {"signal_id": "ok-1", "payload": {"amount": 1}})
    assert (resent.status_code, resent.json()["duplicate"]) == (202, True)


async def test_signal_with_start_starts_once_and_delivers_once(api: Api) -> None:
    saga_id = uuid4()
    body = {"type": "await_payment", "saga_id": str(saga_id), "input": {"order_id": "o-9"},
            "signal": "paid", "signal_id": "s-1", "payload": {"amount": 9}}
    first = await api.post("/signal-with-start", body)
    assert first.status_code == 202, first.text
    assert (first.json()["started"], first.json()["duplicate"]) == (True, False)
    again = await api.post("/signal-with-start", body)
    assert (again.json()["started"], again.json()["duplicate"]) == (False, True)
    assert [r["signal_id"] for r in await _signal_rows(api, saga_id)] == ["s-1"]
    bad = await api.post("/signal-with-start", {**body, "saga_id": str(uuid4()),
                                                "payload": {"amount": "x"}})
    assert bad.status_code == 422
    async with api.store.pool.acquire() as conn:  # refused: no saga started without it
        assert await conn.fetchval("SELECT count(*) FROM sagas") == 1
    assert await _answer_all(api) == ["reserve"]
    assert await _answer_all(api) == ["ship"]
    await verify_all(api.store, [saga_id])


async def test_a_query_answers_while_another_transaction_holds_the_saga_row(
    api: Api, fresh_db: str,
) -> None:
    saga_id = await _start(api)
    before = await api.get(f"/sagas/{saga_id}/queries/progress")
    assert before.status_code == 200, before.text
    assert before.json()["result"] == {"order_id": "o-1", "status": "running", "paid": None}
    holder = await asyncpg.connect(fresh_db)
    try:
        async with holder.transaction():
            await holder.execute("SELECT 1 FROM sagas WHERE id = $1 FOR UPDATE", saga_id)
            # Not even an apply could take the row now; the query does not need it.
            answered = await asyncio.wait_for(
                api.get(f"/sagas/{saga_id}/queries/progress"), timeout=5)
            assert answered.status_code == 200
            async with api.store.pool.acquire() as conn:
                waiting = await conn.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE NOT granted")
            assert waiting == 0
    finally:
        await holder.close()
    history = (await api.get(f"/sagas/{saga_id}/history")).json()["entries"]
    assert len(history) == 1  # the queries wrote nothing


async def test_query_errors(api: Api) -> None:
    saga_id = await _start(api)
    unknown = await api.get(f"/sagas/{saga_id}/queries/nope")
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "unknown_query")
    assert unknown.json()["error"]["details"] == {"known": ["broken", "progress"]}
    missing = await api.get(f"/sagas/{uuid4()}/queries/progress")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "saga_not_found")
    broken = await api.get(f"/sagas/{saga_id}/queries/broken")
    assert (broken.status_code, broken.json()["error"]["code"]) == (500, "query_failed")
    assert "returned dict, not a pydantic model" in broken.json()["error"]["message"]
    assert (await api.client.get(f"/sagas/{saga_id}/queries/progress")).status_code == 401


async def test_an_operator_skips_a_wait_with_the_payload_and_it_is_audited(api: Api) -> None:
    saga_id = await _start(api)
    await _answer_all(api)  # waiting for "paid" now
    retry = await api.post(f"/sagas/{saga_id}/retry", {"reason": "stuck?"})
    assert retry.status_code == 409 and "skip ends the wait now" in retry.text
    bad = await api.post(f"/sagas/{saga_id}/skip", {"reason": "paid by phone",
                                                     "result": {"amount": "lots"}})
    assert bad.status_code == 409 and "not a valid 'paid' signal payload" in bad.text
    done = await api.post(f"/sagas/{saga_id}/skip", {"reason": "paid by phone",
                                                      "result": {"amount": 5}})
    assert done.status_code == 200, done.text
    [ship] = await outbox_commands(api.store, delete=False)
    assert (ship.step, ship.payload) == ("ship", {"amount": 5})
    assert await _timer_kinds(api, saga_id) == ["deadline"]  # the wait's timeout is gone
    history = (await api.get(f"/sagas/{saga_id}/history")).json()["entries"]
    assert history[-1]["actor"] == "operator:olga" and history[-1]["event"]["verb"] == "skip"
    await verify_all(api.store, [saga_id])


async def _timer_kinds(api: Api, saga_id: UUID) -> list[str]:
    async with api.store.pool.acquire() as conn:
        return [r["kind"] for r in await conn.fetch(
            "SELECT kind FROM timers WHERE saga_id = $1 ORDER BY kind", saga_id)]
