"""A filter on a search attribute is answered by the index of its kind, not by reading every
saga: EXPLAIN of the saga list's own query over 20,000 sagas (issue 37)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from coordinator.api.models import SagaFilter
from coordinator.api.queries import list_sagas
from coordinator.api.search import compile_query
from coordinator.engine import compile_saga
from tests.integration.search_support import Shop
from tests.integration.test_store_support import migrated

pytestmark = pytest.mark.integration

SAGAS = 20_000
_FILL = """
INSERT INTO sagas (id, saga_type, saga_version, status, snapshot, input, input_hash,
                   history_seq, created_at, updated_at, last_progress_at)
SELECT gen_random_uuid(), 'shop', 1, CASE WHEN i % 10 = 0 THEN 'dead' ELSE 'running' END,
       '{}', '{}', '\\x00', 1, t, t, t
FROM generate_series(1, $1) AS i, LATERAL (SELECT now() - i * interval '1 second' AS t) AS c;
"""
_ATTRIBUTES = """
INSERT INTO saga_search_attributes (saga_id, name, position, kind, text_value, num_value)
SELECT id, 'customer_id', 0, 'str', 'c-' || (n % 5000), NULL FROM
    (SELECT id, row_number() OVER (ORDER BY id) AS n FROM sagas) AS s
UNION ALL
SELECT id, 'amount', 0, 'int', NULL, n FROM
    (SELECT id, row_number() OVER (ORDER BY id) AS n FROM sagas) AS s
"""


class _Recorder:
    """Stands in for the connection: keeps the list's statement instead of running it."""

    def __init__(self) -> None:
        self.sql = ""
        self.args: tuple[Any, ...] = ()

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        self.sql, self.args = sql, args
        return []


async def _plan(conn: asyncpg.Connection, q: str, f: SagaFilter | None = None) -> str:
    recorder = _Recorder()
    search = compile_query(q, [compile_saga(Shop)])
    await list_sagas(recorder, f or SagaFilter(), now=datetime.now(UTC),  # type: ignore[arg-type]
                     stuck_ids=(), search=search)
    rows = await conn.fetch(f"EXPLAIN (FORMAT JSON) {recorder.sql}", *recorder.args)
    return json.dumps(json.loads(rows[0][0]))


async def test_a_filter_on_an_attribute_uses_the_index_of_its_kind(fresh_db: str) -> None:
    await migrated(fresh_db)
    conn = await asyncpg.connect(fresh_db)
    try:
        await conn.execute(_FILL, SAGAS)
        await conn.execute(_ATTRIBUTES)
        await conn.execute("ANALYZE sagas; ANALYZE saga_search_attributes")
        plan = await _plan(conn, "customer_id = 'c-42'")
        assert "saga_search_text" in plan, plan
        plan = await _plan(conn, "amount >= 19990 and status = 'running'")
        assert "saga_search_num" in plan, plan
        plan = await _plan(conn, "customer_id in ('c-1', 'c-2') or amount < 3",
                           SagaFilter(saga_type="shop"))
        assert "saga_search_text" in plan and "saga_search_num" in plan, plan
        assert '"Seq Scan"' not in plan or "saga_search_attributes" not in plan.split(
            '"Seq Scan"')[1][:200], plan
    finally:
        await conn.close()
