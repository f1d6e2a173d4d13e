"""Shared pieces of the human-task tests over the API: the expense saga on a fresh database,
people with groups, and the API (and its UI) over them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import httpx

from coordinator.api import ApiSettings, TokenAuth, create_app
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from examples.expense_saga import ExpenseSaga
from tests.integration.test_human_tasks_store import answer_commands
from tests.integration.test_store_support import ManualClock, migrated

EXPENSE = {"expense_id": "x-1", "employee": "erin", "manager": "mia", "amount_cents": 12_000,
           "purpose": "train tickets"}

#: name, role, groups; each person's token is ``<name>-token-1``.
PEOPLE = (("erin", "viewer", ()), ("mia", "viewer", ("finance",)),
          ("fay", "viewer", ("finance",)), ("finn", "viewer", ("finance", "audit")),
          ("fred", "operator", ("finance",)), ("ada", "admin", ()))


def token(name: str) -> str:
    return f"{name}-token-1"


def tokens(people: Iterable[tuple[str, str, tuple[str, ...]]] = PEOPLE) -> str:
    """The token configuration of ``people``: ``name:role+group…:token`` entries."""
    return ",".join(f"{name}:{'+'.join((role, *groups))}:{token(name)}"
                    for name, role, groups in people)


@dataclass
class TaskApi:
    client: httpx.AsyncClient
    store: SagaStore
    clock: ManualClock

    async def get(self, path: str, who: str = "mia", **kw: Any) -> httpx.Response:
        return await self.client.get(path, headers=_bearer(who), **kw)

    async def post(self, path: str, body: Any = None, who: str = "mia") -> httpx.Response:
        return await self.client.post(path, json=body, headers=_bearer(who))

    async def start(self, **changes: Any) -> UUID:
        """An expense saga started by erin, its money held: the manager's task is open."""
        started = await self.store.start_saga("expense", EXPENSE | changes, started_by="erin")
        await answer_commands(self.store, started.record.saga_id)
        return started.record.saga_id

    async def task_id(self, saga_id: UUID, node: str) -> str:
        return next(str(t["id"]) for t in await self.store.saga_tasks(saga_id)
                    if t["node"] == node)


def _bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(who)}"}


def monday_clock() -> ManualClock:
    clock = ManualClock()
    clock.now = clock.now.replace(month=3, day=2, hour=9)  # a Monday in Berlin
    return clock


@asynccontextmanager
async def expense_store(dsn: str, topic_prefix: str, clock: Callable[[], datetime]
                        ) -> AsyncIterator[SagaStore]:
    await migrated(dsn)
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[ExpenseSaga])
    async with await SagaStore.open(dsn, registry, max_size=6, clock=clock) as store:
        yield store


@asynccontextmanager
async def task_api(dsn: str, topic_prefix: str, **options: Any) -> AsyncIterator[TaskApi]:
    """The API (``options`` go to ``create_app``) over the expense saga on ``dsn``."""
    clock = monday_clock()
    async with expense_store(dsn, topic_prefix, clock) as store:
        app = create_app(ApiSettings(), store=store, auth=TokenAuth.parse(tokens()), run_jobs=False,
                         clock=clock, **options)
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="https://api") as client:
            yield TaskApi(client, store, clock)
