"""Sleep and sleep-until nodes on the pure core, and timer kinds handled each on their own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from coordinator.engine import (
    CompiledSaga,
    RepairVerb,
    Status,
    StepPhase,
    TimerFired,
    TimerKind,
    compile_saga,
)
from coordinator.engine.decision import InvalidTransition
from coordinator.engine.machine import node_edges
from coordinator.engine.simulate import Simulator
from coordinator.language.nodes import Parallel, Race, Sleep, SleepUntil
from coordinator.language.saga import DefinitionError, Saga
from participant_sdk.protocol import ErrorKind, Outcome
from tests.unit.test_engine_tree import act, ok, saga, sent
from tests.unit.tree_support import TreeInput, check_invariants, check_moves, check_replay, new_run

START = datetime(2026, 1, 1, tzinfo=UTC)


def test_sleep_sets_a_durable_timer_and_the_next_step_waits_for_it() -> None:
    run = new_run(saga(act("a"), Sleep("nap", timedelta(days=30)), act("b")))
    ok(run, "a")
    sim = run.sim
    assert sent(sim) == [("a", "action")]
    nap = sim.current.steps["nap"]
    assert nap.phase is StepPhase.SLEEPING
    assert nap.due_at == START + timedelta(days=30)
    timer = sim.next_timer(TimerKind.SLEEP)
    assert timer is not None and timer.due_at == nap.due_at and timer.phase is None
    assert sim.current.machine_states() == ["nap.sleeping"]
    sim.fire(timer)
    assert sim.current.steps["nap"].phase is StepPhase.SUCCEEDED
    assert sent(sim, 1) == [("b", "action")]  # the clock jumped 30 days, the saga went on
    ok(run, "b")
    assert sim.current.status is Status.COMPLETED
    check_invariants(run)
    check_moves(sim)
    check_replay(sim)


def test_sleep_until_a_time_computed_from_the_input() -> None:
    until = SleepUntil("wait", lambda ctx: START + timedelta(hours=ctx.input.n))
    run = new_run(saga(until, act("b")), n=5)
    assert run.sim.next_timer(TimerKind.SLEEP).due_at == START + timedelta(hours=5)  # type: ignore[union-attr]
    assert sent(run.sim) == []


def test_a_wake_up_time_already_past_goes_on_at_once() -> None:
    run = new_run(saga(SleepUntil("wait", START - timedelta(days=1)), act("b")))
    assert run.sim.current.steps["wait"].phase is StepPhase.SUCCEEDED
    assert run.sim.next_timer(TimerKind.SLEEP) is None
    assert sent(run.sim) == [("b", "action")]


def test_a_naive_datetime_is_a_definition_error_at_class_definition() -> None:
    with pytest.raises(DefinitionError, match="wait: until is a naive datetime"):
        type("Naive", (Saga,), {"name": "naive", "input_model": TreeInput,
                                "steps": (SleepUntil("wait", datetime(2027, 1, 1)),)})
    with pytest.raises(DefinitionError, match="nap: duration must be a timedelta"):
        type("Bad", (Saga,), {"name": "bad", "input_model": TreeInput,
                              "steps": (Sleep("nap", 30),)})  # type: ignore[arg-type]


def test_a_naive_datetime_returned_at_run_time_fails_the_node_and_rolls_back() -> None:
    run = new_run(saga(act("a"), SleepUntil("wait", lambda ctx: datetime(2027, 1, 1))))
    ok(run, "a")
    assert run.sim.current.steps["wait"].phase is StepPhase.FAILED
    assert "naive datetime" in (run.sim.current.reason or "")
    assert sent(run.sim, 1) == [("a", "compensate")]


def test_operator_cancel_of_a_sleeping_saga_removes_its_timer() -> None:
    run = new_run(saga(act("a"), Sleep("nap", timedelta(days=3)), act("b")))
    ok(run, "a")
    sim = run.sim
    timer_id = sim.current.steps["nap"].timer
    decision = sim.repair(RepairVerb.CANCEL)
    assert timer_id in decision.cancel_timers  # the store deletes the row in that transaction
    assert sim.next_timer(TimerKind.SLEEP) is None
    assert sim.current.steps["nap"].phase is StepPhase.FAILED
    ok(run, "a", None)  # the compensation of "a"
    assert sim.current.status is Status.CANCELLED
    run.cancelled = True
    check_invariants(run)
    check_moves(sim)
    check_replay(sim)


def test_resolving_a_dead_saga_drops_the_timer_of_a_sleep_its_rollback_never_reached() -> None:
    """``b`` failing rolls back the parallel; it goes dead at ``a`` (in flight, irreversible)
    before it cut the sibling sleep short. A resolve by hand ends the saga: the sleep too."""
    run = new_run(saga(Parallel("p", (act("a", compensable=False), act("b"),
                                      Sleep("nap", timedelta(days=1))))))
    run.world.answer(run.sim, run.sim.last("b"), Outcome.REJECTED, ErrorKind.BUSINESS)
    sim = run.sim
    assert sim.current.status is Status.DEAD and sim.current.dead_step == "a"
    timer_id = sim.current.steps["nap"].timer
    decision = sim.repair(RepairVerb.RESOLVE, payload={"status": "compensated"})
    assert timer_id is not None and timer_id in decision.cancel_timers
    nap = sim.current.steps["nap"]
    assert (nap.phase, nap.timer) == (StepPhase.FAILED, None)
    assert sim.next_timer(TimerKind.SLEEP) is None
    run.by_hand = True
    check_invariants(run)
    check_moves(sim)
    check_replay(sim)


def test_a_stale_sleep_timer_is_ignored() -> None:
    run = new_run(saga(Sleep("nap", timedelta(hours=1)), act("b")))
    timer = run.sim.next_timer(TimerKind.SLEEP)
    assert timer is not None
    run.sim.fire(timer)
    again = run.sim.fire(timer)  # fired twice (a crash between apply and delete)
    assert again.ignored == f"stale sleep timer {timer.timer_id}"


def test_a_sleep_that_loses_a_race_drops_its_timer() -> None:
    run = new_run(saga(Race("timeout", (act("quick"), Sleep("nap", timedelta(days=1)))),
                       act("after")))
    ok(run, "quick")
    assert run.sim.current.steps["nap"].phase is StepPhase.FAILED
    assert run.sim.next_timer(TimerKind.SLEEP) is None
    ok(run, "after")
    assert run.sim.current.status is Status.COMPLETED
    check_invariants(run)
    check_moves(run.sim)


def test_each_timer_kind_has_its_own_path_and_a_retry_is_not_the_default() -> None:
    run = new_run(saga(Sleep("nap", timedelta(hours=1)), act("b")))
    timer = run.sim.next_timer(TimerKind.SLEEP)
    assert timer is not None
    # A sleep's timer presented as a retry is not a retry of anything: ignored.
    as_retry = run.sim.apply(TimerFired(timer_id=timer.timer_id, step="nap", attempt=1,
                                        kind=TimerKind.RETRY))
    assert as_retry.ignored is not None and as_retry.ignored.startswith("stale retry timer")
    assert run.sim.current.steps["nap"].phase is StepPhase.SLEEPING


def test_the_exported_machine_has_the_sleep_moves() -> None:
    definition: CompiledSaga = saga(Sleep("nap", timedelta(seconds=1)))
    moves = {(a, b) for a, b, _ in node_edges(definition.node("nap"))}
    assert ("sleeping", "succeeded") in moves
    exported = {(t.source, t.target) for t in definition.transitions}
    assert ("nap.pending", "nap.sleeping") in exported
    assert definition.to_json()["nodes"][0] == {"name": "nap", "kind": "sleep",
                                                "description": "", "duration_s": 1.0}


def test_a_thirty_day_sleep_in_a_for_each_item_replays(**_: Any) -> None:
    from coordinator.language.nodes import ForEach

    each = ForEach("items", items=lambda ctx: list(range(ctx.input.n)),
                   body=(Sleep("nap", timedelta(days=30)), act("b")), max_concurrency=2)
    run = new_run(saga(each), n=3)
    sim = run.sim
    assert sorted(t.step for t in sim.timers.values()) == ["items[0].nap", "items[1].nap"]
    while sim.current.status is not Status.COMPLETED:
        if sim.pending:
            run.world.answer(sim, next(iter(sim.pending.values())))
        else:
            sim.fire_next()
    assert sim.now == START + timedelta(days=60)  # two rounds of 30 days at concurrency 2
    check_invariants(run)
    check_replay(sim)


def test_simulator_starts_at_the_fixed_clock() -> None:
    assert Simulator(saga(act("a"))).now == START
    assert compile_saga  # the public entry point stays exported


def test_an_operator_skip_wakes_a_sleep_now_and_retry_says_to_skip() -> None:
    run = new_run(saga(act("a"), Sleep("nap", timedelta(days=30)), act("b")))
    ok(run, "a")
    sim = run.sim
    with pytest.raises(InvalidTransition, match="nap is sleeping: nothing to retry; skip"):
        sim.repair(RepairVerb.RETRY)
    decision = sim.repair(RepairVerb.SKIP, step="nap", reason="customer asked")
    nap = sim.current.steps["nap"]
    assert nap.phase is StepPhase.SUCCEEDED and nap.timer is None
    assert nap.note == "skipped by ops: customer asked"
    assert [t for t in decision.cancel_timers if ":nap:sleep:" in t]  # the timer goes
    assert sent(sim, 1) == [("b", "action")]  # 30 days early, the saga goes on
    ok(run, "b")
    assert sim.current.status is Status.COMPLETED
    check_moves(sim)
    check_replay(sim)
