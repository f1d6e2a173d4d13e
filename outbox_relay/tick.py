"""The relay as a function: one call publishes what is committed, then returns.

A function invocation has no long-lived session, so it cannot own shards the way the relay loop
does (session advisory locks held for the process's life). A tick takes *transaction-scoped*
advisory locks (``pg_try_advisory_xact_lock``) on the same lock keys instead, and claims,
publishes and deletes inside that one transaction, then commits, which frees the locks. So:

* any number of ticks, and relay loops, can run at once: a shard has one publisher at a time
  (a loop's session lock and a tick's transaction lock on a shard exclude each other), and
  per-key order needs nothing more, exactly as in the loop;
* a killed invocation frees its shards when Postgres drops its connection, and at the latest
  after ``idle_in_transaction_session_timeout``, which the tick sets for its own transaction;
* the rows are sent by :meth:`Relay.publish_claimed`, the loop's send/settle/delete path.

The tick holds its transaction open while Kafka acknowledges (bounded by ``publish_timeout``);
that is the price of owning a shard without a session. Rows deleted stay deleted only if the
commit lands; a lost commit re-sends them, and consumers deduplicate by message id.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Final

import asyncpg
from aiokafka import AIOKafkaProducer
from prometheus_client import CollectorRegistry

from outbox_relay.errors import RelayStateError
from outbox_relay.leasing import _CLAIM
from outbox_relay.loop import Relay
from outbox_relay.publishing import (
    ProducerFactory,
    _new_producer,
    _ProducerFault,
    _TransientPublishError,
)
from outbox_relay.schema import SHARD_LOCK_NAMESPACE, install, installed_shard_count
from outbox_relay.settings import RelaySettings
from participant_sdk.startup import started

__all__ = ["RelayTick", "TickReport", "relay_tick"]

log = logging.getLogger(__name__)

#: Shards that have rows and whose lock this transaction got, at most ``$3`` of them. The CASE
#: keeps an empty shard's lock untaken; LIMIT stops the scan (and the locking) at ``$3``.
_LOCK_SHARDS: Final = """
SELECT s FROM unnest($2::smallint[]) AS s
WHERE CASE WHEN EXISTS (SELECT 1 FROM sagaflow_outbox o WHERE o.shard = s)
           THEN pg_try_advisory_xact_lock($1, s) ELSE false END
LIMIT $3
"""

#: A new publisher of a shard is a new ownership epoch, as when a relay loop acquires it.
_BUMP_EPOCHS: Final = """
UPDATE sagaflow_outbox_shard SET epoch = epoch + 1
WHERE shard = ANY($1::smallint[]) RETURNING shard, epoch
"""


@dataclass(frozen=True, slots=True)
class TickReport:
    """What one tick did (all of it committed)."""

    shards: list[int] = field(default_factory=list)
    published: int = 0
    dead_lettered: int = 0
    batches: int = 0


async def relay_tick(
    conn: asyncpg.Connection,
    producer: AIOKafkaProducer,
    publisher: Relay,
    *,
    shard_count: int,
    max_shards: int | None = None,
    budget: dt.timedelta = dt.timedelta(seconds=10),
) -> TickReport:
    """Publish the committed rows of the free shards that have any, in one transaction.

    Claims batches until a claim comes back empty or ``budget`` is spent (a started batch is
    always finished). Raises, after committing what was acknowledged, when some rows met a
    transient Kafka failure: they stay in the table for the next tick.
    """
    settings = publisher.settings
    order = list(range(shard_count))
    random.shuffle(order)  # concurrent ticks start on different shards
    deadline = time.monotonic() + budget.total_seconds()
    published = dead = batches = 0
    failure: _TransientPublishError | None = None
    hold = settings.publish_timeout + budget + dt.timedelta(seconds=10)
    async with conn.transaction():
        await conn.execute(
            "SELECT set_config('idle_in_transaction_session_timeout', $1, true)",
            f"{int(hold.total_seconds() * 1000)}",
        )
        locked = [int(r[0]) for r in await conn.fetch(
            _LOCK_SHARDS, SHARD_LOCK_NAMESPACE, order, max_shards or shard_count)]
        if not locked:
            return TickReport()
        owned = {int(r[0]): int(r[1]) for r in await conn.fetch(_BUMP_EPOCHS, locked)}
        shards = sorted(locked)
        batch = settings.batch_size
        per_shard = min(batch, max(64, 2 * -(-batch // len(shards))))
        while True:
            # A statement of its own after the locks: its snapshot sees every delete that the
            # shard's previous holder committed before releasing the lock.
            rows = list(await conn.fetch(_CLAIM, shards, per_shard, batch))
            if not rows:
                break
            batches += 1
            try:
                sent, lost = await publisher.publish_claimed(conn, producer, rows, owned)
            except _TransientPublishError as exc:
                failure = exc  # the acked rows are deleted; commit them, then raise
                break
            published += sent
            dead += lost
            if time.monotonic() >= deadline:
                break
    if failure is not None:
        raise failure
    return TickReport(shards=shards, published=published, dead_lettered=dead, batches=batches)


class RelayTick:
    """The relay tick with what a warm function instance keeps between invocations: a pool
    of at most ``settings.pool_max_size`` connections and one started producer.

    Build it once per instance (module level in the function's handler file) and await it per
    invocation; ``close()`` when the runtime shuts the instance down, if it says so.
    """

    def __init__(
        self,
        settings: RelaySettings,
        *,
        max_shards: int | None = None,
        budget: dt.timedelta = dt.timedelta(seconds=10),
        registry: CollectorRegistry | None = None,
        producer_factory: ProducerFactory = _new_producer,
    ) -> None:
        self.settings = settings
        self.max_shards = max_shards
        self.budget = budget
        self._publisher = Relay(settings, registry=registry, producer_factory=producer_factory)
        self._producer_factory = producer_factory
        self._pool: asyncpg.Pool | None = None
        self._producer: AIOKafkaProducer | None = None
        self._shard_count: int | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def metrics(self) -> object:
        return self._publisher.metrics

    async def __call__(self) -> TickReport:
        """One tick: publish what is committed in the shards no one else holds."""
        pool, producer, shard_count = await self._ready()
        try:
            async with pool.acquire() as conn:
                return await relay_tick(
                    conn,
                    producer,
                    self._publisher,
                    shard_count=shard_count,
                    max_shards=self.max_shards,
                    budget=self.budget,
                )
        except _ProducerFault:
            await self._drop_producer()  # a new producer id for the next invocation
            raise

    async def close(self) -> None:
        """Stop the producer and close the pool (idempotent)."""
        self._closed = True
        await self._drop_producer()
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def _ready(self) -> tuple[asyncpg.Pool, AIOKafkaProducer, int]:
        async with self._lock:
            if self._closed:
                raise RelayStateError("relay tick closed")
            if self._pool is None:
                self._pool = await asyncpg.create_pool(
                    self.settings.postgres_dsn,
                    min_size=0,
                    max_size=self.settings.pool_max_size,
                    statement_cache_size=self.settings.statement_cache_size,
                    server_settings={"application_name": f"sagaflow-tick:{self.settings.relay_id}"},
                )
            if self._shard_count is None:
                async with self._pool.acquire() as conn:
                    if self.settings.install_schema:
                        await install(conn, shard_count=self.settings.shard_count)
                    self._shard_count = await installed_shard_count(conn)
            if self._producer is None:
                self._producer = await started(self._producer_factory(self.settings))
            return self._pool, self._producer, self._shard_count

    async def _drop_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(Exception):
                await producer.stop()
