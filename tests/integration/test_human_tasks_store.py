"""Human tasks on real Postgres: the tasks table and its notifications written with the
decision, inboxes, the four-eyes chain, and the races (claims, completion against escalation
and timeout)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from coordinator.engine import ReplyReceived, Status
from coordinator.engine.decision import InvalidInput, TaskRefused
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from coordinator.store.task_queries import TaskFilter
from examples.expense_saga import ExpenseSaga
from participant_sdk.protocol import HEADER_MESSAGE_KIND, Outcome, decode_command, make_reply
from participant_sdk.task_events import KIND_TASK_EVENT, TaskEvent
from tests.integration.test_store_support import ManualClock, migrated

pytestmark = pytest.mark.integration

EXPENSE = {"expense_id": "x-1", "employee": "erin", "manager": "mia", "amount_cents": 12_000}
FINANCE = ["finance"]


@pytest.fixture
async def store(fresh_db: str, topic_prefix: str) -> AsyncIterator[SagaStore]:
    await migrated(fresh_db)
    registry = SagaRegistry(topic_prefix=topic_prefix, sagas=[ExpenseSaga])
    clock = ManualClock()
    clock.now = clock.now.replace(month=3, day=2, hour=9)  # a Monday in Berlin
    async with await SagaStore.open(fresh_db, registry, max_size=8, clock=clock) as s:
        yield s


async def outbox(store: SagaStore) -> list[tuple[str, dict[str, str], bytes]]:
    """Every outbox row (topic, headers, payload), taken out of the outbox."""
    async with store.pool.acquire() as conn:
        rows = await conn.fetch("SELECT id, topic, headers, payload FROM sagaflow_outbox "
                                "ORDER BY id")
        await conn.execute("DELETE FROM sagaflow_outbox")
    return [(r["topic"], json.loads(r["headers"]) if isinstance(r["headers"], str)
             else dict(r["headers"] or {}), bytes(r["payload"])) for r in rows]


def notifications(rows: list[tuple[str, dict[str, str], bytes]]) -> list[dict[str, Any]]:
    """The task notifications among ``rows``, each checked against the published model."""
    found = [p for _, h, p in rows if h.get(HEADER_MESSAGE_KIND) == KIND_TASK_EVENT]
    for payload in found:
        TaskEvent.model_validate_json(payload)
    return [json.loads(p) for p in found]


async def answer_commands(store: SagaStore, saga_id: UUID, outcome: Outcome = Outcome.OK
                          ) -> list[dict[str, Any]]:
    """Reply to every command in the outbox; the task notifications found meanwhile."""
    rows = await outbox(store)
    for _, h, payload in rows:
        if h.get(HEADER_MESSAGE_KIND) == KIND_TASK_EVENT:
            continue
        await store.apply(saga_id, ReplyReceived(reply=make_reply(decode_command(payload),
                                                                  outcome)))
    return notifications(rows)


async def started(store: SagaStore) -> UUID:
    result = await store.start_saga("expense", EXPENSE, started_by="erin")
    saga_id = result.record.saga_id
    await answer_commands(store, saga_id)  # the money is held
    return saga_id


async def task_of(store: SagaStore, saga_id: UUID, node: str) -> dict[str, Any]:
    return next(t for t in await store.saga_tasks(saga_id) if t["node"] == node)


async def test_a_task_opens_with_the_decision_and_is_published(store: SagaStore,
                                                               topic_prefix: str) -> None:
    result = await store.start_saga("expense", EXPENSE, started_by="erin")
    saga_id = result.record.saga_id
    rows = await outbox(store)
    assert [t for t, *_ in rows] == [f"{topic_prefix}.payments.commands"]
    await store.apply(saga_id, ReplyReceived(reply=make_reply(decode_command(rows[0][2]),
                                                              Outcome.OK)))
    task = await task_of(store, saga_id, "manager_approval")
    assert task["state"] == "open"
    assert task["candidate_users"] == ["mia"]
    assert task["title"] == "Expense x-1: 120.00 EUR for erin"
    assert task["excluded_users"] == ["erin"]
    assert task["form_schema"]["properties"]["outcome"]["enum"] == ["approve", "reject"]
    # Due in two business days, Berlin time: Monday 10:00 -> Wednesday 10:00.
    assert task["due_at"].isoformat() == "2026-03-04T09:00:00+00:00"
    (note,) = [(t, json.loads(p)) for t, h, p in await outbox(store)
               if h.get(HEADER_MESSAGE_KIND) == KIND_TASK_EVENT]
    assert note[0] == f"{topic_prefix}.tasks"
    assert note[1]["change"] == "created" and note[1]["task_id"] == task["id"]
    assert (await store.verify(saga_id)).ok


async def test_the_chain_runs_with_four_eyes_and_a_rejection_releases_the_money(
        store: SagaStore) -> None:
    saga_id = await started(store)
    manager = await task_of(store, saga_id, "manager_approval")
    with pytest.raises(TaskRefused) as refused:
        await store.act_on_task(manager["id"], "claim", "max", groups=FINANCE)
    assert refused.value.code == "not_candidate"
    await store.act_on_task(manager["id"], "claim", "mia")
    with pytest.raises(InvalidInput):
        await store.act_on_task(manager["id"], "complete", "mia", data={"outcome": "maybe"})
    await store.act_on_task(manager["id"], "complete", "mia", data={"outcome": "approve"})

    finance = [t for t in await store.saga_tasks(saga_id) if t["node"].startswith("finance_")]
    assert len(finance) == 3 and all(t["excluded_users"] == ["erin", "mia"] for t in finance)
    inbox = await store.list_tasks(TaskFilter(user="fay", groups=FINANCE))
    assert {t["id"] for t in inbox} == {t["id"] for t in finance}
    assert await store.list_tasks(TaskFilter(user="erin", groups=FINANCE)) == []

    by_node = {t["node"]: t["id"] for t in finance}
    first, second, third = (by_node[f"finance_{i}"] for i in (1, 2, 3))
    await store.act_on_task(first, "claim", "fay", groups=FINANCE)
    await store.act_on_task(first, "complete", "fay", groups=FINANCE,
                            data={"outcome": "approve", "cost_center": "cc-7"})
    await store.act_on_task(second, "claim", "fay", groups=FINANCE)
    with pytest.raises(TaskRefused) as refused:  # the same person twice in one chain
        await store.act_on_task(second, "complete", "fay", data={"outcome": "approve"})
    assert refused.value.code == "four_eyes"
    await store.act_on_task(second, "unclaim", "fay")
    await store.act_on_task(second, "claim", "fred", groups=FINANCE)
    await store.act_on_task(second, "complete", "fred", data={"outcome": "reject",
                                                               "comment": "no receipt"})
    await store.act_on_task(third, "claim", "flo", groups=FINANCE)
    await store.act_on_task(third, "complete", "flo", data={"outcome": "reject"})

    rows = await outbox(store)
    cancels = [decode_command(p) for _, h, p in rows
               if h.get(HEADER_MESSAGE_KIND) != KIND_TASK_EVENT]
    assert [(c.step, c.phase.value) for c in cancels] == [("hold_money", "cancel")]
    assert [(n["change"], n["actor"]) for n in notifications(rows)][-3:] == [
        ("rejected", "fred"), ("claimed", "flo"), ("rejected", "flo")]
    history = [(h.actor, json.dumps(h.annotation)) for h in await store.get_history(saga_id)]
    assert ("task:fred", '["finance_2: rejected by fred (reject)"]') in history
    assert any(actor == "task:flo" and "finance_quorum" in note for actor, note in history)
    assert (await store.verify(saga_id)).ok


async def test_many_claims_of_one_task_exactly_one_wins(store: SagaStore) -> None:
    saga_id = await started(store)
    manager = await task_of(store, saga_id, "manager_approval")
    await store.act_on_task(manager["id"], "claim", "mia")
    await store.act_on_task(manager["id"], "complete", "mia", data={"outcome": "approve"})
    task = await task_of(store, saga_id, "finance_2")
    people = [f"f{i}" for i in range(12)]
    outcomes = await asyncio.gather(
        *(store.act_on_task(task["id"], "claim", p, groups=FINANCE) for p in people),
        return_exceptions=True)
    winners = [p for p, o in zip(people, outcomes, strict=True)
               if not isinstance(o, BaseException)]
    assert len(winners) == 1, outcomes
    losers = [o for o in outcomes if isinstance(o, BaseException)]
    assert all(isinstance(o, TaskRefused) and o.code == "claimed"
               and f"claimed by {winners[0]}" in str(o) for o in losers)
    assert (await store.get_task(task["id"]))["assignee"] == winners[0]  # type: ignore[index]


@pytest.mark.parametrize("first", ["timers", "completion", "together"])
async def test_a_completion_racing_its_escalation_and_timeout_has_one_outcome(
        store: SagaStore, first: str) -> None:
    saga_id = await started(store)
    manager = await task_of(store, saga_id, "manager_approval")
    await store.act_on_task(manager["id"], "claim", "mia")
    store._clock.advance(timedelta(days=10))  # type: ignore[attr-defined]
    complete = store.act_on_task(manager["id"], "complete", "mia", data={"outcome": "approve"})
    if first == "timers":
        fired = await store.fire_due_timers()
        completed: Any = await asyncio.gather(complete, return_exceptions=True)
        completed = completed[0]
    elif first == "completion":
        completed = await complete
        fired = await store.fire_due_timers()
    else:
        fired, completed = await asyncio.gather(store.fire_due_timers(), complete,
                                                return_exceptions=True)
    await store.fire_due_timers()
    task = await store.get_task(manager["id"])
    saga = await store.get_saga(saga_id)
    assert task is not None and saga is not None
    if first == "timers":
        assert fired >= 2  # the reminder, the escalation and the timeout
    if first == "completion":
        assert fired == 0  # its timers went with it
    if isinstance(completed, BaseException):  # the timeout won: expired, money released
        assert first != "completion"
        assert isinstance(completed, TaskRefused) and completed.code == "closed", completed
        assert task["state"] == "expired" and task["completed_by"] is None
        assert saga.status == Status.COMPENSATING.value
    else:  # the completion won: the escalation and the timeout went stale
        assert first != "timers"
        assert task["state"] == "completed" and task["completed_by"] == "mia"
        assert saga.status == Status.RUNNING.value
    assert (await store.verify(saga_id)).ok


async def test_verify_checks_the_tasks_table_against_the_snapshot(store: SagaStore) -> None:
    saga_id = await started(store)
    manager = await task_of(store, saga_id, "manager_approval")
    await store.act_on_task(manager["id"], "claim", "mia")
    assert (await store.verify(saga_id)).ok
    async with store.pool.acquire() as conn:
        await conn.execute("UPDATE human_tasks SET assignee = 'eve' WHERE id = $1",
                           manager["id"])
    result = await store.verify(saga_id)
    assert not result.ok
    assert result.differences == [
        f"tasks.{manager['id']}.assignee: table 'eve' != snapshot 'mia'"]
