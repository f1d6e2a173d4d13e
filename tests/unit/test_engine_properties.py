"""Property-based tests of the core: random replies, duplicates, stale replies, lost messages,
timeouts and operator repairs, driven by a simulated participant and timer queue."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from coordinator.engine import (
    CompiledSaga,
    InvalidTransition,
    OperatorRepair,
    RepairVerb,
    SagaState,
    Status,
    StepPhase,
)
from coordinator.engine.compiled import StepKind
from coordinator.engine.simulate import Simulator
from participant_sdk.protocol import ErrorKind, Outcome, Phase
from tests.unit.test_engine_fixtures import ALL_DEFINITIONS, ORDER_INPUT
from tests.unit.tree_support import check_commands, check_moves, check_replay

ENDS = {Status.COMPLETED, Status.COMPENSATED, Status.CANCELLED, Status.DEAD}
REPLIES: list[tuple[Outcome, ErrorKind | None]] = [
    (Outcome.OK, None),
    (Outcome.OK, None),
    (Outcome.OK, None),
    (Outcome.REJECTED, ErrorKind.BUSINESS),
    (Outcome.FAILED, ErrorKind.TRANSIENT),
    (Outcome.FAILED, ErrorKind.UNEXPECTED),
    (Outcome.FAILED, ErrorKind.BAD_COMMAND),
]
ACTIONS = ["reply", "reply", "reply", "reply", "old_reply", "timer", "timer", "drop", "repair"]


def _input(definition: CompiledSaga, ship: bool) -> dict[str, Any]:
    return dict(ORDER_INPUT) if definition.name == "order" else {"n": 3, "ship": ship}


def _outstanding(sim: Simulator) -> list[Any]:
    ids = {s.outstanding.message_id for s in sim.current.steps.values() if s.outstanding}
    return [c for c in sim.sent if c.message_id in ids]


def _random_step(data: st.DataObject, sim: Simulator) -> Any:
    state = sim.current
    if state.status in ENDS:
        return None
    if data.draw(st.booleans(), label="repair_status"):
        return None  # the verb's default step
    return data.draw(st.sampled_from([*state.steps, "nope"]), label="repair_step")


def _drive_randomly(data: st.DataObject, sim: Simulator) -> bool:
    """Random adversity; returns whether an operator cancel was accepted."""
    cancelled = False
    for _ in range(data.draw(st.integers(0, 60), label="length")):
        if sim.current.status.is_terminal:
            break
        action = data.draw(st.sampled_from(ACTIONS), label="action")
        if action in ("reply", "old_reply"):
            pool = list(sim.pending.values()) if action == "reply" else sim.sent
            if not pool:
                continue
            cmd = data.draw(st.sampled_from(pool), label="command")
            outcome, kind = data.draw(st.sampled_from(REPLIES), label="outcome")
            sim.reply_to(cmd, outcome, kind=kind, result={"from": cmd.step})
        elif action == "timer":
            if sim.timers:
                timer = data.draw(st.sampled_from(sorted(sim.timers)), label="timer")
                sim.fire(sim.timers[timer])
        elif action == "drop":
            if sim.pending:
                lost = data.draw(st.sampled_from(sorted(sim.pending, key=str)), label="lost")
                del sim.pending[lost]
        else:
            verb = data.draw(st.sampled_from(list(RepairVerb)), label="verb")
            step = _random_step(data, sim)
            try:
                sim.repair(verb, step=step, result={"manual": True},
                           payload={"status": "compensated"} if verb is RepairVerb.RESOLVE
                           else None)
            except InvalidTransition:
                continue
            event(f"repair accepted: {verb.value}")
            cancelled = cancelled or verb is RepairVerb.CANCEL
    return cancelled


def _busy(state: SagaState) -> bool:
    """A command in flight or a retry pending (confirms of a dead saga still run)."""
    return any(s.outstanding is not None or s.retry_timer is not None
               for s in state.steps.values())


def _drain(sim: Simulator) -> None:
    """Participants recover and answer OK; timers fire in order. Must reach an end, and a dead
    saga's independent confirms still in flight must run out too."""
    for _ in range(5_000):
        if sim.current.status in ENDS and not _busy(sim.current):
            return
        live = _outstanding(sim)
        if live:
            sim.reply_to(live[0], Outcome.OK)
        elif sim.timers:
            sim.fire_next()
        else:
            raise AssertionError(f"stuck: no command in flight and no timer\n{sim.current}")
    raise AssertionError("did not finish")


def _check_invariants(sim: Simulator, cancelled: bool) -> None:
    state = sim.current
    assert state.status in ENDS
    assert state.status is not Status.CANCELLED or cancelled
    for step in state.steps.values():
        assert step.outstanding is None and step.retry_timer is None
    for timer in list(sim.timers.values()):  # leftovers are harmless: all stale
        assert sim.fire(timer).ignored is not None
    check_commands(sim)
    # Confirm all: every first confirm goes out in one decision, after the last forward
    # command; the confirm of one step never waits for another's acknowledgement.
    firsts = [i for i, d in enumerate(sim.decisions)
              if any(c.envelope.phase is Phase.CONFIRM and c.envelope.attempt == 1
                     for c in d.commands)]
    assert len(firsts) <= 1, f"first confirms spread over decisions {firsts}"
    if firsts:
        confirm_at = sim.sent.index(next(c for c in sim.sent if c.phase is Phase.CONFIRM))
        assert not any(c.phase.is_forward for c in sim.sent[confirm_at:])
        tried = {c.step for c in sim.sent if c.phase is Phase.TRY}
        confirmed = {c.envelope.step for c in sim.decisions[firsts[0]].commands
                     if c.envelope.phase is Phase.CONFIRM}
        skipped = {k for k, st_ in state.steps.items() if st_.note and "skipped by" in st_.note}
        assert tried - skipped <= confirmed | skipped, (tried, confirmed)
    # Rollback visits the failed step first, then completed steps in reverse completion.
    first_undo: list[str] = []
    for cmd in sim.sent:
        if cmd.phase.is_rollback and cmd.step not in first_undo:
            first_undo.append(cmd.step)
    seqs = [state.steps[k].completed_seq for k in first_undo]
    done = [s for s in seqs if s is not None]
    assert done == sorted(done, reverse=True), f"undo order {first_undo} seqs {seqs}"
    assert all(s is None for s in seqs[: len(seqs) - len(done)])
    if state.status is Status.COMPLETED and state.resolution is None:
        for key, step in state.steps.items():
            tcc = sim.definition.step(key).kind is StepKind.TCC
            ok = {StepPhase.CONFIRMED} if tcc else {StepPhase.SUCCEEDED}
            assert step.phase in ok | {StepPhase.SKIPPED}, (key, step.phase)
    if state.status in (Status.COMPENSATED, Status.CANCELLED) and state.resolution is None:
        assert not any(c.phase is Phase.CONFIRM for c in sim.sent)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), which=st.integers(0, len(ALL_DEFINITIONS) - 1), ship=st.booleans())
def test_random_adversity_ends_legally_and_replays(
    data: st.DataObject, which: int, ship: bool
) -> None:
    definition = ALL_DEFINITIONS[which]
    sim = Simulator(definition)
    sim.start(_input(definition, ship))
    cancelled = _drive_randomly(data, sim)
    event(f"after adversity: {sim.current.status.value}")
    _drain(sim)
    event(f"end: {sim.current.status.value}")
    _check_invariants(sim, cancelled)
    check_moves(sim)
    check_replay(sim)


@settings(max_examples=200, deadline=None)
@given(
    which=st.integers(0, len(ALL_DEFINITIONS) - 1),
    script=st.lists(st.sampled_from(REPLIES), max_size=40),
)
def test_in_order_replies_with_any_outcomes_end_legally(
    which: int, script: list[tuple[Outcome, ErrorKind | None]]
) -> None:
    definition = ALL_DEFINITIONS[which]
    sim = Simulator(definition)
    sim.start(_input(definition, True))
    for outcome, kind in script:
        if sim.current.status in ENDS:
            break
        live = _outstanding(sim)
        if live:
            sim.reply_to(live[0], outcome, kind=kind)
        elif sim.timers:
            sim.fire_next()
    _drain(sim)
    _check_invariants(sim, cancelled=False)
    check_replay(sim)


@settings(max_examples=100, deadline=None)
@given(which=st.integers(0, len(ALL_DEFINITIONS) - 1), data=st.data())
def test_dead_sagas_can_always_be_resolved(which: int, data: st.DataObject) -> None:
    definition = ALL_DEFINITIONS[which]
    sim = Simulator(definition)
    sim.start(_input(definition, True))
    while sim.current.status not in ENDS:
        live = _outstanding(sim)
        if live:
            sim.reply_to(live[0], Outcome.REJECTED)
        else:
            sim.fire_next()
    if sim.current.status is Status.DEAD:
        status = data.draw(st.sampled_from(["completed", "compensated"]))
        sim.apply(OperatorRepair(verb=RepairVerb.RESOLVE, actor="a", reason="r",
                                 payload={"status": status}))
        assert sim.current.status.value == status
    assert sim.current.status.is_terminal
    check_replay(sim)
