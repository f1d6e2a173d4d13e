"""Shared pieces of the operator API tests: an app on a fresh database, tokens, dead sagas.

(Named ``test_api_*`` to sit with the API's tests; it holds no tests itself.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

import httpx
import pytest

from coordinator.api import ApiSettings, TokenAuth, create_app
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from participant_sdk.protocol import CommandEnvelope, ErrorKind, Outcome, Phase
from tests.integration.test_store_support import (
    ManualClock,
    make_registry,
    migrated,
    outbox_commands,
    reply_to,
)

VIEWER, OPERATOR, ADMIN = "viewer-token-1", "operator-token-1", "admin-token-1"
TOKENS = f"vera:viewer:{VIEWER},olga:operator:{OPERATOR},ada:admin:{ADMIN}"
INPUT = {"order_id": "o-1", "amount": 10}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Api:
    client: httpx.AsyncClient
    store: SagaStore
    clock: ManualClock

    async def get(self, path: str, token: str = VIEWER, **kw: Any) -> httpx.Response:
        return await self.client.get(path, headers=bearer(token), **kw)

    async def post(self, path: str, body: Any = None, token: str = OPERATOR) -> httpx.Response:
        return await self.client.post(path, json=body, headers=bearer(token))

    async def delete(self, path: str, token: str = ADMIN) -> httpx.Response:
        return await self.client.delete(path, headers=bearer(token))


@pytest.fixture
async def api_store(
    fresh_db: str, topic_prefix: str
) -> AsyncIterator[tuple[SagaStore, ManualClock]]:
    await migrated(fresh_db)
    clock = ManualClock()
    async with await SagaStore.open(fresh_db, make_registry(topic_prefix), max_size=6,
                                    clock=clock) as store:
        yield store, clock


@asynccontextmanager
async def app_client(store: SagaStore, clock: ManualClock | None = None, *,
                     base_url: str = "http://api", **options: Any
                     ) -> AsyncIterator[httpx.AsyncClient]:
    """The API app over ``store`` (the test tokens, no job runner, its lifespan running) and
    an in-process client of it; ``options`` go to ``create_app`` (``ui=...``)."""
    app = create_app(ApiSettings(), store=store, auth=TokenAuth.parse(TOKENS),
                     run_jobs=False, **({"clock": clock} if clock else {}), **options)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=base_url
    ) as client:
        yield client


@asynccontextmanager
async def open_api(dsn: str, registry: SagaRegistry) -> AsyncIterator[Api]:
    """``dsn`` migrated, a store of ``registry`` on a manual clock, and the API over it."""
    await migrated(dsn)
    clock = ManualClock()
    async with await SagaStore.open(dsn, registry, max_size=4, clock=clock) as store, \
            app_client(store, clock) as client:
        yield Api(client, store, clock)


@pytest.fixture
async def api(api_store: tuple[SagaStore, ManualClock]) -> AsyncIterator[Api]:
    store, clock = api_store
    async with app_client(store, clock) as client:
        yield Api(client, store, clock)


def _script(cmd: CommandEnvelope) -> Outcome | tuple[Outcome, ErrorKind]:
    if cmd.phase is Phase.COMPENSATE:
        return (Outcome.FAILED, ErrorKind.TRANSIENT)
    if cmd.step == "ship" and cmd.phase is Phase.ACTION:
        return Outcome.REJECTED
    return Outcome.OK


async def pump(store: SagaStore, clock: ManualClock, script: Any = _script) -> None:
    """Answer every command in the outbox by ``script``, then fire the timers due in 1 s."""
    from coordinator.engine import ReplyReceived

    for cmd in await outbox_commands(store):
        await store.apply(cmd.saga_id, ReplyReceived(reply=reply_to(cmd, script(cmd))),
                          actor=f"participant:{cmd.participant}")
    clock.advance(timedelta(seconds=1))
    await store.fire_due_timers()


async def make_dead(store: SagaStore, clock: ManualClock, n: int = 1) -> list[UUID]:
    """``n`` ship_order sagas, dead: ship is rejected and refunding charge keeps failing."""
    ids = []
    for i in range(n):
        started = await store.start_saga("ship_order", {"order_id": f"d-{i}", "amount": i})
        ids.append(started.record.saga_id)
    for _ in range(40):
        records = [await store.get_saga(i) for i in ids]
        if all(r is not None and r.status == "dead" for r in records):
            return ids
        await pump(store, clock)
    raise AssertionError("sagas did not die")
