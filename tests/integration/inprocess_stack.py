"""The whole stack in the test's process, on real Postgres and Kafka: a worker, a relay and
participant runners, the coordinator's database and, separately, the participants' own with
an ``effects`` table their handlers write (no tests here); ``Desk``, a participant that books
and unbooks into it.

Tests that need real processes (kills, restarts) use the chaos suite's stack instead.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any

import asyncpg

from coordinator.config.settings import CoordinatorSettings
from coordinator.runtime.worker import Worker
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from outbox_relay import Relay, RelaySettings
from participant_sdk import (
    HandlerContext,
    Participant,
    ParticipantRunner,
    ParticipantSettings,
    on_action,
    on_compensate,
)
from participant_sdk.protocol import command_topic, reply_topic
from tests.integration.test_store_support import migrated
from tests.integration.test_worker_support import create_topics

EFFECTS_DDL = ("CREATE TABLE effects (id bigserial PRIMARY KEY, saga_id uuid, step text,"
               " kind text, at timestamptz DEFAULT clock_timestamp())")


class Desk(Participant):
    """``book`` and its compensation, each recorded in ``effects`` as ``booked``/``unbooked``."""

    name = "desk"

    @on_action("book")
    async def book(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        await _effect(ctx, "booked")

    @on_compensate("book")
    async def unbook(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        await _effect(ctx, "unbooked")


async def _effect(ctx: HandlerContext, kind: str) -> None:
    await ctx.conn.execute("INSERT INTO effects (saga_id, step, kind) VALUES ($1, $2, $3)",
                           ctx.saga_id, ctx.step, kind)


@contextlib.asynccontextmanager
async def inprocess_stack(
    fresh_db: str, pg_url: str, kafka_bootstrap: str, topic_prefix: str, *,
    sagas: Sequence[type[Any]], participants: Sequence[Participant], partitions: int = 1,
    lanes: int = 2,
) -> AsyncIterator[tuple[SagaStore, asyncpg.Connection]]:
    """Yield a store on the coordinator's database and a connection to the participants'."""
    await migrated(fresh_db)
    side = f"p_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(pg_url)
    await admin.execute(f'CREATE DATABASE "{side}"')
    await admin.close()
    side_dsn = pg_url.rsplit("/", 1)[0] + "/" + side
    effects = await asyncpg.connect(side_dsn)
    await effects.execute(EFFECTS_DDL)
    await create_topics(kafka_bootstrap, {
        reply_topic(topic_prefix): partitions,
        **{command_topic(p.name, topic_prefix): partitions for p in participants}})
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=list(sagas))
    settings = CoordinatorSettings(
        dsn=fresh_db, kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix,
        group_id=f"{topic_prefix}-coordinator", timer_max_idle=timedelta(milliseconds=200),
        pool_max_size=3, shutdown_grace=timedelta(seconds=5))
    relay = Relay(RelaySettings(postgres_dsn=fresh_db, kafka_bootstrap=kafka_bootstrap,
                                poll_interval=timedelta(milliseconds=20),
                                shard_count=partitions))
    part = ParticipantSettings(dsn=side_dsn, kafka_bootstrap=kafka_bootstrap,
                               topic_prefix=topic_prefix, lanes=lanes,
                               retry_initial=timedelta(0),
                               commit_interval=timedelta(milliseconds=50))
    store = await SagaStore.open(fresh_db, registry, max_size=2)
    await relay.start()
    try:
        async with contextlib.AsyncExitStack() as running:
            for participant in participants:
                await running.enter_async_context(ParticipantRunner(participant, part))
            await running.enter_async_context(Worker(settings, registry, name="w1"))
            yield store, effects
    finally:
        await relay.stop()
        await store.close()
        await effects.close()
