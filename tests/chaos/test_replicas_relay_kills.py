"""Two coordinator replicas and two relays at once; relays SIGKILLed between publish and delete.

The relays publish in pipelined batches: a batch is deleted on the cycle after the one that sent
it, so a SIGKILL at a random moment under load often lands after a batch was published and
before its rows were deleted (the pause between cycles is widened here): the next owner re-sends
them. The re-sent copies
are counted on the command topics; they must change nothing. A coordinator replica is also
killed now and then, so the other takes its reply partitions over.
"""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from tests.chaos.conftest import MakeStack
from tests.chaos.support.driver import plan_orders, start_orders
from tests.chaos.support.kafka import count_duplicates
from tests.chaos.support.scenario import finish

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(150)]

SEED = 9102


async def test_two_replicas_each_and_relay_sigkills(make_stack: MakeStack) -> None:
    started = time.monotonic()
    rng = random.Random(SEED)
    stack = await make_stack()
    for relay in ("relay-1", "relay-2"):
        # A batch is settled and deleted on the cycle after the one that sent it: a longer
        # pause between cycles widens the published-but-not-deleted window the kills aim at.
        stack.relay(relay, SAGAFLOW_RELAY_MIN_POLL_INTERVAL="0.25")
    stack.start_default(coordinators=2, relays=2)
    orders = plan_orders(SEED, 80)
    driver = asyncio.create_task(
        start_orders(stack.dsn("coordinator"), stack.prefix, orders, pace=0.12))
    relay_kills = coordinator_kills = 0
    for round_ in range(14):
        await asyncio.sleep(rng.uniform(0.4, 1.4))
        victim = rng.choice(["relay-1", "relay-2"])
        relay_kills += stack.kill(victim)
        if round_ % 5 == 4:
            other = rng.choice(["coordinator-1", "coordinator-2"])
            coordinator_kills += stack.kill(other)
            stack.start(other)
        await asyncio.sleep(rng.uniform(0.0, 0.5))
        stack.start(victim)
    await driver
    result = await finish(
        "replicas-relay-sigkill", stack, orders,
        {"relay_sigkill": relay_kills, "coordinator_sigkill": coordinator_kills}, started,
        extra={"re-sent commands": await count_duplicates(stack.kafka_admin, stack.topics[1:])},
        at_least={"relay_sigkill": 12, "coordinator_sigkill": 2},
    )
    assert len(result.violations) == 0, result.violations
