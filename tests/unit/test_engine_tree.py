"""The node tree: each kind's semantics, then random trees under random adversity."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, reject, settings
from hypothesis import strategies as st

from coordinator.engine import CompiledSaga, InvalidTransition, Status, StepPhase, compile_saga
from coordinator.engine.events import RepairVerb
from coordinator.engine.simulate import Simulator
from coordinator.language.nodes import Choice, ForEach, Parallel, Race
from coordinator.language.saga import DefinitionError, Saga, SagaStep, TccStep
from participant_sdk.protocol import ErrorKind, Outcome, Phase
from tests.unit.tree_support import (
    FAST,
    Participants,
    Run,
    TreeInput,
    check_invariants,
    check_moves,
    check_replay,
    compile_tree,
    definitions,
    drain,
    drive_randomly,
    guarded,
    new_run,
    outstanding,
    tree_steps,
)


def saga(*steps: Any, name: str = "tree") -> CompiledSaga:
    cls = type("Tree", (Saga,), {"name": name, "version": 1, "input_model": TreeInput,
                                 "steps": steps})
    return compile_saga(cls)


def tcc(name: str, **kw: Any) -> TccStep:
    return TccStep(name, f"p_{name}", "do", retry=FAST, **kw)


def act(name: str, compensable: bool = True, **kw: Any) -> SagaStep:
    return SagaStep(name, f"p_{name}", "do", compensable=compensable, retry=FAST, **kw)


def sent(sim: Simulator, since: int = 0) -> list[tuple[str, str]]:
    return [(c.step, c.phase.value) for c in sim.sent[since:]]


def ok(run: Run, step: str, phase: Phase | None = None) -> None:
    run.world.answer(run.sim, run.sim.last(step, phase))


def no(run: Run, step: str) -> None:
    run.world.answer(run.sim, run.sim.last(step), Outcome.REJECTED, ErrorKind.BUSINESS)


# -- parallel -----------------------------------------------------------------------------


PAR = saga(tcc("a"), Parallel("p", (tcc("b"), (act("c"), act("d")))), act("e"))


def test_parallel_starts_branches_together_and_joins() -> None:
    run = new_run(PAR)
    ok(run, "a")
    assert sent(run.sim, 1) == [("b", "try"), ("c", "action")]
    assert run.sim.current.active_steps() == ["b", "c"]
    ok(run, "c")
    assert sent(run.sim, 3) == [("d", "action")]  # the branch goes on alone
    ok(run, "b")
    ok(run, "d")
    assert sent(run.sim, 4) == [("e", "action")]
    ok(run, "e")
    assert sent(run.sim, 5) == [("a", "confirm"), ("b", "confirm")]  # confirm is saga-wide
    drain(run)
    assert run.sim.current.status is Status.COMPLETED
    assert run.sim.current.steps["p"].phase is StepPhase.SUCCEEDED
    check_invariants(run)


def test_parallel_branch_failing_undoes_siblings_in_flight_and_done() -> None:
    run = new_run(PAR)
    ok(run, "a")
    ok(run, "c")
    no(run, "d")  # d fails for good while b is still in flight
    state = run.sim.current
    assert state.status is Status.COMPENSATING
    assert state.steps["b"].abandoned and state.steps["b"].uncertain  # may have applied
    # Independent branches are undone at once; inside c;d, the later first (d: null comp).
    assert sorted(sent(run.sim, 4)) == [("b", "cancel"), ("d", "compensate")]
    drain(run)
    assert run.sim.current.status is Status.COMPENSATED
    assert [s for s, p in sent(run.sim) if p in ("cancel", "compensate")][-1] == "a"
    check_invariants(run)


def test_several_active_steps_make_a_verb_without_a_step_ambiguous() -> None:
    run = new_run(PAR)
    ok(run, "a")
    with pytest.raises(InvalidTransition, match=r"2 steps are in progress \(b, c\)"):
        run.sim.repair("skip")
    run.sim.repair("skip", step="c", result={"by": "hand"})
    assert sent(run.sim, 3) == [("d", "action")]


# -- for-each -----------------------------------------------------------------------------


EACH = saga(ForEach("lines", items=lambda ctx: [{"sku": f"k{i}"} for i in range(ctx.input.n)],
                    body=(tcc("reserve", payload=lambda ctx: {"sku": ctx.item["sku"],
                                                                "at": ctx.index}),
                          act("pack", payload=lambda ctx: dict(ctx.results["reserve"]))),
                    max_concurrency=2, max_items=4),
            act("ship", payload=lambda ctx: {"lines": ctx.results["lines"]}))


def test_for_each_bounds_concurrency_and_gathers_results_in_item_order() -> None:
    run = new_run(EACH, n=3)
    sim = run.sim
    assert sent(sim) == [("lines[0].reserve", "try"), ("lines[1].reserve", "try")]
    assert sim.last("lines[1].reserve").payload == {"sku": "k1", "at": 1}
    ok(run, "lines[1].reserve")
    assert sent(sim, 2) == [("lines[1].pack", "action")]  # the item's own result by name
    assert sim.last("lines[1].pack").payload == {"from": "lines[1].reserve"}
    ok(run, "lines[1].pack")  # item 1 done: item 2 may start (2 at once)
    assert sent(sim, 3) == [("lines[2].reserve", "try")]
    for key in ("lines[0].reserve", "lines[0].pack", "lines[2].reserve", "lines[2].pack"):
        ok(run, key)
    assert sim.last("ship").payload == {"lines": [{"from": f"lines[{i}].pack"}
                                                  for i in range(3)]}
    drain(run)
    assert sim.current.status is Status.COMPLETED
    confirms = {c.step for c in sim.sent if c.phase is Phase.CONFIRM}
    assert confirms == {f"lines[{i}].reserve" for i in range(3)}
    check_invariants(run)


def test_for_each_with_too_many_items_fails_before_sending_anything() -> None:
    run = new_run(saga(act("first"), EACH.saga_class.steps[0]), n=5)  # type: ignore[union-attr]
    ok(run, "first")
    state = run.sim.current
    assert state.steps["lines"].phase is StepPhase.FAILED
    assert "5 items exceed max_items=4" in (state.reason or "")
    assert sent(run.sim)[-1] == ("first", "compensate")


def test_for_each_rollback_keeps_to_max_concurrency() -> None:
    run = new_run(saga(ForEach("each", items=lambda ctx: [0, 1, 2], body=(tcc("t"),),
                               max_concurrency=2), act("last")))
    for i in range(3):
        ok(run, f"each[{i}].t")
    no(run, "last")
    ok(run, "last", Phase.COMPENSATE)  # the latest first: its null compensation
    undo = [c.step for c in run.sim.sent if c.phase is Phase.CANCEL]
    assert undo == ["each[0].t", "each[1].t"]  # two at a time, as forward ran
    ok(run, "each[1].t", Phase.CANCEL)
    assert [c.step for c in run.sim.sent if c.phase is Phase.CANCEL][2:] == ["each[2].t"]
    drain(run)
    assert run.sim.current.status is Status.COMPENSATED
    check_invariants(run)


def test_for_each_of_no_items_is_done_at_once() -> None:
    run = new_run(EACH, n=0)
    assert sent(run.sim) == [("ship", "action")]
    assert run.sim.last().payload == {"lines": []}


# -- race ---------------------------------------------------------------------------------


RACE = saga(Race("quote", (tcc("fast"), (act("slow_a"), act("slow_b")), act("third"))),
            act("after", payload=lambda ctx: {"won": ctx.results["quote"]}))


def test_race_first_success_wins_and_every_loser_is_undone() -> None:
    run = new_run(RACE)
    sim = run.sim
    assert sent(sim) == [("fast", "try"), ("slow_a", "action"), ("third", "action")]
    ok(run, "slow_a")
    ok(run, "third")  # third wins: slow_a;slow_b was one step behind
    assert sim.current.steps["quote"].winners == ["third"]
    assert sim.last("after").payload == {"won": {"from": "third"}}
    # The losers: fast (in flight: may apply, so cancelled) and slow_a (done: compensated).
    # fast and slow_b were in flight (they may apply): cancelled and compensated; slow_a,
    # done, is compensated once slow_b's compensation is acknowledged (reverse order).
    assert sorted(sent(sim, 4)) == [("after", "action"), ("fast", "cancel"),
                                    ("slow_b", "compensate")]
    ok(run, "fast", Phase.TRY)  # the loser's try succeeds after the win (before its cancel)
    assert sim.decisions[-1].ignored is not None  # stale for the engine ...
    drain(run)  # ... and the cancel already on its way undoes it
    assert sim.current.status is Status.COMPLETED
    assert not any(c.step == "fast" and c.phase is Phase.CONFIRM for c in sim.sent)
    assert run.world.applied.get("fast") is False and run.world.undo_effects["fast"] == 1
    check_invariants(run)


def test_race_quorum_two_of_three_and_failure_once_out_of_reach() -> None:
    q = saga(Race("q", (act("x"), act("y"), act("z")), quorum=2))
    run = new_run(q)
    no(run, "x")
    ok(run, "y")
    assert run.sim.current.status is Status.RUNNING
    no(run, "z")  # 1 success, 2 failures: 2 of 3 is out of reach
    assert run.sim.current.status is Status.COMPENSATING
    assert "2 of 3 branches failed; 2 had to succeed" in (run.sim.current.reason or "")
    drain(run)
    assert run.sim.current.status is Status.COMPENSATED
    check_invariants(run)
    run = new_run(q)
    ok(run, "z")
    ok(run, "x")
    assert run.sim.current.steps["q"].winners == ["z", "x"]


def test_retry_of_a_race_losers_undo_that_gave_up_while_confirming_cancels_it_again() -> None:
    """A race won at once (its other branch skipped) leaves a tried loser to cancel while the
    saga confirms; that cancel gives up and the saga is dead at the loser. An operator retry
    must cancel it again, never confirm it (the random tree test drew this: the retry took
    the saga's confirm stage for the step's own phase)."""
    run = new_run(saga(Race("r", (tcc("skipped", when=lambda ctx: False),
                                  tcc("loser", cancel_retry=FAST)))))
    sim = run.sim
    assert sent(sim) == [("loser", "try"), ("loser", "cancel")]
    while sim.current.status is not Status.DEAD:
        sim.fire_next()
    assert sim.current.dead_step == "loser"
    assert sim.current.steps["loser"].phase is StepPhase.CANCELLING
    sim.repair(RepairVerb.RETRY)
    assert sent(sim)[-1] == ("loser", "cancel")
    drain(run)
    assert sim.current.status is Status.COMPLETED
    assert not any(c.phase is Phase.CONFIRM for c in sim.sent)
    check_invariants(run)


def test_a_race_refuses_steps_that_cannot_be_undone() -> None:
    with pytest.raises(DefinitionError, match=r"Tree\.x: a step inside a Race must be"):
        saga(Race("r", (act("x", compensable=False), act("y"))))


# -- choice -------------------------------------------------------------------------------


CHOICE = saga(Choice("route", ((lambda ctx: ctx.input.n > 2, act("big")),
                               (lambda ctx: ctx.input.n > 0, (act("small"), act("note")))),
                     otherwise=None), act("end"))


def test_choice_records_the_branch_taken_once() -> None:
    run = new_run(CHOICE, n=1)
    assert run.sim.current.steps["route"].count == 1
    assert sent(run.sim) == [("small", "action")]
    drain(run)
    assert sent(run.sim)[:3] == [("small", "action"), ("note", "action"), ("end", "action")]
    check_replay(run.sim)
    run = new_run(CHOICE, n=0)
    assert run.sim.current.steps["route"].phase is StepPhase.SKIPPED
    assert sent(run.sim) == [("end", "action")]


def test_nested_for_each_keys_name_every_level() -> None:
    nested = saga(ForEach("o", items=lambda ctx: [0, 1], body=(
        ForEach("i", items=lambda ctx: [0, 1], body=(act("leaf"),)),), max_items=2))
    run = new_run(nested)
    assert [c.step for c in run.sim.sent] == ["o[0].i[0].leaf", "o[0].i[1].leaf",
                                              "o[1].i[0].leaf", "o[1].i[1].leaf"]
    drain(run)
    assert run.sim.current.status is Status.COMPLETED
    check_replay(run.sim)


def test_composite_definition_errors_are_reported_at_once() -> None:
    with pytest.raises(DefinitionError) as info:
        saga(ForEach("f", items="nope", body=(act("a"),), max_items=0,  # type: ignore[arg-type]
                     max_concurrency=0),
             Race("r", (act("b"),), quorum=3), Parallel("p", ()), act("a"))
    text = str(info.value)
    for fragment in ("items must be callable", "max_items must be", "max_concurrency must",
                     "quorum must be", "branches must be a non-empty", "duplicate node name"):
        assert fragment in text


# -- random trees -------------------------------------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(definition=definitions(), data=st.data(), n=st.integers(0, 3), flag=st.booleans())
def test_random_trees_under_adversity_end_legally_undo_once_and_replay(
    definition: CompiledSaga, data: st.DataObject, n: int, flag: bool
) -> None:
    run = new_run(definition, n=n, flag=flag)
    drive_randomly(data, run)
    drain(run)
    event(f"end: {run.sim.current.status.value}")
    check_invariants(run)
    check_moves(run.sim)
    check_replay(run.sim)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=tree_steps(), data=st.data(), n=st.integers(0, 3), flag=st.booleans())
def test_random_trees_with_a_guard_deployed_mid_run_end_legally_undo_once_and_replay(
    steps: tuple[Any, ...], data: st.DataObject, n: int, flag: bool
) -> None:
    """A saga runs a while on a tree, then the same version gains a guard around a random
    node or branch (or a node added before one): it ends legally, undoes each effect once and
    replays on the guarded tree."""
    run = new_run(compile_tree(steps), n=n, flag=flag)
    drive_randomly(data, run, steps=data.draw(st.sampled_from([3, 12]), label="before"))
    changed, site = data.draw(guarded(steps), label="deployed")
    try:
        after = compile_tree(changed)
    except DefinitionError:
        reject()  # nested too deep for validation
    event(f"site: {site}")
    run.sim.definition = after
    drive_randomly(data, run)
    drain(run)
    event(f"end: {run.sim.current.status.value}")
    event(f"guard: {run.sim.current.patches.get('deployed', 'undecided')}")
    check_invariants(run)
    check_moves(run.sim)
    assert run.sim.replayed().to_json() == run.sim.current.to_json()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(definition=definitions(), outcomes=st.lists(st.sampled_from(
    [Outcome.OK, Outcome.OK, Outcome.REJECTED, Outcome.FAILED]), max_size=30))
def test_random_trees_with_replies_in_order_end_legally(
    definition: CompiledSaga, outcomes: list[Outcome]
) -> None:
    run = new_run(definition)
    for want in outcomes:
        if run.sim.current.status.is_terminal:
            break
        live = outstanding(run.sim)
        if live:
            run.world.answer(run.sim, live[0], want, ErrorKind.BUSINESS
                             if want is Outcome.REJECTED else ErrorKind.TRANSIENT)
        elif run.sim.timers:
            run.sim.fire_next()
    drain(run)
    check_invariants(run)
    check_moves(run.sim)
    check_replay(run.sim)


# -- the checks catch broken rules ----------------------------------------------------------


def _race_run() -> Run:
    run = new_run(RACE)
    ok(run, "slow_a")
    ok(run, "third")
    drain(run)
    return run


def test_the_invariants_catch_a_race_that_leaves_its_losers(monkeypatch: Any) -> None:
    from coordinator.engine.work import Work

    check_invariants(_race_run())
    monkeypatch.setattr(Work, "undo_later", lambda self, key: None)  # the broken rule
    with pytest.raises(AssertionError, match="loser"):
        check_invariants(_race_run())


def test_the_invariants_catch_rollback_out_of_order(monkeypatch: Any) -> None:
    from coordinator.engine.nodes import base

    def broken(w: Any, kids: Any) -> Any:  # declaration order instead of reverse completion
        for node, key, scope in kids:
            progress = base.undo(w, node, key, scope)
            if progress is not base.Progress.DONE:
                return progress
        return base.Progress.DONE

    def failing_run() -> Run:
        run = new_run(saga(act("one"), act("two"), act("three")))
        ok(run, "one")
        ok(run, "two")
        no(run, "three")
        drain(run)
        return run

    check_invariants(failing_run())
    monkeypatch.setattr(base, "undo_serial", broken)
    with pytest.raises(AssertionError, match="undone first"):
        check_invariants(failing_run())


def test_the_machine_check_catches_an_undeclared_move(monkeypatch: Any) -> None:
    from coordinator.engine.nodes import base, step

    run = new_run(PAR)
    drain(run)
    check_moves(run.sim)
    real = step.edges
    monkeypatch.setitem(base.KINDS, "tcc", step.KIND._replace(
        edges=lambda spec: [e for e in real(spec) if e[:2] != ("tried", "confirming")]))
    with pytest.raises(AssertionError, match="tried -> confirming"):
        check_moves(run.sim)


def test_participant_model_is_a_barrier() -> None:
    world = Participants()
    run = new_run(saga(act("a")))
    run.world = world
    cmd = run.sim.last("a")
    run.sim.repair("cancel")  # the compensation races ahead of the action's reply
    world.answer(run.sim, run.sim.last("a", Phase.COMPENSATE))
    world.answer(run.sim, cmd)  # the late action is refused by the barrier
    assert world.stored[("a", Phase.ACTION)][1] is ErrorKind.BARRIER_REFUSED
    assert not world.applied.get("a")


def test_the_invariants_catch_a_child_saga_left_applied(monkeypatch: Any) -> None:
    """Random trees hold child saga nodes too, answered for by the Simulator like a
    participant; a parent that never cancels its child breaks the rollback check."""
    from coordinator.engine.nodes import step
    from coordinator.language.nodes import ChildSaga

    def failing_run() -> Run:
        run = new_run(saga(ChildSaga("kid", "child_type"), act("after")))
        ok(run, "kid")
        no(run, "after")
        drain(run)
        return run

    check_invariants(failing_run())
    real = step.needs_undo
    monkeypatch.setattr(step, "needs_undo", lambda spec, state: spec.child is None and real(
        spec, state))  # the broken rule: rollback forgets child sagas
    with pytest.raises(AssertionError, match="effects left after rollback"):
        check_invariants(failing_run())
