"""Sleeps that fall due together are applied in place (issue 16, migration 0009).

Sagas started together sit side by side on the same pages and one firing batch rewrites every
row of a page in one transaction. With room left on each page, the new versions stay on their
page (HOT updates: no new index entries); on full pages they move and every index of the table
gets an entry at a random leaf, which made a million sleeping sagas slower to wake.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from pydantic import BaseModel

from coordinator.language.nodes import Sleep
from coordinator.language.saga import Saga, SagaStep
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from tests.integration.test_store_support import migrated

pytestmark = pytest.mark.integration

NAP = timedelta(hours=1)
SAGAS = 60  # several pages of saga rows and of node rows


class NapInput(BaseModel):
    order_id: str


class Napper(Saga):
    name = "napper"
    input_model = NapInput
    steps = (Sleep("nap", NAP), SagaStep("after", "desk", "book", compensable=False))


@pytest.fixture
async def store(fresh_db: str, topic_prefix: str) -> AsyncIterator[SagaStore]:
    await migrated(fresh_db)
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[Napper])
    async with await SagaStore.open(fresh_db, registry, max_size=2) as s:
        yield s


async def _blocks(conn: asyncpg.Connection, table: str, key: str) -> dict[str, int]:
    rows = await conn.fetch(f"SELECT {key}::text AS k, (ctid::text::point)[0]::int AS block "
                            f"FROM {table}")
    return {r["k"]: r["block"] for r in rows}


async def test_sleeps_firing_together_rewrite_their_rows_on_their_own_pages(
        store: SagaStore) -> None:
    for i in range(SAGAS):
        await store.start_saga("napper", {"order_id": f"n{i}"}, actor="test")
    async with store.pool.acquire() as conn:
        # Pages as a long-lived table has them: the room a start's own updates left is taken by
        # later inserts up to the fillfactor (a rewrite packs them the same way).
        await conn.execute("VACUUM FULL sagas, saga_nodes")
        sagas = await _blocks(conn, "sagas", "id")
        nodes = await _blocks(conn, "saga_nodes", "(saga_id, key)")
        assert len(set(sagas.values())) > 1 and len(set(nodes.values())) > 1

        now = datetime.now(UTC) + NAP + timedelta(minutes=1)
        assert await store.fire_due_timers(now=now, limit=SAGAS) == SAGAS

        assert await conn.fetchval("SELECT count(*) FROM sagaflow_outbox") == SAGAS
        assert await _blocks(conn, "sagas", "id") == sagas  # every saga row in place
        after = await _blocks(conn, "saga_nodes", "(saga_id, key)")
        # A fired node's state grows a little (its outcome, the next step's attempt), so a
        # few may not fit beside their old version; on full pages none do.
        in_place = sum(after[k] == block for k, block in nodes.items())
        assert in_place >= 0.75 * len(nodes), f"{in_place} of {len(nodes)} node rows in place"
