# ruff: noqa: F811  (fixtures imported from test_store_support share their names)
"""The Postgres store against a real database: one transaction per state change."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta

import asyncpg
import pytest

from coordinator.engine import ReplyReceived, Status, TimerKind
from coordinator.migrations import applied_versions, discover, migrate
from coordinator.store import (
    ApplyOutcome,
    InvalidInput,
    PendingEvent,
    SagaConflict,
    SagaNotFound,
    SagaStore,
    UnknownSagaType,
    UnknownSagaVersion,
)
from participant_sdk.dead_letters import DeadLetter, list_dead_letters
from participant_sdk.protocol import ErrorKind, Outcome
from tests.integration.test_store_support import (
    ManualClock,
    clock,  # noqa: F401
    outbox_commands,
    reply_to,
    store,  # noqa: F401
    verify_all,
)

pytestmark = pytest.mark.integration

INPUT = {"order_id": "o-1", "amount": 10}
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def test_migrations_are_versioned_idempotent_and_race_free(fresh_db: str) -> None:
    conns = [await asyncpg.connect(fresh_db) for _ in range(3)]
    try:
        results = await asyncio.gather(*(migrate(c) for c in conns))
        assert sorted(v for r in results for v in r) == [m.version for m in discover()]
        assert await migrate(conns[0]) == []
        applied = await applied_versions(conns[0])
        assert set(applied) == {m.version for m in discover()}
        tables = {r["tablename"] for r in await conns[0].fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert {"sagas", "saga_history", "saga_snapshots", "timers", "sagaflow_outbox",
                "sagaflow_dead_letters", "schema_migrations"} <= tables
    finally:
        for c in conns:
            await c.close()


async def test_start_writes_snapshot_history_outbox_and_timer_in_one_go(
    store: SagaStore,
) -> None:
    started = await store.start_saga("tcc_order", INPUT, actor="test",
                                     trace_context={"traceparent": TRACEPARENT})
    assert started.created
    rec = started.record
    assert rec.status == "running" and rec.history_seq == 1
    history = await store.get_history(rec.saga_id)
    assert [h.seq for h in history] == [1] and history[0].actor == "test"
    async with store.pool.acquire() as conn:
        row = await conn.fetchrow("SELECT key, headers FROM sagaflow_outbox")
    assert row["key"] == str(rec.saga_id)
    headers = json.loads(row["headers"])
    assert headers["traceparent"] == TRACEPARENT and headers["saga-message-kind"] == "command"
    (cmd,) = await outbox_commands(store)
    assert (cmd.step, cmd.phase, cmd.attempt) == ("reserve", "try", 1)
    timers = await store.list_timers(rec.saga_id)
    assert [t.kind for t in timers] == [TimerKind.DEADLINE.value]
    # The record is built from what the start wrote, not read back: it must match the row.
    assert rec == await store.get_saga(rec.saga_id)


async def test_start_is_idempotent_by_saga_id(store: SagaStore) -> None:
    saga_id = uuid.uuid4()
    first, again = await asyncio.gather(
        store.start_saga("tcc_order", INPUT, saga_id=saga_id),
        store.start_saga("tcc_order", dict(INPUT), saga_id=saga_id),
    )
    assert sorted([first.created, again.created]) == [False, True]
    assert first.record == again.record == await store.get_saga(saga_id)
    assert len(await store.get_history(saga_id)) == 1
    assert len(await outbox_commands(store)) == 1
    with pytest.raises(SagaConflict, match="different input"):
        await store.start_saga("tcc_order", {**INPUT, "amount": 11}, saga_id=saga_id)
    with pytest.raises(SagaConflict, match="type"):
        await store.start_saga("ship_order", INPUT, saga_id=saga_id)


async def test_bad_starts_raise_clear_errors(store: SagaStore) -> None:
    with pytest.raises(UnknownSagaType) as unknown:
        await store.start_saga("nope", INPUT)
    assert unknown.value.known == ["ship_order", "tcc_order"]
    assert "ship_order, tcc_order" in str(unknown.value)
    with pytest.raises(UnknownSagaVersion, match="registered versions: 1"):
        await store.start_saga("tcc_order", INPUT, version=7)
    with pytest.raises(InvalidInput) as invalid:
        await store.start_saga("tcc_order", {"order_id": "", "amount": -1})
    assert {e["loc"] for e in invalid.value.errors} == {("order_id",), ("amount",)}


async def test_tcc_runs_to_completion_and_ignores_duplicates_and_stale(
    store: SagaStore,
) -> None:
    saga_id = (await store.start_saga("tcc_order", INPUT)).record.saga_id
    (try1,) = await outbox_commands(store)
    reply = reply_to(try1, Outcome.OK)
    assert (await store.apply(saga_id, ReplyReceived(reply=reply))).outcome is ApplyOutcome.APPLIED
    dup = await store.apply(saga_id, ReplyReceived(reply=reply))
    assert dup.outcome is ApplyOutcome.IGNORED and dup.reason
    (try2,) = await outbox_commands(store)
    assert try2.step == "hold"
    await store.apply(saga_id, ReplyReceived(reply=reply_to(try2, Outcome.OK)))
    confirmed = []
    while confirms := await outbox_commands(store):
        for command in confirms:
            confirmed.append((command.step, command.phase))
            await store.apply(saga_id, ReplyReceived(reply=reply_to(command, Outcome.OK)))
    # Declaration order survives the snapshot's round trip (jsonb would sort the step keys).
    assert confirmed == [("reserve", "confirm"), ("hold", "confirm")]
    record = await store.get_saga(saga_id)
    assert record is not None and record.status == Status.COMPLETED.value
    assert await store.list_timers(saga_id) == []
    history = await store.get_history(saga_id)
    assert [h.seq for h in history] == list(range(1, len(history) + 1))
    assert [h.ignored is not None for h in history].count(True) == 1
    await verify_all(store, [saga_id])


async def test_retry_timer_fires_and_rejection_compensates(
    store: SagaStore, clock: ManualClock
) -> None:
    saga_id = (await store.start_saga("ship_order", INPUT)).record.saga_id
    (charge,) = await outbox_commands(store)
    await store.apply(saga_id, ReplyReceived(reply=reply_to(charge, Outcome.OK)))
    (ship,) = await outbox_commands(store)
    failed = reply_to(ship, (Outcome.FAILED, ErrorKind.TRANSIENT))
    await store.apply(saga_id, ReplyReceived(reply=failed))
    retry = [t for t in await store.list_timers(saga_id) if t.kind == TimerKind.RETRY.value]
    assert len(retry) == 1
    assert await store.fire_due_timers() == 0  # not due yet
    clock.advance(timedelta(seconds=1))
    assert await store.fire_due_timers() == 1
    (ship2,) = await outbox_commands(store)
    assert (ship2.step, ship2.attempt) == ("ship", 2)
    # Attempt 1 succeeds after all (a redelivered command): news, not a duplicate. The step
    # may have applied, so rollback must undo it; a second copy is then a duplicate.
    late = await store.apply(saga_id, ReplyReceived(reply=reply_to(ship, Outcome.OK)))
    assert late.outcome is ApplyOutcome.APPLIED
    record = await store.get_saga(saga_id)
    assert record is not None and record.state.steps["ship"].uncertain
    again = await store.apply(saga_id, ReplyReceived(reply=reply_to(ship, Outcome.OK)))
    assert again.outcome is ApplyOutcome.IGNORED
    await store.apply(saga_id, ReplyReceived(reply=reply_to(ship2, Outcome.REJECTED)))
    rollbacks = []
    while commands := await outbox_commands(store):
        for command in commands:
            rollbacks.append((command.step, command.phase))
            await store.apply(saga_id, ReplyReceived(reply=reply_to(command, Outcome.OK)))
    assert ("charge", "compensate") in rollbacks
    record = await store.get_saga(saga_id)
    assert record is not None and record.status == Status.COMPENSATED.value
    await verify_all(store, [saga_id])


async def test_apply_many_spans_sagas_and_dead_letters_unknown_ones(store: SagaStore) -> None:
    ids = [(await store.start_saga("tcc_order", {**INPUT, "order_id": f"o{i}"})).record.saga_id
           for i in range(5)]
    commands = await outbox_commands(store)
    unknown = uuid.uuid4()
    orphan = reply_to(commands[0], Outcome.OK).model_copy(update={"saga_id": unknown})
    letter = DeadLetter(source="test", reason="", payload=b"x", topic="t", partition=0, offset=1)
    events = [PendingEvent(c.saga_id, ReplyReceived(reply=reply_to(c, Outcome.OK)))
              for c in reversed(commands)]
    events.append(PendingEvent(unknown, ReplyReceived(reply=orphan), dead_letter=letter))
    results = await store.apply_many(events)
    assert [r.outcome for r in results[:-1]] == [ApplyOutcome.APPLIED] * 5
    assert results[-1].outcome is ApplyOutcome.NOT_FOUND
    async with store.pool.acquire() as conn:
        (dead,) = await list_dead_letters(conn, source="test")
    assert "no saga" in dead.reason and dead.offset == 1
    assert {c.step for c in await outbox_commands(store)} == {"hold"}
    with pytest.raises(SagaNotFound):
        await store.apply(unknown, events[0].event)
    await verify_all(store, ids)


async def test_history_is_append_only(store: SagaStore) -> None:
    saga_id = (await store.start_saga("tcc_order", INPUT)).record.saga_id
    async with store.pool.acquire() as conn:
        with pytest.raises(asyncpg.RestrictViolationError, match="append-only"):
            await conn.execute("UPDATE saga_history SET actor = 'x' WHERE saga_id = $1", saga_id)


async def test_compaction_checkpoints_and_verify_replays_from_it(store: SagaStore) -> None:
    saga_id = (await store.start_saga("tcc_order", INPUT)).record.saga_id
    (try1,) = await outbox_commands(store)
    await store.apply(saga_id, ReplyReceived(reply=reply_to(try1, Outcome.OK)))
    assert await store.compact(saga_id) == 2
    (try2,) = await outbox_commands(store)
    await store.apply(saga_id, ReplyReceived(reply=reply_to(try2, Outcome.OK)))
    result = await store.verify(saga_id)
    assert result.ok and (result.from_seq, result.replayed_events) == (2, 1)
    assert await store.compact(saga_id, archive=True) == 3
    async with store.pool.acquire() as conn:
        live = await conn.fetchval("SELECT count(*) FROM saga_history WHERE saga_id = $1",
                                   saga_id)
        archived = await conn.fetchval(
            "SELECT count(*) FROM saga_history_archive WHERE saga_id = $1", saga_id)
    assert (live, archived) == (0, 3)
    assert [h.seq for h in await store.get_history(saga_id)] == [1, 2, 3]
    assert (await store.verify(saga_id)).ok
    assert await store.compact_many(min_new_events=1) == 0


async def test_verify_detects_a_tampered_snapshot(store: SagaStore) -> None:
    saga_id = (await store.start_saga("tcc_order", INPUT)).record.saga_id
    async with store.pool.acquire() as conn:
        await conn.execute(
            "UPDATE sagas SET snapshot = jsonb_set(snapshot::jsonb, '{status}', '\"completed\"')")
    result = await store.verify(saga_id)
    assert not result.ok and any("status" in d for d in result.differences)


async def test_list_sagas_filters_and_pages(store: SagaStore, clock: ManualClock) -> None:
    made = []
    for i in range(5):
        clock.advance(timedelta(seconds=1))
        saga_type = "tcc_order" if i % 2 == 0 else "ship_order"
        made.append((await store.start_saga(saga_type, INPUT)).record.saga_id)
    page = await store.list_sagas(limit=2)
    assert [r.saga_id for r in page.items] == made[::-1][:2] and page.next_cursor
    seen = [r.saga_id for r in page.items]
    while page.next_cursor:
        page = await store.list_sagas(limit=2, cursor=page.next_cursor)
        seen += [r.saga_id for r in page.items]
    assert seen == made[::-1]
    tcc = await store.list_sagas(saga_type="tcc_order", version=1, status="running")
    assert [r.saga_id for r in tcc.items] == [made[4], made[2], made[0]]
    old = await store.list_sagas(created_before=clock.now - timedelta(seconds=2))
    assert [r.saga_id for r in old.items] == [made[1], made[0]]
    assert (await store.list_sagas(status="dead")).items == []


async def test_concurrent_timer_claims_fire_each_timer_once(
    store: SagaStore, clock: ManualClock
) -> None:
    ids = [(await store.start_saga("tcc_order", {**INPUT, "order_id": f"o{i}"})).record.saga_id
           for i in range(20)]
    firsts = await outbox_commands(store)
    await store.apply_many([
        PendingEvent(c.saga_id, ReplyReceived(reply=reply_to(c, (Outcome.FAILED,
                                                                  ErrorKind.TRANSIENT))))
        for c in firsts
    ])
    assert await outbox_commands(store) == []
    other = SagaStore(store.pool, store.registry, clock=clock)
    clock.advance(timedelta(seconds=1))

    async def drain(s: SagaStore) -> int:
        total = 0
        while fired := await s.fire_due_timers(limit=3):
            total += fired
        return total

    async def stale_replies() -> None:  # saga-row contention from the reply path meanwhile
        for command in firsts[::2]:
            (result,) = await store.apply_many([PendingEvent(command.saga_id, ReplyReceived(
                reply=reply_to(command, (Outcome.FAILED, ErrorKind.TRANSIENT))))])
            assert result.outcome is ApplyOutcome.IGNORED

    counts = await asyncio.gather(drain(store), drain(other), stale_replies())
    assert counts[0] + counts[1] == 20
    retries = await outbox_commands(store)
    assert sorted((c.saga_id, c.attempt) for c in retries) == sorted((i, 2) for i in ids)
    await verify_all(store, ids)


async def test_pool_release_rolls_back_but_skips_the_session_reset(store: SagaStore) -> None:
    """The store's pool uses the cheap reset: an open transaction is still rolled back."""
    async with store.pool.acquire() as conn:
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        tx = conn.transaction()
        await tx.start()
        await conn.execute("CREATE TEMP TABLE leftover (x int) ON COMMIT DROP")
    for _ in range(4):  # every connection of the pool, so the one released above comes back
        async with store.pool.acquire() as conn:
            if await conn.fetchval("SELECT pg_backend_pid()") == pid:
                assert not conn.is_in_transaction()
                assert await conn.fetchval("SELECT to_regclass('pg_temp.leftover')") is None
                return
    pytest.fail("the released connection did not come back to the pool")
