"""Random subtrees under a catch and in a loop, under random replies: every run ends
legally, undoes each effect at most once and in reverse order along each path, moves only
along the exported machine's edges, and replays to the same state."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from participant_sdk.protocol import ErrorKind, Outcome
from tests.unit.tree_support import (
    check_invariants,
    check_moves,
    check_replay,
    compile_tree,
    drain,
    drive_randomly,
    flow_steps,
    new_run,
    outstanding,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=flow_steps(), data=st.data(), n=st.integers(1, 3), flag=st.booleans())
def test_catches_and_loops_under_adversity_end_legally_undo_once_and_replay(
    steps: tuple[Any, ...], data: st.DataObject, n: int, flag: bool
) -> None:
    run = new_run(compile_tree(steps), n=n, flag=flag)
    drive_randomly(data, run)
    drain(run)
    state = run.sim.current
    caught = state.steps["catch"].payload
    event(f"caught: {caught['kind'] if caught else 'nothing'}")
    event(f"loop iterations: {state.steps['loop'].count}")
    check_invariants(run)
    check_moves(run.sim)
    check_replay(run.sim)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=flow_steps(), n=st.integers(1, 3), outcomes=st.lists(st.sampled_from(
    [Outcome.OK, Outcome.OK, Outcome.REJECTED, Outcome.FAILED]), max_size=30))
def test_catches_and_loops_with_replies_in_order_end_legally(
    steps: tuple[Any, ...], n: int, outcomes: list[Outcome]
) -> None:
    run = new_run(compile_tree(steps), n=n)
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
    caught = run.sim.current.steps["catch"].payload
    event(f"caught: {caught['kind'] if caught else 'nothing'}")
    event(f"end: {run.sim.current.status.value}")
    check_invariants(run)
    check_moves(run.sim)
    check_replay(run.sim)
