"""Updates (``language.updates``) on the pure core and the test kit: accepted with the
handler's result, rejected with the validator's reason and nothing applied, an id answered
once, a finished saga refusing, unknown names and bad payloads refused, replay."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from coordinator.engine import SagaState, replay
from coordinator.language import Update, UpdateRejected
from coordinator.language.nodes import WaitForSignal
from coordinator.language.saga import Saga, SagaStep
from coordinator.language.steps import DefinitionError
from coordinator.store import (
    InvalidUpdatePayload,
    SagaFinished,
    UnknownUpdate,
    UpdateBroken,
    UpdateIdConflict,
    UpdateNotFound,
)
from coordinator.testing import SagaRun, SagaTestEnv
from participant_sdk import HandlerContext, Participant, on_action, on_compensate


class Order(BaseModel):
    address: str


class AddressChange(BaseModel):
    address: str


class Approval(BaseModel):
    by: str


def _address_ok(ctx: Any, change: AddressChange) -> str | None:
    if "ship" in ctx.results:
        return "the order has shipped"
    if not change.address.strip():
        raise UpdateRejected("the address is empty")
    return None


def _current(ctx: Any) -> str:
    latest = ctx.updates.get("change_address")
    return str(latest["address"] if latest else ctx.input.address)


class Shipping(Saga):
    name = "update_shipping"
    input_model = Order
    steps = (
        SagaStep("reserve", "desk", "reserve", compensable=True),
        WaitForSignal("approve", "approved", payload=Approval, timeout=timedelta(days=2)),
        SagaStep("ship", "desk", "ship", compensable=False,
                 payload=lambda ctx: {"address": _current(ctx)}),
    )
    updates = (
        Update("change_address", model=AddressChange, validate=_address_ok,
               apply=lambda ctx, u: {"address": u.address, "previous": _current(ctx),
                                     "at": ctx.now.isoformat()}),
        Update("approve", model=Approval, signal="approved",
               validate=lambda ctx, u: u.by != "mallory" or "mallory may not approve",
               apply=lambda ctx, u: {"by": u.by}),
        Update("broken", apply=lambda ctx, u: 1 / 0),
    )


class Desk(Participant):
    name = "desk"

    @on_action("reserve")
    async def reserve(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        await ctx.conn.insert("ledger", {"step": ctx.step, "body": body})

    @on_compensate("reserve")
    async def unreserve(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        await ctx.conn.insert("ledger", {"step": "unreserve", "body": body})

    @on_action("ship")
    async def ship(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        await ctx.conn.insert("ledger", {"step": ctx.step, "body": body})


async def _run() -> tuple[SagaTestEnv, SagaRun]:
    env = SagaTestEnv(Shipping, [Desk()])
    run = await env.start(Order(address="1 Old Road"))
    assert run.state.steps["approve"].phase.value == "waiting"
    return env, run


def _shipped_to(env: SagaTestEnv) -> list[Any]:
    return [r["body"] for r in env.harnesses["desk"].tables.get("ledger", [])
            if r["step"] == "ship"]


async def test_an_accepted_update_answers_with_the_result_and_later_steps_read_it() -> None:
    env, run = await _run()
    answer = await run.update("change_address", {"address": "2 New Street"}, update_id="u-1")
    assert (answer.outcome, answer.duplicate) == ("accepted", False)
    assert answer.result == {"address": "2 New Street", "previous": "1 Old Road",
                             "at": run.now.isoformat()}
    assert run.state.updates["change_address"].result == answer.result
    history = [e.event for e in run.sim.history if e.event.type == "update_applied"]
    assert [(e.update_id, e.name) for e in history] == [("u-1", "change_address")]
    assert (await run.update("approve", {"by": "ada"})).result == {"by": "ada"}
    assert run.status == "completed"
    assert _shipped_to(env) == [{"address": "2 New Street"}]


async def test_a_rejected_update_gives_the_reason_and_applies_nothing() -> None:
    _env, run = await _run()
    before = run.state
    answer = await run.update("change_address", {"address": "  "}, update_id="u-1")
    assert (answer.outcome, answer.reason, answer.result) == (
        "rejected", "the address is empty", None)
    assert run.state == before  # no event, no result, nothing kept
    assert all(e.event.type != "update_applied" for e in run.sim.history)
    refused = await run.update("approve", {"by": "mallory"})
    assert refused.reason == "mallory may not approve"
    assert run.state.steps["approve"].phase.value == "waiting"  # the wait was not woken
    assert run.update_answer("u-1").reason == "the address is empty"


async def test_an_update_id_is_answered_once_and_its_answer_fetched_by_id() -> None:
    _env, run = await _run()
    first = await run.update("change_address", {"address": "2 New Street"}, update_id="u-1")
    again = await run.update("change_address", {"address": "3 Other"}, update_id="u-1")
    assert (again.duplicate, again.result) == (True, first.result)
    assert run.state.updates["change_address"].count == 1
    assert run.update_answer("u-1").result == first.result
    with pytest.raises(UpdateIdConflict):
        await run.update("approve", {"by": "ada"}, update_id="u-1")
    with pytest.raises(UpdateNotFound):
        run.update_answer("never-sent")
    rejected = await run.update("change_address", {"address": ""}, update_id="u-2")
    assert (await run.update("change_address", {"address": "ok"}, update_id="u-2")
            ).reason == rejected.reason  # a rejection is an answer too: the same again


async def test_an_update_wakes_the_wait_its_signal_names() -> None:
    env, run = await _run()
    answer = await run.update("approve", {"by": "ada"}, update_id="a-1")
    assert answer.result == {"by": "ada"}
    assert run.state.steps["approve"].result == {"by": "ada"}
    assert run.status == "completed"
    assert _shipped_to(env) == [{"address": "1 Old Road"}]


async def test_a_finished_saga_refuses_updates_but_answers_a_resend() -> None:
    _env, run = await _run()
    await run.update("approve", {"by": "ada"}, update_id="a-1")
    assert run.status == "completed"
    with pytest.raises(SagaFinished, match="takes no more updates"):
        await run.update("change_address", {"address": "late"})
    assert (await run.update("approve", {"by": "ada"}, update_id="a-1")).duplicate


async def test_unknown_names_bad_payloads_and_broken_handlers_are_refused() -> None:
    _env, run = await _run()
    before = run.state
    with pytest.raises(UnknownUpdate, match="takes no update 'nope'") as unknown:
        await run.update("nope", {})
    assert unknown.value.known == ["approve", "broken", "change_address"]
    with pytest.raises(InvalidUpdatePayload, match="address"):
        await run.update("change_address", {"address": 7})
    with pytest.raises(UpdateBroken, match="ZeroDivisionError"):
        await run.update("broken", {})
    assert run.state == before


async def test_replay_of_a_history_with_updates_gives_the_same_state() -> None:
    env, run = await _run()
    await run.update("change_address", {"address": "2 New Street"}, update_id="u-1")
    await run.update("change_address", {"address": "3 Third"}, update_id="u-2")
    await run.update("approve", {"by": "ada"}, update_id="a-1")
    history = [(e.event, e.at) for e in run.sim.history]
    again = replay(run.sim.definition, history)
    assert again.to_json() == run.state.to_json()
    assert SagaState.from_json(run.state.to_json()) == run.state
    assert again.updates["change_address"].count == 2
    assert _shipped_to(env) == [{"address": "3 Third"}]


def test_the_class_is_checked_when_it_is_created() -> None:
    with pytest.raises(DefinitionError) as bad:
        class _Bad(Saga):
            name = "bad_updates"
            input_model = Order
            steps = (SagaStep("a", "desk", "reserve", compensable=True),)
            updates = (Update("x"), Update("x"), Update("y", signal="nobody"),
                       Update("bad name!"), "not an update")  # type: ignore[assignment]
    text = str(bad.value)
    for problem in ("updates['x']: declared twice",
                    "signal 'nobody' is not one the saga's waits declare",
                    "'bad name!']: name must be identifier-like", "not an Update"):
        assert problem in text


def test_a_removed_or_narrowed_update_breaks_its_senders() -> None:
    from coordinator.versioning.compat import compare_sagas

    class Strict(BaseModel):
        address: str
        zip: str

    class Next(Shipping):
        version = 2
        updates = (Update("change_address", model=Strict), Update("note"))

    changes = {c.path: c for c in compare_sagas(Shipping, Next)}
    assert changes["update.approve"].breaking
    assert changes["update.broken"].breaking
    assert not changes["update.note"].breaking
    assert any(p.startswith("update.change_address") and c.breaking
               for p, c in changes.items())
