"""The claim reads each owned shard through the (shard, id) key, never other shards' rows.

With an id-only index next to it, the planner could prefer walking ids and filtering the shard
(in the relay bench a claim of 2,000 rows read 130,000): this pins the single-index layout and
the claim's shape.
"""

from __future__ import annotations

import asyncpg
import pytest

from outbox_relay import install
from outbox_relay.relay import _CLAIM
from tests.integration.test_relay_helpers import message, write

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


async def test_claim_uses_the_shard_key_and_reads_no_other_shard(fresh_db: str) -> None:
    conn = await asyncpg.connect(fresh_db)
    try:
        await install(conn, shard_count=16)
        await write(fresh_db, [message("t.cmd", f"saga-{i % 500}", i) for i in range(40_000)])
        await conn.execute("ANALYZE sagaflow_outbox")
        indexes = await conn.fetch(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'sagaflow_outbox'"
        )
        assert [r["indexdef"].split(" USING ")[1] for r in indexes] == ["btree (shard, id)"]
        lane = list(range(16))
        plan = "\n".join(
            r[0]
            for r in await conn.fetch(
                "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) "
                + _CLAIM.replace("$1::smallint[]", f"'{{{','.join(map(str, lane))}}}'::smallint[]")
                .replace("$2", "64")
                .replace("$3", "1000")
            )
        )
        assert "Index Cond: (shard = s.shard)" in plan, plan
        assert "Rows Removed by Filter" not in plan, plan
        rows = await conn.fetch(_CLAIM, lane, 64, 1000)
        assert len(rows) == 1000
        assert {r["shard"] for r in rows} <= set(lane)
        assert [r["id"] for r in rows] == sorted(r["id"] for r in rows)
    finally:
        await conn.close()
