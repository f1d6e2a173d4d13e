"""One behaviour suite for long-running sagas, run through the time-skipping kit
(``coordinator.testing``) and through the operator API on the real stack (worker, relay,
Kafka, SDK participants with their barrier in Postgres), so the two cannot drift apart:
signals (kept, applied once per id, refused as the API refuses them), queries, timers and
operator repairs, updates (answered, rejected, refused alike). Each case checks the status
and the participants' own effects ledger."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from pydantic import BaseModel

from coordinator.api import ApiSettings, TokenAuth, create_app
from coordinator.language import Update
from coordinator.language.nodes import Choice, Sleep, WaitForSignal
from coordinator.language.saga import RetryPolicy, Saga, SagaStep
from participant_sdk import (
    BusinessRejection,
    HandlerContext,
    Participant,
    on_action,
    on_compensate,
)
from participant_sdk.testing import MemoryTransaction
from tests.integration.behaviour_drivers import ApiDriver, Driver, KitDriver, Refused
from tests.integration.inprocess_stack import inprocess_stack
from tests.integration.test_api_support import OPERATOR, TOKENS

pytestmark = pytest.mark.integration

QUICK = RetryPolicy(max_attempts=2, initial_backoff=timedelta(milliseconds=50))
SECOND = timedelta(seconds=1)


class Empty(BaseModel):
    pass


class Confirm(BaseModel):
    by: str


class Progress(BaseModel):
    status: str
    by: str | None


def _book(name: str) -> SagaStep:
    return SagaStep(name, "desk", "book", compensable=True, retry=QUICK)


class SleepThenSignal(Saga):
    name = "sleep_then_signal"
    input_model = Empty
    steps = (_book("open"), Sleep("grace", SECOND),
             WaitForSignal("confirm", "confirmed", payload=Confirm, timeout=timedelta(seconds=30)),
             _book("close"))
    max_kept_signals_per_name = 2
    queries = {
        "progress": lambda q: Progress(status=q.status,
                                       by=(q.results.get("confirm") or {}).get("by")),
        "broken": lambda q: {"not": "a model"},
    }


class TimeoutGoesOn(Saga):
    name = "timeout_goes_on"
    input_model = Empty
    steps = (WaitForSignal("confirm", "confirmed", timeout=SECOND, on_timeout="continue"),
             Choice("late", ((lambda ctx: ctx.results["confirm"] == {"timed_out": True},
                              _book("remind")),), otherwise=_book("ship")))


class TimeoutRollsBack(Saga):
    name = "timeout_rolls_back"
    input_model = Empty
    steps = (_book("open"), WaitForSignal("confirm", "confirmed", timeout=SECOND))


class TwoConfirms(Saga):
    name = "two_confirms"
    input_model = Empty
    steps = (WaitForSignal("first", "confirmed", payload=Confirm, timeout=timedelta(seconds=30)),
             WaitForSignal("second", "confirmed", payload=Confirm, timeout=SECOND,
                           on_timeout="continue"),
             _book("close"))


class GoesDead(Saga):
    """Its last step refuses; the rollback then finds a compensation that always fails."""

    name = "goes_dead"
    input_model = Empty
    steps = (_book("open"), SagaStep("stuck", "desk", "stuck", compensable=True,
                                             compensation_retry=QUICK),
             SagaStep("refuse", "desk", "refuse", compensable=False))


class UpdatedWait(Saga):
    """Waits for ``confirmed``; the ``confirm`` update delivers it, after its validator."""

    name = "updated_wait"
    input_model = Empty
    steps = (_book("open"),
             WaitForSignal("confirm", "confirmed", payload=Confirm, timeout=timedelta(seconds=30)),
             _book("close"))
    updates = (
        Update("confirm", model=Confirm, signal="confirmed",
               validate=lambda ctx, u: u.by != "mallory" or f"{u.by} may not confirm",
               apply=lambda ctx, u: {"by": u.by}),
        Update("note", apply=lambda ctx, u: {"notes": (ctx.updates.get("note") or {}).get(
            "notes", 0) + 1}),
    )


SAGAS: list[type[Saga]] = [SleepThenSignal, TimeoutGoesOn, TimeoutRollsBack, TwoConfirms,
                           GoesDead, UpdatedWait]


async def _effect(ctx: HandlerContext, kind: str) -> None:
    if isinstance(ctx.conn, MemoryTransaction):  # the kit's harness
        await ctx.conn.insert("effects", {"saga_id": ctx.saga_id, "step": ctx.step,
                                          "kind": kind})
    else:
        await ctx.conn.execute("INSERT INTO effects (saga_id, step, kind) VALUES ($1, $2, $3)",
                               ctx.saga_id, ctx.step, kind)


class Desk(Participant):
    name = "desk"

    @on_action("book")
    async def book(self, ctx: HandlerContext, body: Empty) -> dict[str, str]:
        await _effect(ctx, "booked")
        return {"booked": ctx.step}

    @on_compensate("book")
    async def unbook(self, ctx: HandlerContext, body: Empty) -> None:
        await _effect(ctx, "unbooked")

    @on_action("stuck")
    async def stick(self, ctx: HandlerContext, body: Empty) -> None:
        await _effect(ctx, "booked")

    @on_compensate("stuck")
    async def unstick(self, ctx: HandlerContext, body: Empty) -> None:
        raise RuntimeError("the refund service is down")

    @on_action("refuse")
    async def refuse(self, ctx: HandlerContext, body: Empty) -> None:
        raise BusinessRejection("out of stock")


@pytest.fixture(params=["kit", "api"])
async def driver(request: pytest.FixtureRequest, fresh_db: str, pg_url: str,
                 kafka_bootstrap: str, topic_prefix: str) -> AsyncIterator[Driver]:
    if request.param == "kit":
        yield KitDriver(SAGAS, Desk())
        return
    async with inprocess_stack(fresh_db, pg_url, kafka_bootstrap, topic_prefix, sagas=SAGAS,
                               participants=[Desk()]) as (store, ledger):
        app = create_app(ApiSettings(), store=store, auth=TokenAuth.parse(TOKENS),
                         run_jobs=False)
        async with app.router.lifespan_context(app):
            api = ApiDriver(app, OPERATOR, ledger)
            async with api.client:
                yield api


async def test_a_signal_sent_during_the_sleep_is_kept_and_taken_after_it(driver: Driver
                                                                         ) -> None:
    saga_id = await driver.start(SleepThenSignal)
    await driver.signal(saga_id, "confirmed", {"by": "ada"})  # before the wait is reached
    assert await driver.finish(saga_id) == "completed"
    assert await driver.effects(saga_id) == [("open", "booked"), ("close", "booked")]


async def test_a_timeout_that_goes_on_takes_the_declared_path(driver: Driver) -> None:
    saga_id = await driver.start(TimeoutGoesOn)
    assert await driver.finish(saga_id) == "completed"
    assert await driver.effects(saga_id) == [("remind", "booked")]


async def test_a_timeout_that_fails_rolls_back(driver: Driver) -> None:
    saga_id = await driver.start(TimeoutRollsBack)
    assert await driver.finish(saga_id) == "compensated"
    assert await driver.effects(saga_id) == [("open", "booked"), ("open", "unbooked")]


async def test_a_signal_id_a_wait_consumed_is_not_applied_again(driver: Driver) -> None:
    saga_id = await driver.start(TwoConfirms)
    await driver.reach(saga_id, "first", "waiting")
    assert await driver.signal(saga_id, "confirmed", {"by": "ada"}, signal_id="s-1") is False
    await driver.reach(saga_id, "second", "waiting")
    assert await driver.signal(saga_id, "confirmed", {"by": "ada"}, signal_id="s-1") is True
    assert await driver.finish(saga_id) == "completed"
    results = await driver.results(saga_id)
    assert (results["first"], results["second"]) == ({"by": "ada"}, {"timed_out": True})


async def test_signals_are_refused_as_the_api_refuses_them(driver: Driver) -> None:
    saga_id = await driver.start(SleepThenSignal)
    with pytest.raises(Refused) as nosuch:
        await driver.signal(saga_id, "refund", {})
    assert nosuch.value.code == "unknown_signal"
    with pytest.raises(Refused) as bad:
        await driver.signal(saga_id, "confirmed", {"by": 7})
    assert bad.value.code == "invalid_signal_payload"
    assert await driver.signal(saga_id, "confirmed", {"by": "ada"}, signal_id="ok-1") is False
    assert await driver.finish(saga_id) == "completed"
    with pytest.raises(Refused) as late:
        await driver.signal(saga_id, "confirmed", {"by": "bob"})
    assert late.value.code == "saga_finished"
    # A late resend of an id already applied: the same answer as the first time.
    assert await driver.signal(saga_id, "confirmed", {"by": "ada"}, signal_id="ok-1") is True


async def test_queries_answer_and_refuse_as_the_api_does(driver: Driver) -> None:
    saga_id = await driver.start(SleepThenSignal)
    assert await driver.query(saga_id, "progress") == {"status": "running", "by": None}
    with pytest.raises(Refused) as unknown:
        await driver.query(saga_id, "nope")
    assert unknown.value.code == "unknown_query"
    with pytest.raises(Refused) as broken:
        await driver.query(saga_id, "broken")
    assert broken.value.code == "query_failed"
    assert "returned dict, not a pydantic model" in broken.value.message
    await driver.signal(saga_id, "confirmed", {"by": "ada"})
    assert await driver.finish(saga_id) == "completed"
    assert await driver.query(saga_id, "progress") == {"status": "completed", "by": "ada"}


async def test_an_operator_skips_a_wait_with_its_payload(driver: Driver) -> None:
    saga_id = await driver.start(SleepThenSignal)
    await driver.reach(saga_id, "confirm", "waiting")  # the sleep's timer fired
    with pytest.raises(Refused) as retry:
        await driver.repair(saga_id, "retry", "stuck?")
    assert retry.value.code == "invalid_transition"
    assert "skip ends the wait now" in retry.value.message
    with pytest.raises(Refused) as bad:
        await driver.repair(saga_id, "skip", "confirmed by phone", result={"by": 7})
    assert "not a valid 'confirmed' signal payload" in bad.value.message
    assert await driver.repair(saga_id, "skip", "confirmed by phone",
                               result={"by": "ops"}) in ("running", "completed")
    assert await driver.finish(saga_id) == "completed"
    assert (await driver.results(saga_id))["confirm"] == {"by": "ops"}
    assert await driver.effects(saga_id) == [("open", "booked"), ("close", "booked")]


async def test_an_operator_compensates_a_sleeping_saga(driver: Driver) -> None:
    saga_id = await driver.start(SleepThenSignal)
    await driver.reach(saga_id, "grace", "sleeping")
    assert await driver.repair(saga_id, "compensate", "customer called") in (
        "compensating", "compensated")
    assert await driver.finish(saga_id) == "compensated"
    assert await driver.effects(saga_id) == [("open", "booked"), ("open", "unbooked")]
    with pytest.raises(Refused) as again:
        await driver.repair(saga_id, "cancel", "too late")
    assert again.value.code == "invalid_transition"


async def test_a_dead_saga_is_retried_then_skipped_by_an_operator(driver: Driver) -> None:
    saga_id = await driver.start(GoesDead)
    assert await driver.finish(saga_id) == "dead"
    with pytest.raises(Refused) as cancel:
        await driver.repair(saga_id, "cancel", "stop it")
    assert cancel.value.code == "invalid_transition"
    assert await driver.repair(saga_id, "retry", "refund service fixed?") == "compensating"
    assert await driver.finish(saga_id) == "dead"  # it was not
    assert await driver.repair(saga_id, "skip", "refunded by hand") in (
        "compensating", "compensated")
    assert await driver.finish(saga_id) == "compensated"
    assert await driver.effects(saga_id) == [
        ("open", "booked"), ("stuck", "booked"), ("open", "unbooked")]
    with pytest.raises(Refused) as resolve:
        await driver.repair(saga_id, "resolve", "again", status="completed")
    assert resolve.value.code == "invalid_transition"


async def test_signals_past_the_bound_nobody_takes_are_refused(driver: Driver) -> None:
    saga_id = await driver.start(SleepThenSignal)  # sleeping: nothing takes a signal yet
    for n in range(2):
        assert await driver.signal(saga_id, "confirmed", {"by": f"s{n}"}) is False
    with pytest.raises(Refused) as third:
        await driver.signal(saga_id, "confirmed", {"by": "s2"})
    assert third.value.code == "too_many_signals"
    assert "max_kept_signals_per_name=2" in third.value.message
    assert await driver.finish(saga_id) == "completed"
    assert (await driver.results(saga_id))["confirm"] == {"by": "s0"}  # the first one kept


async def test_signal_with_start_starts_once_and_delivers_once(driver: Driver) -> None:
    saga_id = uuid.uuid4()
    with pytest.raises(Refused) as bad:  # refused: nothing starts
        await driver.signal_with_start(SleepThenSignal, saga_id, "confirmed", {"by": 7},
                                       signal_id="s-0")
    assert bad.value.code == "invalid_signal_payload"
    assert await driver.signal_with_start(SleepThenSignal, saga_id, "confirmed",
                                          {"by": "ada"}, signal_id="s-1") == (True, False)
    assert await driver.signal_with_start(SleepThenSignal, saga_id, "confirmed",
                                          {"by": "ada"}, signal_id="s-1") == (False, True)
    assert await driver.finish(saga_id) == "completed"
    assert (await driver.results(saga_id))["confirm"] == {"by": "ada"}
    assert await driver.effects(saga_id) == [("open", "booked"), ("close", "booked")]


async def test_an_update_answers_with_its_result_and_wakes_the_wait(driver: Driver) -> None:
    saga_id = await driver.start(UpdatedWait)
    await driver.reach(saga_id, "confirm", "waiting")
    assert await driver.update(saga_id, "note", {}, update_id="n-1") == (
        "accepted", {"notes": 1})
    assert await driver.update(saga_id, "note", {}, update_id="n-2") == (
        "accepted", {"notes": 2})
    assert await driver.update(saga_id, "confirm", {"by": "ada"}, update_id="c-1") == (
        "accepted", {"by": "ada"})
    assert await driver.finish(saga_id) == "completed"
    assert (await driver.results(saga_id))["confirm"] == {"by": "ada"}
    assert await driver.effects(saga_id) == [("open", "booked"), ("close", "booked")]


async def test_updates_are_rejected_and_refused_as_the_api_does(driver: Driver) -> None:
    saga_id = await driver.start(UpdatedWait)
    await driver.reach(saga_id, "confirm", "waiting")
    with pytest.raises(Refused) as nosuch:
        await driver.update(saga_id, "refund", {}, update_id="r-1")
    assert nosuch.value.code == "unknown_update"
    with pytest.raises(Refused) as bad:
        await driver.update(saga_id, "confirm", {"by": 7}, update_id="c-0")
    assert bad.value.code == "invalid_update_payload"
    no = ("rejected", "mallory may not confirm")
    assert await driver.update(saga_id, "confirm", {"by": "mallory"}, update_id="c-1") == no
    # The same id: the stored answer, whatever the payload (a new id to try again).
    assert await driver.update(saga_id, "confirm", {"by": "ada"}, update_id="c-1") == no
    await driver.reach(saga_id, "confirm", "waiting")  # a rejection woke nothing
    with pytest.raises(Refused) as reused:
        await driver.update(saga_id, "note", {}, update_id="c-1")
    assert reused.value.code == "update_id_conflict"
    assert await driver.update(saga_id, "confirm", {"by": "ada"}, update_id="c-2") == (
        "accepted", {"by": "ada"})
    assert await driver.finish(saga_id) == "completed"
    with pytest.raises(Refused) as late:
        await driver.update(saga_id, "note", {}, update_id="n-9")
    assert late.value.code == "saga_finished"
    assert await driver.update(saga_id, "confirm", {"by": "ada"}, update_id="c-2") == (
        "accepted", {"by": "ada"})  # a late resend: the same answer
