"""Waits for signals on the pure core: kept signals, duplicates, timeouts, the machine."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import BaseModel

from coordinator.engine import RepairVerb, Status, StepPhase, TimerKind, compile_saga
from coordinator.engine.decision import InvalidTransition
from coordinator.language.nodes import Choice, Race, WaitForSignal
from coordinator.language.saga import DefinitionError, Saga
from tests.unit.test_engine_sleep import START
from tests.unit.test_engine_tree import act, ok, saga, sent
from tests.unit.tree_support import TreeInput, check_invariants, check_moves, check_replay, new_run


class Paid(BaseModel):
    amount: int


def paid(**kw: object) -> WaitForSignal:
    return WaitForSignal("pay", "paid", payload=Paid, **kw)  # type: ignore[arg-type]


def test_a_wait_takes_its_signal_and_the_payload_is_its_result() -> None:
    run = new_run(saga(act("a"), paid(), act("b", payload=lambda ctx: ctx.results["pay"])))
    ok(run, "a")
    sim = run.sim
    assert sim.current.steps["pay"].phase is StepPhase.WAITING
    assert sim.current.machine_states() == ["pay.waiting"]
    decision = sim.signal("paid", {"amount": 5}, signal_id="sig-1")
    assert [(c.signal_id, c.node) for c in decision.consumed_signals] == [("sig-1", "pay")]
    assert sim.last("b").payload == {"amount": 5}
    ok(run, "b")
    assert sim.current.status is Status.COMPLETED
    check_invariants(run)
    check_moves(sim)
    check_replay(sim)


def test_a_signal_before_its_wait_is_kept_and_consumed_when_the_wait_is_reached() -> None:
    run = new_run(saga(act("a"), paid(), act("b")))
    sim = run.sim
    early = sim.signal("paid", {"amount": 7}, signal_id="early")
    assert early.consumed_signals == [] and early.ignored is None
    assert [s.signal_id for s in sim.current.signals] == ["early"]
    reached = sim.reply_to(sim.last("a"))  # "a" done: the wait is reached, takes it
    assert [c.signal_id for c in reached.consumed_signals] == ["early"]
    assert sim.current.signals == []
    assert sim.current.steps["pay"].result == {"amount": 7}
    assert sent(sim, 1) == [("b", "action")]
    check_replay(sim)


def test_a_duplicate_signal_is_applied_once() -> None:
    run = new_run(saga(act("a"), paid(), paid_two := WaitForSignal("again", "paid",
                                                                  payload=Paid)))
    assert paid_two.signal == "paid"
    sim = run.sim
    sim.signal("paid", {"amount": 1}, signal_id="same")
    again = sim.signal("paid", {"amount": 1}, signal_id="same")
    assert again.ignored == "duplicate signal same"
    ok(run, "a")
    assert sim.current.steps["pay"].phase is StepPhase.SUCCEEDED
    assert sim.current.steps["again"].phase is StepPhase.WAITING  # one signal, one wait


def test_timeout_fail_rolls_back() -> None:
    run = new_run(saga(act("a"), paid(timeout=timedelta(days=3))))
    ok(run, "a")
    sim = run.sim
    timer = sim.next_timer(TimerKind.SIGNAL_TIMEOUT)
    assert timer is not None and timer.due_at == START + timedelta(days=3)
    sim.fire(timer)
    assert sim.current.steps["pay"].phase is StepPhase.FAILED
    assert "no signal 'paid' within 259200s" in (sim.current.reason or "")
    assert sent(sim, 1) == [("a", "compensate")]
    ok(run, "a")
    assert sim.current.status is Status.COMPENSATED
    check_invariants(run)
    check_moves(sim)


def test_timeout_continue_goes_down_the_declared_path() -> None:
    late = Choice("late", ((lambda ctx: ctx.results["pay"] == {"timed_out": True},
                            act("remind")),), otherwise=act("ship"))
    run = new_run(saga(paid(timeout=timedelta(hours=1), on_timeout="continue"), late))
    sim = run.sim
    sim.fire_next(TimerKind.SIGNAL_TIMEOUT)
    assert sent(sim) == [("remind", "action")]
    ok(run, "remind")
    assert sim.current.status is Status.COMPLETED
    check_invariants(run)
    check_moves(sim)
    check_replay(sim)


def test_a_signal_in_time_drops_the_timeout_timer() -> None:
    run = new_run(saga(paid(timeout=timedelta(hours=1)), act("b")))
    sim = run.sim
    sim.signal("paid", {"amount": 1})
    assert sim.next_timer(TimerKind.SIGNAL_TIMEOUT) is None


def test_operator_cancel_of_a_waiting_saga_drops_the_timeout() -> None:
    run = new_run(saga(act("a"), paid(timeout=timedelta(days=3))))
    ok(run, "a")
    run.sim.repair(RepairVerb.CANCEL)
    assert run.sim.next_timer(TimerKind.SIGNAL_TIMEOUT) is None
    ok(run, "a")
    run.cancelled = True
    assert run.sim.current.status is Status.CANCELLED
    check_invariants(run)


def test_a_signal_as_a_race_branch_cancels_the_other() -> None:
    run = new_run(saga(Race("first", (paid(), act("slow")))))
    sim = run.sim
    sim.signal("paid", {"amount": 2})
    assert sent(sim, 1) == [("slow", "compensate")]  # the loser is undone
    ok(run, "slow")
    ok(run, "slow", None)
    assert sim.current.status is Status.COMPLETED


def test_signal_definition_errors() -> None:
    with pytest.raises(DefinitionError, match="signal must be an identifier-like name"):
        type("S", (Saga,), {"name": "s", "input_model": TreeInput,
                            "steps": (WaitForSignal("w", "no spaces"),)})
    with pytest.raises(DefinitionError, match="on_timeout must be 'fail' or 'continue'"):
        type("S", (Saga,), {"name": "s", "input_model": TreeInput,
                            "steps": (WaitForSignal("w", "x", on_timeout="retry"),)})  # type: ignore[arg-type]
    cls = type("S", (Saga,), {"name": "s", "input_model": TreeInput,
                              "steps": (WaitForSignal("w", "x", payload=Paid),
                                        WaitForSignal("v", "x"))})
    with pytest.raises(DefinitionError, match="different payload models"):
        compile_saga(cls)


def test_a_signal_the_saga_type_has_no_wait_for_is_ignored() -> None:
    run = new_run(saga(act("a")))
    assert run.sim.signal("nope").ignored == "saga type tree waits for no signal 'nope'"


def test_queries_are_checked_with_the_class() -> None:
    with pytest.raises(DefinitionError, match="query name must be identifier-like"):
        type("Q", (Saga,), {"name": "q", "input_model": TreeInput, "steps": (act("a"),),
                            "queries": {"no spaces": lambda q: q}})
    with pytest.raises(DefinitionError, match="query 'x' must be callable"):
        type("Q", (Saga,), {"name": "q", "input_model": TreeInput, "steps": (act("a"),),
                            "queries": {"x": 3}})


def test_an_operator_skip_ends_a_wait_with_a_checked_payload() -> None:
    run = new_run(saga(act("a"), paid(timeout=timedelta(days=3)),
                       act("b", payload=lambda ctx: ctx.results["pay"])))
    ok(run, "a")
    sim = run.sim
    with pytest.raises(InvalidTransition, match="not a valid 'paid' signal payload"):
        sim.repair(RepairVerb.SKIP, result={"amount": "lots"})
    decision = sim.repair(RepairVerb.SKIP, result={"amount": 7}, reason="paid by phone")
    pay = sim.current.steps["pay"]
    assert pay.phase is StepPhase.SUCCEEDED and pay.result == {"amount": 7}
    assert decision.cancel_timers  # the timeout timer goes
    assert [c.envelope.payload for c in decision.commands] == [{"amount": 7}]
    ok(run, "b")
    assert sim.current.status is Status.COMPLETED
    check_moves(sim)
    check_replay(sim)
