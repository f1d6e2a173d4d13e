# ruff: noqa: F811  (fixtures imported from test_store_support share their names)
"""A reply to a saga whose state this store wrote last is applied in ONE autocommitted
statement (compare and set on the history seq; a saga not cached is read first, unlocked), and
a state another store moved on since is never written over: its events fall back to locking
the row."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from coordinator.engine import ReplyReceived
from coordinator.store import ApplyOutcome, PendingEvent, SagaStore
from coordinator.store._writes import LOCK_SAGAS, WRITE_SAGAS
from coordinator.store.store import _READ_SAGAS
from participant_sdk.pools import create_pool
from participant_sdk.protocol import CommandEnvelope, Outcome
from tests.integration.test_store_support import (
    ManualClock,
    clock,  # noqa: F401
    make_registry,
    migrated,
    outbox_commands,
    reply_to,
    verify_all,
)

pytestmark = pytest.mark.integration

INPUT = {"order_id": "o-1", "amount": 10}


class _Logged:
    """A store whose connections log every statement they send."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    async def open(self, dsn: str, prefix: str, clock: ManualClock) -> SagaStore:
        async def init(conn: Any) -> None:
            conn.add_query_logger(lambda record: self.queries.append(record.query.strip()))

        pool = await create_pool(dsn, init=init, min_size=1, max_size=2)
        return SagaStore(pool, make_registry(prefix), clock=clock, owns_pool=True)


@pytest.fixture
async def stores(fresh_db: str, topic_prefix: str, clock: ManualClock
                 ) -> AsyncIterator[tuple[_Logged, SagaStore, SagaStore]]:
    """Two stores (two coordinator replicas) on one database; the first logs its statements."""
    await migrated(fresh_db)
    logged = _Logged()
    async with await logged.open(fresh_db, topic_prefix, clock) as one, \
            await SagaStore.open(fresh_db, make_registry(topic_prefix), clock=clock) as other:
        yield logged, one, other


def _reply(command: CommandEnvelope) -> PendingEvent:
    return PendingEvent(command.saga_id, ReplyReceived(reply=reply_to(command, Outcome.OK)))


async def test_a_reply_to_a_cached_state_is_one_statement(
    stores: tuple[_Logged, SagaStore, SagaStore],
) -> None:
    log, store, _ = stores
    saga_id = (await store.start_saga("tcc_order", INPUT)).record.saga_id
    (reserve,) = await outbox_commands(store)
    log.queries.clear()
    [result] = await store.apply_many([_reply(reserve)])
    assert result.outcome is ApplyOutcome.APPLIED and result.seq == 2
    assert log.queries == [WRITE_SAGAS.strip()]  # no BEGIN, lock or COMMIT of its own
    # Everything the change decided was written by that statement: the next command is in
    # the outbox, the try's deadline timer moved to the next step, the history replays.
    (hold,) = await outbox_commands(store)
    assert (hold.step, hold.phase.value, hold.attempt) == ("hold", "try", 1)
    assert [t.step for t in await store.list_timers(saga_id)] == ["hold"]
    assert [h.seq for h in await store.get_history(saga_id)] == [1, 2]
    # A duplicate is ignored the same way, and recorded as such.
    log.queries.clear()
    [again] = await store.apply_many([_reply(reserve)])
    assert again.outcome is ApplyOutcome.IGNORED and log.queries == [WRITE_SAGAS.strip()]
    [done] = await store.apply_many([_reply(hold)])
    assert done.outcome is ApplyOutcome.APPLIED
    confirms = await outbox_commands(store)
    results = await store.apply_many([_reply(c) for c in confirms])
    assert [r.status for r in results][-1] == "completed"
    record = await store.get_saga(saga_id)
    assert record is not None and record.status == "completed"
    assert await store.list_timers(saga_id) == []
    await verify_all(store, [saga_id])


async def test_a_state_moved_on_by_another_store_is_not_written_over(
    stores: tuple[_Logged, SagaStore, SagaStore],
) -> None:
    log, store, other = stores
    moved = (await store.start_saga("tcc_order", INPUT)).record.saga_id
    kept = (await store.start_saga("tcc_order", {**INPUT, "order_id": "o-2"})).record.saga_id
    # Started by the other replica: not in this store's cache at all.
    foreign = (await other.start_saga("tcc_order", {**INPUT, "order_id": "o-3"})).record.saga_id
    first = {c.saga_id: c for c in await outbox_commands(store)}
    # The other replica applies the first reply of one saga: this store's cached state of
    # that saga (history seq 1) is stale now.
    [result] = await other.apply_many([_reply(first[moved])])
    assert result.outcome is ApplyOutcome.APPLIED
    (hold,) = await outbox_commands(store)
    log.queries.clear()
    # One batch: the second reply of the moved saga, the first reply of the kept one and of
    # the foreign one.
    results = await store.apply_many([_reply(hold), _reply(first[foreign]),
                                      _reply(first[kept])])
    assert [(r.saga_id, r.outcome, r.seq) for r in results] == [
        (moved, ApplyOutcome.APPLIED, 3), (foreign, ApplyOutcome.APPLIED, 2),
        (kept, ApplyOutcome.APPLIED, 2)]
    # The foreign saga's row and state were read (no lock, one query); the one statement
    # then wrote it and the kept one, and nothing of the moved one, whose cached state was
    # stale: that one was applied in a transaction that locked its row and read it afresh.
    assert log.queries[:2] == [_READ_SAGAS.strip(), WRITE_SAGAS.strip()]
    assert log.queries[2:].count(LOCK_SAGAS.strip()) == 1
    assert log.queries.count(WRITE_SAGAS.strip()) == 2
    for saga_id, seqs in ((moved, [1, 2, 3]), (kept, [1, 2]), (foreign, [1, 2])):
        assert [h.seq for h in await store.get_history(saga_id)] == seqs
    commands = await outbox_commands(store)
    assert sorted((c.saga_id == moved, c.step, c.phase.value) for c in commands) == [
        (False, "hold", "try"), (False, "hold", "try"), (True, "hold", "confirm"),
        (True, "reserve", "confirm")]
    await verify_all(store, [moved, kept, foreign])
