# ruff: noqa: F811  (fixtures imported from test_store_support share their names)
"""Firing schedules against real Postgres: overlap policies, catch-up, a replica that died
mid-firing, two firers racing, trigger, backfill and declared-in-code schedules."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest

from coordinator.engine import ReplyReceived
from coordinator.sagas.registry import SagaRegistry
from coordinator.schedules import (
    DeclaredSchedule,
    IntervalSpec,
    InvalidSchedule,
    Overlap,
    ScheduleDefinition,
    ScheduleFirer,
    ScheduleMetrics,
    ScheduleSpec,
    run_saga_id,
    sync_declared,
)
from coordinator.schedules import repository as repo
from coordinator.store import SagaStore
from participant_sdk.protocol import Outcome
from tests.integration.test_store_support import (
    OrderInput,
    ShipOrder,
    clock,  # noqa: F401
    outbox_commands,
    reply_to,
    store,  # noqa: F401
)

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 1, tzinfo=UTC)
EVERY = timedelta(seconds=10)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


async def create(store: SagaStore, overlap: Overlap, *, sid: str = "s1",
                 catchup: timedelta = timedelta(hours=1), **kw: Any) -> ScheduleDefinition:
    d = ScheduleDefinition(id=sid, saga_type="ship_order",
                           input={"order_id": "nightly", "amount": 1},
                           spec=ScheduleSpec(intervals=(IntervalSpec(every=EVERY),)),
                           overlap=overlap, catchup_window=catchup, **kw)
    async with store.pool.acquire() as conn:
        await repo.insert(conn, d, now=T0, actor="test")
    return d


async def runs(store: SagaStore, sid: str = "s1") -> list[tuple[float, str]]:
    async with store.pool.acquire() as conn:
        rows = await conn.fetch("SELECT nominal_at, outcome FROM schedule_runs "
                                "WHERE schedule_id = $1 ORDER BY nominal_at", sid)
    return [((r["nominal_at"] - T0).total_seconds(), r["outcome"]) for r in rows]


async def saga_count(store: SagaStore) -> int:
    async with store.pool.acquire() as conn:
        return int(await conn.fetchval("SELECT count(*) FROM sagas"))


async def status(store: SagaStore, saga_id: UUID) -> str:
    record = await store.get_saga(saga_id)
    assert record is not None
    return record.status


async def finish_all(store: SagaStore) -> None:
    """Answer every command OK until the outbox stays empty (the runs end)."""
    for _ in range(10):
        commands = await outbox_commands(store)
        if not commands:
            return
        for c in commands:
            await store.apply(c.saga_id, ReplyReceived(reply=reply_to(c, Outcome.OK)))


async def test_skip_drops_times_while_the_previous_run_is_going(store: SagaStore) -> None:
    await create(store, Overlap.SKIP)
    firer = ScheduleFirer(store)
    assert (await firer.fire_due(now=at(10))).started == 1
    await firer.fire_due(now=at(20))
    assert await runs(store) == [(10, "started"), (20, "skipped")]
    await finish_all(store)
    assert await status(store, run_saga_id("s1", at(10))) == "completed"
    await firer.fire_due(now=at(30))
    assert await runs(store) == [(10, "started"), (20, "skipped"), (30, "started")]
    assert await saga_count(store) == 2


async def test_buffer_one_keeps_one_and_skips_the_rest(store: SagaStore) -> None:
    await create(store, Overlap.BUFFER_ONE)
    firer = ScheduleFirer(store)
    await firer.fire_due(now=at(10))
    await firer.fire_due(now=at(30))  # 20 buffered, 30 skipped
    assert await runs(store) == [(10, "started"), (20, "buffered"), (30, "skipped")]
    await firer.fire_due(now=at(31))  # still running: nothing new
    assert await saga_count(store) == 1
    await finish_all(store)
    await firer.fire_due(now=at(32))
    assert await runs(store) == [(10, "started"), (20, "started"), (30, "skipped")]
    assert await status(store, run_saga_id("s1", at(20))) == "running"


async def test_buffer_all_runs_every_time_one_after_another(store: SagaStore) -> None:
    await create(store, Overlap.BUFFER_ALL)
    firer = ScheduleFirer(store)
    await firer.fire_due(now=at(10))
    await firer.fire_due(now=at(30))
    assert await runs(store) == [(10, "started"), (20, "buffered"), (30, "buffered")]
    for second, expected in ((35, [(10, "started"), (20, "started"), (30, "buffered")]),
                             (36, [(10, "started"), (20, "started"), (30, "started")])):
        await finish_all(store)
        await firer.fire_due(now=at(second))
        assert await runs(store) == expected
    assert await saga_count(store) == 3


async def test_cancel_other_rolls_the_previous_back_then_starts(store: SagaStore) -> None:
    await create(store, Overlap.CANCEL_OTHER)
    firer = ScheduleFirer(store)
    await firer.fire_due(now=at(10))
    first = run_saga_id("s1", at(10))
    await outbox_commands(store)  # the first command went out: leave it unanswered
    await firer.fire_due(now=at(20))
    assert await status(store, first) == "compensating"
    assert await runs(store) == [(10, "started"), (20, "buffered")]
    history = await store.get_history(first)
    assert history[-1].actor == "operator:schedule:s1"
    await finish_all(store)  # the cancel is answered: the first run is rolled back
    assert await status(store, first) == "cancelled"
    await firer.fire_due(now=at(21))
    assert await runs(store) == [(10, "started"), (20, "started")]


async def test_allow_all_starts_every_time(store: SagaStore) -> None:
    await create(store, Overlap.ALLOW_ALL)
    report = await ScheduleFirer(store).fire_due(now=at(30))
    assert report.started == 3
    assert await runs(store) == [(10, "started"), (20, "started"), (30, "started")]


async def test_catch_up_window_after_downtime(store: SagaStore) -> None:
    await create(store, Overlap.ALLOW_ALL, catchup=timedelta(seconds=25))
    metrics = ScheduleMetrics()
    await ScheduleFirer(store, metrics=metrics).fire_due(now=at(60))
    assert await runs(store) == [(10, "missed"), (20, "missed"), (30, "missed"),
                                 (40, "started"), (50, "started"), (60, "started")]
    async with store.pool.acquire() as conn:
        state = repo.state_of(await repo.get(conn, "s1"))
    assert (state.missed_count, state.fired_count) == (3, 3)
    assert state.next_fire_at == at(70)
    sample = metrics.registry.get_sample_value
    assert sample("sagaflow_schedule_runs_total", {"schedule": "s1", "outcome": "missed"}) == 3
    assert sample("sagaflow_schedule_fire_lag_seconds_count", {"schedule": "s1"}) == 3
    assert sample("sagaflow_schedule_fire_lag_seconds_sum", {"schedule": "s1"}) == 20 + 10 + 0


async def test_a_run_started_by_a_replica_that_died_is_recorded_not_doubled(
    store: SagaStore,
) -> None:
    # The dead replica started the run of t=10 and died before its transaction committed.
    await create(store, Overlap.SKIP, catchup=timedelta(seconds=5))
    await store.start_saga("ship_order", {"order_id": "nightly", "amount": 1},
                           saga_id=run_saga_id("s1", at(10)))
    # Much later (beyond the catch-up window) another replica handles it.
    await ScheduleFirer(store).fire_due(now=at(17))
    assert await runs(store) == [(10, "started")]
    assert await saga_count(store) == 1


async def test_two_firers_racing_fire_each_time_once(store: SagaStore) -> None:
    await create(store, Overlap.ALLOW_ALL, sid="a")
    await create(store, Overlap.ALLOW_ALL, sid="b")
    firers = [ScheduleFirer(store), ScheduleFirer(store)]
    for second in range(10, 101, 5):
        await asyncio.gather(*(f.fire_due(now=at(second)) for f in firers))
    for sid in ("a", "b"):
        assert await runs(store, sid) == [(float(s), "started") for s in range(10, 101, 10)]
        async with store.pool.acquire() as conn:
            state = repo.state_of(await repo.get(conn, sid))
        assert state.fired_count == 10  # each time handled by one firer, not both
    assert await saga_count(store) == 20


async def test_trigger_and_backfill(store: SagaStore) -> None:
    await create(store, Overlap.SKIP, catchup=timedelta(seconds=1))
    firer = ScheduleFirer(store)
    await firer.fire_due(now=at(35))
    assert await runs(store) == [(10, "missed"), (20, "missed"), (30, "missed")]
    run = await firer.trigger("s1", actor="alice", now=at(36))
    assert run["outcome"] == "triggered" and run["saga_id"] is not None
    report = await firer.backfill("s1", at(5), at(25), actor="alice", now=at(37))
    assert report.outcomes == {"backfilled": 2}
    assert await runs(store) == [(10, "backfilled"), (20, "backfilled"), (30, "missed"),
                                 (36, "triggered")]
    again = await firer.backfill("s1", at(5), at(25), actor="alice", now=at(38))
    assert again.outcomes == {}
    assert await saga_count(store) == 3


class NightlyShip(ShipOrder):
    name = "nightly_ship"
    schedules = (
        DeclaredSchedule("nightly", ScheduleSpec(cron=("0 2 * * *",)),
                         input=lambda t: {"order_id": t.date().isoformat(), "amount": 5}),
    )


async def test_declared_schedules_sync_and_map_the_fire_time(store: SagaStore) -> None:
    registry = SagaRegistry(topic_prefix=store.registry.topic_prefix,  # type: ignore[attr-defined]
                            sagas=[NightlyShip])
    scoped = SagaStore(store.pool, registry)
    mappers = await sync_declared(scoped, registry, now=T0)
    assert set(mappers) == {"nightly"}
    async with store.pool.acquire() as conn:
        await conn.execute("UPDATE schedules SET paused = true WHERE id = 'nightly'")
    # A second start-up keeps the operator's pause and changes nothing else.
    await sync_declared(scoped, registry, now=T0 + timedelta(hours=1))
    async with store.pool.acquire() as conn:
        state = repo.state_of(await repo.get(conn, "nightly"))
        await conn.execute("UPDATE schedules SET paused = false WHERE id = 'nightly'")
    assert state.definition.paused
    assert state.source == "code" and state.next_fire_at == T0 + timedelta(hours=2)
    await ScheduleFirer(scoped, mappers=mappers).fire_due(now=T0 + timedelta(hours=2))
    record = await store.get_saga(run_saga_id("nightly", T0 + timedelta(hours=2)))
    assert record is not None
    assert OrderInput.model_validate(record.state.input).order_id == "2026-01-01"


class TwiceDeclared(ShipOrder):
    name = "twice_declared"
    schedules = (DeclaredSchedule("dup", ScheduleSpec(cron=("0 2 * * *",))),
                 DeclaredSchedule("dup", ScheduleSpec(cron=("0 3 * * *",))))


async def test_a_bad_declaration_is_one_clear_error(store: SagaStore) -> None:
    registry = SagaRegistry(sagas=[TwiceDeclared])
    with pytest.raises(InvalidSchedule, match="schedule ids declared twice: dup"):
        await sync_declared(store, registry, now=T0)


async def test_a_failing_input_mapper_is_recorded_and_the_schedule_goes_on(
    store: SagaStore,
) -> None:
    await create(store, Overlap.ALLOW_ALL)

    def broken(fire_time: datetime) -> dict[str, Any]:
        raise RuntimeError("no data for " + fire_time.isoformat())

    await ScheduleFirer(store, mappers={"s1": broken}).fire_due(now=at(20))
    assert await runs(store) == [(10, "failed"), (20, "failed")]
    async with store.pool.acquire() as conn:
        reason = await conn.fetchval("SELECT reason FROM schedule_runs LIMIT 1")
        state = repo.state_of(await repo.get(conn, "s1"))
    assert "input mapper failed: RuntimeError: no data for" in reason
    assert state.next_fire_at == at(30) and await saga_count(store) == 0


async def test_replicas_starting_together_both_sync_the_declarations(store: SagaStore) -> None:
    registry = SagaRegistry(sagas=[NightlyShip])
    scoped = [SagaStore(store.pool, registry) for _ in range(3)]
    for _ in range(8):  # the race is not hit every time: try it a few times
        results = await asyncio.gather(*(sync_declared(s, registry, now=T0) for s in scoped))
        assert [set(r) for r in results] == [{"nightly"}] * 3
        async with store.pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM schedules") == 1
            await conn.execute("DELETE FROM schedules")
