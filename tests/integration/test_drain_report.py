"""The drain report over the API and the ``saga versions`` CLI, on a real Postgres.

Two v1 sagas are in flight (each waits for a reply, with a deadline timer) when v2 is
deployed and takes a new start; the report counts each version's sagas, names the oldest,
bounds the last v1 finish by the latest v1 timer, exports both machines and diffs them.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from coordinator.cli.ops import main as saga_cli
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from tests.integration.test_api_support import VIEWER, app_client, bearer
from tests.integration.test_saga_versions import ShipmentV1, ShipmentV2
from tests.integration.test_store_support import ManualClock, migrated

pytestmark = pytest.mark.integration


class _LoopTransport(httpx.BaseTransport):
    """The sync CLI, run in a thread, calling the in-process app on the test's loop."""

    def __init__(self, client: httpx.AsyncClient, loop: asyncio.AbstractEventLoop) -> None:
        self.client, self.loop = client, loop

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        async def call() -> httpx.Response:
            response = await self.client.send(
                self.client.build_request(request.method, str(request.url),
                                          headers=request.headers, content=request.read()))
            await response.aread()
            return response

        got = asyncio.run_coroutine_threadsafe(call(), self.loop).result(30)
        return httpx.Response(got.status_code, headers=got.headers, content=got.content)


@pytest.fixture
async def client(fresh_db: str, topic_prefix: str) -> AsyncIterator[httpx.AsyncClient]:
    await migrated(fresh_db)
    clock = ManualClock()
    v1 = SagaRegistry(topic_prefix=topic_prefix, sagas=[ShipmentV1])
    both = SagaRegistry(topic_prefix=topic_prefix, sagas=[ShipmentV1, ShipmentV2])
    async with await SagaStore.open(fresh_db, v1, max_size=2, clock=clock) as old:
        for order in ("a", "b"):
            await old.start_saga("shipment", {"order_id": order, "amount": 1})
            clock.advance(timedelta(seconds=5))
    async with await SagaStore.open(fresh_db, both, max_size=4, clock=clock) as store:
        await store.start_saga("shipment", {"order_id": "new", "amount": 2})
        async with app_client(store, clock) as c:
            c.headers.update(bearer(VIEWER))
            yield c


async def _report(client: httpx.AsyncClient, **params: Any) -> dict[str, Any]:
    response = await client.get("/saga-types/shipment/versions", params=params)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


async def test_drain_report_counts_bounds_and_diffs_versions(
        client: httpx.AsyncClient, fresh_db: str) -> None:
    import asyncpg

    data = await _report(client, diff_from=1, diff_to=2)
    v1, v2 = data["versions"]
    assert (v1["version"], v1["registered"], v1["latest"], v1["live"]) == (1, True, False, 2)
    assert v1["by_status"] == {"scheduled": 0, "running": 2, "compensating": 0, "dead": 0}
    assert (v2["version"], v2["latest"], v2["live"]) == (2, True, 1)
    conn = await asyncpg.connect(fresh_db)
    try:
        oldest = await conn.fetchrow("SELECT id, created_at FROM sagas WHERE saga_version = 1 "
                                     "ORDER BY created_at LIMIT 1")
        last_due = await conn.fetchval(
            "SELECT max(due_at) FROM timers t JOIN sagas s ON s.id = t.saga_id "
            "WHERE s.saga_version = 1")
        assert v1["oldest_live_id"] == str(oldest["id"])
        assert v1["unbounded"] == 0 and last_due is not None
        assert v1["expected_last_finish"] == last_due.isoformat().replace("+00:00", "Z")
        assert v1["machine"]["version"] == 1 and v2["machine"]["version"] == 2
        diff = data["diff"]
        assert (diff["steps_added"], diff["steps_removed"], diff["steps_changed"]) == (
            ["hold"], ["ship"], [])
        assert "ship.executing" in diff["states_removed"] and not diff["input_schema_changed"]

        # A v1 saga waiting with no timer has no known end: the last finish is unknown.
        await conn.execute("DELETE FROM timers WHERE saga_id = $1", oldest["id"])
        v1 = (await _report(client))["versions"][0]
        assert (v1["unbounded"], v1["expected_last_finish"]) == (1, None)
        assert v1["last_timer_due"] is not None
    finally:
        await conn.close()


async def test_drain_report_refuses_bad_requests(client: httpx.AsyncClient) -> None:
    unknown = await client.get("/saga-types/nope/versions")
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "saga_type_not_found"
    half = await client.get("/saga-types/shipment/versions", params={"diff_from": 1})
    assert half.json()["error"]["code"] == "diff_needs_two_versions"
    missing = await client.get("/saga-types/shipment/versions",
                               params={"diff_from": 1, "diff_to": 9})
    assert missing.status_code == 400
    assert missing.json()["error"]["code"] == "version_not_registered"
    assert (await client.get("/saga-types/shipment/versions",
                             params={"diff_from": 0, "diff_to": 1})).status_code == 422
    anonymous = await client.get("/saga-types/shipment/versions", headers={"Authorization": ""})
    assert anonymous.status_code == 401


async def test_cli_prints_the_drain_report_and_the_diff(client: httpx.AsyncClient) -> None:
    out = io.StringIO()
    transport = _LoopTransport(client, asyncio.get_running_loop())
    code = await asyncio.to_thread(
        saga_cli, ["--url", "http://api", "--token", VIEWER, "versions", "shipment",
                   "--diff", "1", "2"], out=out, transport=transport)
    text = out.getvalue()
    assert code == 0, text
    lines = text.splitlines()
    assert lines[0] == "saga type shipment"
    assert lines[1].split()[:6] == ["VERSION", "REGISTERED", "LATEST", "RUNNING",
                                    "COMPENSATING", "DEAD"]
    assert lines[2].split()[:6] == ["1", "true", "false", "2", "0", "0"]
    assert "v1 -> v2:" in lines and "  steps added: hold" in lines
    assert "  steps removed: ship" in lines
    code = await asyncio.to_thread(saga_cli, ["--url", "http://api", "--token", VIEWER,
                                              "versions", "nope"], out=io.StringIO(),
                                   transport=transport)
    assert code == 1
