"""Publishing your own outbox rows right after your commit; the relays are the recovery path.

A writer that inserts its rows with a lease (``insert_select(lease=...)``: ``created_at`` set
that far ahead) hands them, once its transaction COMMITTED, to a :class:`DirectPublisher`.
They go to Kafka at once on the publisher's own idempotent producer (``acks=all``), in the
order given, and are deleted once Kafka acknowledged them. Relays leave a leased row alone until
its ``created_at``; a row the writer did not publish (it crashed after its commit, Kafka
refused the row, the delete was lost) is then claimed and sent by a relay like any other row.
So delivery stays at-least-once and nothing is sent before its transaction committed or from
inside one; what the writer saves is the hint, the relay's wake-up and its claim per commit.

With a :class:`Lane` (the coordinator's direct lane to participants), a row of a topic the
lane routes goes around Kafka: it is deleted once the lane handled it for good, and goes to
Kafka as above when the lane could not.

Order: rows handed over are sent in that order, one producer, key = partition key, so the rows
of one key that this publisher sends reach Kafka in id order. A key whose row failed is not
published directly for ``lease`` seconds afterwards: its later rows then wait for a relay too,
which sends the key's rows in id order. Rows of one key sent by two writers (or by a writer and
a relay) can interleave; for saga commands that is the same reordering an at-least-once resend
already causes, and the participants' barrier makes it harmless (see ``bench/README.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import partial
from typing import Any, Final, Protocol

import asyncpg
from aiokafka import AIOKafkaProducer
from opentelemetry import trace

from outbox_relay.message import LeasedRow
from outbox_relay.publishing import _PRODUCER_FAULTS, traced_headers
from participant_sdk.direct import DIRECT_SYSTEM
from participant_sdk.protocol import HEADER_MESSAGE_ID
from participant_sdk.startup import started

__all__ = ["DirectPublisher", "Lane", "LeasedRow", "direct_producer_config"]

log = logging.getLogger(__name__)

#: Deletes the acknowledged rows (one statement per round of acknowledgements).
_DELETE: Final = """
DELETE FROM sagaflow_outbox o USING unnest($1::smallint[], $2::bigint[]) AS d(shard, id)
WHERE o.shard = d.shard AND o.id = d.id
"""


#: How long acknowledgements gather before their rows are deleted in one statement. A
#: handled row is leased, so no relay sends it meanwhile; each DELETE is a commit, and one per
#: acknowledgement made them a third of the coordinator's round trips at 1 in flight.
DELETE_WINDOW: Final = timedelta(milliseconds=50)


def direct_producer_config(bootstrap: str, client_id: str, **security: Any) -> dict[str, Any]:
    """A direct publisher's producer arguments: the relay's (idempotent, ``acks=all``, no
    linger: an isolated batch leaves at once)."""
    return {
        "bootstrap_servers": bootstrap,
        "enable_idempotence": True,
        "acks": "all",
        "linger_ms": 0,
        "client_id": client_id,
        **security,
    }


ProducerFactory = Callable[[], AIOKafkaProducer]


class Lane(Protocol):
    """A way around Kafka for some topics (the coordinator's direct lane to participants).

    :meth:`deliver` returns True once the record was handled for good (the row may then be
    deleted), False when it was not: the row then goes to Kafka as if there were no lane.
    """

    def routes(self, topic: str) -> bool: ...

    async def deliver(self, topic: str, key: bytes, value: bytes,
                      headers: list[tuple[str, bytes]]) -> bool: ...


class DirectPublisher:
    """Sends leased outbox rows after their commit and deletes them once acknowledged.

    ``start()`` / ``stop()``; :meth:`publish` is synchronous (call it from an after-commit
    hook). ``stop()`` waits (bounded) for what was handed over to be acknowledged and deleted;
    anything left is a relay's after its lease.
    """

    def __init__(self, pool: asyncpg.Pool, producer_factory: ProducerFactory, *,
                 lease: timedelta, name: str = "direct", lane: Lane | None = None,
                 delete_window: timedelta = DELETE_WINDOW) -> None:
        self._pool = pool
        self._delete_window = delete_window.total_seconds()
        self._lane = lane
        self._delivering: set[asyncio.Task[None]] = set()
        self._factory = producer_factory
        self._lease = lease.total_seconds()
        self._name = name
        self._producer: AIOKafkaProducer | None = None
        self._broken = False
        self._queue: asyncio.Queue[Sequence[LeasedRow]] = asyncio.Queue()
        self._acked: list[LeasedRow] = []
        self._ack_ready = asyncio.Event()
        self._stopped_keys: dict[str, float] = {}
        self._pending = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks: list[asyncio.Task[None]] = []
        self._tracer = trace.get_tracer("sagaflow.outbox_relay")
        #: Rows acknowledged by Kafka, handled by the lane, left to the relays, and deleted
        #: (for tests and logs).
        self.sent = 0
        self.delivered = 0
        self.left = 0
        self.deleted = 0

    async def start(self) -> None:
        if self._tasks:
            raise RuntimeError("DirectPublisher.start() called twice")
        self._producer = await started(self._factory())
        self._tasks = [asyncio.create_task(self._send_loop(), name=f"{self._name}-send"),
                       asyncio.create_task(self._delete_loop(), name=f"{self._name}-delete")]

    def publish(self, rows: Sequence[LeasedRow]) -> None:
        """Send ``rows`` (committed) soon, in this order; returns at once. Before
        :meth:`start` succeeded (or after :meth:`stop`) they are left to the relays."""
        if not rows:
            return
        if not self._tasks:
            self._pending += len(rows)
            for row in rows:
                self._leave(row, None)
            return
        self._pending += len(rows)
        self._idle.clear()
        self._queue.put_nowait(rows)

    async def flush(self) -> None:
        """Wait until every row handed over was acknowledged and deleted, or left."""
        await self._idle.wait()

    async def stop(self, grace: float = 5.0) -> None:
        """Let what was handed over go out and be deleted (at most ``grace`` seconds), then
        close. Idempotent."""
        tasks, self._tasks = self._tasks, []
        if not tasks:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.flush(), grace)
        tasks.extend(self._delivering)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await self._producer.stop()
        if self._pending:
            log.warning("%s: %d rows not published; relays send them after their lease",
                        self._name, self._pending)

    # -- sending ---------------------------------------------------------------------------

    def _headers(self, row: LeasedRow, system: str = "kafka") -> list[tuple[str, bytes]]:
        headers = [(name, value.encode()) for name, value in row.headers.items()]
        headers.append((HEADER_MESSAGE_ID, str(row.message.message_id).encode()))
        if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            headers = traced_headers(self._tracer, row.message.topic, headers,
                                     message_id=row.message.message_id, key=row.message.key,
                                     shard=row.shard, row_id=row.id, system=system)
        return headers

    async def _send_loop(self) -> None:
        while True:
            rows = await self._queue.get()
            if self._broken:
                try:
                    await self._replace_producer()
                except Exception as exc:  # Kafka away: these rows wait for a relay
                    log.warning("%s: replacing the Kafka producer failed: %r", self._name, exc)
                    for row in rows:
                        self._leave(row, None)
                    continue
            await self._send(rows)

    async def _send(self, rows: Sequence[LeasedRow]) -> None:
        now = time.monotonic()
        for row in rows:
            key = row.message.key
            until = self._stopped_keys.get(key)
            if until is not None:
                if now < until:
                    self._leave(row, None)
                    continue
                del self._stopped_keys[key]
            if self._lane is not None and self._lane.routes(row.message.topic):
                task = asyncio.create_task(self._deliver(row))
                self._delivering.add(task)
                task.add_done_callback(self._delivering.discard)
                continue
            await self._produce(row, self._headers(row))

    async def _produce(self, row: LeasedRow, headers: list[tuple[str, bytes]]) -> None:
        producer = self._producer
        if producer is None:  # being replaced: the row waits for a relay
            self._leave(row, ConnectionError("no Kafka producer"))
            return
        try:
            fut = await producer.send(row.message.topic, row.message.payload,
                                      key=row.message.key.encode(), headers=headers)
        except Exception as exc:  # a refused row: it stays for a relay
            self._leave(row, exc)
            return
        fut.add_done_callback(partial(self._sent, row))

    async def _deliver(self, row: LeasedRow) -> None:
        """Hand ``row`` to the lane; what the lane did not finish goes to Kafka."""
        assert self._lane is not None
        headers = self._headers(row, DIRECT_SYSTEM)
        try:
            done = await self._lane.deliver(row.message.topic, row.message.key.encode(),
                                            row.message.payload, headers)
        except Exception as exc:
            log.warning("%s: the direct lane failed on outbox row %d (%r); it goes to Kafka",
                        self._name, row.id, exc)
            done = False
        if done:
            self.delivered += 1
            self._acknowledged(row)
        else:
            await self._produce(row, headers)

    def _sent(self, row: LeasedRow, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            self._leave(row, asyncio.CancelledError())
            return
        error = fut.exception()
        if error is not None:
            self._broken = self._broken or isinstance(error, _PRODUCER_FAULTS)
            self._leave(row, error)
            return
        self.sent += 1
        self._acknowledged(row)

    def _acknowledged(self, row: LeasedRow) -> None:
        self._acked.append(row)
        self._ack_ready.set()

    def _leave(self, row: LeasedRow, error: BaseException | None) -> None:
        """Leave ``row`` in the table for a relay (after its lease), and stop publishing its
        key directly for a lease, so that the relay sends the key's rows in order."""
        if error is not None:
            log.warning("%s: outbox row %d not published (%r); a relay sends it after its "
                        "lease", self._name, row.id, error)
        now = time.monotonic()
        if len(self._stopped_keys) > 10_000:
            self._stopped_keys = {k: t for k, t in self._stopped_keys.items() if t > now}
        self._stopped_keys[row.message.key] = now + self._lease
        self.left += 1
        self._done(1)

    def _done(self, rows: int) -> None:
        self._pending -= rows
        if not self._pending:
            self._idle.set()

    async def _replace_producer(self) -> None:
        old, self._producer = self._producer, None
        if old is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(old.stop(), 5)
        self._producer = await started(self._factory())
        self._broken = False
        log.warning("%s: Kafka producer replaced after a producer state error", self._name)

    # -- deleting --------------------------------------------------------------------------

    async def _delete_loop(self) -> None:
        while True:
            await self._ack_ready.wait()
            if self._delete_window:
                await asyncio.sleep(self._delete_window)
            self._ack_ready.clear()
            rows, self._acked = self._acked, []
            try:
                async with self._pool.acquire() as conn:
                    await conn.execute(_DELETE, [r.shard for r in rows], [r.id for r in rows])
                self.deleted += len(rows)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                # They were published: a relay re-sends them after their lease (duplicates
                # carry the same message id).
                log.warning("%s: deleting %d published outbox rows failed: %r", self._name,
                            len(rows), exc)
            self._done(len(rows))
