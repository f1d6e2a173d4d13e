"""The direct lane under faults: sagas run with their commands handed to the participants over
TCP (``participant_sdk.direct``), while participants SIGKILL themselves after a commit and
before their answer and the coordinator is SIGKILLed mid-saga.

What must hold: the lane carries the commands (Kafka sees only each saga's first command, which
the relay publishes, while nothing fails); every command the lane could not finish reaches its
participant over Kafka, whose barrier answers it without running it twice; every saga settles,
effects applied once, outbox empty (the audit of every chaos scenario).
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from participant_sdk.barrier import BARRIER_TABLE
from participant_sdk.protocol import command_topic
from tests.chaos.conftest import MakeStack
from tests.chaos.support import patient_sagas
from tests.chaos.support.crashes import FLAG, supervise
from tests.chaos.support.driver import plan_orders, start_orders, wait_settled
from tests.chaos.support.scenario import finish
from tests.chaos.support.stack import PARTITIONS, SERVICES, ChaosStack, fetch

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(150)]

SEED = 9117
TOKEN = "lane-token-for-the-chaos-test"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _define(stack: ChaosStack) -> None:
    addresses = {s: f"127.0.0.1:{_free_port()}" for s in SERVICES}
    stack.coordinator("coordinator-1", SAGAFLOW_DIRECT_ENDPOINTS=",".join(
        f"{s}={a}" for s, a in addresses.items()), SAGAFLOW_DIRECT_TOKEN=TOKEN,
        SAGAFLOW_DIRECT_TIMEOUT="3s")
    stack.relay("relay-1")
    for service in SERVICES:
        stack.participant(service, SAGAFLOW_PARTICIPANT_DIRECT_LISTEN=addresses[service],
                          SAGAFLOW_DIRECT_TOKEN=TOKEN)


async def _commands_on_kafka(stack: ChaosStack) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=stack.kafka_admin)
    await consumer.start()
    try:
        parts = [TopicPartition(command_topic(s, stack.prefix), p)
                 for s in SERVICES for p in range(PARTITIONS)]
        return sum((await consumer.end_offsets(parts)).values())
    finally:
        await consumer.stop()


async def _commands_handled(stack: ChaosStack) -> int:
    """Commands the participants ran or answered: one barrier row per step and phase."""
    return sum([(await fetch(stack.dsn(s), f"SELECT count(*) FROM {BARRIER_TABLE}"))[0][0]
                for s in SERVICES])


async def test_the_lane_carries_commands_and_kafka_carries_what_it_could_not(
    make_stack: MakeStack, tmp_path: Path
) -> None:
    started = time.monotonic()
    # Deadlines of minutes: a command the lane lost is not re-sent by a step's retry in time.
    stack = await make_stack(sagas=patient_sagas.SAGAS)
    _define(stack)
    for name in stack.procs:
        stack.start(name)
    await stack.wait_ready()

    # Quiet: the commands of a saga's first transaction go over Kafka (the relay sends them:
    # the driver does not publish), every later one over the lane.
    quiet = plan_orders(SEED, 12)
    await start_orders(stack.dsn("coordinator"), stack.prefix, quiet, pace=0.05,
                       sagas=patient_sagas.SAGAS)
    assert await wait_settled(stack.dsn("coordinator"), len(quiet), 40)
    handled = await _commands_handled(stack)
    on_kafka = await _commands_on_kafka(stack)
    assert handled > 3 * len(quiet)
    assert on_kafka < 2 * len(quiet), (on_kafka, handled)

    # Faults: each participant dies once after a commit, before its answer on the lane; the
    # coordinator is SIGKILLed twice mid-saga.
    crashes: list[str] = []
    for service in SERVICES:
        stack.kill(service)  # restarted once more armed, then kept running unarmed
        stack.start(service, **{FLAG: str(tmp_path / f"{service}-armed")})
    supervisors = [asyncio.create_task(supervise(stack, s, tmp_path, crashes, armed=0))
                   for s in SERVICES]
    orders = plan_orders(SEED + 1, 40)
    try:
        driver = asyncio.create_task(
            start_orders(stack.dsn("coordinator"), stack.prefix, orders, pace=0.1,
                         sagas=patient_sagas.SAGAS))
        kills = 0
        for pause in (1.5, 1.7):
            await asyncio.sleep(pause)
            kills += stack.kill("coordinator-1")
            await asyncio.sleep(0.3)
            stack.start("coordinator-1")
        await driver
        result = await finish(
            "direct-lane", stack, [*quiet, *orders],
            lambda: {"coordinator_sigkill": kills,
                     **{f"{s}_sigkill_after_commit": crashes.count(s) for s in SERVICES}},
            started, settle_timeout=90,
            at_least={"coordinator_sigkill": 2,
                      **{f"{s}_sigkill_after_commit": 1 for s in SERVICES}},
        )
    finally:
        for task in supervisors:
            task.cancel()
        await asyncio.gather(*supervisors, return_exceptions=True)
    assert len(result.violations) == 0, result.violations
    # The faults made the lane miss, and the misses went over Kafka (its warning, in the
    # coordinator's log across its lives).
    assert "over Kafka" in stack.procs["coordinator-1"].log.read_text(errors="replace")
