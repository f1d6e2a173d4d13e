"""Every list of the API pages one way: ``?limit=&cursor=`` in, ``{items, next_cursor}`` out.

Walking each list with cursors returns every row once, in order, including past the old
1,000-item wall of ``/dead-letters``; a cursor of another list or filter, or a doctored one,
is a 400 ``invalid_cursor``.
"""

# ruff: noqa: F811  (fixtures imported from the support modules share their names)

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from coordinator.api import cursors
from coordinator.schedules import ScheduleFirer
from tests.integration.test_api_support import (
    Api,
    api,  # noqa: F401
    api_store,  # noqa: F401
)

pytestmark = pytest.mark.integration

LETTERS = 1050


async def walk(api: Api, path: str, limit: int, **params: Any) -> list[list[dict[str, Any]]]:
    """Every page of ``path``, following next_cursor."""
    pages, cursor = [], None
    while True:
        query = {**params, "limit": limit, **({"cursor": cursor} if cursor else {})}
        r = await api.get(path, params=query)
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body) == {"items", "next_cursor"}, body
        pages.append(body["items"])
        cursor = body["next_cursor"]
        if cursor is None:
            return pages


async def test_dead_letters_page_past_a_thousand(api: Api) -> None:
    async with api.store.pool.acquire() as conn:
        await conn.execute(
            """
            INSERT INTO sagaflow_dead_letters (source, reason, payload, headers)
            SELECT CASE WHEN i % 3 = 0 THEN 'a' ELSE 'b' END, 'r' || i, 'x'::bytea, '[]'
            FROM generate_series(1, $1) AS i
            """, LETTERS)
    pages = await walk(api, "/dead-letters", 1000)
    ids = [d["id"] for page in pages for d in page]
    assert [len(p) for p in pages] == [1000, LETTERS - 1000]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == LETTERS
    only_a = [d for page in await walk(api, "/dead-letters", 100, source="a") for d in page]
    assert len(only_a) == LETTERS // 3 and {d["source"] for d in only_a} == {"a"}
    first = (await api.get("/dead-letters", params={"limit": 5, "source": "a"})).json()
    wrong_filter = await api.get("/dead-letters", params={"cursor": first["next_cursor"]})
    assert wrong_filter.status_code == 400
    assert wrong_filter.json()["error"]["code"] == "invalid_cursor"


async def test_outbox_dead_letters_schedules_and_runs_page(api: Api) -> None:
    async with api.store.pool.acquire() as conn:
        await conn.execute(
            """
            INSERT INTO sagaflow_outbox_dead_letter
                (id, shard, topic, key, payload, message_id, headers, created_at, failed_at,
                 error_class, reason)
            SELECT i, 0, 't', 'k', 'x'::bytea, gen_random_uuid(), '{}', now(), now(), 'E', 'r'
            FROM generate_series(1, 7) AS i
            """)
    pages = await walk(api, "/outbox/dead-letters", 3)
    assert [[d["id"] for d in p] for p in pages] == [[1, 2, 3], [4, 5, 6], [7]]

    for i in range(5):
        r = await api.post("/schedules", {
            "id": f"s{i}", "saga_type": "ship_order", "input": {"amount": 1},
            "fire_time_field": "order_id", "spec": {"intervals": [{"every": "PT1H"}]}})
        assert r.status_code == 201, r.text
    pages = await walk(api, "/schedules", 2)
    assert [[s["definition"]["id"] for s in p] for p in pages] == [["s0", "s1"], ["s2", "s3"],
                                                                   ["s4"]]
    filtered = await walk(api, "/schedules", 2, type="ship_order")
    assert sum(len(p) for p in filtered) == 5

    firer = ScheduleFirer(api.store)
    for _ in range(5):
        api.clock.advance(timedelta(hours=1))
        await firer.fire_due(now=api.clock())
    pages = await walk(api, "/schedules/s0/runs", 2)
    nominal = [r["nominal_at"] for p in pages for r in p]
    assert len(nominal) == 5 and nominal == sorted(nominal, reverse=True), nominal
    runs_cursor = (await api.get("/schedules/s0/runs", params={"limit": 2})).json()["next_cursor"]
    other = await api.get("/schedules/s1/runs", params={"cursor": runs_cursor})
    assert other.status_code == 400 and other.json()["error"]["code"] == "invalid_cursor"


@pytest.mark.parametrize("path", ["/dead-letters", "/outbox/dead-letters", "/schedules",
                                  "/sagas", "/dead-sagas", "/repairs"])
async def test_a_foreign_or_doctored_cursor_is_refused(api: Api, path: str) -> None:
    for cursor in ("not-a-cursor", cursors.encode("somebody-elses-list", 1, "x")):
        r = await api.get(path, params={"cursor": cursor})
        assert r.status_code == 400, (path, cursor, r.text)
        assert r.json()["error"]["code"] == "invalid_cursor"
