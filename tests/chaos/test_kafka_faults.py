"""Kafka connections cut mid-operation through a TCP proxy, then the broker SIGKILLed and
restarted.

The scenario owns its broker (devstack, own ports and folder) whose advertised listener is the
proxy's port, so every client connection, bootstrap and after, goes through the proxy.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from tests.chaos.conftest import MakeStack
from tests.chaos.support.driver import plan_orders, start_orders
from tests.chaos.support.proxy import TcpProxy
from tests.chaos.support.scenario import cut_then_restart, finish
from tests.chaos.support.services import OwnedKafka, free_port
from tests.chaos.support.stack import ChaosStack

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]

SEED = 9105


async def test_kafka_cut_connections_and_broker_restart(
    make_stack: MakeStack, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    proxy_port = free_port()
    broker = OwnedKafka(tmp_path / "kafka-home", proxy_port)
    stacks: list[ChaosStack] = []
    proxy = TcpProxy("127.0.0.1", broker.port, listen_port=proxy_port)
    await proxy.start()
    try:
        await asyncio.to_thread(broker.up)
        started = time.monotonic()  # the scenario proper, without the broker's first start
        bootstrap = f"127.0.0.1:{proxy_port}"
        stack = await make_stack(kafka=bootstrap)
        stacks.append(stack)
        stack.start_default()
        await stack.wait_ready()
        orders = plan_orders(SEED, 60)
        driver = asyncio.create_task(
            start_orders(stack.dsn("coordinator"), stack.prefix, orders, pace=0.25))
        faults = await cut_then_restart(proxy, rng, broker.restart)
        await driver
        result = await finish(
            "kafka-cuts-and-restart", stack, orders,
            {"kafka_proxy_cuts": faults.cuts, "kafka_broker_sigkill_restart": faults.restarts},
            started,
            settle_timeout=90,
            extra={"connections cut": faults.cut_connections},
            at_least={"kafka_proxy_cuts": 5, "kafka_broker_sigkill_restart": 1,
                      "connections cut": 5},
        )
        await stack.drop()
    finally:
        for stack_ in stacks:  # never leave a process behind a proxy that is about to go
            await stack_.stop_all()
        await proxy.stop()
        await asyncio.to_thread(broker.down)
    assert len(result.violations) == 0, result.violations
