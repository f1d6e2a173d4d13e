"""Targeted tests of the core's semantic rules, one rule per test."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from coordinator.engine import (
    InvalidInput,
    InvalidTransition,
    ReplyReceived,
    SagaStarted,
    SagaState,
    Stage,
    Status,
    StepPhase,
    TimerKind,
    advance,
    compile_saga,
    message_id,
)
from coordinator.engine.simulate import Simulator
from coordinator.language.saga import Saga, SagaStep
from examples.order_saga import OrderSaga
from participant_sdk.protocol import ErrorKind, Outcome, Phase, ReplyEnvelope
from tests.unit.test_engine_fixtures import (
    ORDER_INPUT,
    AllSaga,
    Flags,
    Guarded,
    Mixed,
    WithPivot,
    compiled,
)

ORDER = compile_saga(OrderSaga, topic_prefix="tst")


def order_sim() -> Simulator:
    sim = Simulator(ORDER)
    sim.start(ORDER_INPUT, {"traceparent": "00-abc-def-01"})
    return sim


def phases(sim: Simulator) -> list[tuple[str, str]]:
    return [(c.step, c.phase.value) for c in sim.sent]


def test_happy_path_tries_in_order_then_confirms_and_completes() -> None:
    sim = order_sim()
    first = sim.last()
    assert (first.step, first.phase, first.attempt) == ("reserve_funds", Phase.TRY, 1)
    assert first.payload == {"customer": "c-1", "amount": 1250}
    assert first.reply_to == "tst.replies" and first.participant == "payments"
    assert sim.decisions[0].commands[0].topic == "tst.payments.commands"
    sim.reply(result={"hold": "h1"})
    sim.reply()
    ship = sim.last()
    assert ship.payload == {"address": "1 Main St", "items": ["sku-9", "sku-9"]}
    confirms = sim.reply(result={"shipment_id": "s1"})
    # "confirm all": every TCC step's confirm goes out in the same decision, each with its
    # own deadline timer; the saga completes when the last one is acknowledged.
    assert [(c.envelope.step, c.envelope.phase) for c in confirms.commands] == [
        ("reserve_funds", Phase.CONFIRM), ("reserve_stock", Phase.CONFIRM)]
    assert [t.timer_id for t in confirms.timers] == [
        f"{sim.saga_id}:reserve_funds:confirm:1:deadline",
        f"{sim.saga_id}:reserve_stock:confirm:1:deadline"]
    assert sim.current.machine_states() == ["reserve_funds.confirming",
                                            "reserve_stock.confirming"]
    sim.reply_to(sim.last("reserve_stock"))  # acknowledgements may come in any order
    assert sim.current.status is Status.RUNNING
    assert sim.current.steps["reserve_stock"].phase is StepPhase.CONFIRMED
    sim.reply_to(sim.last("reserve_funds"))
    assert phases(sim) == [("reserve_funds", "try"), ("reserve_stock", "try"),
                           ("create_shipment", "action"), ("reserve_funds", "confirm"),
                           ("reserve_stock", "confirm")]
    state = sim.current
    assert state.status is Status.COMPLETED and state.finished_at is not None
    assert state.steps["reserve_funds"].result == {"hold": "h1"}
    assert state.trace_context == {"traceparent": "00-abc-def-01"}
    assert not sim.timers  # every deadline timer was cancelled by its reply


def test_message_ids_and_timer_ids_are_deterministic() -> None:
    sim = order_sim()
    env = sim.last()
    assert env.message_id == message_id(sim.saga_id, "reserve_funds", Phase.TRY, 1)
    [timer] = sim.decisions[0].timers
    assert timer.timer_id == f"{sim.saga_id}:reserve_funds:try:1:deadline"
    assert timer.due_at == sim.now + timedelta(seconds=10)
    again = advance(ORDER, None, sim.history[0].event, sim.history[0].at)
    assert again == sim.decisions[0]


def test_rejected_try_cancels_every_step_tried_or_possibly_tried() -> None:
    sim = order_sim()
    sim.reply()
    sim.reply(Outcome.REJECTED, message="out of stock")
    assert sim.current.status is Status.COMPENSATING
    assert sim.last().phase is Phase.CANCEL and sim.last().step == "reserve_stock"
    sim.reply()
    sim.reply()
    assert phases(sim)[2:] == [("reserve_stock", "cancel"), ("reserve_funds", "cancel")]
    assert sim.current.status is Status.COMPENSATED
    assert "out of stock" in (sim.current.reason or "")
    assert "create_shipment" not in {c.step for c in sim.sent}


def test_failure_of_first_try_cancels_only_it() -> None:
    sim = order_sim()
    sim.reply(Outcome.REJECTED)
    assert phases(sim) == [("reserve_funds", "try"), ("reserve_funds", "cancel")]


def test_retryable_failure_backs_off_on_a_durable_timer() -> None:
    sim = order_sim()
    decision = sim.reply(Outcome.FAILED, kind=ErrorKind.TRANSIENT)
    assert not decision.commands
    [retry] = decision.timers
    assert retry.kind is TimerKind.RETRY and retry.attempt == 2
    assert timedelta(0) < retry.due_at - sim.now <= timedelta(milliseconds=200)
    assert decision.cancel_timers == [f"{sim.saga_id}:reserve_funds:try:1:deadline"]
    sim.fire(retry)
    assert (sim.last().step, sim.last().attempt) == ("reserve_funds", 2)
    assert sim.current.steps["reserve_funds"].last_error is not None


def test_non_retryable_kind_fails_at_once() -> None:
    sim = order_sim()
    sim.reply(Outcome.FAILED, kind=ErrorKind.BAD_COMMAND)
    assert sim.current.status is Status.COMPENSATING


def test_retries_exhausted_roll_back() -> None:
    sim = order_sim()
    for _ in range(5):  # OrderSaga allows 5 forward attempts
        sim.reply(Outcome.FAILED, kind=ErrorKind.UNEXPECTED)
        if sim.current.status is Status.RUNNING:
            sim.fire_next(TimerKind.RETRY)
    assert sim.current.steps["reserve_funds"].attempt(Phase.TRY) == 5
    assert sim.last().phase is Phase.CANCEL
    assert "after 5 attempt(s)" in (sim.current.reason or "")


def test_missing_reply_past_deadline_is_a_retryable_failure() -> None:
    sim = order_sim()
    sim.fire_next(TimerKind.DEADLINE)
    step = sim.current.steps["reserve_funds"]
    assert step.uncertain and step.last_error is not None
    assert step.last_error.kind == "deadline"
    sim.fire_next(TimerKind.RETRY)
    assert sim.last().attempt == 2


def test_deadline_with_no_attempts_left_cancels_the_possibly_tried_step() -> None:
    sim = order_sim()
    for _ in range(5):
        sim.fire_next(TimerKind.DEADLINE)
        if sim.current.status is Status.RUNNING:
            sim.fire_next(TimerKind.RETRY)
    assert sim.last().phase is Phase.CANCEL and sim.last().step == "reserve_funds"


def test_late_reply_to_earlier_attempt_is_ignored_as_stale() -> None:
    sim = order_sim()
    first = sim.last()
    sim.fire_next(TimerKind.DEADLINE)
    sim.fire_next(TimerKind.RETRY)
    decision = sim.reply_to(first)
    assert decision.ignored is not None and "stale" in decision.ignored
    assert decision.history[0].note.startswith("ignored: stale")
    assert decision.state == sim.decisions[-2].state


def test_duplicate_reply_is_applied_once() -> None:
    sim = order_sim()
    cmd = sim.last()
    sim.reply_to(cmd)
    before = sim.current
    dup = sim.reply_to(cmd)
    assert dup.ignored is not None and "duplicate" in dup.ignored
    assert dup.state == before and not dup.commands


def test_reply_for_unknown_step_wrong_phase_or_message_is_ignored() -> None:
    sim = order_sim()
    cmd = sim.last()
    unknown = cmd.model_copy(update={"step": "nope"})
    assert "unknown step" in (sim.reply_to(unknown).ignored or "")
    wrong_phase = cmd.model_copy(update={"phase": Phase.CONFIRM})
    assert "stale" in (sim.reply_to(wrong_phase).ignored or "")
    wrong_id = cmd.model_copy(update={"message_id": uuid.uuid4()})
    assert "unknown message" in (sim.reply_to(wrong_id).ignored or "")
    other_saga = cmd.model_copy(update={"saga_id": uuid.uuid4()})
    assert "another saga" in (sim.reply_to(other_saga).ignored or "")
    assert sim.current.status is Status.RUNNING


def test_stale_timer_is_ignored() -> None:
    sim = order_sim()
    [deadline] = sim.decisions[0].timers
    sim.reply()
    assert "stale deadline" in (sim.fire(deadline).ignored or "")


def test_confirm_failure_retries_then_exhaustion_makes_saga_dead() -> None:
    sim = Simulator(compiled(Mixed))
    sim.start({})
    for _ in range(3):
        sim.reply()
    assert [(c.step, c.phase) for c in sim.pending.values()] == [
        ("a", Phase.CONFIRM), ("c", Phase.CONFIRM)]
    for _ in range(3):  # ROLLBACK policy: 3 attempts, counted for a alone
        sim.reply_to(sim.last("a"), Outcome.FAILED)
        if sim.current.status is not Status.DEAD:
            sim.fire_next(TimerKind.RETRY)
    state = sim.current
    assert state.status is Status.DEAD and state.dead_step == "a"
    assert "confirm failed for good after 3" in (state.reason or "")
    assert state.steps["c"].attempt(Phase.CONFIRM) == 1  # c's confirm is still in flight
    sim.reply_to(sim.last("c"))  # and is still applied: confirms are independent
    assert sim.current.steps["c"].phase is StepPhase.CONFIRMED
    assert sim.current.status is Status.DEAD
    assert not sim.timers


def test_each_confirm_keeps_its_own_retries_timers_and_stale_replies() -> None:
    sim = Simulator(compiled(Mixed))
    sim.start({})
    for _ in range(3):
        sim.reply()
    a1, c1 = sim.last("a"), sim.last("c")
    decision = sim.reply_to(a1, Outcome.FAILED)  # a backs off; c is untouched
    assert decision.cancel_timers == [f"{sim.saga_id}:a:confirm:1:deadline"]
    [retry] = decision.timers
    assert (retry.step, retry.kind, retry.attempt) == ("a", TimerKind.RETRY, 2)
    sim.fire_next(TimerKind.DEADLINE)  # c's deadline: a retryable failure of c alone
    assert sim.current.steps["c"].retry_timer is not None
    assert sim.current.steps["a"].retry_timer == retry.timer_id
    sim.fire(retry)
    a2 = sim.last("a")
    assert a2.attempt == 2
    assert "stale" in (sim.reply_to(a1).ignored or "")
    assert "duplicate" in (sim.reply_to(c1).ignored or "")
    sim.reply_to(a2)
    assert sim.current.status is Status.RUNNING
    sim.fire_next(TimerKind.RETRY)
    sim.reply_to(sim.last("c"))
    assert sim.current.status is Status.COMPLETED
    assert [(c.step, c.phase.value, c.attempt) for c in sim.sent][3:] == [
        ("a", "confirm", 1), ("c", "confirm", 1), ("a", "confirm", 2), ("c", "confirm", 2)]
    assert sim.replayed().to_json() == sim.current.to_json()


def test_two_confirms_giving_up_raise_dead_one_after_the_other() -> None:
    sim = Simulator(compiled(Mixed))
    sim.start({})
    for _ in range(3):
        sim.reply()
    sim.reply_to(sim.last("a"), Outcome.REJECTED)
    sim.reply_to(sim.last("c"), Outcome.REJECTED)  # while the saga is dead at a
    state = sim.current
    assert state.status is Status.DEAD and state.dead_step == "a"
    assert state.steps["c"].phase is StepPhase.CONFIRMING and state.steps["c"].outstanding is None
    sim.repair("skip")  # a confirmed by hand: the saga runs again and meets c
    assert sim.current.status is Status.DEAD and sim.current.dead_step == "c"
    assert "gave up while the saga was dead" in (sim.current.reason or "")
    sim.repair("retry")
    sim.reply_to(sim.last("c"))
    assert sim.current.status is Status.COMPLETED
    assert sim.replayed().to_json() == sim.current.to_json()


def test_mixed_saga_compensates_in_reverse_order_of_completion() -> None:
    sim = Simulator(compiled(Mixed))
    sim.start({})
    sim.reply()  # a tried
    sim.reply()  # b done
    sim.reply(Outcome.REJECTED)  # c try rejected
    for _ in range(3):
        sim.reply()
    assert phases(sim)[3:] == [("c", "cancel"), ("b", "compensate"), ("a", "cancel")]
    assert sim.current.status is Status.COMPENSATED
    assert not any(c.phase is Phase.CONFIRM for c in sim.sent)


def test_compensation_exhausted_makes_saga_dead() -> None:
    sim = Simulator(compiled(AllSaga))
    sim.start({})
    sim.reply()
    sim.reply(Outcome.REJECTED)
    sim.reply()  # s2 compensate (null compensation at the participant)
    for _ in range(3):
        sim.reply(Outcome.FAILED)
        if sim.current.status is not Status.DEAD:
            sim.fire_next(TimerKind.RETRY)
    assert sim.current.status is Status.DEAD and sim.current.dead_step == "s1"


def test_rejected_compensation_makes_saga_dead_at_once() -> None:
    sim = Simulator(compiled(AllSaga))
    sim.start({})
    sim.reply(Outcome.REJECTED)
    sim.reply(Outcome.REJECTED)
    assert sim.current.status is Status.DEAD


def test_committed_step_without_compensation_blocks_rollback_dead() -> None:
    sim = Simulator(compiled(WithPivot))
    sim.start({})
    sim.reply()  # a tried
    sim.reply()  # pivot committed
    sim.reply(Outcome.REJECTED)  # c rejected
    sim.reply()  # c compensated (null)
    state = sim.current
    assert state.status is Status.DEAD and state.dead_step == "pivot"
    assert "declares no compensation" in (state.reason or "")
    assert not any(c.step == "a" and c.phase is Phase.CANCEL for c in sim.sent)


def test_rejected_irreversible_step_rolls_back_the_others() -> None:
    sim = Simulator(compiled(WithPivot))
    sim.start({})
    sim.reply()
    sim.reply(Outcome.REJECTED)  # pivot definitely did nothing
    assert sim.last().phase is Phase.CANCEL and sim.last().step == "a"
    sim.reply()
    assert sim.current.status is Status.COMPENSATED


def test_irreversible_step_with_unknown_outcome_makes_saga_dead() -> None:
    sim = Simulator(compiled(WithPivot))
    sim.start({})
    sim.reply()
    for _ in range(3):
        sim.fire_next(TimerKind.DEADLINE)
        if sim.current.status is Status.RUNNING:
            sim.fire_next(TimerKind.RETRY)
    assert sim.current.status is Status.DEAD and sim.current.dead_step == "pivot"
    assert "may have taken effect" in (sim.current.reason or "")


def test_guard_skips_step_and_mapper_sees_earlier_results() -> None:
    sim = Simulator(compiled(Guarded))
    sim.start({"n": 7, "ship": True})
    sim.reply(result={"id": 1})
    assert sim.last().payload == {"n": 7, "first": {"id": 1}}
    sim2 = Simulator(compiled(Guarded))
    sim2.start({"ship": False})
    sim2.reply()
    assert sim2.current.steps["ship"].phase is StepPhase.SKIPPED
    assert sim2.last().step == "last"


class _Boom(Saga):
    name = "boom"
    version = 1
    input_model = Flags
    steps = (
        SagaStep("ok", "p1", "do", compensable=True),
        SagaStep("bad", "p2", "do", compensable=True,
                 payload=lambda ctx: {"x": ctx.results["missing"]}),
    )


def test_mapper_error_fails_the_step_for_good_and_rolls_back() -> None:
    sim = Simulator(compiled(_Boom))
    sim.start({})
    sim.reply()
    state = sim.current
    bad = state.steps["bad"]
    assert bad.phase is StepPhase.FAILED and not bad.sent
    assert bad.last_error is not None and bad.last_error.kind == "mapper"
    assert "KeyError" in bad.last_error.message
    assert (sim.last().step, sim.last().phase) == ("ok", Phase.COMPENSATE)
    sim.reply()
    assert sim.current.status is Status.COMPENSATED
    assert [c.step for c in sim.sent].count("bad") == 0


def _reply_for(sim: Simulator, outcome: Outcome) -> ReplyEnvelope:
    cmd = sim.last()
    return ReplyEnvelope(message_id=uuid.uuid4(), in_reply_to=cmd.message_id,
                         saga_id=cmd.saga_id, step=cmd.step, phase=cmd.phase,
                         attempt=cmd.attempt, participant=cmd.participant, outcome=outcome)


def test_start_validates_input_and_definition() -> None:
    start = SagaStarted(saga_id=uuid.uuid4(), saga_type="order", version=1,
                        input={"order_id": "x"})
    with pytest.raises(InvalidInput, match="invalid input for order v1"):
        advance(ORDER, None, start, Simulator(ORDER).now)
    wrong = start.model_copy(update={"version": 2, "input": ORDER_INPUT})
    with pytest.raises(InvalidTransition, match="v2"):
        advance(ORDER, None, wrong, Simulator(ORDER).now)


def test_duplicate_start_is_ignored_and_events_need_a_saga() -> None:
    sim = order_sim()
    again = sim.apply(sim.history[0].event)
    assert again.ignored is not None and not again.commands
    with pytest.raises(InvalidTransition, match="never started"):
        advance(ORDER, None, ReplyReceived(reply=_reply_for(sim, Outcome.OK)), sim.now)


def test_state_json_round_trip_and_machine_state() -> None:
    sim = order_sim()
    sim.reply()
    state = sim.current
    assert SagaState.from_json(state.to_json()) == state
    assert state.machine_state() == "reserve_stock.trying"
    assert state.stage is Stage.FORWARD
    assert sim.replayed().to_json() == state.to_json()


def test_engine_does_not_depend_on_snapshot_key_order() -> None:
    """A JSONB snapshot reorders object keys; the engine must walk steps in definition order."""
    sim = Simulator(compiled(Mixed))
    sim.start({})
    data = sim.current.to_json()
    data["steps"] = dict(reversed(list(data["steps"].items())))
    shuffled = SagaState.from_json(data)
    assert shuffled == sim.current
    cmd = sim.last()
    reply = ReplyReceived(reply=_reply_for(sim, Outcome.OK).model_copy(
        update={"in_reply_to": cmd.message_id}))
    expected = advance(sim.definition, sim.current, reply, sim.now)
    got = advance(sim.definition, shuffled, reply, sim.now)
    assert got.commands == expected.commands and got.state == expected.state
    assert got.commands[0].envelope.step == "b"


def test_replace_is_model_copy_without_its_cost() -> None:
    from coordinator.engine.state import replace

    sim = order_sim()
    state = sim.current
    step = state.steps["reserve_funds"]
    changes = {"phase": StepPhase.TRIED, "note": "n", "attempts": {Phase.TRY: 2}}
    fast, slow = replace(step, dict(changes)), step.model_copy(update=dict(changes))
    assert fast == slow and fast.model_fields_set == slow.model_fields_set
    assert fast.model_dump(mode="json") == slow.model_dump(mode="json")
    assert step.note is None  # the original is untouched
    whole = replace(state, {"completions": 7})
    assert whole == state.model_copy(update={"completions": 7})
    assert list(whole.to_json()) == list(state.to_json())  # key order kept


def test_advance_never_modifies_the_state_it_is_given() -> None:
    """Work edits one copy of the steps mapping in place per decision: never the caller's."""
    sim = Simulator(compiled(Mixed))
    sim.start({})
    for _ in range(3):
        before = sim.current
        frozen = before.to_json()
        steps = dict(before.steps)
        sim.reply()
        assert before.to_json() == frozen and before.steps == steps
        assert sim.current.steps is not before.steps
    assert sim.replayed().to_json() == sim.current.to_json()


def test_decisions_built_without_validation_equal_validated_ones() -> None:
    from coordinator.engine import (
        Decision,
        HistoryEntry,
        OutgoingCommand,
        Outstanding,
        TimerRequest,
    )

    sim = order_sim()
    sim.reply()
    for made in sim.decisions:
        again = Decision(state=made.state, commands=list(made.commands),
                         timers=list(made.timers), cancel_timers=list(made.cancel_timers),
                         history=[HistoryEntry(**dict(h)) for h in made.history],
                         moves=list(made.moves), touched=list(made.touched))
        assert made == again and made.model_dump() == again.model_dump()
        for command in made.commands:
            assert command == OutgoingCommand.model_validate(command.model_dump())
        for timer in made.timers:
            assert timer == TimerRequest.model_validate(timer.model_dump())
        for step in made.state.steps.values():
            if step.outstanding is not None:
                out = step.outstanding
                assert out == Outstanding.model_validate(out.model_dump())
                assert out.model_dump(mode="json") == Outstanding.model_validate(
                    out.model_dump(mode="json")).model_dump(mode="json")
