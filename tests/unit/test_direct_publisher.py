"""DirectPublisher without services: order, deletes of acknowledged rows only, a producer whose
idempotence state broke is replaced, and Kafka being away leaves rows to the relays."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from aiokafka.errors import KafkaConnectionError, OutOfOrderSequenceNumber

from outbox_relay.direct import DirectPublisher
from outbox_relay.message import LeasedRow, OutboxMessage


class _Conn:
    def __init__(self, pool: _Pool) -> None:
        self.pool = pool

    async def execute(self, _sql: str, _shards: list[int], ids: list[int]) -> None:
        self.pool.deleted.extend(ids)
        self.pool.statements += 1


class _Pool:
    def __init__(self) -> None:
        self.deleted: list[int] = []
        self.statements = 0

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[_Conn]:
        yield _Conn(self)


class _Producer:
    """Acknowledges every send, or fails each with ``error``; ``start`` may fail too."""

    def __init__(self, error: BaseException | None = None, *, start_fails: bool = False) -> None:
        self.error = error
        self.start_fails = start_fails
        self.sent: list[tuple[str, bytes, list[tuple[str, bytes]]]] = []

    async def start(self) -> None:
        if self.start_fails:
            raise KafkaConnectionError("no broker")

    async def stop(self) -> None:
        pass

    async def send(self, topic: str, value: bytes, *, key: bytes,
                   headers: list[tuple[str, bytes]]) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.error is None:
            self.sent.append((key.decode(), value, headers))
            fut.set_result(None)
        else:
            fut.set_exception(self.error)
        return fut


def _row(row_id: int, key: str) -> LeasedRow:
    message = OutboxMessage(topic="p.commands", key=key, payload=f"{row_id}".encode(),
                            message_id=uuid.uuid4())
    return LeasedRow(shard=0, id=row_id, message=message,
                     headers={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-"
                                             "b7ad6b7169203331-01"})


async def test_rows_go_out_in_order_and_only_acknowledged_ones_are_deleted() -> None:
    pool, producer = _Pool(), _Producer()
    publisher = DirectPublisher(pool, lambda: producer, lease=timedelta(seconds=2))  # type: ignore[arg-type,return-value]
    await publisher.start()
    try:
        publisher.publish([_row(1, "a"), _row(2, "b")])
        publisher.publish([_row(3, "a")])
        await asyncio.wait_for(publisher.flush(), 1)
        assert [(k, v) for k, v, _ in producer.sent] == [("a", b"1"), ("b", b"2"), ("a", b"3")]
        headers = dict(producer.sent[0][2])
        assert headers["traceparent"].startswith(b"00-0af7") and b"saga-message-id" in [
            k.encode() for k in headers]
        assert sorted(pool.deleted) == [1, 2, 3]
        assert (publisher.sent, publisher.left, publisher.deleted) == (3, 0, 3)
    finally:
        await publisher.stop()


async def test_a_broken_producer_is_replaced_and_kafka_away_leaves_rows_to_the_relays() -> None:
    pool = _Pool()
    producers = [_Producer(OutOfOrderSequenceNumber()), _Producer(start_fails=True),
                 _Producer()]
    made: list[_Producer] = []

    def factory() -> _Producer:
        made.append(producers[len(made)])
        return made[-1]

    publisher = DirectPublisher(pool, factory, lease=timedelta(milliseconds=50))  # type: ignore[arg-type]
    await publisher.start()
    try:
        publisher.publish([_row(1, "a")])  # the producer's state breaks: left, not deleted
        await asyncio.wait_for(publisher.flush(), 1)
        assert (publisher.sent, publisher.left, pool.deleted) == (0, 1, [])
        publisher.publish([_row(2, "b")])  # the replacement cannot connect: left as well
        await asyncio.wait_for(publisher.flush(), 1)
        assert (publisher.sent, publisher.left, pool.deleted) == (0, 2, [])
        await asyncio.sleep(0.06)  # key "a" is no longer held back after its lease
        publisher.publish([_row(3, "a")])  # the next replacement works
        await asyncio.wait_for(publisher.flush(), 1)
        assert (publisher.sent, pool.deleted) == (1, [3])
        assert len(made) == 3 and [k for k, _, _ in made[2].sent] == ["a"]
    finally:
        await publisher.stop()


async def test_acknowledgements_within_the_window_are_deleted_in_one_statement() -> None:
    pool, producer = _Pool(), _Producer()
    publisher = DirectPublisher(pool, lambda: producer, lease=timedelta(seconds=2),  # type: ignore[arg-type,return-value]
                                delete_window=timedelta(milliseconds=100))
    await publisher.start()
    try:
        for row_id in range(1, 6):  # five commits, each publishing its row, 10 ms apart
            publisher.publish([_row(row_id, f"k{row_id}")])
            await asyncio.sleep(0.01)
        await asyncio.wait_for(publisher.flush(), 1)
        assert (sorted(pool.deleted), pool.statements) == ([1, 2, 3, 4, 5], 1)
        publisher.publish([_row(6, "k6")])  # a later one: its own statement
        await asyncio.wait_for(publisher.flush(), 1)
        assert (pool.deleted[-1], pool.statements) == (6, 2)
    finally:
        await publisher.stop()
