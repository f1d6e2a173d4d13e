# ruff: noqa: F811  (fixtures imported from test_store_support share their names)
"""Stuck detection and coordinator metrics on a real store, with a clock the test moves."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from coordinator.engine import OperatorRepair, RepairVerb, ReplyReceived
from coordinator.observability.metrics import CoordinatorMetrics
from coordinator.observability.scan import WorkerObservability
from coordinator.observability.settings import ObservabilitySettings, StuckPolicy
from coordinator.observability.stuck import list_stuck
from coordinator.store import PendingEvent, SagaStore
from participant_sdk.logging_config import SagaContextFilter
from participant_sdk.protocol import ErrorKind, Outcome
from tests.integration.test_store_support import (
    ManualClock,
    clock,  # noqa: F401
    outbox_commands,
    reply_to,
    store,  # noqa: F401
)

pytestmark = pytest.mark.integration

INPUT = {"order_id": "o-1", "amount": 10}


async def _fail_and_retry(store: SagaStore, clock: ManualClock, times: int) -> None:
    """Fail the outstanding try ``times`` times; each backoff timer fires a new attempt."""
    for _ in range(times):
        (command,) = await outbox_commands(store)
        clock.advance(timedelta(seconds=2))
        await store.apply_many([PendingEvent(command.saga_id, ReplyReceived(
            reply=reply_to(command, (Outcome.FAILED, ErrorKind.TRANSIENT))))])
        clock.advance(timedelta(seconds=1))
        assert await store.fire_due_timers() == 1


async def test_no_progress_uses_the_step_threshold_then_the_type_then_the_default(
    store: SagaStore, clock: ManualClock
) -> None:
    t0 = clock.now
    saga = (await store.start_saga("tcc_order", INPUT)).record
    await store.start_saga("ship_order", INPUT)
    policy = StuckPolicy(default=timedelta(seconds=300),
                         thresholds={"tcc_order.reserve": timedelta(seconds=60),
                                     "ship_order": timedelta(seconds=120)})
    async with store.pool.acquire() as conn:
        assert await list_stuck(conn, policy, now=t0 + timedelta(seconds=30)) == []
        found = await list_stuck(conn, policy, now=t0 + timedelta(seconds=61))
        assert [(s.saga_id, s.step, s.reasons) for s in found] == [
            (saga.saga_id, "reserve", ("no_progress",))]
        assert found[0].threshold == timedelta(seconds=60)
        assert found[0].step_phase == "trying" and found[0].attempt == 1
        later = await list_stuck(conn, policy, now=t0 + timedelta(seconds=121))
        assert sorted(s.saga_type for s in later) == ["ship_order", "tcc_order"]
        only = await list_stuck(conn, policy, now=t0 + timedelta(seconds=121),
                                saga_type="ship_order")
        assert [s.saga_type for s in only] == ["ship_order"]
        assert await list_stuck(conn, StuckPolicy(), now=t0 + timedelta(seconds=121)) == []
        among = await list_stuck(conn, policy, now=t0 + timedelta(seconds=121),
                                 saga_ids=[saga.saga_id])
        assert [s.saga_id for s in among] == [saga.saga_id]
        assert await list_stuck(conn, policy, now=t0 + timedelta(seconds=121),
                                saga_ids=[]) == []


async def test_retrying_sagas_are_flagged_although_they_progress(
    store: SagaStore, clock: ManualClock
) -> None:
    metrics = CoordinatorMetrics()
    store.add_change_listener(metrics.observe_changes)
    saga = (await store.start_saga("tcc_order", INPUT)).record
    await _fail_and_retry(store, clock, 2)
    policy = StuckPolicy(max_retries=2)
    async with store.pool.acquire() as conn:
        (found,) = await list_stuck(conn, policy, now=clock.now)
        assert found.saga_id == saga.saga_id and found.reasons == ("retrying",)
        assert found.attempt == 3 and found.retries == 2
        assert await list_stuck(conn, StuckPolicy(max_retries=3), now=clock.now) == []

    sample = metrics.registry.get_sample_value
    labels = {"saga_type": "tcc_order", "step": "reserve", "phase": "try"}
    assert sample("sagaflow_step_retries_total", labels) == 2
    assert sample("sagaflow_commands_written_total", labels) == 3
    assert sample("sagaflow_step_failures_total", {**labels, "error_kind": "transient"}) == 2
    assert sample("sagaflow_step_duration_seconds_count", {**labels, "outcome": "failed"}) == 2
    assert sample("sagaflow_step_duration_seconds_sum", {**labels, "outcome": "failed"}) == 4.0
    assert sample("sagaflow_sagas_started_total", {"saga_type": "tcc_order"}) == 1


async def test_an_operator_retry_restarts_the_retry_count_of_the_stuck_scan(
    store: SagaStore, clock: ManualClock
) -> None:
    saga = (await store.start_saga("tcc_order", INPUT)).record
    await _fail_and_retry(store, clock, 1)
    (command,) = await outbox_commands(store)  # attempt 2 fails too: waiting for its backoff
    await store.apply_many([PendingEvent(command.saga_id, ReplyReceived(
        reply=reply_to(command, (Outcome.FAILED, ErrorKind.TRANSIENT))))])
    policy = StuckPolicy(max_retries=1)
    async with store.pool.acquire() as conn:
        assert [s.saga_id for s in await list_stuck(conn, policy, now=clock.now)] == [
            saga.saga_id]
    await store.apply(saga.saga_id, OperatorRepair(verb=RepairVerb.RETRY, actor="alice",
                                                   reason="fixed the payment gateway"))
    async with store.pool.acquire() as conn:
        assert await list_stuck(conn, policy, now=clock.now) == []
        attempts = await conn.fetchval("SELECT busiest_attempt FROM sagas WHERE id = $1",
                                       saga.saga_id)
    assert attempts == 1  # attempt 3 overall, the first of the operator's budget


async def test_the_scan_sets_gauges_and_warns_once_per_newly_stuck_saga(
    store: SagaStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    await store.start_saga("ship_order", INPUT)
    await outbox_commands(store)  # ship_order's command: it just waits
    saga = (await store.start_saga("tcc_order", INPUT)).record
    await _fail_and_retry(store, clock, 2)
    settings = ObservabilitySettings(stuck_retries=2, stuck_after=timedelta(hours=1))
    scanner = WorkerObservability(store, settings)
    caplog.handler.addFilter(SagaContextFilter())
    with caplog.at_level(logging.WARNING, logger="coordinator.observability.scan"):
        first = await scanner.scan()
        second = await scanner.scan()
    assert [s.saga_id for s in first] == [saga.saga_id] and second == []
    warnings = [r for r in caplog.records if "is stuck" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].saga_id == str(first[0].saga_id)  # type: ignore[attr-defined]
    sample = scanner.metrics.registry.get_sample_value
    assert sample("sagaflow_sagas_in_flight", {"saga_type": "tcc_order", "status": "running"}) == 1
    assert sample("sagaflow_sagas_in_flight", {"saga_type": "ship_order",
                                               "status": "running"}) == 1
    assert sample("sagaflow_stuck_sagas", {"saga_type": "tcc_order", "reason": "retrying"}) == 1
    assert sample("sagaflow_outbox_backlog_rows") == 1  # tcc_order's third attempt


async def test_the_in_flight_scan_can_use_the_partial_index(store: SagaStore) -> None:
    async with store.pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")
        plan = "\n".join(r[0] for r in await conn.fetch(
            "EXPLAIN SELECT saga_type, status, count(*) FROM sagas "
            "WHERE status IN ('running', 'compensating', 'dead') GROUP BY saga_type, status"))
        assert "sagas_in_flight" in plan
        plan = "\n".join(r[0] for r in await conn.fetch(
            "EXPLAIN SELECT id FROM sagas WHERE status IN ('running', 'compensating')"))
        assert "sagas_in_flight" in plan


async def test_the_migration_fills_the_activity_columns_as_the_writer_does(
    store: SagaStore, clock: ManualClock
) -> None:
    """Migration 0004 fills the stuck scan's columns of the sagas already in flight from
    their snapshots: run its UPDATE again on blanked rows (their snapshots whole again, as
    before migration 0006 split them) and get what the writer wrote."""
    from pathlib import Path

    import coordinator.migrations
    from coordinator.store.nodes import dumps, load_stored

    saga = (await store.start_saga("tcc_order", INPUT)).record
    await _fail_and_retry(store, clock, 2)  # reserve: trying, attempt 3
    await store.start_saga("ship_order", INPUT)
    select = ("SELECT id, stage, active_steps, busiest_step, busiest_phase, busiest_attempt "
              "FROM sagas ORDER BY id")
    sql = (Path(coordinator.migrations.__file__).parent / "0004_child_sagas.sql").read_text()
    backfill = sql[sql.index("UPDATE sagas AS s"):]
    async with store.pool.acquire() as conn:
        written = await conn.fetch(select)
        assert {r["id"]: r["busiest_attempt"] for r in written}[saga.saga_id] == 3
        for saga_id, whole in (await load_stored(conn, [r["id"] for r in written])).items():
            await conn.execute("UPDATE sagas SET snapshot = $2::json WHERE id = $1", saga_id,
                               dumps(whole))
        await conn.execute("UPDATE sagas SET stage = 'done', active_steps = '{}', "
                           "busiest_step = NULL, busiest_phase = NULL, busiest_attempt = 0")
        await conn.execute(backfill)
        assert await conn.fetch(select) == written


async def test_stuck_ids_agree_with_the_full_scan_for_a_uniform_policy(
    store: SagaStore, clock: ManualClock
) -> None:
    """The ids-only query the API uses must flag exactly what the full scan flags."""
    from coordinator.observability.stuck import stuck_ids

    t0 = clock.now
    busy = (await store.start_saga("tcc_order", INPUT)).record.saga_id
    await _fail_and_retry(store, clock, 2)  # its try on attempt 3: "retrying"
    quiet = (await store.start_saga("tcc_order", INPUT)).record.saga_id
    clock.advance(timedelta(seconds=200))
    later = (await store.start_saga("ship_order", INPUT)).record.saga_id
    policy = StuckPolicy(default=timedelta(seconds=300), max_retries=2)
    async with store.pool.acquire() as conn:
        for at in (t0 + timedelta(seconds=250), t0 + timedelta(seconds=301),
                   t0 + timedelta(seconds=600)):
            full = {s.saga_id for s in await list_stuck(conn, policy, now=at)}
            assert await stuck_ids(conn, policy, now=at) == full
            assert await stuck_ids(conn, policy, now=at, saga_ids=[busy]) == full & {busy}
        assert full == {quiet, busy, later}
