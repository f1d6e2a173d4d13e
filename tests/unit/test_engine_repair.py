"""Operator repairs: what each verb does, and InvalidTransition where it is not legal."""

from __future__ import annotations

import pytest

from coordinator.engine import InvalidTransition, RepairVerb, Stage, Status, StepPhase, TimerKind
from coordinator.engine.simulate import Simulator
from participant_sdk.protocol import Outcome, Phase
from tests.unit.test_engine_fixtures import AllSaga, Mixed, WithPivot, compiled


def dead_in_rollback() -> Simulator:
    """AllSaga dead: s2 rejected, s1's compensation rejected."""
    sim = Simulator(compiled(AllSaga))
    sim.start({})
    sim.reply()
    sim.reply(Outcome.REJECTED)
    sim.reply()
    sim.reply(Outcome.REJECTED)
    assert sim.current.status is Status.DEAD and sim.current.dead_step == "s1"
    return sim


def dead_in_confirm() -> Simulator:
    """Mixed dead: a's confirm rejected; c's confirm (sent with it) still in flight."""
    sim = Simulator(compiled(Mixed))
    sim.start({})
    for _ in range(3):
        sim.reply()
    sim.reply_to(sim.last("a"), Outcome.REJECTED)
    assert sim.current.status is Status.DEAD and sim.current.stage is Stage.CONFIRM
    assert sim.current.dead_step == "a" and sim.current.machine_state() == "dead"
    return sim


def test_retry_dead_compensation_with_payload_override_and_fresh_budget() -> None:
    sim = dead_in_rollback()
    before = sim.last().attempt
    sim.repair(RepairVerb.RETRY, payload={"fixed": True})
    cmd = sim.last()
    assert (cmd.step, cmd.phase, cmd.attempt) == ("s1", Phase.COMPENSATE, before + 1)
    assert cmd.payload == {"fixed": True}
    assert sim.current.status is Status.COMPENSATING
    sim.reply()
    assert sim.current.status is Status.COMPENSATED
    assert "operator retry by ops" in sim.history[-2].note


def test_retry_dead_confirm_returns_to_running() -> None:
    sim = dead_in_confirm()
    sim.repair(RepairVerb.RETRY)
    assert sim.current.status is Status.RUNNING
    assert (sim.last().step, sim.last().phase, sim.last().attempt) == ("a", Phase.CONFIRM, 2)
    sim.reply()
    assert sim.current.status is Status.RUNNING  # c's confirm still in flight
    sim.reply_to(sim.last("c"))
    assert sim.current.status is Status.COMPLETED


def test_retry_running_step_waiting_for_backoff_sends_now() -> None:
    sim = Simulator(compiled(AllSaga))
    sim.start({})
    sim.reply(Outcome.FAILED)
    timer = sim.next_timer(TimerKind.RETRY)
    assert timer is not None
    decision = sim.repair("retry")
    assert timer.timer_id in decision.cancel_timers
    assert sim.last().attempt == 2


def test_retry_with_command_in_flight_is_invalid() -> None:
    sim = Simulator(compiled(AllSaga))
    sim.start({})
    with pytest.raises(InvalidTransition, match="in flight"):
        sim.repair("retry")


def test_retry_redrives_irreversible_step_with_unknown_outcome_forward() -> None:
    sim = Simulator(compiled(WithPivot))
    sim.start({})
    sim.reply()
    for _ in range(3):
        sim.fire_next(TimerKind.DEADLINE)
        if sim.current.status is Status.RUNNING:
            sim.fire_next(TimerKind.RETRY)
    assert sim.current.status is Status.DEAD
    sim.repair("retry", step="pivot")
    assert sim.current.status is Status.RUNNING and sim.last().step == "pivot"
    sim.reply()
    sim.reply()
    sim.reply()
    assert sim.current.status is Status.COMPLETED


def test_retry_committed_irreversible_step_is_invalid() -> None:
    sim = Simulator(compiled(WithPivot))
    sim.start({})
    sim.reply()
    sim.reply()
    sim.reply(Outcome.REJECTED)
    sim.reply()
    with pytest.raises(InvalidTransition, match="no compensation"):
        sim.repair("retry")
    with pytest.raises(InvalidTransition, match="dead at step 'pivot'"):
        sim.repair("skip", step="a")


def test_skip_dead_rollback_step_continues_rollback() -> None:
    sim = Simulator(compiled(WithPivot))
    sim.start({})
    sim.reply()
    sim.reply()
    sim.reply(Outcome.REJECTED)
    sim.reply()
    sim.repair("skip", reason="refunded by hand")
    assert sim.current.steps["pivot"].phase is StepPhase.RESOLVED
    assert sim.last().step == "a" and sim.last().phase is Phase.CANCEL
    sim.reply()
    assert sim.current.status is Status.COMPENSATED


def test_skip_running_forward_step_records_result_and_continues() -> None:
    sim = Simulator(compiled(AllSaga))
    sim.start({})
    decision = sim.repair("skip", step="s1", result={"manual": 1})
    assert decision.cancel_timers  # its deadline timer
    assert sim.current.steps["s1"].result == {"manual": 1}
    assert sim.last().step == "s2"
    late = sim.reply_to(sim.sent[0])
    assert late.ignored is not None


def test_skip_wrong_step_is_invalid() -> None:
    sim = Simulator(compiled(AllSaga))
    sim.start({})
    with pytest.raises(InvalidTransition, match="not in progress"):
        sim.repair("skip", step="s3")
    with pytest.raises(InvalidTransition, match="unknown step"):
        sim.repair("skip", step="zzz")


def test_skip_dead_confirm_marks_confirmed() -> None:
    sim = dead_in_confirm()
    sim.repair("skip")
    assert sim.current.steps["a"].phase is StepPhase.CONFIRMED
    sim.reply_to(sim.last("c"))
    assert sim.current.status is Status.COMPLETED


def test_resolve_dead_confirm_abandons_confirms_still_in_flight() -> None:
    sim = dead_in_confirm()
    decision = sim.repair("resolve", payload={"status": "completed"})
    assert f"{sim.saga_id}:c:confirm:1:deadline" in decision.cancel_timers
    assert all(s.outstanding is None for s in sim.current.steps.values())
    assert sim.reply_to(sim.last("c")).ignored == "saga finished"


def test_retry_while_confirming_needs_the_step_named_when_several_are_in_progress() -> None:
    sim = Simulator(compiled(Mixed))
    sim.start({})
    for _ in range(3):
        sim.reply()
    sim.reply_to(sim.last("c"), Outcome.FAILED)
    with pytest.raises(InvalidTransition, match="in flight"):
        sim.repair("retry", step="a")
    with pytest.raises(InvalidTransition, match="not in progress; in progress: a, c"):
        sim.repair("retry", step="b")
    with pytest.raises(InvalidTransition, match=r"2 steps are in progress \(a, c\): name"):
        sim.repair("retry")
    sim.repair("retry", step="c")
    assert (sim.last().step, sim.last().attempt) == ("c", 2)


def test_compensate_running_saga_rolls_back_in_flight_step() -> None:
    sim = Simulator(compiled(Mixed))
    sim.start({})
    sim.reply()
    sim.repair("compensate")
    assert [(c.step, c.phase.value) for c in sim.sent][2:] == [("b", "compensate")]
    sim.reply()
    sim.reply()
    assert sim.current.status is Status.COMPENSATED


def test_compensate_dead_rollback_leaves_irreversible_step_and_continues() -> None:
    sim = Simulator(compiled(WithPivot))
    sim.start({})
    sim.reply()
    sim.reply()
    sim.reply(Outcome.REJECTED)
    sim.reply()
    sim.repair("compensate")
    assert sim.current.steps["pivot"].phase is StepPhase.RESOLVED
    sim.reply()
    assert sim.current.status is Status.COMPENSATED


def test_compensate_is_invalid_while_confirming_or_compensating() -> None:
    with pytest.raises(InvalidTransition, match="confirms have started"):
        dead_in_confirm().repair("compensate")
    sim = Simulator(compiled(AllSaga))
    sim.start({})
    sim.reply(Outcome.REJECTED)
    with pytest.raises(InvalidTransition, match="already compensating"):
        sim.repair("compensate")


def test_cancel_running_saga_ends_cancelled() -> None:
    sim = Simulator(compiled(AllSaga))
    sim.start({})
    sim.reply()
    sim.repair("cancel", reason="customer asked")
    assert sim.current.status is Status.COMPENSATING
    assert sim.last().step == "s2" and sim.last().phase is Phase.COMPENSATE
    sim.reply()
    sim.reply()
    assert sim.current.status is Status.CANCELLED
    assert "customer asked" in (sim.current.reason or "")


def test_cancel_is_invalid_unless_running_forward() -> None:
    with pytest.raises(InvalidTransition, match="confirming"):
        sim = Simulator(compiled(Mixed))
        sim.start({})
        for _ in range(3):
            sim.reply()
        sim.repair("cancel")
    with pytest.raises(InvalidTransition, match="only a running saga"):
        dead_in_rollback().repair("cancel")


def test_resolve_dead_saga_closes_it_with_a_note() -> None:
    sim = dead_in_rollback()
    sim.repair("resolve", actor="alice", reason="refunded manually",
               payload={"status": "compensated"})
    state = sim.current
    assert state.status is Status.COMPENSATED
    assert state.resolution is not None and state.resolution["actor"] == "alice"
    assert state.resolution["dead_step"] == "s1"
    assert sim.replayed().to_json() == state.to_json()


def test_resolve_is_only_for_dead_sagas_and_checks_status() -> None:
    sim = Simulator(compiled(AllSaga))
    sim.start({})
    with pytest.raises(InvalidTransition, match="only a dead saga"):
        sim.repair("resolve")
    with pytest.raises(InvalidTransition, match="must be 'completed' or 'compensated'"):
        dead_in_rollback().repair("resolve", payload={"status": "running"})


def test_no_repair_applies_to_a_finished_saga() -> None:
    sim = Simulator(compiled(AllSaga))
    sim.start({})
    for _ in range(3):
        sim.reply()
    for verb in RepairVerb:
        with pytest.raises(InvalidTransition, match="completed"):
            sim.repair(verb)


def test_invalid_repair_changes_nothing() -> None:
    sim = Simulator(compiled(AllSaga))
    sim.start({})
    before = (sim.current, len(sim.history))
    with pytest.raises(InvalidTransition):
        sim.repair("resolve")
    assert (sim.current, len(sim.history)) == before


def test_an_undo_that_gave_up_while_the_saga_was_dead_elsewhere_parks_it_next() -> None:
    """Found by the adversity property test: a late OK of the irreversible pivot parks the
    saga at the pivot while ``a``'s cancel is still retrying; that cancel then gives up too.
    Skipping the pivot must not leave ``a`` cancelling with nothing in flight for ever: the
    rollback reaches ``a`` and parks the saga there, where a retry finishes it."""
    from participant_sdk.protocol import ErrorKind

    sim = Simulator(compiled(WithPivot))
    sim.start({"n": 3, "ship": False})
    sim.reply_to(sim.last("a", Phase.TRY), Outcome.OK)
    pivot = sim.last("pivot", Phase.ACTION)
    sim.reply_to(pivot, Outcome.REJECTED, kind=ErrorKind.BUSINESS)
    sim.reply_to(sim.last("a", Phase.CANCEL), Outcome.FAILED, kind=ErrorKind.TRANSIENT)
    sim.reply_to(pivot, Outcome.OK)  # late: the pivot took effect after all
    assert (sim.current.status, sim.current.dead_step) == (Status.DEAD, "pivot")
    while sim.current.steps["a"].phase is StepPhase.CANCELLING and (
            sim.current.steps["a"].retry_timer is not None):
        sim.fire_next(TimerKind.RETRY)
        sim.reply_to(sim.last("a", Phase.CANCEL), Outcome.REJECTED, kind=ErrorKind.BUSINESS)
    a = sim.current.steps["a"]
    assert (a.phase, a.outstanding, a.retry_timer) == (StepPhase.CANCELLING, None, None)
    sim.repair(RepairVerb.SKIP)  # the pivot, by hand
    assert (sim.current.status, sim.current.dead_step) == (Status.DEAD, "a")
    sim.repair(RepairVerb.RETRY)
    sim.reply_to(sim.last("a", Phase.CANCEL), Outcome.OK)
    assert sim.current.status is Status.COMPENSATED
