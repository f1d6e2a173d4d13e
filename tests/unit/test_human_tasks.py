"""Human tasks in the pure engine and the test kit: opening, claiming, four eyes, delegation,
reminders and escalations on business time, timeouts, repairs, replay and the machine."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from coordinator.engine import Status, compile_saga
from coordinator.engine.decision import InvalidInput, InvalidTransition, TaskRefused
from coordinator.engine.events import TimerKind
from coordinator.engine.simulate import Simulator
from coordinator.language import DefinitionError, Saga, SagaStep
from coordinator.language.calendars import BusinessCalendar
from coordinator.language.tasks import (
    Approval,
    Escalation,
    HumanTask,
    all_of,
    any_of,
    approvers,
    quorum,
)
from coordinator.sagas.diagram import mermaid
from coordinator.testing import SagaTestEnv
from examples.expense_saga import ExpenseSaga
from participant_sdk import HandlerContext, Participant, on_cancel, on_confirm, on_try
from participant_sdk.protocol import Outcome
from tests.unit.tree_support import check_moves

EXPENSE = {"expense_id": "x-1", "employee": "erin", "manager": "mia", "amount_cents": 12_000}
MONDAY = datetime(2026, 3, 2, 9, tzinfo=UTC)


class In(BaseModel):
    who: str = "mia"


class Decision(BaseModel):
    outcome: Literal["ship", "hold", "scrap"]
    note: str = ""


def one_task(*after: Any, **task: Any) -> type[Saga]:
    fields: dict[str, Any] = {"title": "Check it", "users": ("mia",)} | task

    class OneTask(Saga):
        name = "one_task"
        input_model = In
        steps = (SagaStep("book", "desk", "book", compensable=True),
                 HumanTask("check", **fields), *after)

    return OneTask


def started(saga: type[Saga], **start: Any) -> tuple[Simulator, str]:
    sim = Simulator(compile_saga(saga), now=MONDAY)
    sim.start({"who": "mia"}, started_by=start.get("by", "sam"))
    sim.reply(Outcome.OK)
    return sim, next(iter(sim.tasks))


def test_a_task_opens_waits_and_its_form_becomes_the_result() -> None:
    sim, tid = started(one_task(form=Decision, reject=("scrap",)))
    assert sim.current.steps["check"].phase.value == "waiting"
    assert sim.tasks[tid]["state"] == "open"
    sim.act(tid, "claim", "mia")
    sim.act(tid, "complete", "mia", data={"outcome": "hold", "note": "later"})
    assert sim.current.status is Status.COMPLETED
    assert sim.current.steps["check"].result == {"outcome": "hold", "note": "later"}
    assert [c.change for c in sim.task_changes] == ["created", "claimed", "completed"]
    assert sim.replayed() == sim.current


def test_a_rejection_rolls_the_saga_back() -> None:
    sim, tid = started(one_task(form=Decision, reject=("scrap",)))
    sim.act(tid, "claim", "mia")
    sim.act(tid, "complete", "mia", data={"outcome": "scrap"})
    assert sim.current.status is Status.COMPENSATING
    assert sim.last().phase.value == "compensate"
    assert sim.tasks[tid]["state"] == "rejected"


@pytest.mark.parametrize(("who", "action", "kwargs", "code"), [
    ("max", "claim", {}, "not_candidate"),
    ("mia", "complete", {"data": {"outcome": "approve"}}, "not_assignee"),
    ("max", "unclaim", {}, "not_assignee"),
    ("mia", "comment", {"comment": " "}, "bad_request"),
])
def test_who_may_do_what_is_decided_by_the_engine(who: str, action: str,
                                                  kwargs: dict[str, Any], code: str) -> None:
    sim, tid = started(one_task())
    with pytest.raises(TaskRefused) as refused:
        sim.act(tid, action, who, **kwargs)
    assert refused.value.code == code


def test_a_claimed_task_names_its_holder_and_an_admin_may_take_over() -> None:
    sim, tid = started(one_task(groups=("ops",)))
    sim.act(tid, "claim", "olga", groups=["ops"])
    with pytest.raises(TaskRefused, match="claimed by olga"):
        sim.act(tid, "claim", "oscar", groups=["ops"])
    sim.act(tid, "reassign", "root", admin=True, to_user="oscar")
    sim.act(tid, "complete", "oscar", data={"outcome": "approve"})
    assert sim.current.status is Status.COMPLETED


def test_a_form_that_does_not_validate_is_refused() -> None:
    sim, tid = started(one_task())
    sim.act(tid, "claim", "mia")
    with pytest.raises(InvalidInput, match="outcome"):
        sim.act(tid, "complete", "mia", data={"outcome": "perhaps"})


def test_delegation_comes_back_to_the_owner_when_asked() -> None:
    sim, tid = started(one_task())
    sim.act(tid, "claim", "mia")
    sim.act(tid, "delegate", "mia", to_user="dan", return_to_owner=True)
    sim.act(tid, "complete", "dan", data={"outcome": "approve", "comment": "looks fine"})
    task = sim.tasks[tid]
    assert (task["state"], task["assignee"], task["delegation"]) == ("open", "mia", "resolved")
    assert task["proposal"] == {"outcome": "approve", "comment": "looks fine"}
    sim.act(tid, "complete", "mia", data=task["proposal"])
    assert sim.current.status is Status.COMPLETED
    assert sim.tasks[tid]["completed_by"] == "mia"


def test_reminders_escalations_and_the_due_time_run_on_business_time() -> None:
    saga = one_task(due=timedelta(days=2), calendar=BusinessCalendar(), timezone="UTC",
                    remind_after=timedelta(hours=4), remind_every=timedelta(days=1),
                    max_reminders=3, escalations=(Escalation(after=timedelta(days=1),
                                                             to_groups=("leads",),
                                                             priority=90),))
    sim = Simulator(compile_saga(saga), now=datetime(2026, 3, 6, 10, tzinfo=UTC))  # Friday
    sim.start({"who": "mia"})
    sim.reply(Outcome.OK)
    tid = next(iter(sim.tasks))
    assert sim.tasks[tid]["due_at"] == "2026-03-10T10:00:00+00:00"  # Tuesday
    fired = []
    while (timer := sim.next_timer()) is not None:
        sim.fire(timer)
        fired.append((timer.kind.value, timer.due_at.isoformat()))
    assert fired == [
        ("task_reminder", "2026-03-06T14:00:00+00:00"),
        ("task_escalation", "2026-03-09T10:00:00+00:00"),  # Monday: the weekend is closed
        ("task_reminder", "2026-03-09T14:00:00+00:00"),
        ("task_reminder", "2026-03-10T14:00:00+00:00"),
    ]
    task = sim.tasks[tid]
    assert (task["reminders"], task["candidate_groups"], task["priority"]) == (3, ["leads"], 90)
    assert task["candidate_users"] == ["mia"]


def test_a_stale_task_timer_is_ignored() -> None:
    sim, tid = started(one_task(SagaStep("ship", "desk", "ship", compensable=False),
                                timeout=timedelta(hours=1)))
    timeout = sim.next_timer(TimerKind.TASK_TIMEOUT)
    assert timeout is not None
    sim.act(tid, "claim", "mia")
    sim.act(tid, "complete", "mia", data={"outcome": "approve"})
    assert sim.fire(timeout).ignored == f"stale task timer {timeout.timer_id}"


@pytest.mark.parametrize(("on_timeout", "status", "state"), [
    ("reject", Status.COMPENSATING, "expired"),
    ("fail", Status.DEAD, "expired"),
    (Approval(outcome="approve", comment="auto"), Status.COMPLETED, "completed"),
])
def test_the_outcome_on_final_timeout(on_timeout: Any, status: Status, state: str) -> None:
    sim, tid = started(one_task(timeout=timedelta(hours=8), on_timeout=on_timeout))
    sim.fire_next(TimerKind.TASK_TIMEOUT)
    assert sim.current.status is status
    assert sim.tasks[tid]["state"] == state
    assert sim.replayed() == sim.current


def test_an_operator_retry_reopens_a_task_the_saga_died_at_and_skip_decides_it() -> None:
    sim, tid = started(one_task(timeout=timedelta(hours=8), on_timeout="fail"))
    sim.fire_next(TimerKind.TASK_TIMEOUT)
    sim.repair("retry")
    reopened = [t for t in sim.tasks.values() if t["state"] == "open"]
    assert len(reopened) == 1 and reopened[0]["id"] != tid
    with pytest.raises(InvalidTransition):
        sim.repair("skip")  # a decision needs the form
    sim.repair("skip", result={"outcome": "approve", "comment": "by phone"})
    assert sim.current.status is Status.COMPLETED
    assert sim.tasks[reopened[0]["id"]]["completed_by"] == "operator:ops"


def test_a_rolled_back_or_cancelled_saga_cancels_its_open_tasks() -> None:
    sim, tid = started(one_task())
    sim.repair("cancel")
    assert sim.tasks[tid]["state"] == "cancelled"
    assert not [t for t in sim.timers.values() if t.kind.value.startswith("task_")]


def test_any_of_cancels_the_other_tasks_and_all_of_fails_at_the_first_rejection() -> None:
    class Either(Saga):
        name = "either"
        input_model = In
        steps = (any_of("who", HumanTask("a", title="A", users=("ann",)),
                        HumanTask("b", title="B", users=("bob",))),
                 all_of("both", HumanTask("c", title="C", users=("cat",)),
                        HumanTask("d", title="D", users=("dan",))))

    sim = Simulator(compile_saga(Either), now=MONDAY)
    sim.start({})
    ids = {t["node"]: t["id"] for t in sim.tasks.values()}
    sim.act(ids["b"], "claim", "bob")
    sim.act(ids["b"], "complete", "bob", data={"outcome": "approve"})
    assert sim.tasks[ids["a"]]["state"] == "cancelled"
    ids = {t["node"]: t["id"] for t in sim.tasks.values()}
    sim.act(ids["c"], "claim", "cat")
    sim.act(ids["c"], "complete", "cat", data={"outcome": "reject"})
    assert sim.tasks[ids["d"]]["state"] == "cancelled"
    assert sim.current.status is Status.COMPENSATED


@pytest.mark.parametrize(("verdicts", "statuses"), [
    ("decided", ["running", "completed"]),           # won at the first approval
    ("first_rejection", ["compensated"]),            # the first rejection is a veto
    ("all", ["running", "running", "completed"]),    # decided once all three are heard
])
def test_a_quorum_decides_as_soon_as_it_can_at_a_veto_or_after_every_verdict(
        verdicts: str, statuses: list[str]) -> None:
    class Quorum(Saga):
        name = "quorum"
        input_model = In
        steps = (quorum("q", 1, *approvers("a", 3, title="A", groups=("g",)),
                        verdicts=verdicts),)  # type: ignore[arg-type]

    sim = Simulator(compile_saga(Quorum), now=MONDAY)
    sim.start({})
    ids = {t["node"]: t["id"] for t in sim.tasks.values()}
    seen = []
    for person, node, outcome in (("p1", "a_1", "reject"), ("p2", "a_2", "approve"),
                                  ("p3", "a_3", "reject")):
        if sim.tasks[ids[node]]["state"] != "open":
            break
        sim.act(ids[node], "claim", person, groups=["g"])
        sim.act(ids[node], "complete", person, groups=["g"], data={"outcome": outcome})
        seen.append(sim.current.status.value)
    assert seen == statuses
    assert sim.replayed() == sim.current


async def test_the_kit_runs_the_expense_chain_with_four_eyes() -> None:
    env = SagaTestEnv(ExpenseSaga, [Payments()], now=MONDAY)
    run = await env.start(EXPENSE, started_by="erin")
    assert [t["node"] for t in run.tasks()] == ["manager_approval"]
    assert (await run.skip_to("reminder")).due_at == MONDAY + timedelta(hours=4)
    await run.skip_to("escalation")
    assert run.task("manager_approval")["candidate_groups"] == ["finance-leads"]
    await run.complete("manager_approval", "mia", {"outcome": "approve"})
    with pytest.raises(TaskRefused, match="four eyes"):
        await run.act("finance_1", "claim", "erin", groups=["finance"])
    await run.complete("finance_1", "fay", {"outcome": "approve"}, groups=["finance"])
    with pytest.raises(TaskRefused, match="four eyes"):
        await run.complete("finance_2", "fay", {"outcome": "approve"}, groups=["finance"])
    await run.act("finance_2", "unclaim", "fay")
    await run.complete("finance_2", "fred", {"outcome": "approve"}, groups=["finance"])
    await run.run_to_end()
    assert run.status == "completed"
    assert run.task("finance_3")["state"] == "cancelled"
    changes = [(n.node, n.change) for n in run.notifications]
    assert ("manager_approval", "reminded") in changes
    assert ("manager_approval", "escalated") in changes
    assert env.harnesses["payments"].participant.confirmed == 1


def test_declarations_are_checked_with_the_class() -> None:
    with pytest.raises(DefinitionError) as bad:
        one_task(users=(), priority=101, remind_after=timedelta(0), form=In,
                 on_timeout="ignore", timezone="Mars/Olympus",
                 escalations=(Escalation(after=timedelta(days=1)),))
    text = str(bad.value)
    for problem in ("needs candidate users or groups", "priority must be", "remind_after",
                    "no outcome field", "on_timeout must be", "unknown timezone",
                    "names no users, groups or priority"):
        assert problem in text, problem


def test_the_task_is_in_the_machine_and_the_diagram_and_moves_follow_its_edges() -> None:
    definition = compile_saga(one_task(timeout=timedelta(hours=1), four_eyes=True))
    exported = definition.to_json() if hasattr(definition, "to_json") else None
    drawing = mermaid(definition)
    assert "human task for mia; timeout 1:00:00: reject; four eyes" in drawing
    sim, tid = started(one_task(timeout=timedelta(hours=1)))
    sim.act(tid, "claim", "mia")
    sim.act(tid, "complete", "mia", data={"outcome": "approve"})
    check_moves(sim)
    del exported


class Payments(Participant):
    """The payments participant of the expense saga, in memory."""

    name = "payments"
    confirmed = 0

    @on_try("charge")
    async def hold(self, ctx: HandlerContext, body: dict[str, Any]) -> dict[str, Any]:
        return {"held": body["amount"]}

    @on_confirm("charge")
    async def capture(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        type(self).confirmed += 1

    @on_cancel("charge")
    async def release(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        return None

