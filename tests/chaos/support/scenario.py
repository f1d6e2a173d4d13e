"""The common ending of every scenario: wait, audit, print the summary."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tests.chaos.support.audit import Audit, Poison, audit, summary
from tests.chaos.support.driver import Order, wait_settled
from tests.chaos.support.proxy import TcpProxy
from tests.chaos.support.stack import ChaosStack


async def finish(
    name: str,
    stack: ChaosStack,
    orders: list[Order],
    faults: dict[str, int] | Callable[[], dict[str, int]],
    started: float,
    *,
    settle_timeout: float = 60.0,
    poison: list[Poison] | None = None,
    unknown_sagas: set[uuid.UUID] | None = None,
    forged_commands: set[uuid.UUID] | None = None,
    extra: dict[str, object] | None = None,
    at_least: Mapping[str, int] | None = None,
) -> Audit:
    """Wait until every saga settled (bounded), audit the invariants, print the summary.

    ``at_least`` gives a lower bound per fault (a key of ``faults`` or of ``extra``): a fault
    that fired fewer times is a violation, so a scenario whose faults silently stopped
    firing fails instead of passing on a quiet run.
    """
    waited = time.monotonic()
    settled = await wait_settled(stack.dsn("coordinator"), len(orders), settle_timeout)
    settle_s = round(time.monotonic() - waited, 1)
    result = await audit(stack, orders, poison=poison or [],
                         unknown_sagas=unknown_sagas or set(),
                         forged_commands=forged_commands or set())
    if not settled:
        result.fail(f"not every saga settled with an empty outbox within {settle_timeout:.0f}s")
    extra = {**(extra or {}), "settled after s": settle_s}
    if callable(faults):
        faults = faults()  # counted once everything settled
    counted: dict[str, object] = {**(extra or {}), **faults}
    for fault, bound in (at_least or {}).items():
        fired = counted.get(fault)
        if not isinstance(fired, int) or fired < bound:
            result.fail(f"fault {fault} fired {fired} times, the scenario needs {bound}")
    crashed = [n for n in stack.dead_processes() if stack.procs[n].kills == 0]
    for proc in crashed:
        result.fail(f"process {proc} exited on its own:\n{stack.log_tail(proc, 15)}")
    print("\n" + summary(name, result, faults, time.monotonic() - started, extra))
    if result.violations:
        for proc in stack.procs:
            print(f"----- tail of {proc} -----\n{stack.log_tail(proc, 12)}")
    return result


@dataclass
class CutsAndRestart:
    cuts: int = 0
    cut_connections: int = 0
    restarts: int = 0


async def cut_then_restart(
    proxy: TcpProxy, rng: random.Random, restart: Callable[[], None], *, cuts: int = 5
) -> CutsAndRestart:
    """Refuse connections through ``proxy`` ``cuts`` times at random moments, then restart
    the service behind it (``restart`` blocks, so it runs in a thread)."""
    done = CutsAndRestart()
    for _ in range(cuts):
        await asyncio.sleep(rng.uniform(1.0, 2.5))
        done.cut_connections += proxy.refuse(rng.uniform(0.0, 1.0))
        done.cuts += 1
    await asyncio.sleep(1.0)
    await asyncio.to_thread(restart)
    done.restarts += 1
    return done
