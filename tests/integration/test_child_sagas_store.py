"""Child sagas on real Postgres: started in the parent's transaction, requests and answers
delivered through the timers table, each applied in its receiver's own transaction; the
depth limit; refused starts; and many parents and children finishing and rolling back at
once without a deadlock."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest
from pydantic import BaseModel

from coordinator.engine import OperatorRepair, RepairVerb, ReplyReceived
from coordinator.language.nodes import MAX_CHILD_DEPTH, ChildSaga, Parallel
from coordinator.language.saga import Saga, SagaStep, TccStep
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from participant_sdk.protocol import CommandEnvelope, Outcome
from tests.integration.test_store_support import (
    ManualClock,
    migrated,
    outbox_commands,
    reply_to,
    verify_all,
)

pytestmark = pytest.mark.integration


class Order(BaseModel):
    order_id: str = "o-1"
    fail: bool = False
    levels: int = 0


class Ship(Saga):
    name = "ship"
    input_model = Order
    # book waits a day for its reply: only the parent's one-hour wait for the child can end
    # a slow child first
    steps = (TccStep("book", "carrier", "book", deadline=timedelta(days=1)),
             SagaStep("label", "printer", "print", compensable=True))


class Checkout(Saga):
    name = "checkout"
    input_model = Order
    steps = (
        TccStep("reserve", "payments", "reserve"),
        Parallel("ship_both", branches=(ChildSaga("east", Ship), ChildSaga("west", Ship))),
        SagaStep("notify", "mailer", "send", compensable=True),
    )


class Lost(Saga):
    name = "lost"
    input_model = Order
    steps = (TccStep("reserve", "payments", "reserve"), ChildSaga("ghost", "no_such_saga"))


class Nest(Saga):
    """Runs itself as its own child: only the depth limit stops it."""

    name = "nest"
    input_model = Order
    steps = (TccStep("hold", "payments", "hold"), ChildSaga("deeper", "nest"))


@pytest.fixture
async def store(fresh_db: str, topic_prefix: str) -> AsyncIterator[SagaStore]:
    await migrated(fresh_db)
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[Ship, Checkout, Lost, Nest])
    async with await SagaStore.open(fresh_db, registry, max_size=8,
                                    clock=ManualClock()) as s:
        yield s


def _script(cmd: CommandEnvelope) -> Outcome:
    failing = cmd.step == "notify" and cmd.payload.get("fail")
    return Outcome.REJECTED if failing and cmd.phase.is_forward else Outcome.OK


async def _settle(store: SagaStore, rounds: int = 30) -> None:
    """Answer every command and apply every delivery until nothing is left."""
    for _ in range(rounds):
        commands = await outbox_commands(store)
        for cmd in commands:
            await store.apply(cmd.saga_id, ReplyReceived(reply=reply_to(cmd, _script(cmd))))
        fired = await store.fire_due_timers()
        if not commands and not fired:
            return
    raise AssertionError("did not settle")


async def _children(store: SagaStore, parent: uuid.UUID) -> list[asyncpg.Record]:
    async with store.pool.acquire() as conn:
        return list(await conn.fetch(
            "SELECT id, saga_type, status FROM sagas WHERE parent_id = $1 ORDER BY id", parent))


async def test_children_start_with_the_parent_and_confirm_when_it_completes(
        store: SagaStore) -> None:
    parent = (await store.start_saga("checkout", {"order_id": "ok"})).record.saga_id
    await _settle(store)
    record = await store.get_saga(parent)
    assert record is not None and record.status == "completed"
    kids = await _children(store, parent)
    assert [k["status"] for k in kids] == ["completed", "completed"]
    history = await store.get_history(kids[0]["id"])
    events = [h.event.type for h in history]
    assert events[0] == "saga_started" and "parent_request" in events
    assert (await store.get_history(kids[0]["id"]))[0].actor == f"parent:{parent}"
    await verify_all(store, [parent, *(k["id"] for k in kids)])


async def test_a_parent_that_rolls_back_cancels_its_prepared_children(
        store: SagaStore) -> None:
    parent = (await store.start_saga("checkout", {"order_id": "no", "fail": True})
              ).record.saga_id
    await _settle(store)
    record = await store.get_saga(parent)
    assert record is not None and record.status == "compensated"
    assert record.state.steps["east"].phase.value == "cancelled"
    kids = await _children(store, parent)
    assert [k["status"] for k in kids] == ["compensated", "compensated"]
    for kid in kids:
        child = await store.get_saga(kid["id"])
        assert child is not None
        assert child.state.steps["book"].phase.value == "cancelled"
        assert child.state.steps["label"].phase.value == "compensated"
    await verify_all(store, [parent, *(k["id"] for k in kids)])


async def test_a_child_that_cannot_start_fails_its_node(store: SagaStore) -> None:
    parent = (await store.start_saga("lost", {})).record.saga_id
    await _settle(store)
    record = await store.get_saga(parent)
    assert record is not None and record.status == "compensated"
    assert "no_such_saga" in (record.state.reason or "")
    assert await _children(store, parent) == []
    await verify_all(store, [parent])


async def test_child_sagas_nest_only_as_deep_as_the_limit(store: SagaStore) -> None:
    top = (await store.start_saga("nest", {})).record.saga_id
    await _settle(store, rounds=60)
    async with store.pool.acquire() as conn:
        rows = await conn.fetch("SELECT id, parent_id, status FROM sagas")
    assert len(rows) == 1 + MAX_CHILD_DEPTH  # the top saga and one per level
    assert {r["status"] for r in rows} == {"compensated"}
    record = await store.get_saga(top)
    assert record is not None
    assert "nest" in (record.state.reason or "")
    await verify_all(store, [r["id"] for r in rows])


async def _deadlocks(conn: asyncpg.Connection) -> int:
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    value: int = await conn.fetchval(
        "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
    return value


async def test_parents_and_children_finishing_and_rolling_back_at_once_never_deadlock(
        store: SagaStore) -> None:
    """Forty parents, eighty children. While the children's replies are applied in random
    order from six connections (each child then answers its parent), an operator cancels
    every other parent (each parent then sends a cancel to its children), and two timer
    loops deliver requests and answers both ways at once."""
    async with store.pool.acquire() as conn:
        before = await _deadlocks(conn)
    parents = [(await store.start_saga("checkout", {"order_id": f"p{i}"})).record.saga_id
               for i in range(40)]
    for cmd in await outbox_commands(store):  # every reserve: the children start
        await store.apply(cmd.saga_id, ReplyReceived(reply=reply_to(cmd, Outcome.OK)))
    rng = random.Random(7)

    async def answer(lane: list[CommandEnvelope]) -> None:
        for cmd in lane:
            await store.apply(cmd.saga_id, ReplyReceived(reply=reply_to(cmd, _script(cmd))))

    async def cancel(ids: list[uuid.UUID]) -> None:
        for saga_id in ids:
            await store.apply(saga_id, OperatorRepair(verb=RepairVerb.CANCEL, actor="ops",
                                                      reason="customer changed their mind"),
                              actor="operator:ops")

    doomed = parents[1::2]
    for round_ in range(60):
        commands = await outbox_commands(store)
        rng.shuffle(commands)
        work = [answer(commands[i::6]) for i in range(6)]
        if round_ == 1:
            work += [cancel(doomed[0::2]), cancel(doomed[1::2])]
        fired = await asyncio.gather(store.fire_due_timers(limit=5),
                                     store.fire_due_timers(limit=5), *work)
        if round_ > 1 and not commands and not any(fired[:2]):
            break
    await asyncio.sleep(1.0)  # statistics are flushed when a backend goes idle
    async with store.pool.acquire() as conn:
        statuses = dict(await conn.fetch(
            "SELECT status, count(*) FROM sagas GROUP BY status"))
        assert await _deadlocks(conn) == before
    assert statuses == {"completed": 60, "cancelled": 20, "compensated": 40}, statuses
    await verify_all(store, parents)


async def test_a_slow_child_is_cancelled_when_the_parent_stops_waiting(
        store: SagaStore, ) -> None:
    parent = (await store.start_saga("checkout", {"order_id": "slow"})).record.saga_id
    clock = store._clock
    assert isinstance(clock, ManualClock)
    for cmd in await outbox_commands(store):  # reserve; the children start
        await store.apply(cmd.saga_id, ReplyReceived(reply=reply_to(cmd, Outcome.OK)))
    await store.fire_due_timers()
    held = await outbox_commands(store)  # the children's tries: never answered
    assert {c.step for c in held} == {"book"}
    clock.advance(timedelta(hours=2))  # past the children's one-hour deadline
    await _settle(store)
    record = await store.get_saga(parent)
    assert record is not None and record.status == "compensated"
    # The parent gave up waiting (its deadline, not a child's); the other child was abandoned.
    assert "deadline: no reply within 3600s" in (record.state.reason or ""), record.state.reason
    kids = await _children(store, parent)
    assert [k["status"] for k in kids] == ["compensated", "compensated"]
    for kid in kids:  # the child's try was in flight: cancelled, as possibly applied
        child = await store.get_saga(kid["id"])
        assert child is not None and child.state.steps["book"].phase.value == "cancelled"


async def test_the_api_lists_a_sagas_children_and_a_childs_parent(store: SagaStore) -> None:

    from tests.integration.test_api_support import VIEWER, app_client, bearer

    parent = (await store.start_saga("checkout", {"order_id": "api"})).record.saga_id
    await _settle(store)
    async with app_client(store) as client:
        body = (await client.get(f"/sagas/{parent}", headers=bearer(VIEWER))).json()
        assert body["parent_id"] is None
        assert sorted((c["node"], c["status"], c["saga_type"]) for c in body["children"]) == [
            ("east", "completed", "ship"), ("west", "completed", "ship")]
        kid = body["children"][0]["saga_id"]
        child = (await client.get(f"/sagas/{kid}", headers=bearer(VIEWER))).json()
        assert child["parent_id"] == str(parent) and child["children"] == []
        assert child["parent_node"] == body["children"][0]["node"]


async def test_a_prepared_child_is_not_stuck_its_waiting_parent_may_be(
        store: SagaStore) -> None:
    from coordinator.observability.stuck import list_stuck

    parent = (await store.start_saga("checkout", {"order_id": "idle"})).record.saga_id
    answered: set[uuid.UUID] = set()
    for _ in range(10):  # everything but notify is answered: the children stay prepared
        for cmd in await outbox_commands(store, delete=False):
            if cmd.step != "notify" and cmd.message_id not in answered:
                answered.add(cmd.message_id)
                await store.apply(cmd.saga_id, ReplyReceived(reply=reply_to(cmd, Outcome.OK)))
        await store.fire_due_timers()
    kids = await _children(store, parent)
    for k in kids:
        child = await store.get_saga(k["id"])
        assert child is not None
        assert (child.status, child.state.stage.value) == ("running", "prepared"), child.state
    later = store._clock() + timedelta(days=1)
    async with store.pool.acquire() as conn:
        stuck = {s.saga_id for s in await list_stuck(conn, now=later)}
    assert stuck == {parent}


async def test_the_ui_links_a_parent_and_its_children(store: SagaStore) -> None:
    import re

    from coordinator.ui import UiSettings
    from tests.integration.test_api_support import VIEWER, app_client

    parent = (await store.start_saga("checkout", {"order_id": "ui"})).record.saga_id
    await _settle(store)
    kids = await _children(store, parent)
    async with app_client(store, base_url="https://ui.test",
                          ui=UiSettings(session_secret="test-secret-1")) as client:
        login = await client.get("/ui/login")
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', login.text)
        assert csrf is not None
        signed = await client.post("/ui/login", data={"csrf_token": csrf[1], "token": VIEWER})
        assert signed.status_code == 303
        page = (await client.get(f"/ui/sagas/{parent}")).text
        assert 'id="children"' in page and 'id="parent"' not in page
        for kid in kids:
            assert f'href="/ui/sagas/{kid["id"]}"' in page
        child = (await client.get(f"/ui/sagas/{kids[0]['id']}")).text
        assert f'href="/ui/sagas/{parent}"' in child and 'id="children"' not in child
