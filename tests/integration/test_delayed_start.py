"""Delayed start through the API on real Postgres: the saga exists at once as ``scheduled``
(listed, cancellable), with a ``start`` timer row, and its first command is written only when
that timer fires."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from uuid import UUID

import pytest

from coordinator.sagas.registry import SagaRegistry
from tests.integration.test_api_support import Api, open_api
from tests.integration.test_signals_api import AwaitPayment
from tests.integration.test_store_support import outbox_commands

pytestmark = pytest.mark.integration


@pytest.fixture
async def api(fresh_db: str, topic_prefix: str) -> AsyncIterator[Api]:
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[AwaitPayment])
    async with open_api(fresh_db, registry) as api:
        yield api


async def _timer_kinds(api: Api, saga_id: UUID) -> list[str]:
    async with api.store.pool.acquire() as conn:
        return [r["kind"] for r in await conn.fetch(
            "SELECT kind FROM timers WHERE saga_id = $1", saga_id)]


async def test_a_delayed_saga_is_scheduled_listed_and_sends_its_first_command_on_time(
    api: Api,
) -> None:
    started = await api.post("/sagas", {"type": "await_payment", "input": {"order_id": "o-1"},
                                        "delay_seconds": 3600})
    assert started.status_code == 201, started.text
    saga_id = UUID(started.json()["saga_id"])
    assert started.json()["status"] == "scheduled"
    listed = (await api.get("/sagas", params={"status": "scheduled"})).json()["items"]
    assert [i["saga_id"] for i in listed] == [str(saga_id)]
    assert await _timer_kinds(api, saga_id) == ["start"]
    assert await outbox_commands(api.store) == []
    api.clock.advance(timedelta(minutes=59))
    assert await api.store.fire_due_timers() == 0  # not yet
    api.clock.advance(timedelta(minutes=1))
    assert await api.store.fire_due_timers() == 1
    [first] = await outbox_commands(api.store)
    assert first.step == "reserve"
    assert (await api.get(f"/sagas/{saga_id}")).json()["status"] == "running"


async def test_an_operator_cancel_of_a_scheduled_saga_ends_it_and_drops_its_timer(
    api: Api,
) -> None:
    start_at = (api.clock.now + timedelta(days=2)).isoformat()
    started = await api.post("/sagas", {"type": "await_payment", "input": {"order_id": "o-2"},
                                        "start_at": start_at})
    saga_id = UUID(started.json()["saga_id"])
    cancelled = await api.post(f"/sagas/{saga_id}/cancel", {"reason": "customer left"})
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    assert await _timer_kinds(api, saga_id) == []
    api.clock.advance(timedelta(days=3))
    assert await api.store.fire_due_timers() == 0
    assert await outbox_commands(api.store) == []


async def test_a_start_time_must_carry_its_offset_and_comes_alone(api: Api) -> None:
    naive = await api.post("/sagas", {"type": "await_payment", "input": {"order_id": "o"},
                                      "start_at": "2027-01-01T00:00:00"})
    assert naive.status_code == 422
    both = await api.post("/sagas", {"type": "await_payment", "input": {"order_id": "o"},
                                     "start_at": "2027-01-01T00:00:00Z", "delay_seconds": 5})
    assert both.status_code == 422
    assert "start_at or delay_seconds" in both.text
