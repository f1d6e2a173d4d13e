"""Session fixtures that hand tests real services.

Each service comes from, in order: an environment variable, testcontainers when a Docker engine
is reachable, or the local processes that ``devstack`` starts. Under ``CI=true`` a service that
cannot be had fails the run instead of skipping it.
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest

from devstack.acquire import Endpoints, acquire_services
from devstack.kafka import delete_topics, run_sync, topic_names
from outbox_relay import install


@pytest.fixture(scope="session")
def services() -> Iterator[Endpoints]:
    with acquire_services() as endpoints:
        yield endpoints


@pytest.fixture(scope="session")
def pg_url(services: Endpoints) -> str:
    """URL of a Postgres server (the ``postgres`` database) the tests may create databases on."""
    return services.postgres_url()


@pytest.fixture(scope="session")
def kafka_bootstrap(services: Endpoints) -> Iterator[str]:
    """The broker; the topics the run creates are deleted at its end (each test has its own
    prefix, so a few thousand pile up a run, and a broker holding tens of thousands of
    partitions takes minutes to start). ``SAGAFLOW_TEST_KEEP_TOPICS=1`` keeps them."""
    bootstrap = services.kafka_bootstrap()
    before = run_sync(topic_names(bootstrap))
    yield bootstrap
    if os.environ.get("SAGAFLOW_TEST_KEEP_TOPICS"):
        return
    created = run_sync(topic_names(bootstrap)) - before
    try:
        run_sync(delete_topics(bootstrap, created))
    except Exception as exc:  # the run's result stands; the topics are only clutter
        warnings.warn(f"deleting the run's {len(created)} Kafka topics failed: {exc!r}",
                      stacklevel=1)


@pytest.fixture(scope="session")
def jaeger_otlp(services: Endpoints) -> str:
    """OTLP/HTTP base URL of Jaeger's collector (append ``/v1/traces``)."""
    return services.jaeger_otlp()


@pytest.fixture(scope="session")
def jaeger_query(services: Endpoints) -> str:
    """Base URL of Jaeger's query API (``/api/traces/{trace_id}``)."""
    return services.jaeger_query()


@pytest.fixture
async def fresh_db(pg_url: str) -> AsyncIterator[str]:
    """URL of a new, empty database that is dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(pg_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = pg_url.rsplit("/", 1)[0] + "/" + name
    yield url
    admin = await asyncpg.connect(pg_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture
def topic_prefix() -> str:
    """A topic prefix unique to the test, so tests never read each other's messages."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def outbox_admin(fresh_db: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection to ``fresh_db`` with the outbox installed (16 shards), closed after."""
    admin = await asyncpg.connect(fresh_db)
    try:
        await install(admin, shard_count=16)
        yield admin
    finally:
        await admin.close()


@pytest.fixture
def introspected(monkeypatch: pytest.MonkeyPatch) -> list[set[int]]:
    """The type OIDs of each catalog introspection asyncpg runs in the test (a spy: the real
    introspection still runs against Postgres)."""
    seen: list[set[int]] = []
    original = asyncpg.Connection._introspect_types

    async def counting(self: Any, typeoids: Any, *args: Any) -> Any:
        seen.append(set(typeoids))
        return await original(self, typeoids, *args)

    monkeypatch.setattr(asyncpg.Connection, "_introspect_types", counting)
    return seen
