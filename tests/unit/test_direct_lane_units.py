"""The direct lane's two coordinator-side pieces without services: DirectPublisher handing
routed rows to a Lane (and to Kafka whatever the lane did not finish), and DirectLane applying
the participants' replies in batches (and answering False whenever the command must go to
Kafka)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from coordinator.runtime import direct_lane as direct_lane_module
from coordinator.runtime.direct_lane import DIRECT_SOURCE, DirectLane
from coordinator.runtime.functions.handlers import BatchResult
from outbox_relay.direct import DirectPublisher
from outbox_relay.message import LeasedRow, OutboxMessage
from participant_sdk.direct import DirectAnswer, Kind
from participant_sdk.protocol import HEADER_MESSAGE_ID
from participant_sdk.records import InboundRecord
from tests.unit.test_direct_publisher import _Pool

# -- DirectPublisher with a lane ------------------------------------------------------------

ROUTED, UNROUTED = "sagaflow.payments.commands", "sagaflow.inventory.commands"


class _Producer:
    """Acknowledges every send and remembers it."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, bytes, list[tuple[str, bytes]]]] = []

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def send(self, topic: str, value: bytes, *, key: bytes,
                   headers: list[tuple[str, bytes]]) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.sent.append((topic, key.decode(), value, headers))
        fut.set_result(None)
        return fut


class _Lane:
    """Routes ``ROUTED``; answers each row by its payload: ``ok`` True, ``no`` False,
    ``boom`` raises, ``hang`` waits for ``release`` (then True)."""

    def __init__(self) -> None:
        self.delivered: list[tuple[str, str, bytes, list[tuple[str, bytes]]]] = []
        self.release = asyncio.Event()
        self.hanging = asyncio.Event()
        self.cancelled = 0

    def routes(self, topic: str) -> bool:
        return topic == ROUTED

    async def deliver(self, topic: str, key: bytes, value: bytes,
                      headers: list[tuple[str, bytes]]) -> bool:
        self.delivered.append((topic, key.decode(), value, headers))
        kind = value.split(b":")[0]
        if kind == b"boom":
            raise ConnectionError("the lane broke")
        if kind == b"hang":
            self.hanging.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return kind in (b"ok", b"hang")


def _row(row_id: int, payload: str, topic: str = ROUTED, key: str = "") -> LeasedRow:
    message = OutboxMessage(topic=topic, key=key or f"saga-{row_id}",
                            payload=f"{payload}:{row_id}".encode(), message_id=uuid.uuid4())
    return LeasedRow(shard=0, id=row_id, message=message, headers={"saga-message-kind": "x"})


@contextlib.asynccontextmanager
async def _publisher(lane: _Lane | None) -> AsyncIterator[tuple[DirectPublisher, _Pool,
                                                                _Producer]]:
    pool, producer = _Pool(), _Producer()
    publisher = DirectPublisher(pool, lambda: producer,
                                lease=timedelta(milliseconds=50), lane=lane)
    await publisher.start()
    try:
        yield publisher, pool, producer
    finally:
        await asyncio.wait_for(publisher.stop(grace=0.2), 5)


async def test_a_row_the_lane_handled_is_deleted_and_never_produced() -> None:
    lane = _Lane()
    async with _publisher(lane) as (publisher, pool, producer):
        row = _row(1, "ok")
        publisher.publish([row])
        await asyncio.wait_for(publisher.flush(), 2)
        assert pool.deleted == [1] and producer.sent == []
        [(topic, key, value, headers)] = lane.delivered
        assert (topic, key, value) == (ROUTED, "saga-1", b"ok:1")
        assert (HEADER_MESSAGE_ID, str(row.message.message_id).encode()) in headers
        assert ("saga-message-kind", b"x") in headers
        assert (publisher.delivered, publisher.sent, publisher.left, publisher.deleted) == (
            1, 0, 0, 1)


@pytest.mark.parametrize("payload", ["no", "boom"])
async def test_a_row_the_lane_did_not_finish_goes_to_kafka(payload: str) -> None:
    lane = _Lane()
    async with _publisher(lane) as (publisher, pool, producer):
        row = _row(1, payload)
        publisher.publish([row])
        await asyncio.wait_for(publisher.flush(), 2)
        assert len(lane.delivered) == 1
        [(topic, key, value, headers)] = producer.sent
        assert (topic, key, value) == (ROUTED, "saga-1", f"{payload}:1".encode())
        # The same record goes to Kafka: same headers (message id included) as on the lane.
        assert headers == lane.delivered[0][3]
        assert pool.deleted == [1]  # deleted once Kafka acknowledged it
        assert (publisher.delivered, publisher.sent, publisher.left) == (0, 1, 0)


async def test_an_unrouted_row_goes_to_kafka_without_the_lane() -> None:
    lane = _Lane()
    async with _publisher(lane) as (publisher, pool, producer):
        publisher.publish([_row(1, "ok", topic=UNROUTED)])
        await asyncio.wait_for(publisher.flush(), 2)
        assert lane.delivered == []
        assert [(t, v) for t, _, v, _ in producer.sent] == [(UNROUTED, b"ok:1")]
        assert pool.deleted == [1]
        assert (publisher.delivered, publisher.sent) == (0, 1)


async def test_a_mixed_batch_is_split_between_the_lane_and_kafka() -> None:
    lane = _Lane()
    async with _publisher(lane) as (publisher, pool, producer):
        publisher.publish([_row(1, "ok"), _row(2, "no"), _row(3, "ok", topic=UNROUTED),
                           _row(4, "boom"), _row(5, "ok")])
        await asyncio.wait_for(publisher.flush(), 2)
        assert sorted(v for _, _, v, _ in lane.delivered) == [b"boom:4", b"no:2", b"ok:1",
                                                              b"ok:5"]
        assert sorted(v for _, _, v, _ in producer.sent) == [b"boom:4", b"no:2", b"ok:3"]
        assert sorted(pool.deleted) == [1, 2, 3, 4, 5]
        assert (publisher.delivered, publisher.sent, publisher.left, publisher.deleted) == (
            2, 3, 0, 5)


async def test_flush_returns_once_the_lane_answered() -> None:
    lane = _Lane()
    async with _publisher(lane) as (publisher, pool, _):
        publisher.publish([_row(1, "hang"), _row(2, "ok", topic=UNROUTED)])
        await asyncio.wait_for(lane.hanging.wait(), 2)
        flush = asyncio.create_task(publisher.flush())
        await asyncio.sleep(0.1)
        assert not flush.done()  # the lane has not answered row 1 yet
        assert pool.deleted == [2]
        lane.release.set()
        await asyncio.wait_for(flush, 2)
        assert sorted(pool.deleted) == [1, 2] and publisher.delivered == 1


async def test_stop_cancels_a_lane_delivery_that_hangs() -> None:
    lane = _Lane()
    pool, producer = _Pool(), _Producer()
    publisher = DirectPublisher(pool, lambda: producer,
                                lease=timedelta(seconds=2), lane=lane)
    await publisher.start()
    publisher.publish([_row(1, "hang")])
    await asyncio.wait_for(lane.hanging.wait(), 2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(publisher.stop(grace=0.1), 2)
    assert loop.time() - started < 1.0
    assert lane.cancelled == 1
    # Neither deleted nor produced: the row is a relay's after its lease.
    assert (pool.deleted, producer.sent, publisher.delivered) == ([], [], 0)


# -- DirectLane -----------------------------------------------------------------------------

PAYMENTS = "sagaflow.payments.commands"


class _Client:
    """Answers each call from ``answers`` by the command's value (default: a reply)."""

    def __init__(self, answers: dict[bytes, DirectAnswer | None] | None = None) -> None:
        self.answers = answers or {}
        self.calls: list[tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]] = []
        self.closed = False

    async def call(self, topic: str, key: bytes | None, value: bytes | None,
                   headers: list[tuple[str, bytes]]) -> DirectAnswer | None:
        self.calls.append((topic, key, value, list(headers)))
        assert value is not None
        if value in self.answers:
            return self.answers[value]
        return DirectAnswer(Kind.REPLY, InboundRecord("sagaflow.replies", -1, -1, key,
                                                      b"reply-to-" + value, [("h", b"1")]))

    async def close(self) -> None:
        self.closed = True


class _Apply:
    """Stands in for handle_reply_batch: records each batch; ``gate`` holds it, ``fail``
    makes the next batches raise."""

    def __init__(self) -> None:
        self.batches: list[list[bytes | None]] = []
        self.sources: list[str] = []
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()
        self.fail = 0

    async def __call__(self, _store: object, records: Sequence[InboundRecord], *,
                       source: str) -> BatchResult:
        self.batches.append([r.value for r in records])
        self.sources.append(source)
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            self.fail -= 1
            raise OSError("the database went away")
        return BatchResult(applied=len(records))


@pytest.fixture
def apply(monkeypatch: pytest.MonkeyPatch) -> _Apply:
    fake = _Apply()
    monkeypatch.setattr(direct_lane_module, "handle_reply_batch", fake)
    return fake


def _lane(client: _Client, *, start: bool = True,
          registry: CollectorRegistry | None = None) -> DirectLane:
    lane = DirectLane(object(), {"payments": "127.0.0.1:7001"},  # type: ignore[arg-type]
                      prefix="sagaflow", registry=registry)
    assert set(lane._clients) == {PAYMENTS}
    lane._clients[PAYMENTS] = client  # type: ignore[assignment]
    if start:
        lane.start()
    return lane


def test_the_lane_routes_only_its_participants_command_topics() -> None:
    lane = DirectLane(object(), {"payments": "127.0.0.1:7001",  # type: ignore[arg-type]
                                 "inventory": "[::1]:7002"}, prefix="acme")
    assert lane.routes("acme.payments.commands") and lane.routes("acme.inventory.commands")
    for other in ("acme.shipping.commands", "acme.replies", "sagaflow.payments.commands",
                  "payments"):
        assert not lane.routes(other)


async def test_a_reply_is_applied_before_deliver_returns_true(apply: _Apply) -> None:
    client = _Client()
    lane = _lane(client)
    try:
        assert await asyncio.wait_for(lane.deliver(PAYMENTS, b"s1", b"c1", [("m", b"1")]), 2)
        assert client.calls == [(PAYMENTS, b"s1", b"c1", [("m", b"1")])]
        assert apply.batches == [[b"reply-to-c1"]] and apply.sources == [DIRECT_SOURCE]
        assert (lane.applied, lane.batches) == (1, 1)
    finally:
        await lane.stop()
    assert client.closed


async def test_replies_arriving_together_are_applied_in_one_batch(apply: _Apply) -> None:
    lane = _lane(_Client())
    try:
        apply.gate = asyncio.Event()
        first = asyncio.create_task(lane.deliver(PAYMENTS, b"s0", b"c0", []))
        await asyncio.wait_for(apply.entered.wait(), 2)
        # While the first batch commits, four more replies come: they share the next one.
        rest = [asyncio.create_task(lane.deliver(PAYMENTS, f"s{i}".encode(),
                                                 f"c{i}".encode(), []))
                for i in range(1, 5)]
        await asyncio.sleep(0.05)
        assert not first.done() and not any(t.done() for t in rest)
        apply.gate.set()
        assert await asyncio.wait_for(asyncio.gather(first, *rest), 2) == [True] * 5
        assert apply.batches == [[b"reply-to-c0"],
                                 [b"reply-to-c1", b"reply-to-c2", b"reply-to-c3",
                                  b"reply-to-c4"]]
        assert (lane.applied, lane.batches) == (5, 2)
    finally:
        await lane.stop()


async def test_when_applying_fails_the_whole_batch_goes_to_kafka(apply: _Apply) -> None:
    lane = _lane(_Client())
    try:
        apply.fail = 1
        results = await asyncio.wait_for(asyncio.gather(
            *(lane.deliver(PAYMENTS, b"s", f"c{i}".encode(), []) for i in range(3))), 2)
        assert results == [False] * 3
        assert len(apply.batches) == 1 and (lane.applied, lane.batches) == (0, 0)
        # The loop survived: the next reply is applied.
        assert await asyncio.wait_for(lane.deliver(PAYMENTS, b"s", b"c9", []), 2)
        assert (lane.applied, lane.batches) == (1, 1)
    finally:
        await lane.stop()


@pytest.mark.parametrize(("answer", "result"), [
    (None, False),
    (DirectAnswer(Kind.REDELIVER), False),
    (DirectAnswer(Kind.NO_REPLY), True),
])
async def test_answers_without_a_reply_are_not_applied(
        apply: _Apply, answer: DirectAnswer | None, result: bool) -> None:
    lane = _lane(_Client({b"c": answer}))
    try:
        assert await asyncio.wait_for(lane.deliver(PAYMENTS, b"s", b"c", []), 2) is result
        await asyncio.sleep(0.01)
        assert apply.batches == [] and (lane.applied, lane.batches) == (0, 0)
    finally:
        await lane.stop()


async def test_the_lane_counts_each_outcome_per_participant(apply: _Apply) -> None:
    registry = CollectorRegistry()
    lane = _lane(_Client({b"gone": None, b"busy": DirectAnswer(Kind.REDELIVER),
                          b"poison": DirectAnswer(Kind.NO_REPLY)}), registry=registry)
    try:
        for value in (b"ok1", b"ok2", b"gone", b"busy", b"poison"):
            await asyncio.wait_for(lane.deliver(PAYMENTS, b"s", value, []), 2)
        apply.fail = 1
        assert not await asyncio.wait_for(lane.deliver(PAYMENTS, b"s", b"ok3", []), 2)
    finally:
        await lane.stop()

    def count(outcome: str) -> float | None:
        return registry.get_sample_value("sagaflow_direct_lane_commands_total",
                                         {"participant": "payments", "outcome": outcome})

    assert (count("answered"), count("dead_letter"), count("kafka")) == (2, 1, 3)


async def test_a_lane_not_started_applies_nothing_and_leaves_the_command_to_kafka(
        apply: _Apply) -> None:
    lane = _lane(_Client(), start=False)
    try:
        assert await asyncio.wait_for(lane.deliver(PAYMENTS, b"s", b"c", []), 2) is False
        assert apply.batches == []
    finally:
        await lane.stop()


async def test_stop_answers_false_to_replies_waiting_for_a_batch(apply: _Apply) -> None:
    lane = _lane(_Client())
    apply.gate = asyncio.Event()
    first = asyncio.create_task(lane.deliver(PAYMENTS, b"s0", b"c0", []))
    await asyncio.wait_for(apply.entered.wait(), 2)
    waiting = asyncio.create_task(lane.deliver(PAYMENTS, b"s1", b"c1", []))
    await asyncio.sleep(0.01)
    await asyncio.wait_for(lane.stop(), 2)
    assert await asyncio.wait_for(waiting, 2) is False
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)


async def test_stop_answers_false_to_the_batch_being_applied(apply: _Apply) -> None:
    lane = _lane(_Client())
    apply.gate = asyncio.Event()
    applying = asyncio.create_task(lane.deliver(PAYMENTS, b"s0", b"c0", []))
    await asyncio.wait_for(apply.entered.wait(), 2)
    await asyncio.wait_for(lane.stop(), 2)
    try:
        assert await asyncio.wait_for(applying, 1) is False
    finally:
        applying.cancel()
        await asyncio.gather(applying, return_exceptions=True)
