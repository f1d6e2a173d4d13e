"""``engine.quiet``: the marks that let a walk skip a for-each's unchanged items change nothing.

Every decision made with the marks must equal, field for field (state, commands, timers,
touched nodes, history note), the one a full walk makes from the same state without them;
and with the marks a reply visits only the item that replied and the one it starts, however
many items are in flight."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from coordinator.engine import CompiledSaga, Decision, InvalidTransition, advance, compile_saga
from coordinator.engine.events import Event
from coordinator.engine.nodes import base
from coordinator.engine.quiet import WAITING, Quiet
from coordinator.engine.simulate import Simulator
from coordinator.engine.state import SagaState, replace
from coordinator.language.nodes import ForEach, Parallel, WaitForSignal
from coordinator.language.saga import Saga, SagaStep, TccStep
from participant_sdk.protocol import CommandEnvelope, ErrorKind, Outcome, Phase
from tests.unit.tree_support import (
    check_invariants,
    check_replay,
    definitions,
    drain,
    drive_randomly,
    new_run,
)


def _unmarked(state: SagaState) -> SagaState:
    """The same state with no marks: its walks visit every item."""
    return replace(state, {"steps": dict(state.steps)})


def _full_walk(definition: CompiledSaga, state: SagaState, event: Event, now: Any
               ) -> Decision | InvalidTransition:
    try:
        return advance(definition, _unmarked(state), event, now)
    except InvalidTransition as exc:
        return exc


@contextmanager
def compared() -> Iterator[list[int]]:
    """Every ``Simulator.apply`` also decides without marks and must decide the same; yields
    a list whose length counts the decisions compared."""
    real = Simulator.apply
    seen: list[int] = []

    def apply(sim: Simulator, event: Event) -> Decision:
        before = sim.state
        full = None if before is None else _full_walk(sim.definition, before, event, sim.now)
        if isinstance(full, InvalidTransition):
            with pytest.raises(InvalidTransition):
                real(sim, event)
            raise full
        decision = real(sim, event)
        if full is not None:
            assert decision == full, f"marks changed the decision on {event.type}"
            assert decision.touched == full.touched
            seen.append(1)
        return decision

    with patch.object(Simulator, "apply", apply):
        yield seen


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(definition=definitions(), data=st.data(), n=st.integers(0, 3), flag=st.booleans())
def test_random_trees_decide_with_marks_as_with_a_full_walk(
    definition: CompiledSaga, data: st.DataObject, n: int, flag: bool
) -> None:
    with compared():
        run = new_run(definition, n=n, flag=flag)
        drive_randomly(data, run)
        drain(run)
    check_invariants(run)
    check_replay(run.sim)


class Count(BaseModel):
    count: int


def _hold_each(cap: int | None, wait: bool = False) -> CompiledSaga:
    body: tuple[Any, ...] = (TccStep("hold", "payments", "hold"),
                             SagaStep("ship", "shipping", "ship", compensable=True))
    if wait:  # a wait reads the saga's kept signals, not only its own node
        body = (Parallel("both", (TccStep("hold", "payments", "hold"),
                                  WaitForSignal("go", "go"))),)
    saga = type("HoldEachQ", (Saga,), {
        "name": "hold_each_q", "input_model": Count,
        "steps": (ForEach("lines", lambda ctx: list(range(ctx.input.count)),
                          max_concurrency=cap, max_items=100, body=body),
                  TccStep("check", "payments", "check"))})
    return compile_saga(saga)


def _drive(sim: Simulator, rng: random.Random, events: int,
           answer: Callable[[Any], tuple[Outcome, ErrorKind | None]]) -> None:
    """Up to ``events`` events in random order: a dead saga is retried by an operator, an
    idle one fires its next timer, else a random pending command gets ``answer``."""
    for _ in range(events):
        if sim.current.status.value == "dead":
            sim.repair("retry", step=sim.current.dead_step)
            continue
        if not sim.pending:
            if not sim.timers:
                return
            sim.fire_next()
            continue
        command = rng.choice(list(sim.pending.values()))
        outcome, kind = answer(command)
        sim.reply_to(command, outcome, kind=kind)


@pytest.mark.parametrize("cap", [None, 1, 3])
@pytest.mark.parametrize("seed", range(6))
def test_many_items_in_any_order_on_every_path_decide_as_a_full_walk(
    cap: int | None, seed: int
) -> None:
    """Replies in random order, some failing (retries), the check refused or not, cancels
    refused for good (the saga dies, an operator retries): every decision is compared."""
    rng = random.Random(seed)
    refuse_check = seed % 2 == 0
    with compared() as seen:
        sim = Simulator(_hold_each(cap), saga_id=uuid.UUID(int=seed + 1), check_touched=False)
        sim.start({"count": 25})
        _drive(sim, rng, 2_000, lambda command: _answer(rng, command, refuse_check))
    assert sim.current.status.value in ("completed", "compensated")
    assert len(seen) > 60


def _answer(rng: random.Random, command: CommandEnvelope, refuse_check: bool
            ) -> tuple[Outcome, ErrorKind | None]:
    if command.step == "check" and command.phase is Phase.TRY and refuse_check:
        return Outcome.REJECTED, ErrorKind.BUSINESS
    roll = rng.random()
    if command.phase is Phase.CANCEL and roll < 0.1:
        return Outcome.FAILED, ErrorKind.BAD_COMMAND  # refused for good: the saga dies
    if roll < 0.15:
        return Outcome.FAILED, ErrorKind.TRANSIENT  # retried after a backoff
    return Outcome.OK, None


def test_a_signal_reaches_a_wait_in_a_marked_item() -> None:
    """A wait inside an item reads the kept signals, not only its own node: a signal must be
    taken by the next walk though no node of the item changed since it was marked."""
    with compared():
        sim = Simulator(_hold_each(2, wait=True), check_touched=False)
        sim.start({"count": 4})
        first = next(iter(sim.pending.values()))
        sim.reply_to(first)  # lines[0].hold tried; lines[0].go waits; lines[1] likewise
        sim.signal("go", signal_id="s1")
        assert sim.current.steps["lines[0].go"].phase.value == "succeeded"


def _visits(walk: Callable[..., Any], calls: list[str]) -> Callable[..., Any]:
    def counted(w: Any, node: Any, key: str, scope: Any, *rest: Any) -> Any:
        if key.startswith("lines[") and key.endswith("]"):
            calls.append(key)
        return walk(w, node, key, scope, *rest)
    return counted


@pytest.mark.parametrize("path", ["forward", "confirm", "rollback"])
def test_a_reply_visits_the_item_that_replied_and_the_one_it_starts(path: str) -> None:
    sim = Simulator(_hold_each(10), check_touched=False)
    sim.start({"count": 60})
    calls: list[str] = []
    timed = {"forward": Phase.TRY, "confirm": Phase.CONFIRM, "rollback": Phase.CANCEL}[path]
    checked = 0
    from coordinator.engine import confirming
    with patch.object(base, "forward", _visits(base.forward, calls)), \
            patch.object(base, "undo", _visits(base.undo, calls)), \
            patch.object(confirming, "confirm", _visits(confirming.confirm, calls)):
        while sim.pending:
            command = next(iter(sim.pending.values()))
            outcome, kind = Outcome.OK, None
            if command.step == "check" and command.phase is Phase.TRY and path == "rollback":
                outcome, kind = Outcome.REJECTED, ErrorKind.BUSINESS
            calls.clear()
            sim.reply_to(command, outcome, kind=kind)
            if (command.phase is timed and command.step.startswith("lines[")
                    and command.step.endswith(".hold") and 10 <= _index(command) < 40):
                assert len(calls) <= 2, (command.step, calls)
                checked += 1
    assert checked >= 25


def _index(command: CommandEnvelope) -> int:
    return int(command.step[len("lines["):command.step.index("]")])


def test_marks_travel_only_with_the_mapping_they_describe() -> None:
    """A state handed to ``advance`` twice finds its marks intact; a mapping read back from
    JSON carries none; another definition does not trust them."""
    definition = _hold_each(3)
    sim = Simulator(definition, check_touched=False)
    sim.start({"count": 10})
    state = sim.current
    commands = list(sim.pending.values())
    memo = state.steps.memo  # type: ignore[attr-defined]
    assert isinstance(memo, Quiet) and memo.marks["lines"] == {0: WAITING, 1: WAITING, 2: WAITING}
    # A refusal fails the item and starts the rollback (every mark of the decision dropped):
    # the state it started from keeps its own.
    sim.reply_to(commands[0], Outcome.REJECTED, kind=ErrorKind.BUSINESS)
    assert sim.current.stage.value == "rollback"
    assert memo.marks["lines"] == {0: WAITING, 1: WAITING, 2: WAITING}
    again = Simulator(definition, check_touched=False)
    again.state = state
    again.reply_to(commands[1])
    assert memo.marks["lines"] == {0: WAITING, 1: WAITING, 2: WAITING}
    assert again.current.steps.memo.marks["lines"] is not memo.marks["lines"]  # type: ignore[attr-defined]
    assert Quiet.inherit(dict(state.steps), definition).marks == {}
    assert Quiet.inherit(state.steps, _hold_each(3)).marks == {}
    assert Quiet.inherit(SagaState.from_json(state.to_json()).steps, definition).marks == {}


def test_a_field_change_without_a_node_edit_publishes_a_mapping_without_the_old_marks() -> None:
    """The marks describe the state they were made for: a decision that changes a field a
    walk may read, and no node, must not hand the old mapping (and its marks) on."""
    from datetime import UTC, datetime

    from coordinator.engine.work import Work

    definition = _hold_each(3)
    sim = Simulator(definition, check_touched=False)
    sim.start({"count": 10})
    state = sim.current
    w = Work(definition, state, datetime(2026, 1, 2, tzinfo=UTC))
    w.update(completions=w.get("completions"))  # neutral: the marks hold
    assert w.state.steps is state.steps
    w.update(reason="a field a walk may read")
    steps = w.state.steps
    assert steps is not state.steps and steps == state.steps
    assert not any(steps.memo.marks.values())  # type: ignore[attr-defined]
    assert state.steps.memo.marks["lines"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed", range(3))
def test_the_bound_check_by_key_agrees_with_the_walk_over_leaves(seed: int) -> None:
    """``foreach.in_phase`` reads a flat body's steps by key; it must answer as the general
    walk over the item's leaves does, for every item, at every decision, in every phase."""
    from datetime import UTC, datetime

    from coordinator.engine.nodes import foreach
    from coordinator.engine.state import StepPhase
    from coordinator.engine.work import Work

    definition = _hold_each(3)
    body = definition.root.children[0].children[0]
    assert foreach._flat_steps(body) == ("hold", "ship")
    rng = random.Random(seed)
    sim = Simulator(definition, saga_id=uuid.UUID(int=seed + 1), check_touched=False)
    sim.start({"count": 8})
    checked = 0
    for _ in range(400):
        w = Work(definition, sim.current, datetime(2026, 1, 2, tzinfo=UTC))
        scope = base.Scope(parent="lines")
        for index in range(8):
            key = f"lines[{index}]"
            for phase in StepPhase:
                want = any(w.step(k).phase is phase
                           for _, k, _ in base.leaves(w, body, key, scope))
                assert foreach.in_phase(w, body, key, scope, frozenset({phase})) is want
                checked += want
        if sim.current.status.value == "dead":
            sim.repair("retry", step=sim.current.dead_step)
        elif sim.pending:
            command = rng.choice(list(sim.pending.values()))
            outcome, kind = _answer(rng, command, seed % 2 == 0)
            sim.reply_to(command, outcome, kind=kind)
        else:
            break
    assert checked > 50


def _nested(cap: int | None) -> CompiledSaga:
    """A for-each of for-eaches whose items race two holds and catch a refused ship."""
    from coordinator.language.flow_nodes import Catch
    from coordinator.language.nodes import Race

    inner = ForEach("inner", lambda ctx: list(range(3)), max_concurrency=2, max_items=5, body=(
        Race("quote", (TccStep("a", "payments", "hold"), TccStep("b", "payments", "hold"))),
        Catch("safe", body=(SagaStep("ship", "shipping", "ship", compensable=True),),
              fallback=(TccStep("note", "payments", "note"),), failures=("business",)),
    ))
    saga = type("NestedQ", (Saga,), {
        "name": "nested_q", "input_model": Count,
        "steps": (ForEach("outer", lambda ctx: list(range(ctx.input.count)),
                          max_concurrency=cap, max_items=10, body=(inner,)),
                  TccStep("check", "payments", "check"))})
    return compile_saga(saga)


@pytest.mark.parametrize("cap", [None, 2])
@pytest.mark.parametrize("seed", range(5))
def test_nested_for_eaches_with_races_and_catches_decide_as_a_full_walk(
    cap: int | None, seed: int
) -> None:
    rng = random.Random(100 + seed)
    with compared() as seen:
        sim = Simulator(_nested(cap), saga_id=uuid.UUID(int=seed + 9), check_touched=False)
        sim.start({"count": 4})

        def answer(command: Any) -> tuple[Outcome, ErrorKind | None]:
            if command.step.endswith(".ship") and rng.random() < 0.3:
                return Outcome.REJECTED, ErrorKind.BUSINESS  # caught: the fallback runs
            return _answer(rng, command, seed % 2 == 0)

        _drive(sim, rng, 3_000, answer)
    assert sim.current.status.value in ("completed", "compensated")
    assert len(seen) > 40


def test_command_ids_are_exactly_uuid5_so_sagas_in_flight_keep_their_ids() -> None:
    import copy
    import pickle
    import uuid

    from coordinator.engine.state import Phase
    from coordinator.engine.work import MESSAGE_NAMESPACE, message_id

    for n in range(200):
        saga_id = uuid.uuid4()
        step = f"lines[{n}].reserve_stöck"  # non-ASCII too: the name is hashed as UTF-8
        for phase in Phase:
            fast = message_id(saga_id, step, phase, n % 7 + 1)
            slow = uuid.uuid5(MESSAGE_NAMESPACE, f"{saga_id}/{step}/{phase.value}/{n % 7 + 1}")
            assert fast == slow and hash(fast) == hash(slow) and str(fast) == str(slow)
            assert fast.version == 5 and fast.variant == uuid.RFC_4122
            assert pickle.loads(pickle.dumps(fast)) == slow and copy.copy(fast) == slow
