"""SIGKILL the coordinator worker again and again at random points while sagas run."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from tests.chaos.conftest import MakeStack
from tests.chaos.support.driver import plan_orders, start_orders
from tests.chaos.support.scenario import finish

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(150)]

SEED = 9101


async def test_coordinator_sigkill_mid_saga(make_stack: MakeStack) -> None:
    started = time.monotonic()
    rng = random.Random(SEED)
    stack = await make_stack()
    stack.start_default()
    orders = plan_orders(SEED, 60)
    driver = asyncio.create_task(
        start_orders(stack.dsn("coordinator"), stack.prefix, orders, pace=0.2))
    kills = 0
    for _ in range(8):
        await asyncio.sleep(rng.uniform(0.8, 2.5))
        kills += stack.kill("coordinator-1")
        await asyncio.sleep(rng.uniform(0.0, 0.6))
        stack.start("coordinator-1")
    await driver
    result = await finish("coordinator-sigkill", stack, orders,
                          {"coordinator_sigkill": kills}, started,
                          at_least={"coordinator_sigkill": 7})
    assert len(result.violations) == 0, result.violations
