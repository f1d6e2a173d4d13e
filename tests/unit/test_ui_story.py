"""The diagram tells the story (issue 42): marks per node from a saga's state, guards drawn on
their edges, and the marks and counts in the SVG."""

from __future__ import annotations

from coordinator.engine import Status
from coordinator.engine.simulate import Simulator
from coordinator.ui.diagram_svg import state_svg
from coordinator.ui.story import null_compensation, saga_marks
from participant_sdk.protocol import Outcome
from tests.unit.test_engine_fixtures import AllSaga, Guarded, compiled


def _reversible(sim: Simulator) -> set[str]:
    return {s.name for s in sim.definition.steps if s.reversible}


def test_a_dead_rollback_shows_where_it_died_the_null_undo_and_the_skipped_step() -> None:
    sim = Simulator(compiled(AllSaga))
    sim.start({})
    sim.reply()
    sim.reply(Outcome.REJECTED)  # s2 rejected: its compensation is a null compensation
    sim.reply()
    sim.reply(Outcome.REJECTED)  # s1's compensation refused: dead at s1
    state = sim.current
    assert state.status is Status.DEAD
    assert saga_marks(state, _reversible(sim)) == {"s1": "died", "s2": "null", "s3": "skipped"}
    assert null_compensation(state.steps["s2"]) and not null_compensation(state.steps["s1"])
    svg = state_svg(sim.definition, ["dead"], marks=saga_marks(state, _reversible(sim)))
    assert 'class="state mark-died" data-state="s1"' in svg and "died here" in svg
    assert "null compensation" in svg and "skipped" in svg


def test_a_rollback_in_progress_shows_what_is_left_to_undo() -> None:
    sim = Simulator(compiled(AllSaga))
    sim.start({})
    sim.reply()
    sim.reply()
    sim.reply(Outcome.REJECTED)  # s3 rejected: s3's (null) undo, then s2's, then s1's
    marks = saga_marks(sim.current, _reversible(sim))
    assert marks["s3"] == "here" and marks["s2"] == "undo" and marks["s1"] == "undo"


def test_a_guard_that_said_no_is_skipped_and_drawn_on_its_edge() -> None:
    sim = Simulator(compiled(Guarded))
    sim.start({"ship": False})
    while sim.current.status is not Status.COMPLETED:
        sim.reply()
    marks = saga_marks(sim.current, _reversible(sim))
    assert marks == {"first": "done", "ship": "skipped", "last": "done"}
    svg = state_svg(sim.definition, ["completed"], marks=marks)
    assert 'class="edge guarded"' in svg and '<text class="guard"' in svg
    assert "when guard" in svg


def test_the_type_page_counts_sagas_at_each_node() -> None:
    svg = state_svg(compiled(AllSaga), marks={"s2": "here"}, counts={"s2": 7})
    assert 'class="state mark-here" data-state="s2"' in svg and "· 7 here" in svg
