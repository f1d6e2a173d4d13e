"""``coordinator.client.SagaClient`` against the real API app on real Postgres: typed start,
signal, query, list, cancel, the long-poll result, and safe retries of connection errors."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from coordinator.api import ApiSettings, TokenAuth, create_app
from coordinator.client import SagaApiError, SagaClient
from coordinator.engine import ReplyReceived
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from participant_sdk.protocol import Outcome
from tests.integration.test_api_support import OPERATOR, TOKENS
from tests.integration.test_signals_api import AwaitPayment, Order, Paid, Progress
from tests.integration.test_store_support import ManualClock, migrated, outbox_commands, reply_to

pytestmark = pytest.mark.integration


class FlakyTransport(httpx.AsyncBaseTransport):
    """The real app behind it; the first ``failures`` requests fail before reaching it, or
    (``after=True``) after it handled them: a lost response."""

    def __init__(self, inner: httpx.AsyncBaseTransport, failures: int, after: bool) -> None:
        self.inner, self.failures, self.after, self.seen = inner, failures, after, 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.seen += 1
        if self.failures and not self.after:
            self.failures -= 1
            raise httpx.ConnectError("refused", request=request)
        response = await self.inner.handle_async_request(request)
        if self.failures:
            self.failures -= 1
            await response.aread()
            raise httpx.ReadError("connection reset", request=request)
        return response


@pytest.fixture
async def app_store(fresh_db: str, topic_prefix: str) -> AsyncIterator[tuple[Any, SagaStore]]:
    await migrated(fresh_db)
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[AwaitPayment])
    async with await SagaStore.open(fresh_db, registry, max_size=4, clock=ManualClock()
                                    ) as store:
        app = create_app(ApiSettings(), store=store, auth=TokenAuth.parse(TOKENS),
                         run_jobs=False)
        async with app.router.lifespan_context(app):
            yield app, store


def _client(app: Any, failures: int = 0, after: bool = False
            ) -> tuple[SagaClient, FlakyTransport]:
    flaky = FlakyTransport(httpx.ASGITransport(app=app), failures, after)
    return SagaClient("http://api", token=OPERATOR, transport=flaky), flaky


async def _answer(store: SagaStore) -> list[str]:
    steps = []
    for command in await outbox_commands(store):
        await store.apply(command.saga_id, ReplyReceived(reply=reply_to(command, Outcome.OK)))
        steps.append(command.step)
    return steps


async def test_start_signal_query_and_wait_for_the_result(
    app_store: tuple[Any, SagaStore],
) -> None:
    app, store = app_store
    client, transport = _client(app)
    async with client:
        saga_id = await client.start(AwaitPayment, Order(order_id="o-7"))
        assert await client.query(saga_id, "progress", Progress) == Progress(
            order_id="o-7", status="running", paid=None)
        sent = await client.signal(saga_id, "paid", Paid(amount=12))
        assert sent["duplicate"] is False
        assert [s["saga_id"] for s in await client.list(type="await_payment")] == [
            str(saga_id)]
        not_yet = await client.result(saga_id, wait=timedelta(milliseconds=200))
        assert not_yet["done"] is False and not_yet["status"] == "running"

        async def finish() -> None:
            await asyncio.sleep(0.3)
            assert await _answer(store) == ["reserve"]
            assert await _answer(store) == ["ship"]

        began, requests = time.monotonic(), transport.seen
        waiter = asyncio.create_task(client.result(saga_id, wait=timedelta(seconds=20)))
        await finish()
        outcome = await waiter
        assert outcome["done"] is True and outcome["status"] == "completed"
        assert outcome["results"]["pay"] == {"amount": 12}
        assert time.monotonic() - began < 5  # answered when it finished, not at the wait's end
        assert transport.seen - requests == 1  # one long poll, no client-side loop
        with pytest.raises(SagaApiError) as refused:
            await client.signal(saga_id, "paid", {"amount": 1})
        assert (refused.value.status, refused.value.code) == (409, "saga_finished")


async def test_connection_errors_are_retried_where_a_repeat_is_safe(
    app_store: tuple[Any, SagaStore],
) -> None:
    app, store = app_store
    lost, transport = _client(app, failures=2, after=True)  # responses lost twice
    async with lost:
        saga_id = await lost.start("await_payment", {"order_id": "o-8"})
        assert transport.seen == 3
        await lost.signal(saga_id, "paid", {"amount": 3})  # lost reply, retried: applied once
    history = await store.get_history(saga_id)
    assert sum(h.event.type == "signal_received" for h in history) == 1
    async with store.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM sagas") == 1
    unsafe, transport = _client(app, failures=1, after=True)
    async with unsafe:  # a repair whose response was lost is not repeated blindly
        with pytest.raises(httpx.ReadError):
            await unsafe.cancel(saga_id, "customer left")
        assert transport.seen == 1  # (it did apply: repeating it would be a 409 or worse)
    refused, transport = _client(app, failures=1, after=False)
    async with refused:  # a refused connection never reached the API: safe to repeat
        other = await refused.start("await_payment", {"order_id": "o-9"})
        cancelled = await refused.cancel(other, "customer left")
        assert transport.seen == 3 and cancelled["status"] in ("compensating", "cancelled")
    async with store.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM sagas") == 2


async def test_the_result_wait_is_bounded_and_validated(
    app_store: tuple[Any, SagaStore],
) -> None:
    app, _ = app_store
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://api",
                                 headers={"Authorization": f"Bearer {OPERATOR}"}) as http:
        saga = (await http.post("/sagas", json={"type": "await_payment",
                                                "input": {"order_id": "o"}})).json()
        for bad in ("forever", "-1s", "5 fortnights"):  # the schema's pattern refuses them
            answer = await http.get(f"/sagas/{saga['saga_id']}/result", params={"wait": bad})
            error = answer.json()["error"]
            assert (answer.status_code, error["code"]) == (422, "validation_error")
            assert error["details"][0]["loc"] == ["query", "wait"]
        now = await http.get(f"/sagas/{saga['saga_id']}/result")
        assert now.status_code == 200 and now.json()["done"] is False
