"""``coordinator.testing``: a 30-day sleep and a 3-day signal timeout in milliseconds, on the
same core as production, against the participant's real handlers (in-memory barrier)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from pydantic import BaseModel

import coordinator.testing as kit
from coordinator.language.nodes import ChildSaga, Sleep, WaitForSignal
from coordinator.language.saga import Saga, SagaStep
from coordinator.language.steps import DefinitionError
from coordinator.store import InvalidSignalPayload, TooManySignals
from coordinator.testing import SagaTestEnv
from participant_sdk import BusinessRejection, HandlerContext, Participant, on_action, on_compensate


class Account(BaseModel):
    account: str


class Converted(BaseModel):
    plan: str


class Progress(BaseModel):
    status: str
    plan: str | None


class Trial(Saga):
    name = "trial"
    input_model = Account
    steps = (
        SagaStep("open", "accounts", "open", compensable=True),
        Sleep("grace", timedelta(days=30)),
        WaitForSignal("choice", "converted", payload=Converted, timeout=timedelta(days=3)),
        SagaStep("bill", "accounts", "bill", compensable=True,
                 payload=lambda ctx: {"account": ctx.input.account}),
    )
    queries = {"progress": lambda q: Progress(
        status=q.status, plan=(q.results.get("choice") or {}).get("plan"))}


class Accounts(Participant):
    name = "accounts"

    @on_action("open")
    async def open(self, ctx: HandlerContext, body: Account) -> dict[str, str]:
        await ctx.conn.insert("ledger", {"step": ctx.step, "what": "open"})
        return {"opened": body.account}

    @on_compensate("open")
    async def close(self, ctx: HandlerContext, body: Account) -> None:
        await ctx.conn.insert("ledger", {"step": ctx.step, "what": "close"})

    @on_action("bill")
    async def bill(self, ctx: HandlerContext, body: Account) -> None:
        await ctx.conn.insert("ledger", {"step": ctx.step, "what": "bill"})

    @on_compensate("bill")
    async def refund(self, ctx: HandlerContext, body: Account) -> None:
        await ctx.conn.insert("ledger", {"step": ctx.step, "what": "refund"})


def _ledger(env: SagaTestEnv) -> list[str]:
    return [r["what"] for r in env.harnesses["accounts"].tables.get("ledger", [])]


async def test_thirty_days_of_sleep_and_a_signal_take_milliseconds() -> None:
    env = SagaTestEnv(Trial, [Accounts()])
    began = time.monotonic()
    run = await env.start(Account(account="a-1"))
    assert run.state.steps["grace"].phase.value == "sleeping"
    assert await run.skip()  # jump to the wake-up
    assert run.now == env.now + timedelta(days=30)
    assert run.query("progress", Progress) == Progress(status="running", plan=None)
    await run.signal("converted", Converted(plan="pro"))
    assert run.status == "completed"
    assert run.query("progress", Progress).plan == "pro"
    assert _ledger(env) == ["open", "bill"]
    assert time.monotonic() - began < 1.0


async def test_a_three_day_signal_timeout_rolls_back_at_once() -> None:
    env = SagaTestEnv(Trial, [Accounts()])
    run = await env.start({"account": "a-2"})
    assert await run.run_to_end() == "compensated"
    assert run.now == env.now + timedelta(days=33)
    assert _ledger(env) == ["open", "close"]


async def test_skip_by_a_duration_fires_only_what_is_due() -> None:
    env = SagaTestEnv(Trial, [Accounts()])
    run = await env.start({"account": "a-3"})
    await run.skip(timedelta(days=29))
    assert run.state.steps["grace"].phase.value == "sleeping"
    await run.skip(timedelta(days=2))
    assert run.state.steps["choice"].phase.value == "waiting"


async def test_signals_are_validated_as_the_api_does_and_participants_must_be_given() -> None:
    run = await SagaTestEnv(Trial, [Accounts()]).start({"account": "a-4"})
    with pytest.raises(InvalidSignalPayload):
        await run.signal("converted", {"plan": 7})
    with pytest.raises(ValueError, match="participants not given: accounts"):
        SagaTestEnv(Trial, [])
    assert kit.__all__ == ["SagaRun", "SagaTestEnv"]


class Delivery(Saga):
    """A child saga: book a courier, wait a day for the pick-up, then confirm."""

    name = "delivery"
    input_model = Account
    steps = (
        SagaStep("book", "accounts", "open", compensable=True),
        Sleep("pickup", timedelta(days=1)),
    )


class Order(Saga):
    name = "order"
    input_model = Account
    steps = (
        ChildSaga("ship", Delivery, deadline=timedelta(days=2)),
        SagaStep("bill", "accounts", "bill", compensable=True,
                 payload=lambda ctx: {"account": ctx.input.account}),
    )


class ByName(Saga):
    name = "by_name"
    input_model = Account
    steps = (ChildSaga("ship", "delivery", deadline=timedelta(days=2)),
             SagaStep("bill", "accounts", "bill", compensable=True))


async def test_a_child_saga_runs_in_the_kit_its_sleep_skipped_with_the_parent() -> None:
    env = SagaTestEnv(Order, [Accounts()])  # Delivery found through the ChildSaga node
    run = await env.start({"account": "a-5"})
    child = run.child("ship")
    assert child.state.steps["pickup"].phase.value == "sleeping"
    assert run.state.steps["ship"].phase.value == "trying"
    assert await run.run_to_end() == "completed"
    assert run.child("ship").status == "completed"  # confirmed once the parent succeeded
    assert run.now == env.now + timedelta(days=1)
    assert _ledger(env) == ["open", "bill"]
    for sim in run.family.sagas.values():
        assert sim.replayed() == sim.current


async def test_a_parent_rolling_back_cancels_its_child_in_the_kit() -> None:
    class Refusing(Accounts):
        @on_action("bill")
        async def bill(self, ctx: HandlerContext, body: Account) -> None:
            raise BusinessRejection("card declined")

    env = SagaTestEnv(Order, [Refusing()])
    run = await env.start({"account": "a-6"})
    assert await run.run_to_end() == "compensated"
    assert run.child("ship").status == "compensated"
    assert _ledger(env) == ["open", "close"]  # the child's own rollback ran


async def test_a_child_type_missing_from_the_env_fails_its_node() -> None:
    run = await SagaTestEnv(ByName, [Accounts()]).start({"account": "a-7"})
    assert run.status == "compensated"
    assert "pass its class as children=" in str(run.state.steps["ship"].last_error)
    run = await SagaTestEnv(ByName, [Accounts()], children=[Delivery]).start({"account": "a-8"})
    assert await run.run_to_end() == "completed"


class Notes(Saga):
    name = "notes"
    input_model = Account
    max_kept_signals = 3
    max_kept_signals_per_name = 2
    steps = (Sleep("grace", timedelta(days=1)),
             WaitForSignal("first", "a", timeout=timedelta(days=1), on_timeout="continue"),
             WaitForSignal("second", "c", timeout=timedelta(days=1), on_timeout="continue"),
             WaitForSignal("third", "b", timeout=timedelta(days=1), on_timeout="continue"))


async def test_kept_signals_are_bounded_per_name_and_per_saga() -> None:
    run = await SagaTestEnv(Notes, []).start(Account(account="a-1"))
    await run.signal("a")
    await run.signal("a")
    with pytest.raises(TooManySignals, match="max_kept_signals_per_name=2"):
        await run.signal("a")
    await run.signal("b")
    with pytest.raises(TooManySignals, match="max_kept_signals=3"):
        await run.signal("b")
    assert len(run.state.signals) == 3  # nothing refused was kept
    assert await run.skip()  # the sleep ends: "first" takes an "a" at once
    await run.signal("b")  # room again
    assert [s.name for s in run.state.signals] == ["a", "b", "b"]


def test_the_bounds_must_be_positive_ints() -> None:
    with pytest.raises(DefinitionError, match="max_kept_signals_per_name"):
        type("Bad", (Saga,), {"name": "bad", "input_model": Account, "steps": Notes.steps,
                              "max_kept_signals_per_name": 0})
