"""``GET /repairs``: bulk repair jobs, newest first, in cursor pages like ``GET /sagas``."""

from __future__ import annotations

import asyncpg

from coordinator.api.models import RepairJobPageOut, RepairJobSummary, SagaSort
from coordinator.api.queries import decode_cursor, encode_cursor
from coordinator.api.verification import VERIFY_VERB
from coordinator.engine import RepairVerb

__all__ = ["list_repair_jobs"]

_SORT = SagaSort.CREATED_DESC  # the cursor carries it, as the saga list's cursors do


async def list_repair_jobs(conn: asyncpg.Connection, *, limit: int,
                           cursor: str | None) -> RepairJobPageOut:
    after = decode_cursor(cursor, _SORT) if cursor is not None else None
    rows = await conn.fetch(
        "SELECT id, verb, reason, actor, status, total, created_at, finished_at "
        "FROM repair_jobs WHERE verb <> $1 "
        "AND ($2::timestamptz IS NULL OR (created_at, id) < ($2, $3::uuid)) "
        "ORDER BY created_at DESC, id DESC LIMIT $4",
        VERIFY_VERB, after[0] if after else None, after[1] if after else None, limit + 1)
    items = [RepairJobSummary(job_id=r["id"], verb=RepairVerb(r["verb"]), reason=r["reason"],
                              actor=r["actor"], status=r["status"], total=r["total"],
                              created_at=r["created_at"], finished_at=r["finished_at"])
             for r in rows[:limit]]
    more = len(rows) > limit
    last = items[-1] if items else None
    return RepairJobPageOut(items=items, next_cursor=encode_cursor(
        _SORT, last.created_at, last.job_id) if more and last else None)
