"""The load both failover scenarios put on a stack before their fault.

Sized so that two thousand sagas are in flight when the fault lands, with the rest started
while the stack runs, across it; and so that the rate before the fault is measured on a moving
stack. Each scenario keeps its own seed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from tests.chaos.support.driver import Order, plan_orders, start_concurrently
from tests.chaos.support.recovery import ProgressSampler
from tests.chaos.support.stack import ChaosStack

ORDERS = 2300
#: Started before the processes, so two thousand are in flight at the fault.
BACKLOG = 2150
IN_FLIGHT_AT_FAULT = 2000
#: History events the sagas record before the fault: the stack is moving (each step adds
#: events; the 150 sagas started late add one each to start).
ADVANCED_BEFORE_FAULT = 1000
DRIVERS = 8


@dataclass(frozen=True)
class LoadAtFault:
    orders: list[Order]
    #: The drivers still starting the rest; their result is the number of retried starts.
    drivers: asyncio.Task[int]


async def load_until_fault(
    stack: ChaosStack, sampler: ProgressSampler, seed: int, start_processes: Callable[[], None]
) -> LoadAtFault:
    """Start the backlog, then the processes and the rest; return once the fault may land
    (the sampler marks it)."""
    orders = plan_orders(seed, ORDERS, customers=ORDERS // 10, skus=ORDERS // 20)
    dsn = stack.dsn("coordinator")
    await start_concurrently(dsn, stack.prefix, orders[:BACKLOG], drivers=DRIVERS,
                             sagas=stack.sagas)
    sampler.start()
    start_processes()
    await stack.wait_ready()
    drivers = start_concurrently(dsn, stack.prefix, orders[BACKLOG:], drivers=DRIVERS,
                                 sagas=stack.sagas)
    await sampler.wait_progress(IN_FLIGHT_AT_FAULT, advanced=ADVANCED_BEFORE_FAULT,
                                timeout=150)
    sampler.mark_fault()
    return LoadAtFault(orders, drivers)
