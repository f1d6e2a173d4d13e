"""A version guard as the only node of a parallel, race or choice branch: sagas started before
the guard keep the keys and parents they had (their rollback undoes the branch, a race's win
order stands), new sagas take the new path."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.engine import Status, StepPhase
from coordinator.engine.compiled import CompiledSaga, GroupKind, StepKind
from coordinator.language.nodes import Choice, Parallel, Patched, Race
from coordinator.language.saga import DefinitionError
from participant_sdk.protocol import Phase
from tests.unit.test_engine_tree import act, no, ok, saga, sent
from tests.unit.tree_support import Run, check_invariants, check_replay, drain, new_run


def _deploy(run: Run, definition: CompiledSaga) -> None:
    run.sim.definition = definition


def _replays_exactly(run: Run) -> None:
    assert run.sim.replayed().to_json() == run.sim.current.to_json()


def _undone(run: Run) -> list[str]:
    return [s for s, p in sent(run.sim) if p in ("compensate", "cancel")]


def _par(branch: Any) -> CompiledSaga:
    return saga(act("a"), Parallel("p", (branch, act("c"))), act("boom"))


PAR_V1 = _par(act("b"))
PAR_GUARDED = _par(Patched("b-v2", new=act("b2"), old=act("b")))


def _rolled_back_once(run: Run, *steps: str) -> None:
    assert run.sim.current.status is Status.COMPENSATED
    assert {k: run.world.undo_effects.get(k, 0) for k in steps} == dict.fromkeys(steps, 1)
    check_invariants(run)


def test_a_guard_alone_in_a_branch_is_the_branch() -> None:
    """No sequence is wrapped around it: the old node sits under the parallel, as before."""
    p = PAR_GUARDED.node("p")
    assert [c.kind for c in p.children] == [GroupKind.PATCHED, StepKind.SAGA]
    assert PAR_GUARDED.parents["b"] == "b-v2" and "p.0" not in PAR_GUARDED.order
    assert PAR_GUARDED.parents["b-v2"] == "p"


def test_old_saga_past_the_parallel_undoes_the_old_branch_once() -> None:
    run = new_run(PAR_V1)
    ok(run, "a")
    ok(run, "b")
    ok(run, "c")  # the parallel succeeded on the old code: boom in flight
    _deploy(run, PAR_GUARDED)
    no(run, "boom")
    drain(run)
    _rolled_back_once(run, "a", "b", "c")
    assert "b2" not in {s for s, _ in sent(run.sim)}
    _replays_exactly(run)


def test_old_saga_mid_branch_finishes_on_the_old_path_then_rolls_back() -> None:
    run = new_run(PAR_V1)
    ok(run, "a")  # b and c in flight on the old code
    _deploy(run, PAR_GUARDED)
    ok(run, "b")
    ok(run, "c")
    assert run.sim.current.patches == {"b-v2": "old"}
    assert run.sim.current.steps["b"].parent == "p"
    no(run, "boom")
    drain(run)
    _rolled_back_once(run, "a", "b", "c")
    assert "b2" not in {s for s, _ in sent(run.sim)}
    _replays_exactly(run)


def test_new_saga_takes_the_new_branch_and_rolls_it_back() -> None:
    run = new_run(PAR_GUARDED)
    ok(run, "a")
    assert sorted(sent(run.sim, 1)) == [("b2", "action"), ("c", "action")]
    ok(run, "b2")
    ok(run, "c")
    no(run, "boom")
    drain(run)
    _rolled_back_once(run, "a", "b2", "c")
    assert run.sim.current.steps["b2"].parent == "p"
    assert run.sim.current.steps["b"].phase is StepPhase.PENDING
    check_replay(run.sim)


def test_new_saga_with_a_longer_new_branch_undoes_it_in_reverse() -> None:
    definition = _par(Patched("b-v2", new=(act("b1"), act("b2")), old=act("b")))
    run = new_run(definition)
    ok(run, "a")
    ok(run, "b1")
    ok(run, "b2")
    ok(run, "c")
    no(run, "boom")
    drain(run)
    _rolled_back_once(run, "a", "b1", "b2", "c")
    undone = _undone(run)
    assert undone.index("b2") < undone.index("b1")
    check_replay(run.sim)


def test_a_branch_of_several_nodes_keeps_its_sequence_on_the_old_path() -> None:
    """Before the guard the branch was ``(b, d)``: the sequence ``p.0``; the old path keeps
    it, so an old saga's ``b`` and ``d`` still sit under it."""
    v1 = _par((act("b"), act("d")))
    guarded = _par(Patched("b-v2", new=act("b2"), old=(act("b"), act("d"))))
    assert guarded.parents["b"] == "p.0" == v1.parents["b"]
    run = new_run(v1)
    ok(run, "a")
    ok(run, "b")
    ok(run, "d")
    ok(run, "c")
    _deploy(run, guarded)
    no(run, "boom")
    drain(run)
    _rolled_back_once(run, "a", "b", "d", "c")
    _replays_exactly(run)


# -- race --------------------------------------------------------------------------------------


def _race(branch: Any, quorum: int = 2) -> CompiledSaga:
    """The guarded branch comes last: a win order by branch would differ from the real one."""
    return saga(Race("r", (act("c"), act("d"), branch), quorum=quorum), act("boom",
                payload=lambda ctx: {"won": ctx.results["r"]}))


RACE_V1 = _race(act("b"))
RACE_GUARDED = _race(Patched("b-v2", new=act("b2"), old=act("b")))


def test_old_race_won_by_the_guarded_branch_first_keeps_its_win_order() -> None:
    """``b`` finished before the deploy, ``c`` after it: ``b`` won first."""
    run = new_run(RACE_V1)
    ok(run, "b")
    _deploy(run, RACE_GUARDED)
    ok(run, "c")
    race = run.sim.current.steps["r"]
    assert race.phase is StepPhase.SUCCEEDED and race.winners == ["b", "c"]
    assert run.sim.last("boom").payload == {"won": [{"from": "b"}, {"from": "c"}]}
    no(run, "boom")
    drain(run)
    _rolled_back_once(run, "b", "c")
    assert ("d", "compensate") in sent(run.sim)  # it lost: undone (a null compensation)
    _replays_exactly(run)


def test_old_race_past_its_win_undoes_the_guarded_winner_once() -> None:
    run = new_run(RACE_V1)
    ok(run, "c")
    ok(run, "b")
    _deploy(run, RACE_GUARDED)
    no(run, "boom")
    drain(run)
    _rolled_back_once(run, "b", "c")
    _replays_exactly(run)


def test_a_guarded_loser_is_undone_in_the_background_once() -> None:
    run = new_run(_race(Patched("b-v2", new=(act("b1"), act("b2")), old=act("b")), quorum=1))
    ok(run, "b1")  # b2 in flight
    ok(run, "c")  # c wins: the guard's new path is given up
    assert run.sim.current.steps["r"].winners == ["c"]
    ok(run, "boom")
    drain(run)
    assert run.sim.current.status is Status.COMPLETED
    assert run.world.undo_effects.get("b1") == 1
    undone = _undone(run)
    assert undone.index("b2") < undone.index("b1")  # the path's sequence undoes in reverse
    check_invariants(run)
    check_replay(run.sim)


def test_an_old_race_loser_under_a_new_guard_is_undone_once() -> None:
    run = new_run(_race(act("b"), quorum=1))
    _deploy(run, _race(Patched("b-v2", new=act("b2"), old=act("b")), quorum=1))
    ok(run, "c")  # b in flight on the old code loses
    assert run.sim.current.patches == {"b-v2": "old"}
    ok(run, "b", Phase.ACTION)  # b's late success: it applied, so it is undone
    ok(run, "boom")
    drain(run)
    assert run.sim.current.status is Status.COMPLETED
    assert run.world.undo_effects.get("b") == 1 and "b2" not in {s for s, _ in sent(run.sim)}
    check_invariants(run)
    _replays_exactly(run)


def test_new_race_won_by_the_new_path() -> None:
    run = new_run(RACE_GUARDED)
    ok(run, "b2")
    ok(run, "d")
    assert run.sim.current.steps["r"].winners == ["b2", "d"]
    assert run.sim.last("boom").payload == {"won": [{"from": "b2"}, {"from": "d"}]}
    ok(run, "c", Phase.ACTION)  # the loser's late success: undone
    ok(run, "boom")
    drain(run)
    assert run.sim.current.status is Status.COMPLETED
    assert run.world.undo_effects == {"c": 1}
    check_invariants(run)
    check_replay(run.sim)


# -- choice ------------------------------------------------------------------------------------


def _choice(branch: Any) -> CompiledSaga:
    return saga(Choice("ch", ((lambda ctx: ctx.input.flag, branch),), otherwise=act("o")),
                act("boom"))


def test_old_choice_past_its_branch_undoes_the_old_path_once() -> None:
    run = new_run(_choice(act("b")))
    ok(run, "b")
    _deploy(run, _choice(Patched("b-v2", new=act("b2"), old=act("b"))))
    no(run, "boom")
    drain(run)
    _rolled_back_once(run, "b")
    _replays_exactly(run)


def test_a_guard_beside_a_branchs_only_node_is_a_definition_error() -> None:
    with pytest.raises(DefinitionError, match=r"p: branches\[0\]: without its guards this "
                                              r"branch is the single node 'b'"):
        _par((Patched("add-audit", new=act("audit")), act("b")))
    with pytest.raises(DefinitionError, match=r"ch: otherwise: .* single node 'o'"):
        saga(Choice("ch", ((lambda ctx: True, act("b")),),
                    otherwise=(act("o"), Patched("x", new=act("x1"), old=None))))
    # Guarding the whole branch, or a branch that had several nodes, is fine.
    _par(Patched("add-audit", new=(act("audit"), act("b2")), old=act("b")))
    _par((Patched("add-audit", new=act("audit")), act("b"), act("b3")))
    _par((Patched("n", new=act("n1")), Patched("m", new=act("m1"))))  # a new branch
