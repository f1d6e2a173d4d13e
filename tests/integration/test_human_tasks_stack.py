"""Human tasks on the whole stack (worker, relay, Kafka, an SDK participant): a reminder and an
escalation published on ``{prefix}.tasks`` on time, in real seconds; and a process SIGKILLed
between a completion's commit and the publishing of the saga's next command: the saga goes on
after the lease, nothing lost and nothing sent twice."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer

from coordinator.store import SagaStore
from examples.expense_saga import ExpenseInput
from participant_sdk import HandlerContext, Participant, on_cancel, on_confirm, on_try
from participant_sdk.task_events import TaskEvent, tasks_topic
from tests.integration.inprocess_stack import inprocess_stack
from tests.integration.tasks_support import QuickExpense
from tests.integration.test_store_support import verify_all
from tests.integration.test_worker_support import create_topics

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXPENSE = ExpenseInput(expense_id="x-9", employee="erin", manager="mia", amount_cents=500)
FINANCE = ["finance"]

#: Completes a task with a store whose after-commit publisher SIGKILLs its own process: the
#: commit happened, the leased commands were never sent.
KILLER = """
import asyncio, os, signal, sys
from datetime import timedelta
from coordinator.sagas.registry import SagaRegistry
from coordinator.store import SagaStore
from tests.integration.tasks_support import QuickExpense

async def main(dsn, prefix, task_id):
    registry = SagaRegistry(topic_prefix=prefix, sagas=[QuickExpense])
    store = await SagaStore.open(dsn, registry, max_size=1)
    def die(rows):  # a command leased: the saga's next step, committed, not yet sent
        if any(r.message.topic.endswith(".commands") for r in rows):
            os.kill(os.getpid(), signal.SIGKILL)
    store.publish_own_rows(die, lease=timedelta(seconds=2))
    await store.act_on_task(task_id, "claim", "fred", groups=["finance"])
    await store.act_on_task(task_id, "complete", "fred", data={"outcome": "approve"})
    print("not killed", flush=True)

asyncio.run(main(*sys.argv[1:]))
"""


class Payments(Participant):
    """Holds, captures or releases the expense's money; every call leaves an effect row."""

    name = "payments"

    async def _effect(self, ctx: HandlerContext, kind: str) -> None:
        await ctx.conn.execute("INSERT INTO effects (saga_id, step, kind) VALUES ($1, $2, $3)",
                               ctx.saga_id, ctx.step, kind)

    @on_try("charge")
    async def hold(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        await self._effect(ctx, "held")

    @on_confirm("charge")
    async def capture(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        await self._effect(ctx, "captured")

    @on_cancel("charge")
    async def release(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        await self._effect(ctx, "released")


@pytest.fixture
async def stack(fresh_db: str, pg_url: str, kafka_bootstrap: str, topic_prefix: str
                ) -> AsyncIterator[tuple[SagaStore, asyncpg.Connection]]:
    await create_topics(kafka_bootstrap, {tasks_topic(topic_prefix): 1})
    async with inprocess_stack(fresh_db, pg_url, kafka_bootstrap, topic_prefix,
                               sagas=[QuickExpense], participants=[Payments()]) as running:
        yield running


async def until(check: Any, within: float = 30) -> Any:
    deadline = time.monotonic() + within
    while not (found := await check()):
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)
    return found


async def test_the_chain_runs_with_reminders_on_time_and_survives_a_kill_after_commit(
        stack: tuple[SagaStore, asyncpg.Connection], fresh_db: str, kafka_bootstrap: str,
        topic_prefix: str) -> None:
    store, effects = stack
    consumer = AIOKafkaConsumer(tasks_topic(topic_prefix), bootstrap_servers=kafka_bootstrap,
                                auto_offset_reset="earliest", group_id=None)
    await consumer.start()
    events: list[tuple[TaskEvent, float]] = []

    async def listen() -> None:
        async for record in consumer:
            assert record.value is not None
            events.append((TaskEvent.model_validate_json(record.value), time.time()))

    listening = asyncio.create_task(listen())
    try:
        saga_id = (await store.start_saga("quick_expense", EXPENSE.model_dump(),
                                          started_by="erin")).record.saga_id

        async def manager_task() -> dict[str, Any] | None:
            return next((t for t in await store.saga_tasks(saga_id)
                         if t["node"] == "manager_approval"), None)

        manager = await until(manager_task)
        escalated = await until(lambda: _seen(events, "escalated"), within=20)
        created = _event(events, "created")
        reminded = _event(events, "reminded")
        # Due after 1 s and 2 s; fired by the worker's timer loop and published through the
        # outbox: on time means not early, and late by at most a few seconds on this machine.
        for event, due in ((reminded, 1.0), (escalated, 2.0)):
            lateness = (event[0].at - created[0].at).total_seconds() - due
            assert 0 <= lateness < 3, (event[0].change, lateness)
            assert event[1] - event[0].at.timestamp() < 3  # reached the consumer soon after
        assert escalated[0].task.candidate_groups == ["finance-leads"]

        await store.act_on_task(manager["id"], "claim", "mia")
        await store.act_on_task(manager["id"], "complete", "mia", data={"outcome": "approve"})
        finance = await until(lambda: _finance_tasks(store, saga_id))
        await store.act_on_task(finance["finance_1"], "claim", "fay", groups=FINANCE)
        await store.act_on_task(finance["finance_1"], "complete", "fay",
                                data={"outcome": "approve"})

        killer = await asyncio.create_subprocess_exec(
            sys.executable, "-c", KILLER, fresh_db, topic_prefix, finance["finance_2"],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(killer.communicate(), 60)
        assert killer.returncode == -9, (killer.returncode, out, err)
        task = await store.get_task(finance["finance_2"])
        assert task is not None and task["state"] == "completed"  # the commit happened

        async def finished() -> bool:
            saga = await store.get_saga(saga_id)
            return saga is not None and saga.status == "completed"

        await until(finished)  # the relay sent the confirm once the lease was over
        kinds = [r["kind"] for r in await effects.fetch(
            "SELECT kind FROM effects WHERE saga_id = $1 ORDER BY id", saga_id)]
        assert kinds == ["held", "captured"]  # nothing lost, nothing twice
        third = await store.get_task(finance["finance_3"])
        assert third is not None and third["state"] == "cancelled"
        await until(lambda: _seen(events, "cancelled"))
        await verify_all(store, [saga_id])
    finally:
        listening.cancel()
        await consumer.stop()


def _event(events: list[tuple[TaskEvent, float]], change: str) -> tuple[TaskEvent, float]:
    return next(e for e in events if e[0].change == change)


async def _seen(events: list[tuple[TaskEvent, float]], change: str
                ) -> tuple[TaskEvent, float] | None:
    return next((e for e in events if e[0].change == change), None)


async def _finance_tasks(store: SagaStore, saga_id: Any) -> dict[str, str] | None:
    found = {t["node"]: t["id"] for t in await store.saga_tasks(saga_id)
             if t["node"].startswith("finance_")}
    return found if len(found) == 3 else None


