"""The conformance kit against real participants over real Kafka.

The example services (the two carriers too), each its own process as users run them, pass
every case through the kit's command line. A participant without a barrier (raw aiokafka,
built here) fails exactly the barrier cases, so the kit can tell a broken participant from a
good one.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from examples.stack import CARRIERS, processes, stack_commands
from participant_sdk.conformance import ActionSpec, KitConfig, run_cases
from participant_sdk.protocol import (
    HEADER_TRACEPARENT,
    ErrorInfo,
    ErrorKind,
    Outcome,
    ProtocolError,
    command_topic,
    decode_command,
    encode,
    envelope_headers,
    make_reply,
)
from tests.integration.test_worker_support import create_topics

pytestmark = pytest.mark.integration

#: What the docs (participants.md) tell a team to run, per example service.
EXAMPLES = {
    "payments": ["--action", "charge:tcc", "--payload",
                 'charge={"customer": "conformance", "amount": 100}'],
    "inventory": ["--action", "reserve:tcc", "--payload",
                  'reserve={"sku": "KIT-1", "quantity": 1}'],
    "shipping": ["--action", "ship:saga", "--payload",
                 'ship={"address": "1 Kit Street", "items": ["KIT-1"]}'],
    **{carrier: ["--action", "book:saga", "--payload",
                 'book={"order_id": "KIT-1", "address": "1 Kit Street", "parcels": 1}']
       for carrier in CARRIERS},
}


async def kit(bootstrap: str, prefix: str, participant: str, args: list[str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "participant_sdk.conformance", "--bootstrap", bootstrap,
        "--prefix", prefix, "--participant", participant, *args, "--timeout", "10",
        "--startup-timeout", "60",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    out, _ = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_the_example_services_pass_the_kit(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    # Shipping's run uses a topic given to the kit, as where the kit may not create topics.
    given = f"{topic_prefix}.given.replies"
    await create_topics(kafka_bootstrap, {
        given: 1, **{command_topic(s, topic_prefix): 4 for s in EXAMPLES}})
    args = {**EXAMPLES, "shipping": [*EXAMPLES["shipping"], "--reply-topic", given]}
    commands = stack_commands(coordinator_dsn=fresh_db, service_dsns=dict.fromkeys(EXAMPLES,
                              fresh_db), kafka=kafka_bootstrap, topic_prefix=topic_prefix)
    services = {name: commands[name] for name in EXAMPLES}
    with processes(services, tmp_path / "logs", quiet=True):
        runs = await asyncio.gather(*(kit(kafka_bootstrap, topic_prefix, name, argv)
                                      for name, argv in args.items()))
    for name, (code, out) in zip(EXAMPLES, runs, strict=True):
        lines = out.splitlines()
        assert code == 0, (name, out)
        cases = [line for line in lines if line.startswith(("PASS", "FAIL"))]
        per_action = 7 if ":tcc" in EXAMPLES[name][1] else 6
        assert len(cases) == per_action + 8 and all(c.startswith("PASS") for c in cases), out
        assert lines[-1] == f"{len(cases)} passed, 0 failed", out
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        for _ in range(50):  # topic deletion completes in the background
            topics = set(await admin.list_topics())
            private = [t for t in topics if t.startswith(f"{topic_prefix}.conformance-")]
            if not private:
                break
            await asyncio.sleep(0.1)
    finally:
        await admin.close()
    assert given in topics and not private  # the given topic kept, the private ones deleted


class BarrierlessParticipant:
    """Speaks the wire correctly but runs every command's effect again: no barrier at all."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.bootstrap = bootstrap
        self.topic = command_topic("wallet", prefix)
        self.effects = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        consumer = AIOKafkaConsumer(self.topic, bootstrap_servers=self.bootstrap,
                                    group_id=f"{self.topic}-group", auto_offset_reset="earliest")
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all")
        await consumer.start()
        await producer.start()
        try:
            async for record in consumer:
                try:
                    command = decode_command(record.value or b"")
                except ProtocolError:
                    continue  # dead letter, no reply: correct
                if command.participant != "wallet" or command.action != "hold":
                    reply = make_reply(command, Outcome.REJECTED, error=ErrorInfo(
                        kind=ErrorKind.BAD_COMMAND, message="no such handler"))
                else:
                    self.effects += 1  # the "business write", unguarded
                    reply = make_reply(command, Outcome.OK, result={"effect": self.effects})
                trace = [(k, v) for k, v in record.headers if k == HEADER_TRACEPARENT][:1]
                await producer.send_and_wait(
                    command.reply_to, encode(reply), key=str(command.saga_id).encode(),
                    headers=envelope_headers(reply) + trace)
        finally:
            await consumer.stop()
            await producer.stop()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        self._task = asyncio.create_task(self._run())
        try:
            yield
        finally:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def test_the_kit_fails_a_participant_without_a_barrier(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    wallet = BarrierlessParticipant(kafka_bootstrap, topic_prefix)
    await create_topics(kafka_bootstrap, {wallet.topic: 2})
    config = KitConfig(bootstrap=kafka_bootstrap, prefix=topic_prefix, participant="wallet",
                       actions=(ActionSpec("hold", "tcc", {"amount": 1}),),
                       timeout=10, startup_timeout=60)
    async with wallet.running():
        results = await run_cases(config)
    failed = {r.name.split(": ", 1)[1]: r.detail for r in results if not r.passed}
    assert set(failed) == {
        "duplicate forward answered from the barrier",
        "duplicate confirm answered from the barrier",
        "duplicate rollback answered from the barrier",
        "hanging forward refused",
    }, [r.line() for r in results]
    assert "expected rejected/barrier_refused, got ok" in failed["hanging forward refused"]
    assert "not answered from the barrier" in failed[
        "duplicate forward answered from the barrier"]
    # Everything else about its wire behaviour is right, and the kit says so.
    assert sum(r.passed for r in results) == len(results) - 4


async def test_a_participant_that_never_answers_fails_fast(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    await create_topics(kafka_bootstrap, {command_topic("ghost", topic_prefix): 1})
    config = KitConfig(bootstrap=kafka_bootstrap, prefix=topic_prefix, participant="ghost",
                       actions=(ActionSpec("x", "saga"),), timeout=2, startup_timeout=2)
    started = asyncio.get_running_loop().time()
    results = await run_cases(config)
    assert not any(r.passed for r in results)
    assert all("no reply at all" in r.detail for r in results[1:]), results[1].line()
    assert asyncio.get_running_loop().time() - started < 15  # not one timeout per case
