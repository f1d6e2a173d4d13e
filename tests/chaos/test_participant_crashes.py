"""Every participant SIGKILLs itself after a commit and before its reply, again and again.

The SDK's test hook (``SAGAFLOW_PARTICIPANT_CRASH_AFTER_COMMIT_FLAG``) kills the process right
after the first command it commits when the flag file does not exist yet. A supervisor restarts
each participant with a new flag file, so each life dies once, at a moment set by the traffic.
The redelivered command must be answered from the barrier: the effect is applied once.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.chaos.conftest import MakeStack
from tests.chaos.support.crashes import supervise
from tests.chaos.support.driver import plan_orders, start_orders
from tests.chaos.support.scenario import finish
from tests.chaos.support.stack import SERVICES

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(150)]

SEED = 9103
LIVES = 2


async def test_participants_crash_after_commit_before_reply(
    make_stack: MakeStack, tmp_path: Path
) -> None:
    started = time.monotonic()
    stack = await make_stack()
    for i in (1,):
        stack.start(stack.coordinator(f"coordinator-{i}").name)
        stack.start(stack.relay(f"relay-{i}").name)
    for service in SERVICES:
        stack.participant(service)
    crashes: list[str] = []
    supervisors = [asyncio.create_task(supervise(stack, s, tmp_path, crashes, armed=LIVES))
                   for s in SERVICES]
    orders = plan_orders(SEED, 60)
    try:
        await start_orders(stack.dsn("coordinator"), stack.prefix, orders, pace=0.2)
        result = await finish(
            "participant-crash-after-commit", stack, orders,
            lambda: {f"{s}_sigkill_after_commit": crashes.count(s) for s in SERVICES}, started,
            settle_timeout=90,  # each crash stalls its consumer group ~10 s (session timeout)
            at_least={f"{s}_sigkill_after_commit": LIVES for s in SERVICES},
        )
    finally:
        for task in supervisors:
            task.cancel()
        await asyncio.gather(*supervisors, return_exceptions=True)
    assert len(result.violations) == 0, result.violations
