"""The store's reads, each on a pooled connection (the queries are ``queries``), and the
replay-based verify and compaction, which read a saga's history to check or checkpoint it."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from coordinator.engine import CompiledSaga
from coordinator.store import queries
from coordinator.store._transactions import TransactionsMixin
from coordinator.store.records import HistoryRecord, SagaPage, SagaRecord, VerifyResult

__all__ = ["ReadsMixin"]


class ReadsMixin(TransactionsMixin):
    """Sagas and their history read; a saga's history verified or compacted."""

    async def get_saga(self, saga_id: UUID) -> SagaRecord | None:
        async with self.pool.acquire() as conn:
            return await queries.get_saga(conn, saga_id)

    async def get_history(self, saga_id: UUID) -> list[HistoryRecord]:
        async with self.pool.acquire() as conn:
            return await queries.get_history(conn, saga_id)

    async def list_sagas(
        self,
        *,
        saga_type: str | None = None,
        version: int | None = None,
        status: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> SagaPage:
        """Sagas newest first, filtered; pass ``next_cursor`` back for the next page."""
        async with self.pool.acquire() as conn:
            return await queries.list_sagas(
                conn, saga_type=saga_type, version=version, status=status,
                created_after=created_after, created_before=created_before,
                limit=limit, cursor=cursor,
            )

    async def verify(self, saga_id: UUID) -> VerifyResult:
        """Replay the history (from the latest checkpoint) and compare with the snapshot."""
        async with self.pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
            return await queries.verify(conn, saga_id, self._definition_for)

    async def compact(self, saga_id: UUID, *, archive: bool = False) -> int:
        """Checkpoint the saga's verified state at its current seq; return that seq.

        With ``archive=True`` the history rows up to the checkpoint move to
        ``saga_history_archive`` (never modified); without it nothing in history changes.
        """
        async with self.transaction() as conn:
            return await queries.compact(conn, saga_id, self._definition_for, archive=archive)

    async def compact_many(self, *, min_new_events: int = 100, limit: int = 1000,
                           archive: bool = False) -> int:
        """Checkpoint every saga with ``min_new_events`` events since its last checkpoint."""
        async with self.pool.acquire() as conn:
            ids = await queries.sagas_needing_checkpoint(conn, min_new_events, limit)
        for saga_id in ids:
            await self.compact(saga_id, archive=archive)
        return len(ids)

    def _definition_for(self, saga_type: str, version: int) -> CompiledSaga:
        return self.definition(saga_type, version)
