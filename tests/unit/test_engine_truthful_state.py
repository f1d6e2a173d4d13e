"""After a death and a repair the snapshot tells the true story: the rollback's reason and
the dead reason are separate fields, a repair clears the dead reason and records itself, and a
late ``ok`` for the dead step is recorded (issue 42)."""

from __future__ import annotations

from coordinator.engine import RepairVerb, Stage, Status
from coordinator.engine.simulate import Simulator
from participant_sdk.protocol import Outcome, Phase
from tests.unit.test_engine_fixtures import AllSaga, Mixed, compiled


def dead_in_rollback() -> Simulator:
    """AllSaga: s2 rejected (the rollback's cause), then s1's compensation rejected (dead)."""
    sim = Simulator(compiled(AllSaga))
    sim.start({})
    sim.reply()
    sim.reply(Outcome.REJECTED)
    sim.reply()
    sim.reply(Outcome.REJECTED)
    assert sim.current.status is Status.DEAD and sim.current.dead_step == "s1"
    return sim


def test_the_rollback_reason_survives_the_death_in_its_own_field() -> None:
    sim = dead_in_rollback()
    state = sim.current
    assert state.cause == "s2"
    assert state.rollback_reason is not None and "s2" in state.rollback_reason
    assert state.dead_reason is not None and "s1" in state.dead_reason
    assert state.rollback_reason != state.dead_reason
    assert state.reason == state.dead_reason  # the headline while dead


def test_a_repair_out_of_dead_clears_the_dead_reason_and_records_itself() -> None:
    sim = dead_in_rollback()
    dead_reason = sim.current.dead_reason
    sim.repair(RepairVerb.RETRY, actor="alice", reason="hotel is back")
    state = sim.current
    assert state.status is Status.COMPENSATING and state.dead_reason is None
    assert state.reason == state.rollback_reason  # the rollback's cause again
    assert state.repaired is not None
    assert state.repaired["verb"] == "retry" and state.repaired["actor"] == "alice"
    assert state.repaired["dead_step"] == "s1"
    assert state.repaired["dead_reason"] == dead_reason
    sim.reply()
    assert sim.current.status is Status.COMPENSATED
    assert sim.current.reason == sim.current.rollback_reason
    assert "s2" in (sim.current.reason or "")
    assert sim.replayed() == sim.current


def test_a_confirm_repaired_to_completed_keeps_no_reason() -> None:
    sim = Simulator(compiled(Mixed))
    sim.start({})
    for _ in range(3):
        sim.reply()
    sim.reply_to(sim.last("a"), Outcome.REJECTED)
    assert sim.current.status is Status.DEAD and sim.current.stage is Stage.CONFIRM
    sim.repair(RepairVerb.RETRY)
    sim.reply()
    sim.reply_to(sim.last("c"))
    state = sim.current
    assert state.status is Status.COMPLETED
    assert state.reason is None and state.dead_reason is None and state.rollback_reason is None
    assert state.repaired is not None and state.repaired["dead_step"] == "a"


def test_a_late_ok_for_the_dead_step_is_recorded_and_a_retry_completes_it() -> None:
    sim = dead_in_rollback()
    given_up = sim.last("s1", Phase.COMPENSATE)
    decision = sim.reply_to(given_up, Outcome.OK)
    assert decision.ignored is None
    assert "late ok for the dead step" in decision.history[0].note
    state = sim.current
    assert state.status is Status.DEAD
    assert state.late_ok is not None and state.late_ok["step"] == "s1"
    assert state.late_ok["phase"] == "compensate"
    again = sim.reply_to(given_up, Outcome.OK)  # a duplicate of it: nothing new
    assert again.ignored is not None
    sim.repair(RepairVerb.RETRY)
    assert sim.current.late_ok is None
    sim.reply()
    assert sim.current.status is Status.COMPENSATED
    assert sim.replayed() == sim.current


def test_a_late_failure_or_a_reply_for_another_step_is_not_a_late_ok() -> None:
    sim = dead_in_rollback()
    assert sim.reply_to(sim.last("s1", Phase.COMPENSATE), Outcome.FAILED).ignored is not None
    assert sim.reply_to(sim.last("s2", Phase.COMPENSATE), Outcome.OK).ignored is not None
    assert sim.current.late_ok is None
