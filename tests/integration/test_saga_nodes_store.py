"""Saga state stored as a spine, the input and one row per node (migration 0006), and the
store's cache of the states it committed: a reply rewrites only what it changed, a replica
never acts on a state another one has moved on from, and nothing uncommitted is cached."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import coordinator.migrations
from bench.foreach_sagas import ShipEach
from coordinator.engine import ReplyReceived
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import ApplyOutcome, PendingEvent, SagaStore
from coordinator.store.nodes import dumps, load_stored
from participant_sdk.protocol import Outcome
from tests.integration.test_store_support import (
    ManualClock,
    migrated,
    outbox_commands,
    reply_to,
    verify_all,
)

pytestmark = pytest.mark.integration

LINES = 30


def _input(lines: int = LINES) -> dict[str, Any]:
    return {"customer_id": "c-1", "amount_cents": 100, "sku": "SKU-1", "quantity": 1,
            "address": "1 Main St", "lines": lines}


async def _open(dsn: str, prefix: str, clock: ManualClock, cache: int = 1024) -> SagaStore:
    registry = SagaRegistry(topic_prefix=prefix, sagas=[ShipEach])
    return await SagaStore.open(dsn, registry, max_size=2, clock=clock, state_cache=cache)


async def _answer(store: SagaStore, commands: list[Any]) -> None:
    """Answer ``commands`` OK, one transaction each, through ``store``."""
    for command in commands:
        [result] = await store.apply_many([PendingEvent(
            command.saga_id, ReplyReceived(reply=reply_to(command, Outcome.OK)))])
        assert result.outcome is ApplyOutcome.APPLIED, result


@pytest.fixture
async def db(fresh_db: str) -> str:
    await migrated(fresh_db)
    return fresh_db


async def test_a_reply_rewrites_only_the_nodes_it_changed(db: str, topic_prefix: str) -> None:
    async with await _open(db, topic_prefix, ManualClock()) as store:
        saga = (await store.start_saga(ShipEach.name, _input())).record.saga_id
        commands = await outbox_commands(store)
        assert len(commands) == 10
        versions = "SELECT key, xmin::text AS v FROM saga_nodes WHERE saga_id = $1"
        async with store.pool.acquire() as conn:
            before = {r["key"]: r["v"] for r in await conn.fetch(versions, saga)}
            await _answer(store, commands[:1])
            after = {r["key"]: r["v"] for r in await conn.fetch(versions, saga)}
        assert len(before) > 2 * 10  # the for-each, its items, their steps
        written = {k for k, v in after.items() if before.get(k) != v}
        # The answered step and its item, the next item and its step, and the for-each (its
        # settled mark moved): not the whole tree.
        assert written == {"lines", "lines[0].ship", "lines[0]", "lines[10]", "lines[10].ship"}
        await verify_all(store, [saga])


async def test_replicas_never_act_on_a_state_another_replica_moved_on_from(
    db: str, topic_prefix: str
) -> None:
    """Two stores (two caches) take turns on one saga; each must see the other's changes."""
    clock_a, clock_b = ManualClock(), ManualClock()
    clock_b.advance(timedelta(seconds=7))  # their writes differ: a stale state would show
    async with await _open(db, topic_prefix, clock_a) as a, \
            await _open(db, topic_prefix, clock_b) as b:
        saga = (await a.start_saga(ShipEach.name, _input(12))).record.saga_id
        turn = 0
        while commands := await outbox_commands(a):
            for command in commands:
                await _answer((a, b)[turn % 2], [command])
                turn += 1
        record = await b.get_saga(saga)
        assert record is not None and record.status == "completed", record
        assert turn == 12
        await verify_all(a, [saga])


async def test_a_transaction_that_failed_leaves_nothing_in_the_cache(
    db: str, topic_prefix: str
) -> None:
    """Store A's change fails at its commit; replica B applies the same reply
    (at another ``now``); A's next changes must start from B's committed state."""
    clock_a, clock_b = ManualClock(), ManualClock()
    clock_b.advance(timedelta(seconds=7))
    async with await _open(db, topic_prefix, clock_a) as a, \
            await _open(db, topic_prefix, clock_b) as b:
        saga = (await a.start_saga(ShipEach.name, _input(12))).record.saga_id
        commands = await outbox_commands(a)
        async with a.pool.acquire() as conn:
            await conn.execute("""
                CREATE TABLE fail_next (n int);
                INSERT INTO fail_next VALUES (1);
                CREATE FUNCTION fail_once() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF EXISTS (SELECT 1 FROM fail_next) THEN
                        DELETE FROM fail_next;
                        RAISE EXCEPTION 'injected failure';
                    END IF;
                    RETURN NEW;
                END $$;
                CREATE CONSTRAINT TRIGGER fail_once AFTER INSERT ON saga_history
                    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_once();
            """)
        # The commit itself fails (a deferred trigger): everything was written, nothing
        # committed, the trigger's DELETE included.
        with pytest.raises(asyncpg.RaiseError, match="injected"):
            await _answer(a, commands[:1])
        async with a.pool.acquire() as conn:
            await conn.execute("DROP TRIGGER fail_once ON saga_history")
        await _answer(b, commands[:1])
        await _answer(a, commands[1:])
        while more := await outbox_commands(a):  # A alone to the end, rewriting every node
            await _answer(a, more)
        record = await a.get_saga(saga)
        assert record is not None and record.status == "completed", record
        await verify_all(a, [saga])


async def test_verify_sees_nodes_stored_in_another_order(db: str, topic_prefix: str) -> None:
    async with await _open(db, topic_prefix, ManualClock()) as store:
        saga = (await store.start_saga(ShipEach.name, _input(3))).record.saga_id
        await verify_all(store, [saga])
        async with store.pool.acquire() as conn:
            await conn.execute("UPDATE saga_nodes SET ordinal = -ordinal WHERE saga_id = $1",
                               saga)
        result = await store.verify(saga)
        assert not result.ok
        assert result.differences == ["steps: stored in another order than replayed"]


async def test_migration_0006_splits_the_snapshots_already_stored(
    db: str, topic_prefix: str
) -> None:
    """Rows as 0005 left them (whole snapshots, no node rows, no input column value) come out
    of 0006's statements as the writer writes them, node order and JSON text included."""
    clock = ManualClock()
    async with await _open(db, topic_prefix, clock) as store:
        ids = [(await store.start_saga(ShipEach.name, _input(n))).record.saga_id
               for n in (0, 4, 11)]
        await _answer(store, (await outbox_commands(store))[:3])
        sql = (Path(coordinator.migrations.__file__).parent / "0006_saga_nodes.sql").read_text()
        moves = sql[sql.index("INSERT INTO saga_nodes"):sql.index("ALTER TABLE sagas ALTER")]
        async with store.pool.acquire() as conn:
            written = await load_stored(conn, ids)
            nodes = await conn.fetch("SELECT * FROM saga_nodes ORDER BY saga_id, key")
            spines = await conn.fetch("SELECT id, snapshot, input FROM sagas ORDER BY id")
            await conn.execute("ALTER TABLE sagas ALTER COLUMN input DROP NOT NULL")
            for saga_id, whole in written.items():  # 0005 kept no signals (0007 did, 0012 not)
                older = {k: v for k, v in whole.items() if k != "signals"}
                await conn.execute("UPDATE sagas SET snapshot = $2::json, input = NULL "
                                   "WHERE id = $1", saga_id, dumps(older))
            await conn.execute("DELETE FROM saga_nodes")
            await conn.execute(moves)
            assert await load_stored(conn, ids) == written
            assert {k: list(w["steps"]) for k, w in (await load_stored(conn, ids)).items()} == {
                k: list(w["steps"]) for k, w in written.items()}
            assert await conn.fetch("SELECT * FROM saga_nodes ORDER BY saga_id, key") == nodes
            moved = await conn.fetch("SELECT id, snapshot, input FROM sagas ORDER BY id")
        # The spine keeps its text but for the fields that left it.
        assert [(r["id"], r["input"]) for r in moved] == [(r["id"], r["input"]) for r in spines]
        assert [json.loads(r["snapshot"]) for r in moved] == [
            json.loads(r["snapshot"]) for r in spines]
        await verify_all(store, ids)


async def test_nodes_an_older_build_wrote_decode_and_the_saga_goes_on(
    db: str, topic_prefix: str
) -> None:
    """Node rows without a field added since (``settled``) decode with its default. Until
    the for-each node is written again, verify names that field as the one difference (the
    replay of this build sets it); the next reply rewrites the node and they agree."""
    async with await _open(db, topic_prefix, ManualClock(), cache=0) as store:
        saga = (await store.start_saga(ShipEach.name, _input(12))).record.saga_id
        commands = await outbox_commands(store)
        await _answer(store, commands[:4])
        async with store.pool.acquire() as conn:
            await conn.execute("UPDATE saga_nodes SET state = (state::jsonb - 'settled')::json "
                               "WHERE saga_id = $1", saga)
        result = await store.verify(saga)
        assert result.differences == [".steps.lines.settled: stored 0 != replayed 4"]
        await _answer(store, commands[4:5])
        await verify_all(store, [saga])
        async with store.pool.acquire() as conn:
            await conn.execute("UPDATE saga_nodes SET state = jsonb_set(state::jsonb, "
                               "'{note}', '\"edited\"')::json WHERE key = 'lines[0]'")
        result = await store.verify(saga)
        assert not result.ok and result.differences[0].startswith(".steps.lines[0].note")
