"""A Kafka broker that leads partitions of the command and reply topics SIGKILLed mid-run, with
over a thousand sagas in flight, and kept down.

The scenario owns a three-broker KRaft cluster (devstack HA mode); its topics have replication
factor 3 and ``min.insync.replicas=2``, the relay produces with ``acks=all``, and every process
gets the cluster's bootstrap list. Two brokers keep taking writes: the leaders move, the
consumer groups find their coordinators again, and the auditor must find nothing lost or done
twice.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from participant_sdk.protocol import reply_topic
from tests.chaos.conftest import MakeStack
from tests.chaos.support import patient_sagas
from tests.chaos.support.failover_load import IN_FLIGHT_AT_FAULT, load_until_fault
from tests.chaos.support.ha import OwnedKafkaCluster
from tests.chaos.support.recovery import ProgressSampler
from tests.chaos.support.scenario import finish
from tests.chaos.support.stack import ChaosStack

pytestmark = [pytest.mark.chaos, pytest.mark.failover, pytest.mark.timeout(540)]

SEED = 9122


async def leaders(bootstrap: str, topics: list[str]) -> dict[str, list[int]]:
    """Topic -> the broker id leading each partition."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics(topics)
    finally:
        await admin.close()
    return {t["topic"]: [p["leader"] for p in sorted(t["partitions"], key=lambda p: p["partition"])]
            for t in described}


def broker_to_kill(led: dict[str, list[int]], replies: str) -> int:
    """The broker leading most partitions among those leading replies and commands both."""
    commands = {b for t, bs in led.items() if t != replies for b in bs}
    both = set(led[replies]) & commands
    assert both, f"no broker leads both reply and command partitions: {led}"
    counts = Counter(b for bs in led.values() for b in bs)
    return max(sorted(both), key=lambda b: counts[b])


async def test_kafka_broker_leading_partitions_lost(
    make_stack: MakeStack, tmp_path: Path
) -> None:
    cluster = OwnedKafkaCluster(tmp_path / "kafka-ha")
    stacks: list[ChaosStack] = []
    sampler: ProgressSampler | None = None
    try:
        await asyncio.to_thread(cluster.up)
        started = time.monotonic()
        stack = await make_stack(kafka=cluster.bootstrap, replication_factor=3,
                                 sagas=patient_sagas.SAGAS)
        stacks.append(stack)
        sampler = ProgressSampler(stack.dsn("coordinator"))
        load = await load_until_fault(stack, sampler, SEED, stack.start_default)
        led = await leaders(cluster.bootstrap, stack.topics)
        victim = broker_to_kill(led, reply_topic(stack.prefix))
        await asyncio.to_thread(cluster.kill, victim)
        retries = await load.drivers
        result = await finish(
            "kafka-broker-lost", stack, load.orders, {"kafka_broker_sigkill_kept_down": 1}, started,
            settle_timeout=240,
            extra={"killed broker": victim, "driver retries": retries,
                   "partitions it led": sum(bs.count(victim) for bs in led.values())},
        )
        await sampler.stop()
        figures = sampler.figures()
        print(f"recovery figures: {figures}\n{sampler.timeline()}")
        moved = await leaders(cluster.bootstrap, stack.topics)
        await stack.drop()
    finally:
        if sampler is not None:
            await sampler.stop()
        for stack_ in stacks:
            await stack_.stop_all()
        await asyncio.to_thread(cluster.down)
    assert len(result.violations) == 0, result.violations
    assert victim not in {b for bs in moved.values() for b in bs}, moved
    assert figures["in_flight_at_fault"] >= IN_FLIGHT_AT_FAULT, figures
