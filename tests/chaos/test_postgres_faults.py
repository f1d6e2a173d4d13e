"""Postgres connections cut mid-operation through a TCP proxy, then the server crashed
(``pg_ctl stop -m immediate``) and restarted.

The scenario owns its Postgres server (devstack, own port and folder); every process reaches
it through the proxy, the test's own driver and auditor directly.
"""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from tests.chaos.conftest import MakeStack
from tests.chaos.support.driver import plan_orders, start_orders
from tests.chaos.support.proxy import TcpProxy
from tests.chaos.support.scenario import cut_then_restart, finish
from tests.chaos.support.services import OwnedPostgres
from tests.chaos.support.stack import ChaosStack

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]

SEED = 9106


async def test_postgres_cut_connections_and_server_restart(make_stack: MakeStack) -> None:
    rng = random.Random(SEED)
    server = OwnedPostgres()
    stacks: list[ChaosStack] = []
    proxy = TcpProxy("127.0.0.1", server.port)
    await proxy.start()
    try:
        await asyncio.to_thread(server.up)
        started = time.monotonic()
        stack = await make_stack(
            pg_url=server.url, proc_pg_url=f"postgresql://postgres@127.0.0.1:{proxy.port}/x")
        stacks.append(stack)
        stack.start_default()
        await stack.wait_ready()
        orders = plan_orders(SEED, 60)
        driver = asyncio.create_task(
            start_orders(stack.dsn("coordinator"), stack.prefix, orders, pace=0.25))
        faults = await cut_then_restart(proxy, rng, server.restart)
        await driver
        result = await finish(
            "postgres-cuts-and-restart", stack, orders,
            {"postgres_proxy_cuts": faults.cuts, "postgres_crash_restart": faults.restarts},
            started,
            settle_timeout=90,
            extra={"connections cut": faults.cut_connections},
            at_least={"postgres_proxy_cuts": 5, "postgres_crash_restart": 1,
                      "connections cut": 5},
        )
        await stack.drop()
    finally:
        for stack_ in stacks:  # never leave a process behind a proxy that is about to go
            await stack_.stop_all()
        await proxy.stop()
        await asyncio.to_thread(server.down)
    assert len(result.violations) == 0, result.violations
