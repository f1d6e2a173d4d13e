"""Delayed start on the pure core: scheduled at once, nothing sent until the start timer."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from coordinator.engine import InvalidTransition, RepairVerb, Status, TimerKind
from coordinator.engine.simulate import Simulator
from tests.unit.test_engine_sleep import START
from tests.unit.test_engine_tree import act, saga
from tests.unit.tree_support import Participants, Run, check_moves, check_replay

TWO = saga(act("a"), act("b"))


def _scheduled(days: int = 2) -> Simulator:
    sim = Simulator(TWO, saga_id=uuid.UUID(int=9))
    sim.start({"n": 1}, start_at=START + timedelta(days=days))
    return sim


def test_a_saga_with_a_later_start_is_scheduled_and_sends_nothing_until_then() -> None:
    sim = _scheduled()
    assert sim.current.status is Status.SCHEDULED
    assert sim.current.machine_states() == ["scheduled"]
    assert sim.sent == []
    timer = sim.next_timer(TimerKind.START)
    assert timer is not None and timer.due_at == START + timedelta(days=2)
    sim.fire(timer)
    assert sim.current.status is Status.RUNNING
    assert [(c.step, c.phase.value) for c in sim.sent] == [("a", "action")]
    assert sim.sent[0].message_id  # the first command goes out at the start time
    assert sim.now == START + timedelta(days=2)
    check_moves(sim)
    check_replay(sim)


def test_a_start_time_already_past_runs_at_once() -> None:
    sim = Simulator(TWO)
    sim.start({}, start_at=START - timedelta(minutes=1))
    assert sim.current.status is Status.RUNNING and len(sim.sent) == 1


def test_operator_cancel_of_a_scheduled_saga_drops_its_start_timer() -> None:
    sim = _scheduled()
    decision = sim.repair(RepairVerb.CANCEL)
    assert sim.current.status is Status.CANCELLED
    assert decision.cancel_timers == [f"{sim.saga_id}::start"]
    assert sim.timers == {} and sim.sent == []
    check_moves(sim)
    check_replay(sim)


def test_other_verbs_on_a_scheduled_saga_are_refused() -> None:
    sim = _scheduled()
    for verb in (RepairVerb.RETRY, RepairVerb.SKIP, RepairVerb.COMPENSATE, RepairVerb.RESOLVE):
        with pytest.raises(InvalidTransition, match="only cancel applies"):
            sim.repair(verb)


def test_a_signal_to_a_scheduled_saga_is_kept_for_after_the_start() -> None:
    from coordinator.language.nodes import WaitForSignal

    sim = Simulator(saga(WaitForSignal("w", "go"), act("b")))
    sim.start({}, start_at=START + timedelta(hours=1))
    sim.signal("go")
    assert sim.current.status is Status.SCHEDULED and len(sim.current.signals) == 1
    sim.fire_next(TimerKind.START)
    assert [c.step for c in sim.sent] == ["b"]
    Run(sim, Participants())  # the shared run type accepts it
