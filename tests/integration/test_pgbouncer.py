"""The function path behind PgBouncer in transaction mode: a saga end to end with the store,
the relay tick and the participants' SDK all connected through it, and the server
connections bounded however many clients the instances open."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from urllib.parse import urlsplit

import asyncpg
import pytest

from coordinator.store import SagaStore
from devstack.config import Settings
from devstack.pgbouncer import Pgbouncer
from examples.order_saga import OrderSaga
from tests.integration.functions_support import FunctionStack
from tests.integration.test_functions_e2e import order, run_until_settled

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="session")
def pgbouncer_port(services: object) -> Iterator[int]:
    """PgBouncer named by SAGAFLOW_TEST_PGBOUNCER_URL, else devstack's (started if needed)."""
    url = os.environ.get("SAGAFLOW_TEST_PGBOUNCER_URL")
    if url:
        yield int(urlsplit(url).port or 6432)
        return
    bouncer = Pgbouncer(Settings.from_env())
    bouncer.up()
    yield bouncer.port


def through(dsn: str, port: int) -> str:
    parts = urlsplit(dsn)
    return parts._replace(netloc=f"{parts.username or 'postgres'}@{parts.hostname}:{port}").geturl()


async def test_a_saga_runs_end_to_end_through_pgbouncer_transaction_mode(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str, pgbouncer_port: int
) -> None:
    pooled = through(fresh_db, pgbouncer_port)
    stack = FunctionStack(pooled, kafka_bootstrap, topic_prefix, [OrderSaga],
                          statement_cache_size=0)
    # Migrations take a session lock: they run on a direct connection, once per release.
    await stack.setup(admin_dsn=fresh_db)
    store = await SagaStore.open(pooled, stack.registry, max_size=4, statement_cache_size=0,
                                 server_settings={"application_name": "sagaflow-test"})
    try:
        ids = [(await store.start_saga("order", order(i))).record.saga_id for i in range(6)]
        broke = (await store.start_saga("order", order(9, "broke"))).record.saga_id
        statuses = await run_until_settled(stack, store, [*ids, broke])
        assert statuses == {**dict.fromkeys(ids, "completed"), broke: "compensated"}
    finally:
        await store.close()
        await stack.close()


async def test_many_clients_share_a_bounded_set_of_server_connections(
    fresh_db: str, pgbouncer_port: int
) -> None:
    pooled = through(fresh_db, pgbouncer_port)
    clients = [await asyncpg.connect(pooled, statement_cache_size=0) for _ in range(30)]
    direct = await asyncpg.connect(fresh_db)
    try:
        async def work(conn: asyncpg.Connection) -> int:
            async with conn.transaction():
                pid = int(await conn.fetchval("SELECT pg_backend_pid()"))
                await asyncio.sleep(0.05)
                return pid

        pids = await asyncio.gather(*(work(c) for c in clients))
        # 30 clients were served by at most the pool's 10 server connections.
        assert len(set(pids)) <= 10
        servers = await direct.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()")
        assert servers <= 10
    finally:
        for c in clients:
            await c.close()
        await direct.close()
