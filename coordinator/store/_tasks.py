"""Human tasks through the store: a person's action applied to the saga that owns the task
(one transaction: the saga locked, the engine deciding whether they may, the task row and
its notification written), and the inbox reads."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from coordinator.engine import TaskActed
from coordinator.engine.decision import TaskRefused
from coordinator.engine.events import TaskAction
from coordinator.store import task_queries
from coordinator.store._apply import ApplyMixin
from coordinator.store.records import ApplyResult
from coordinator.store.task_queries import TaskFilter

__all__ = ["TasksMixin"]


class TasksMixin(ApplyMixin):
    """Acting on human tasks, and reading them."""

    async def act_on_task(self, task_id: str, action: TaskAction | str, actor: str, *,
                          groups: Sequence[str] = (), admin: bool = False,
                          data: dict[str, Any] | None = None, to_user: str | None = None,
                          return_to_owner: bool = False, comment: str = "") -> ApplyResult:
        """Claim, unclaim, complete, reassign, delegate or comment on a task as ``actor``.

        Raises the engine's :class:`TaskRefused` (its ``code`` says why: ``unknown``,
        ``closed``, ``claimed``, ``not_candidate``, ``not_assignee``, ``four_eyes``) or
        ``InvalidInput`` (a form that does not validate); nothing is written then."""
        async with self.pool.acquire() as conn:
            saga_id = await conn.fetchval("SELECT saga_id FROM human_tasks WHERE id = $1",
                                          task_id)
        if saga_id is None:
            raise TaskRefused(f"no task {task_id}", "unknown")
        event = TaskActed(task_id=task_id, action=TaskAction(action), actor=actor,
                          groups=sorted(set(groups)), admin=admin, data=data, to_user=to_user,
                          return_to_owner=return_to_owner, comment=comment)
        return await self.apply(saga_id, event, actor=f"task:{actor}")

    async def get_task(self, task_id: str) -> dict[str, Any] | None:
        async with self.pool.acquire() as conn:
            return await task_queries.get_task(conn, task_id)

    async def list_tasks(self, filter: TaskFilter, *, limit: int = 50,
                         after: tuple[datetime | None, int, str] | None = None
                         ) -> list[dict[str, Any]]:
        async with self.pool.acquire() as conn:
            return await task_queries.list_tasks(conn, filter, limit=limit, after=after)

    async def count_tasks(self, filter: TaskFilter) -> dict[str, int]:
        async with self.pool.acquire() as conn:
            return await task_queries.count_tasks(conn, filter)

    async def saga_tasks(self, saga_id: UUID) -> list[dict[str, Any]]:
        async with self.pool.acquire() as conn:
            return await task_queries.saga_tasks(conn, saga_id)
