"""The Postgres primary lost for good, mid-run, with over a thousand sagas in flight, and its
synchronous standby promoted (``pg_ctl promote``, by the test, as a failover manager would).

Every process (coordinators, relays, participants), the driver and the auditor use the pair's
multi-host DSN with ``target_session_attrs=read-write``, so they find the promoted server by
themselves. No acknowledged commit may be lost: the auditor checks every saga's effects, and
the relays must own every outbox shard again on the new primary.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from outbox_relay.schema import SHARD_LOCK_NAMESPACE
from tests.chaos.conftest import MakeStack
from tests.chaos.support import patient_sagas
from tests.chaos.support.failover_load import IN_FLIGHT_AT_FAULT, load_until_fault
from tests.chaos.support.ha import OwnedPostgresPair
from tests.chaos.support.recovery import ProgressSampler
from tests.chaos.support.scenario import finish
from tests.chaos.support.stack import ChaosStack, fetch

pytestmark = [pytest.mark.chaos, pytest.mark.failover, pytest.mark.timeout(540)]

SEED = 9121

_SHARD_LOCKS = """
SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND classid = $1::oid AND objsubid = 2
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


async def test_postgres_primary_lost_standby_promoted(make_stack: MakeStack) -> None:
    pair = OwnedPostgresPair()
    stacks: list[ChaosStack] = []
    sampler: ProgressSampler | None = None
    try:
        await asyncio.to_thread(pair.up)
        assert await asyncio.to_thread(pair.synchronous), "the standby is not synchronous"
        started = time.monotonic()
        stack = await make_stack(pg_url=pair.url, sagas=patient_sagas.SAGAS)
        stacks.append(stack)
        sampler = ProgressSampler(stack.dsn("coordinator"))
        load = await load_until_fault(stack, sampler, SEED, lambda: stack.start_default(relays=2))
        await asyncio.to_thread(pair.kill_primary)
        killed = time.monotonic()
        await asyncio.to_thread(pair.promote)
        promoted_s = time.monotonic() - killed
        retries = await load.drivers
        result = await finish(
            "postgres-primary-lost", stack, load.orders, {"postgres_primary_sigkill": 1}, started,
            settle_timeout=240,
            extra={"driver retries": retries, "promote_s": round(promoted_s, 2)},
        )
        await sampler.stop()
        figures = sampler.figures()
        print(f"recovery figures: {figures} promote_s={promoted_s:.2f}\n{sampler.timeline()}")
        (server,) = await fetch(stack.dsn("coordinator"),
                                "SELECT pg_is_in_recovery() AS standby, "
                                "current_setting('port')::int AS port")
        shards = await fetch(stack.dsn("coordinator"),
                             "SELECT count(*) AS n FROM sagaflow_outbox_shard")
        locks = await fetch(stack.dsn("coordinator"), _SHARD_LOCKS, SHARD_LOCK_NAMESPACE)
        await stack.drop()
    finally:
        if sampler is not None:
            await sampler.stop()
        for stack_ in stacks:
            await stack_.stop_all()
        await asyncio.to_thread(pair.down)
    assert len(result.violations) == 0, result.violations
    assert (server["standby"], server["port"]) == (False, pair.settings.pg_standby_port)
    assert locks[0][0] == shards[0]["n"], "the relays do not own every shard on the new primary"
    assert figures["in_flight_at_fault"] >= IN_FLIGHT_AT_FAULT, figures
