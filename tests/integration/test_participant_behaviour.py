"""One behaviour suite, run against the in-memory harness and against real Kafka + Postgres.

Handlers record their effects through :class:`EffectSink`, a three-line interface with a
Postgres implementation (real path) and a harness one (``MemoryTransaction.insert``), so the
suite audits the same effects on both paths and the harness cannot drift from the real loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, Protocol

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from pydantic import BaseModel

from participant_sdk import (
    BusinessRejection,
    CommandBatchHandler,
    CommandEnvelope,
    ErrorKind,
    HandlerContext,
    Outcome,
    Participant,
    ParticipantRunner,
    ParticipantSettings,
    Phase,
    ReplyEnvelope,
    command_topic,
    list_dead_letters,
    on_action,
    on_cancel,
    on_compensate,
    on_confirm,
    on_try,
    reply_topic,
)
from participant_sdk.protocol import (
    HEADER_MESSAGE_ID,
    HEADER_MESSAGE_KIND,
    encode,
    envelope_headers,
    header_value,
    reply_message_id,
)
from participant_sdk.records import InboundRecord
from participant_sdk.testing import MemoryTransaction, ParticipantHarness

pytestmark = pytest.mark.integration

NAME = "wallet"


class EffectSink(Protocol):
    async def record(self, ctx: HandlerContext, kind: str, amount: int) -> None: ...


class PgSink:
    async def record(self, ctx: HandlerContext, kind: str, amount: int) -> None:
        await ctx.conn.execute(
            "INSERT INTO effects (saga_id, step, kind, amount) VALUES ($1, $2, $3, $4)",
            ctx.saga_id, ctx.step, kind, amount,
        )


class MemorySink:
    async def record(self, ctx: HandlerContext, kind: str, amount: int) -> None:
        assert isinstance(ctx.conn, MemoryTransaction)
        await ctx.conn.insert(
            "effects", {"saga_id": ctx.saga_id, "step": ctx.step, "kind": kind, "amount": amount}
        )


class Hold(BaseModel):
    amount: int
    seq: int = 0


class Note(Hold):
    #: How long the note handler takes: lets a test make later commands finish first.
    delay_ms: int = 0


class Wallet(Participant):
    name = NAME

    def __init__(self, sink: EffectSink) -> None:
        self.sink = sink

    @on_try("hold")
    async def hold(self, ctx: HandlerContext, body: Hold) -> dict[str, Any]:
        await self.sink.record(ctx, "held", body.amount)  # rolled back if rejected below
        if body.amount > 100:
            raise BusinessRejection("insufficient funds", details={"available": 100})
        return {"held": body.amount}

    @on_confirm("hold")
    async def capture(self, ctx: HandlerContext, body: Hold) -> None:
        await self.sink.record(ctx, "captured", body.amount)

    @on_cancel("hold")
    async def release(self, ctx: HandlerContext, body: Hold) -> Hold:
        await self.sink.record(ctx, "released", body.amount)
        return body

    @on_action("note")
    async def note(self, ctx: HandlerContext, body: Note) -> dict[str, Any]:
        if body.amount < 0:
            raise RuntimeError("negative note")
        await asyncio.sleep(body.delay_ms / 1000)
        await self.sink.record(ctx, f"note-{body.seq}", body.amount)
        return {"seq": body.seq}

    @on_compensate("note")
    async def unnote(self, ctx: HandlerContext, body: Note) -> None:
        await self.sink.record(ctx, "unnote", body.amount)


class Driver(Protocol):
    async def send(self, command: CommandEnvelope) -> ReplyEnvelope: ...
    async def effects(self, saga_id: uuid.UUID) -> list[tuple[str, int]]: ...
    async def send_many(self, commands: list[CommandEnvelope]) -> list[ReplyEnvelope]: ...
    def command(self, action: str, phase: Phase, payload: dict[str, Any], *,
                saga_id: uuid.UUID, attempt: int = 1) -> CommandEnvelope: ...


def _command(prefix: str, action: str, phase: Phase, payload: dict[str, Any], *,
             saga_id: uuid.UUID, attempt: int = 1, participant: str = NAME,
             step: str | None = None) -> CommandEnvelope:
    return CommandEnvelope(
        message_id=uuid.uuid4(), saga_id=saga_id, saga_type="order", step=step or f"{action}-step",
        phase=phase, attempt=attempt, participant=participant, action=action,
        payload=payload, reply_to=reply_topic(prefix),
    )


class HarnessDriver:
    def __init__(self) -> None:
        self.harness = ParticipantHarness(Wallet(MemorySink()))

    def command(self, action: str, phase: Phase, payload: dict[str, Any], *,
                saga_id: uuid.UUID, attempt: int = 1) -> CommandEnvelope:
        return _command("saga", action, phase, payload, saga_id=saga_id, attempt=attempt)

    async def send(self, command: CommandEnvelope) -> ReplyEnvelope:
        return await self.harness.send(command)

    async def send_many(self, commands: list[CommandEnvelope]) -> list[ReplyEnvelope]:
        """All at once, like a consumer handed a batch: the harness must run them in order."""
        return list(await asyncio.gather(*(self.harness.send(c) for c in commands)))

    async def effects(self, saga_id: uuid.UUID) -> list[tuple[str, int]]:
        rows = self.harness.tables.get("effects", [])
        return [(r["kind"], r["amount"]) for r in rows if r["saga_id"] == saga_id]


class KafkaDriver:
    """Produces commands to the participant's topic and waits for replies on the reply topic."""

    def __init__(self, dsn: str, bootstrap: str, prefix: str) -> None:
        self.dsn, self.bootstrap, self.prefix = dsn, bootstrap, prefix
        self.replies: dict[uuid.UUID, list[tuple[ReplyEnvelope, list[Any]]]] = {}
        self._arrived = asyncio.Condition()

    def command(self, action: str, phase: Phase, payload: dict[str, Any], *,
                saga_id: uuid.UUID, attempt: int = 1) -> CommandEnvelope:
        return _command(self.prefix, action, phase, payload, saga_id=saga_id, attempt=attempt)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[KafkaDriver]:
        conn = await asyncpg.connect(self.dsn)
        await conn.execute(
            "CREATE TABLE effects (id bigserial PRIMARY KEY, saga_id uuid, step text,"
            " kind text, amount int)"
        )
        self.conn = conn
        await create_topics(self.bootstrap, [command_topic(NAME, self.prefix),
                                             reply_topic(self.prefix)])
        settings = ParticipantSettings(
            dsn=self.dsn, kafka_bootstrap=self.bootstrap, topic_prefix=self.prefix,
            lanes=8, retry_initial=timedelta(0), commit_interval=timedelta(milliseconds=50),
        )
        self.producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all")
        consumer = AIOKafkaConsumer(
            reply_topic(self.prefix), bootstrap_servers=self.bootstrap,
            auto_offset_reset="earliest", group_id=None,
        )
        await self.producer.start()
        await consumer.start()
        reader = asyncio.create_task(self._read(consumer))
        try:
            async with ParticipantRunner(Wallet(PgSink()), settings) as runner:
                self.runner = runner
                yield self
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            await consumer.stop()
            await self.producer.stop()
            await conn.close()

    async def _read(self, consumer: AIOKafkaConsumer) -> None:
        async for msg in consumer:
            reply = ReplyEnvelope.model_validate_json(msg.value)
            async with self._arrived:
                self.replies.setdefault(reply.in_reply_to, []).append((reply, msg.headers))
                self._arrived.notify_all()

    async def publish(self, command: CommandEnvelope) -> None:
        await self.producer.send_and_wait(
            command_topic(NAME, self.prefix), encode(command),
            key=str(command.saga_id).encode(), headers=envelope_headers(command),
        )

    async def wait_reply(self, command: CommandEnvelope) -> ReplyEnvelope:
        async with self._arrived:
            await asyncio.wait_for(
                self._arrived.wait_for(lambda: command.message_id in self.replies), 30
            )
            return self.replies[command.message_id][0][0]

    async def send(self, command: CommandEnvelope) -> ReplyEnvelope:
        await self.publish(command)
        return await self.wait_reply(command)

    async def send_many(self, commands: list[CommandEnvelope]) -> list[ReplyEnvelope]:
        for command in commands:
            await self.publish(command)
        return [await self.wait_reply(c) for c in commands]

    async def effects(self, saga_id: uuid.UUID) -> list[tuple[str, int]]:
        rows = await self.conn.fetch(
            "SELECT kind, amount FROM effects WHERE saga_id = $1 ORDER BY id", saga_id
        )
        return [(r["kind"], r["amount"]) for r in rows]


class BatchDriver:
    """Hands commands to the function entry point (``CommandBatchHandler``) as trigger records;
    the replies come back from the call (and are published to Kafka as well)."""

    def __init__(self, dsn: str, bootstrap: str, prefix: str) -> None:
        self.dsn, self.bootstrap, self.prefix = dsn, bootstrap, prefix
        self.offset = 0

    def command(self, action: str, phase: Phase, payload: dict[str, Any], *,
                saga_id: uuid.UUID, attempt: int = 1) -> CommandEnvelope:
        return _command(self.prefix, action, phase, payload, saga_id=saga_id, attempt=attempt)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[BatchDriver]:
        conn = await asyncpg.connect(self.dsn)
        await conn.execute(
            "CREATE TABLE effects (id bigserial PRIMARY KEY, saga_id uuid, step text,"
            " kind text, amount int)"
        )
        self.conn = conn
        settings = ParticipantSettings(
            dsn=self.dsn, kafka_bootstrap=self.bootstrap, topic_prefix=self.prefix,
            retry_initial=timedelta(0), pool_size=4,
        )
        self.handler = CommandBatchHandler(Wallet(PgSink()), settings)
        try:
            yield self
        finally:
            await self.handler.close()
            await conn.close()

    def record(self, command: CommandEnvelope) -> InboundRecord:
        self.offset += 1
        return InboundRecord(command_topic(NAME, self.prefix), 0, self.offset,
                             str(command.saga_id).encode(), encode(command),
                             envelope_headers(command))

    async def send(self, command: CommandEnvelope) -> ReplyEnvelope:
        return (await self.send_many([command]))[0]

    async def send_many(self, commands: list[CommandEnvelope]) -> list[ReplyEnvelope]:
        """One batch, as a function trigger hands it over."""
        result = await self.handler.handle([self.record(c) for c in commands])
        assert result.failed == [] and len(result.replies) == len(commands)
        return [ReplyEnvelope.model_validate_json(r.value) for r in result.replies]

    async def effects(self, saga_id: uuid.UUID) -> list[tuple[str, int]]:
        rows = await self.conn.fetch(
            "SELECT kind, amount FROM effects WHERE saga_id = $1 ORDER BY id", saga_id
        )
        return [(r["kind"], r["amount"]) for r in rows]


async def create_topics(bootstrap: str, topics: list[str], partitions: int = 4) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics]
        )
    finally:
        await admin.close()


@pytest.fixture(scope="module")
async def module_db(pg_url: str) -> AsyncIterator[str]:
    name = f"t_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(pg_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    yield pg_url.rsplit("/", 1)[0] + "/" + name
    admin = await asyncpg.connect(pg_url)
    await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await admin.close()


@pytest.fixture(scope="module")
async def kafka_driver(module_db: str, kafka_bootstrap: str) -> AsyncIterator[KafkaDriver]:
    driver = KafkaDriver(module_db, kafka_bootstrap, f"t{uuid.uuid4().hex[:10]}")
    async with driver.running():
        yield driver


@pytest.fixture(scope="module")
async def batch_driver(pg_url: str, kafka_bootstrap: str) -> AsyncIterator[BatchDriver]:
    name = f"t_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(pg_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    driver = BatchDriver(pg_url.rsplit("/", 1)[0] + "/" + name, kafka_bootstrap,
                         f"t{uuid.uuid4().hex[:10]}")
    try:
        async with driver.running():
            yield driver
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@pytest.fixture(params=["harness", "kafka", "batch"])
def driver(request: pytest.FixtureRequest) -> Driver:
    if request.param == "harness":
        return HarnessDriver()
    if request.param == "batch":
        b: BatchDriver = request.getfixturevalue("batch_driver")
        return b
    d: KafkaDriver = request.getfixturevalue("kafka_driver")
    return d


async def test_try_confirm_applies_once_per_phase(driver: Driver) -> None:
    saga = uuid.uuid4()
    tried = await driver.send(driver.command("hold", Phase.TRY, {"amount": 40}, saga_id=saga))
    assert tried.outcome is Outcome.OK and tried.result == {"held": 40}
    assert tried.message_id == reply_message_id(tried.in_reply_to)
    confirmed = await driver.send(driver.command("hold", Phase.CONFIRM, {"amount": 40},
                                                 saga_id=saga))
    assert confirmed.outcome is Outcome.OK and confirmed.result is None
    assert await driver.effects(saga) == [("held", 40), ("captured", 40)]


async def test_duplicate_delivery_applies_one_effect_and_replays_the_reply(driver: Driver) -> None:
    saga = uuid.uuid4()
    first = driver.command("hold", Phase.TRY, {"amount": 10}, saga_id=saga)
    again = first.model_copy()  # the very same message delivered twice
    retry = driver.command("hold", Phase.TRY, {"amount": 10}, saga_id=saga, attempt=2)
    r1 = await driver.send(first)
    r2 = await driver.send(again)
    r3 = await driver.send(retry)
    assert r1 == r2
    assert r3.outcome is Outcome.OK and r3.result == {"held": 10} and r3.attempt == 2
    assert r3.in_reply_to == retry.message_id
    assert await driver.effects(saga) == [("held", 10)]


async def test_business_rejection_is_stored_and_writes_rolled_back(driver: Driver) -> None:
    saga = uuid.uuid4()
    r1 = await driver.send(driver.command("hold", Phase.TRY, {"amount": 500}, saga_id=saga))
    assert r1.outcome is Outcome.REJECTED and r1.error is not None
    assert r1.error.kind is ErrorKind.BUSINESS and r1.result == {"available": 100}
    r2 = await driver.send(driver.command("hold", Phase.TRY, {"amount": 500}, saga_id=saga,
                                          attempt=2))
    assert (r2.outcome, r2.error) == (r1.outcome, r1.error)
    # Cancel after a rejected try has nothing to undo: null compensation.
    r3 = await driver.send(driver.command("hold", Phase.CANCEL, {"amount": 500}, saga_id=saga))
    assert r3.outcome is Outcome.OK
    assert await driver.effects(saga) == []


async def test_null_compensation_then_hanging_try_is_refused(driver: Driver) -> None:
    saga = uuid.uuid4()
    cancel = await driver.send(driver.command("hold", Phase.CANCEL, {"amount": 5}, saga_id=saga))
    assert cancel.outcome is Outcome.OK and cancel.result is None
    late = await driver.send(driver.command("hold", Phase.TRY, {"amount": 5}, saga_id=saga))
    assert late.outcome is Outcome.REJECTED and late.error is not None
    assert late.error.kind is ErrorKind.BARRIER_REFUSED
    again = await driver.send(driver.command("hold", Phase.CANCEL, {"amount": 5}, saga_id=saga,
                                             attempt=2))
    assert again.outcome is Outcome.OK
    assert await driver.effects(saga) == []


async def test_cancel_after_try_runs_business_cancel_once(driver: Driver) -> None:
    saga = uuid.uuid4()
    await driver.send(driver.command("hold", Phase.TRY, {"amount": 7}, saga_id=saga))
    c1 = await driver.send(driver.command("hold", Phase.CANCEL, {"amount": 7}, saga_id=saga))
    c2 = await driver.send(driver.command("hold", Phase.CANCEL, {"amount": 7}, saga_id=saga,
                                          attempt=2))
    assert c1.result == c2.result == {"amount": 7, "seq": 0}
    assert await driver.effects(saga) == [("held", 7), ("released", 7)]


async def test_action_compensation_and_unexpected_error(driver: Driver) -> None:
    saga = uuid.uuid4()
    boom = await driver.send(driver.command("note", Phase.ACTION, {"amount": -1}, saga_id=saga))
    assert boom.outcome is Outcome.FAILED and boom.error is not None
    assert boom.error.kind is ErrorKind.UNEXPECTED and boom.error.type == "RuntimeError"
    assert "negative note" in boom.error.message
    # FAILED is not final: a retry runs the handler again.
    ok = await driver.send(driver.command("note", Phase.ACTION, {"amount": 3}, saga_id=saga,
                                          attempt=2))
    assert ok.outcome is Outcome.OK
    comp = await driver.send(driver.command("note", Phase.COMPENSATE, {"amount": 3},
                                            saga_id=saga))
    assert comp.outcome is Outcome.OK
    assert await driver.effects(saga) == [("note-0", 3), ("unnote", 3)]


async def test_unknown_action_and_bad_payload_are_rejected_as_bad_command(
    driver: Driver,
) -> None:
    saga = uuid.uuid4()
    unknown = await driver.send(driver.command("teleport", Phase.ACTION, {}, saga_id=saga))
    assert unknown.outcome is Outcome.REJECTED and unknown.error is not None
    assert unknown.error.kind is ErrorKind.BAD_COMMAND
    bad = await driver.send(driver.command("hold", Phase.TRY, {"amount": "lots"}, saga_id=saga))
    assert bad.outcome is Outcome.REJECTED and bad.error is not None
    assert bad.error.kind is ErrorKind.BAD_COMMAND
    assert await driver.effects(saga) == []


async def test_the_phases_of_one_step_run_in_order(driver: Driver) -> None:
    """An action and its compensation handed over together, the action slow: run out of
    order, the compensation would find no action (a null compensation) and the barrier would
    then refuse the late action. (Independent steps of one saga may run at once:
    ``test_participant_saga_lanes``.)"""
    sagas = [uuid.uuid4() for _ in range(5)]
    commands = []
    for saga in sagas:
        body = {"amount": 1, "seq": 0, "delay_ms": 80}
        commands += [driver.command("note", Phase.ACTION, body, saga_id=saga),
                     driver.command("note", Phase.COMPENSATE, body, saga_id=saga)]
    replies = await driver.send_many(commands)
    assert all(r.outcome is Outcome.OK for r in replies)
    for saga in sagas:
        assert await driver.effects(saga) == [("note-0", 1), ("unnote", 1)]


# --- real path only ---------------------------------------------------------------------------


async def test_kafka_reply_headers_and_dead_letters(kafka_driver: KafkaDriver) -> None:
    saga = uuid.uuid4()
    cmd = kafka_driver.command("hold", Phase.TRY, {"amount": 1}, saga_id=saga)
    reply = await kafka_driver.send(cmd)
    headers = kafka_driver.replies[cmd.message_id][0][1]
    assert header_value(headers, HEADER_MESSAGE_ID) == str(reply.message_id)
    assert header_value(headers, HEADER_MESSAGE_KIND) == "reply"

    # Undecodable bytes: kept as a dead letter, the loop goes on.
    await kafka_driver.producer.send_and_wait(
        command_topic(NAME, kafka_driver.prefix), b"\x00not json", key=str(saga).encode()
    )
    unknown = kafka_driver.command("teleport", Phase.ACTION, {}, saga_id=saga)
    await kafka_driver.send(unknown)
    after = await kafka_driver.send(
        kafka_driver.command("note", Phase.ACTION, {"amount": 1}, saga_id=saga)
    )
    assert after.outcome is Outcome.OK
    letters = await list_dead_letters(kafka_driver.conn, source=f"participant:{NAME}")
    reasons = [d.reason for d in letters if d.key == str(saga).encode()]
    assert len(reasons) == 2
    assert any("undecodable" in r for r in reasons) and any("teleport" in r for r in reasons)
    raw = [d.payload for d in letters if d.key == str(saga).encode()]
    assert b"\x00not json" in raw


async def test_batch_keeps_a_poison_record_and_publishes_the_other_replies(
    batch_driver: BatchDriver,
) -> None:
    saga, other = uuid.uuid4(), uuid.uuid4()
    first = batch_driver.command("note", Phase.ACTION, {"amount": 1}, saga_id=saga)
    second = batch_driver.command("hold", Phase.TRY, {"amount": 2}, saga_id=saga)
    third = batch_driver.command("hold", Phase.TRY, {"amount": 3}, saga_id=other)
    poison = InboundRecord(command_topic(NAME, batch_driver.prefix), 0, 999,
                           str(saga).encode(), b"\x00not json")
    records = [batch_driver.record(first), poison, batch_driver.record(second),
               batch_driver.record(third)]
    result = await batch_driver.handler.handle(records)
    assert result.failed == [] and result.dead_lettered == 1
    assert [ReplyEnvelope.model_validate_json(r.value).in_reply_to for r in result.replies] == [
        first.message_id, second.message_id, third.message_id]
    assert await batch_driver.effects(saga) == [("note-0", 1), ("held", 2)]
    letters = await list_dead_letters(batch_driver.conn, source=f"participant:{NAME}")
    kept = [letter for letter in letters if letter.offset == 999]
    assert len(kept) == 1 and kept[0].payload == b"\x00not json"
    # The replies were published (and acknowledged) before handle() returned.
    consumer = AIOKafkaConsumer(reply_topic(batch_driver.prefix),
                                bootstrap_servers=batch_driver.bootstrap,
                                auto_offset_reset="earliest", group_id=None)
    await consumer.start()
    try:
        seen: set[uuid.UUID] = set()
        deadline = asyncio.get_running_loop().time() + 15
        while len(seen & {first.message_id, second.message_id, third.message_id}) < 3:
            assert asyncio.get_running_loop().time() < deadline, seen
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                seen.update(ReplyEnvelope.model_validate_json(m.value).in_reply_to
                            for m in batch)
    finally:
        await consumer.stop()
