"""Version guards (``flow.Patched``): sagas that passed the guard's point on the old code keep
the old path, others take the new one; the choice is recorded once and replay follows it."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.engine import Status, StepPhase
from coordinator.engine.compiled import CompiledSaga
from coordinator.engine.decide import replay
from coordinator.engine.events import event_from_json
from coordinator.language.nodes import ForEach, Parallel, Patched, Sequence
from coordinator.language.saga import DefinitionError
from participant_sdk.protocol import ErrorKind, Outcome
from tests.unit.test_engine_tree import act as step
from tests.unit.test_engine_tree import saga, sent
from tests.unit.tree_support import check_replay, drain, new_run


def _v(*nodes: Any) -> CompiledSaga:
    return saga(*nodes)


BEFORE = _v(step("a"), step("charge"), step("end"))
#: The same version after the change "fraud-check": a step added before ``charge``, and
#: ``charge`` replaced by ``charge_v2``.
AFTER = _v(step("a"), Patched("fraud-check", new=(step("fraud"), step("charge_v2")),
                              old=step("charge")), step("end"))
ADDED = _v(step("a"), Patched("audit", new=step("audit_log")), step("charge"), step("end"))


def _deploy(run: Any, definition: CompiledSaga) -> None:
    run.sim.definition = definition


def _replays_exactly(run: Any) -> None:
    """Replay of the whole history under the guarded class gives the stored snapshot (the
    decisions before the deploy were made by the class without the guard)."""
    assert run.sim.replayed().to_json() == run.sim.current.to_json()


def test_a_new_saga_takes_the_new_path_and_records_it() -> None:
    run = new_run(AFTER)
    drain(run)
    assert run.sim.current.status is Status.COMPLETED
    assert [s for s, _ in sent(run.sim)] == ["a", "fraud", "charge_v2", "end"]
    assert run.sim.current.patches == {"fraud-check": "new"}
    assert "charge" in run.sim.current.steps  # the old path's node stays pending
    assert any("patch fraud-check: new path" in h.note for h in run.sim.history)
    check_replay(run.sim)


def test_a_saga_inside_the_old_branch_keeps_the_old_path() -> None:
    run = new_run(BEFORE)
    run.world.answer(run.sim, run.sim.last())  # a done: charge is in flight on the old code
    _deploy(run, AFTER)
    drain(run)
    assert [s for s, _ in sent(run.sim)] == ["a", "charge", "end"]
    assert run.sim.current.patches == {"fraud-check": "old"}
    _replays_exactly(run)


def test_a_saga_past_an_added_node_does_not_run_it_late() -> None:
    run = new_run(_v(step("a"), step("charge"), step("end")))
    run.world.answer(run.sim, run.sim.last())
    run.world.answer(run.sim, run.sim.last())  # charge done: end in flight
    _deploy(run, ADDED)
    drain(run)
    assert [s for s, _ in sent(run.sim)] == ["a", "charge", "end"]
    assert run.sim.current.patches == {"audit": "old"}
    _replays_exactly(run)


def test_a_saga_before_the_point_takes_the_new_path() -> None:
    run = new_run(BEFORE)  # a in flight: the guard's point not reached yet
    _deploy(run, AFTER)
    drain(run)
    assert [s for s, _ in sent(run.sim)] == ["a", "fraud", "charge_v2", "end"]
    assert run.sim.current.patches == {"fraud-check": "new"}
    _replays_exactly(run)


def test_replay_follows_the_recorded_choice() -> None:
    """An old saga that decided late, replayed from its start under the guarded class, takes
    the path recorded on the history's event (the rule at its first event would say new)."""
    run = new_run(BEFORE)
    run.world.answer(run.sim, run.sim.last())
    _deploy(run, AFTER)
    run.world.answer(run.sim, run.sim.last())  # charge done: the walk reaches the guard
    assert run.sim.history[-1].event.patches == {"fraud-check": "old"}
    assert "patches" in run.sim.history[-1].event.to_json()
    assert "patches" not in run.sim.history[0].event.to_json()  # rows stay as they were
    drain(run)
    _replays_exactly(run)
    unrecorded = [(event_from_json({**h.event.to_json(), "patches": {}}), h.at)
                  for h in run.sim.history]
    # Without the record (the rule at the first event would say new), replay takes the old
    # path: an unrecorded guard was never reached on the guarded code. It stays unrecorded.
    again = replay(AFTER, unrecorded)
    assert again.patches == {} and "fraud" not in again.steps
    assert again.steps["charge"].phase is StepPhase.SUCCEEDED


def test_rollback_undoes_the_path_taken() -> None:
    run = new_run(_v(Patched("p", new=(step("x"), step("y"))), step("boom")))
    run.world.answer(run.sim, run.sim.last())
    run.world.answer(run.sim, run.sim.last())
    run.world.answer(run.sim, run.sim.last(), Outcome.REJECTED, ErrorKind.BUSINESS)
    drain(run)
    assert run.sim.current.status is Status.COMPENSATED
    # boom's own (null) compensation first, then the guard's path in reverse order.
    assert [s for s, p in sent(run.sim) if p == "compensate"] == ["boom", "y", "x"]
    check_replay(run.sim)


def test_the_exported_machine_shows_both_paths() -> None:
    states = set(AFTER.states)
    assert {"charge.executing", "charge_v2.executing", "fraud.executing"} <= states
    node = AFTER.to_json()["nodes"][1]
    assert node["kind"] == "patched" and node["change"] == "fraud-check"
    assert (node["new"], node["old"]) == (["fraud", "charge_v2"], ["charge"])


def test_guard_definition_errors() -> None:
    with pytest.raises(DefinitionError, match="change must be an identifier-like"):
        _v(Patched("bad id!", new=step("x")))
    with pytest.raises(DefinitionError, match="duplicate node name 'x'"):
        _v(Patched("p", new=step("x"), old=step("x")))
    with pytest.raises(DefinitionError, match="new is empty"):
        _v(Patched("p", new=()))


def test_a_guard_is_drawn_in_the_diagram_and_the_console() -> None:
    from coordinator.sagas.diagram import mermaid
    from coordinator.ui.diagram_svg import state_svg

    assert "version guard fraud-check" in mermaid(AFTER)
    assert "version guard fraud-check" in state_svg(AFTER)


def test_a_guard_in_a_group_finished_on_the_old_code_is_undone_by_its_old_path() -> None:
    """The sequence ``s`` succeeded before the guard was written: no walk reaches the guard
    again, so it stays undecided; the rollback undoes the old path, and replay takes it."""
    before = _v(Sequence("s", (step("x"), step("y"))), step("boom"))
    after = _v(Sequence("s", (Patched("x-v2", new=step("x2"), old=step("x")), step("y"))),
               step("boom"))
    run = new_run(before)
    run.world.answer(run.sim, run.sim.last())
    run.world.answer(run.sim, run.sim.last())  # s done: boom in flight
    _deploy(run, after)
    run.world.answer(run.sim, run.sim.last(), Outcome.REJECTED, ErrorKind.BUSINESS)
    drain(run)
    assert run.sim.current.status is Status.COMPENSATED
    assert run.sim.current.patches == {}  # undecided: the drain report keeps it live
    assert [s for s, p in sent(run.sim) if p == "compensate"] == ["boom", "y", "x"]
    assert run.world.undo_effects == {"x": 1, "y": 1}
    _replays_exactly(run)


def test_one_for_each_item_past_the_guard_keeps_every_item_on_the_old_path() -> None:
    """Item 0 ran ``y`` on the old code; item 1 reaches the guard first on the new code. The
    saga passed the point (in item 0), so it takes the old path everywhere: one saga, one
    path, and its rollback undoes item 0's ``y``."""
    def each(*body: Any) -> CompiledSaga:
        return _v(ForEach("f", items=lambda ctx: [0, 1], body=body, max_concurrency=1),
                  step("boom"))

    run = new_run(each(step("x"), step("y")))
    for _ in range(2):  # f[0].x, f[0].y done: f[1].x in flight
        run.world.answer(run.sim, run.sim.last())
    _deploy(run, each(step("x"), Patched("y-v2", new=step("y2"), old=step("y"))))
    run.world.answer(run.sim, run.sim.last())  # f[1].x: the walk reaches item 1's guard
    assert run.sim.current.patches == {"y-v2": "old"}
    run.world.answer(run.sim, run.sim.last("f[1].y"))
    run.world.answer(run.sim, run.sim.last("boom"), Outcome.REJECTED, ErrorKind.BUSINESS)
    drain(run)
    assert run.sim.current.status is Status.COMPENSATED
    assert run.world.undo_effects == dict.fromkeys(["f[0].x", "f[0].y", "f[1].x", "f[1].y"], 1)
    _replays_exactly(run)


def test_guards_of_one_change_take_one_path() -> None:
    """``b`` ran (in a parallel finished on the old code) under the change's first guard; the
    second, reached first on the new code, takes the old path too."""
    before = _v(Parallel("p", (step("b"), step("c"))), step("d"), step("e"), step("boom"))
    after = _v(Parallel("p", (Patched("v2", new=step("b2"), old=step("b"), name="g1"),
                              step("c"))),
               step("d"), Patched("v2", new=step("e2"), old=step("e"), name="g2"),
               step("boom"))
    run = new_run(before)
    run.world.answer(run.sim, run.sim.last("b"))
    run.world.answer(run.sim, run.sim.last("c"))  # p done: d in flight
    _deploy(run, after)
    run.world.answer(run.sim, run.sim.last("d"))  # the walk reaches g2
    assert run.sim.current.patches == {"v2": "old"}
    run.world.answer(run.sim, run.sim.last("e"))
    run.world.answer(run.sim, run.sim.last("boom"), Outcome.REJECTED, ErrorKind.BUSINESS)
    drain(run)
    assert run.world.undo_effects == dict.fromkeys("bcde", 1)
    _replays_exactly(run)


def test_a_nested_guard_whose_path_was_skipped_does_not_hold_up_the_undo_order() -> None:
    """``s4`` is skipped (its ``when`` says no): the inner guard ran nothing, so the outer
    guard completed when ``s2`` did, before ``s5``; ``s5`` is undone first."""
    when = step("s4", when=lambda ctx: ctx.input.flag)
    run = new_run(_v(Patched("g1", new=(step("s2"), Patched("g3", new=when))), step("s5"),
                     step("boom")), flag=False)
    run.world.answer(run.sim, run.sim.last("s2"))
    run.world.answer(run.sim, run.sim.last("s5"))
    run.world.answer(run.sim, run.sim.last("boom"), Outcome.REJECTED, ErrorKind.BUSINESS)
    drain(run)
    assert run.sim.current.steps["s4"].phase is StepPhase.SKIPPED
    assert [s for s, p in sent(run.sim) if p == "compensate"] == ["boom", "s5", "s2"]
    check_replay(run.sim)


def test_a_guard_on_another_guards_path_sees_the_nodes_after_the_outer_guard() -> None:
    """``c1`` added ``a`` before ``y``; ``c2`` later put both under a guard of its own. A saga
    that ran ``y`` on the code before either does not run ``a`` late."""
    run = new_run(_v(step("y"), step("z"), step("end")))
    run.world.answer(run.sim, run.sim.last())  # y done: z in flight
    _deploy(run, _v(Patched("c2", new=step("w"), old=(Patched("c1", new=step("a")), step("y"))),
                    step("z"), step("end")))
    drain(run)
    assert [s for s, _ in sent(run.sim)] == ["y", "z", "end"]
    assert run.sim.current.patches == {"c2": "old", "c1": "old"}
    _replays_exactly(run)
