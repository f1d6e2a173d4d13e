"""Saga-end hints on real Postgres: the result long poll of the API answers when another
store (a worker's) ends the saga, although the poll's own re-reads are switched off; it does
so again after its LISTEN connection is killed; other sagas' ends and foreign payloads wake
nobody; hints flow only while the API has long polls (its connection closes when idle, and
the sender stops hinting)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import coordinator.api.routes_results as routes_results
import coordinator.runtime.hints.results as result_hints
from coordinator.api import ApiSettings, TokenAuth, create_app
from coordinator.config.settings import CoordinatorSettings
from coordinator.engine import ReplyReceived
from coordinator.runtime.hints.results import (
    CHANNEL,
    SagaEndHints,
    SagaEndWaiters,
    start_saga_end_hints,
)
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from participant_sdk.protocol import Outcome
from tests.integration.test_api_support import OPERATOR, TOKENS
from tests.integration.test_signals_api import AwaitPayment
from tests.integration.test_store_support import migrated, outbox_commands, reply_to

pytestmark = pytest.mark.integration


@pytest.fixture
def no_rereads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long poll reads its saga once and then only when hinted (never by its own timer)."""
    monkeypatch.setattr(routes_results, "_FIRST_PAUSE", 3600.0)
    monkeypatch.setattr(routes_results, "_LONGEST_PAUSE", 3600.0)


Setup = tuple[httpx.AsyncClient, SagaEndWaiters, SagaEndHints, SagaStore]


@pytest.fixture
async def api_and_worker(fresh_db: str, topic_prefix: str, monkeypatch: pytest.MonkeyPatch
                         ) -> AsyncIterator[Setup]:
    """The API app on a store of its own (its listener idles out after 0.5 s), and the
    "worker": another store on the same database whose commits send saga-end hints."""
    await migrated(fresh_db)
    monkeypatch.setattr(result_hints, "LISTENER_IDLE", 0.5)
    monkeypatch.setattr(result_hints, "LOOK_EVERY", 0.2)
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[AwaitPayment])
    async with (await SagaStore.open(fresh_db, registry, max_size=4) as api_store,
                await SagaStore.open(fresh_db, registry, max_size=2) as worker_store):
        hints = await start_saga_end_hints(worker_store, CoordinatorSettings(dsn=fresh_db))
        assert hints is not None
        app = create_app(ApiSettings(), store=api_store, auth=TokenAuth.parse(TOKENS),
                         run_jobs=False)
        try:
            async with app.router.lifespan_context(app), httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app), base_url="http://api",
                    headers={"Authorization": f"Bearer {OPERATOR}"}) as http:
                yield http, app.state.ctx.saga_ends, hints, worker_store
        finally:
            await hints.stop()


async def _until(predicate: Any, what: str, limit: float = 10.0) -> None:
    for _ in range(int(limit / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not {what} within {limit} s")


async def _start(http: httpx.AsyncClient, order: str) -> str:
    answer = await http.post("/sagas", json={"type": "await_payment",
                                             "input": {"order_id": order}})
    assert answer.status_code in (200, 201), answer.text
    saga_id: str = answer.json()["saga_id"]
    return saga_id


async def _finish(store: SagaStore, http: httpx.AsyncClient, saga_id: str) -> None:
    """Answer the reservation, pay, answer the shipping: the saga completes, on ``store``."""
    await _answer(store)
    paid = await http.post(f"/sagas/{saga_id}/signals/paid",
                           json={"signal_id": f"pay-{saga_id}", "payload": {"amount": 5}})
    assert paid.status_code in (200, 202), paid.text
    await _answer(store)


async def _answer(store: SagaStore) -> None:
    for command in await outbox_commands(store):
        await store.apply(command.saga_id, ReplyReceived(reply=reply_to(command, Outcome.OK)))


async def _long_poll(http: httpx.AsyncClient, saga_id: str) -> dict[str, Any]:
    answer = await http.get(f"/sagas/{saga_id}/result", params={"wait": "20s"})
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


async def test_the_long_poll_answers_on_the_hint_of_another_store(
    api_and_worker: Setup, no_rereads: None,
) -> None:
    http, ends, _, worker_store = api_and_worker
    saga_id, other = await _start(http, "o-1"), await _start(http, "o-2")
    waiter = asyncio.create_task(_long_poll(http, saga_id))
    bystander = asyncio.create_task(_long_poll(http, other))
    await _until(lambda: ends.listening, "the API listening")
    await asyncio.sleep(0.3)  # both read their saga once and wait
    assert not waiter.done() and not bystander.done()
    await _finish(worker_store, http, saga_id)
    outcome = await asyncio.wait_for(waiter, 10)
    assert outcome["done"] is True and outcome["status"] == "completed"
    assert not bystander.done()  # another saga's end woke only its own waiter
    bystander.cancel()
    await asyncio.gather(bystander, return_exceptions=True)


async def test_waiters_are_woken_after_a_reconnect_and_foreign_payloads_are_ignored(
    api_and_worker: Setup, no_rereads: None,
) -> None:
    http, ends, _, worker_store = api_and_worker
    saga_id = await _start(http, "o-3")
    waiter = asyncio.create_task(_long_poll(http, saga_id))
    await _until(lambda: ends.listening, "the API listening")
    await asyncio.sleep(0.3)
    async with worker_store.pool.acquire() as conn:
        await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, "not-a-saga-id  also-not")
    await asyncio.sleep(0.3)
    assert not waiter.done()
    # The saga ends while the API's LISTEN connection is gone: no hint reaches it, but the
    # reconnect wakes every waiter to read again.
    async with worker_store.pool.acquire() as conn:
        killed = await conn.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'LISTEN%'")
    assert killed == 1
    await _finish(worker_store, http, saga_id)
    outcome = await asyncio.wait_for(waiter, 15)
    assert outcome["status"] == "completed"


async def test_hints_flow_only_while_someone_waits(api_and_worker: Setup) -> None:
    http, ends, hints, worker_store = api_and_worker
    unwatched = await _start(http, "o-4")
    await _finish(worker_store, http, unwatched)  # no long poll: the API does not listen
    await _until(lambda: hints.dropped == 1, "the end left unsent")
    assert hints.sent == 0 and not ends.listening
    watched = await _start(http, "o-5")
    waiter = asyncio.create_task(_long_poll(http, watched))
    await _until(lambda: ends.listening, "the API listening for its long poll")
    await asyncio.sleep(result_hints.LOOK_EVERY)  # the sender's next look sees the listener
    await _finish(worker_store, http, watched)
    assert (await asyncio.wait_for(waiter, 10))["status"] == "completed"
    await _until(lambda: hints.sent == 1, "the end hinted")
    await _until(lambda: not ends.listening, "the idle listener closed")
    async with worker_store.pool.acquire() as conn:
        assert not await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1",
            result_hints.LISTENER_APP_NAME)
