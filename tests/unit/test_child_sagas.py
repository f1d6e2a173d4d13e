"""Child sagas in the pure core: a parent and its children wired together in memory, the way
the store wires them (children started with the parent's decision, requests and answers
delivered later, each in the receiver's own ``advance``)."""

from __future__ import annotations

import re
import uuid
from collections import deque
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from coordinator.engine import (
    CompiledSaga,
    ParentRequest,
    SagaStarted,
    Stage,
    Status,
    StepPhase,
    TimerKind,
    compile_saga,
)
from coordinator.engine.decision import Decision, Delivery
from coordinator.engine.simulate import Simulator
from coordinator.language.nodes import ChildSaga, Parallel
from coordinator.language.saga import DefinitionError, Saga, SagaStep, TccStep
from participant_sdk.protocol import CommandEnvelope, Outcome, Phase


class Order(BaseModel):
    order_id: str = "o-1"
    fail_at: str = ""  # a step whose forward command is rejected


class Shipping(Saga):
    name = "shipping"
    input_model = Order
    steps = (
        TccStep("book", "carrier", "book"),
        SagaStep("label", "printer", "print", compensable=True),
    )


class Checkout(Saga):
    name = "checkout"
    input_model = Order
    steps = (
        TccStep("reserve", "payments", "reserve"),
        ChildSaga("ship", Shipping, deadline=timedelta(minutes=5)),
        SagaStep("notify", "mailer", "send", compensable=True),
    )


class TwoChildren(Saga):
    name = "two_children"
    input_model = Order
    steps = (Parallel("both", branches=(
        ChildSaga("east", Shipping), ChildSaga("west", Shipping))),
        TccStep("settle", "payments", "settle"))


Answer = Callable[[CommandEnvelope], Outcome | None]


class Family:
    """Sagas by id; routes child starts and deliveries like the store and timer loop do."""

    def __init__(self, *classes: type[Saga]) -> None:
        self.types: dict[str, CompiledSaga] = {c.name: compile_saga(c) for c in classes}
        self.sagas: dict[uuid.UUID, Simulator] = {}
        self.inbox: deque[Delivery] = deque()
        self.delivered: list[Delivery] = []

    def start(self, saga: type[Saga], **input: Any) -> Simulator:
        sim = Simulator(self.types[saga.name], saga_id=uuid.uuid4())
        self.sagas[sim.saga_id] = sim
        self._route(sim.start(Order(**input).model_dump()))
        return sim

    def _route(self, decision: Decision) -> None:
        for start in decision.children:
            child = Simulator(self.types[start.saga_type], saga_id=start.saga_id)
            self.sagas[child.saga_id] = child
            self._route(child.apply(SagaStarted(
                saga_id=start.saga_id, saga_type=start.saga_type,
                version=child.definition.version, input=start.input,
                trace_context=start.trace_context, parent=start.parent)))
        self.inbox.extend(decision.deliveries)

    def deliver(self, *, twice: bool = False) -> int:
        """Apply every queued delivery (``twice``: each one a second time, as a redelivery)."""
        count = 0
        while self.inbox:
            delivery = self.inbox.popleft()
            self.delivered.append(delivery)
            for _ in range(2 if twice else 1):
                self._route(self.sagas[delivery.saga_id].apply(delivery.event))
            count += 1
        return count

    def run(self, answer: Answer = lambda cmd: Outcome.OK, *, twice: bool = False) -> None:
        """Play every participant and deliver everything until nothing moves."""
        for _ in range(200):
            moved = self.deliver(twice=twice)
            for sim in list(self.sagas.values()):
                for cmd in list(sim.pending.values()):
                    outcome = answer(cmd)
                    if outcome is not None:
                        self._route(sim.reply_to(cmd, outcome, result={"by": cmd.step}))
                        moved += 1
            if not moved:
                return
        raise AssertionError("the family did not settle")

    def fire_next(self, sim: Simulator, kind: TimerKind) -> None:
        self._route(sim.fire_next(kind))

    def children_of(self, parent: Simulator) -> list[Simulator]:
        return [s for s in self.sagas.values()
                if s.state is not None and s.current.parent is not None
                and s.current.parent.saga_id == parent.saga_id]

    def phases(self, sim: Simulator) -> list[tuple[str, Phase]]:
        """Every command and child request ``sim`` sent, in order (from its history)."""
        sent = (re.fullmatch(r"(\S+): sent (\w+) attempt \d+", part)
                for h in sim.history for part in h.note.split("; "))
        return [(m[1], Phase(m[2])) for m in sent if m]


def rejecting(step: str) -> Answer:
    def answer(cmd: CommandEnvelope) -> Outcome:
        return Outcome.REJECTED if cmd.step == step and cmd.phase.is_forward else Outcome.OK
    return answer


def test_a_child_runs_prepares_and_confirms_with_its_parent() -> None:
    family = Family(Checkout, Shipping)
    parent = family.start(Checkout)
    family.run()
    (child,) = family.children_of(parent)
    assert parent.current.status is Status.COMPLETED
    assert child.current.status is Status.COMPLETED
    # The child confirmed its TCC step only after the parent's whole tree had succeeded.
    assert family.phases(child) == [("book", Phase.TRY), ("label", Phase.ACTION),
                                    ("book", Phase.CONFIRM)]
    notes = " ".join(h.note for h in child.history)
    assert notes.index("waiting for the parent") < notes.index("parent saga confirms")
    assert parent.current.steps["notify"].completed_seq is not None
    ship = parent.current.steps["ship"]
    assert ship.phase is StepPhase.CONFIRMED
    assert ship.result == {"saga_id": str(child.saga_id),
                           "results": {"book": {"by": "book"}, "label": {"by": "label"}}}
    for sim in (parent, child):
        assert sim.replayed() == sim.current


def test_the_parent_rolling_back_after_the_child_succeeded_cancels_the_child() -> None:
    family = Family(Checkout, Shipping)
    parent = family.start(Checkout)
    family.run(rejecting("notify"))
    (child,) = family.children_of(parent)
    assert parent.current.status is Status.COMPENSATED
    assert child.current.status is Status.COMPENSATED
    assert parent.current.steps["ship"].phase is StepPhase.CANCELLED
    # The child ran its own rollback: label compensated, then book cancelled; never confirmed.
    assert family.phases(child) == [("book", Phase.TRY), ("label", Phase.ACTION),
                                    ("label", Phase.COMPENSATE), ("book", Phase.CANCEL)]
    # Recorded in both histories: the parent's cancel request, the child's answer.
    assert any(isinstance(h.event, ParentRequest) and h.event.phase is Phase.CANCEL
               for h in child.history)
    assert any("ship: cancel ok" in h.note for h in parent.history)
    # Rollback order in the parent: the child before reserve (it completed after it).
    assert family.phases(parent)[-3:] == [("notify", Phase.COMPENSATE),
                                          ("ship", Phase.CANCEL), ("reserve", Phase.CANCEL)]
    for sim in (parent, child):
        assert sim.replayed() == sim.current


def test_a_failed_child_rolls_itself_back_and_fails_its_node() -> None:
    family = Family(Checkout, Shipping)
    parent = family.start(Checkout)
    family.run(rejecting("label"))
    (child,) = family.children_of(parent)
    assert child.current.status is Status.COMPENSATED
    # A refused action is compensated too (the barrier makes that a no-op if it never ran).
    assert family.phases(child) == [("book", Phase.TRY), ("label", Phase.ACTION),
                                    ("label", Phase.COMPENSATE), ("book", Phase.CANCEL)]
    assert parent.current.status is Status.COMPENSATED
    assert "child saga" in (parent.current.reason or "")
    assert "notify" not in {s for s, _ in family.phases(parent)}
    # The failed node is cancelled like a failed try; the child answers: nothing left to undo.
    assert parent.current.steps["ship"].phase is StepPhase.CANCELLED


def test_redelivered_requests_and_answers_change_nothing() -> None:
    once, twice = Family(Checkout, Shipping), Family(Checkout, Shipping)
    for family in (once, twice):
        family.run_parent = family.start(Checkout)  # type: ignore[attr-defined]
        family.run(rejecting("notify"), twice=family is twice)
    for family in (once, twice):
        parent = family.run_parent  # type: ignore[attr-defined]
        (child,) = family.children_of(parent)
        assert (parent.current.status, child.current.status) == (Status.COMPENSATED,
                                                                 Status.COMPENSATED)
        assert len(family.phases(child)) == 4
    ignored = [h.note for s in twice.sagas.values() for h in s.history
               if h.note.startswith("ignored")]
    assert len(ignored) == len(twice.delivered)


def test_the_parent_gives_up_on_a_slow_child_and_cancels_it() -> None:
    family = Family(Checkout, Shipping)
    parent = family.start(Checkout)
    family.run(lambda cmd: None if cmd.step == "label" else Outcome.OK)  # label never answers
    (child,) = family.children_of(parent)
    assert parent.current.steps["ship"].phase is StepPhase.TRYING
    family.fire_next(parent, TimerKind.DEADLINE)  # five minutes without the child's answer
    family.run(lambda cmd: None if cmd.step == "label" and cmd.phase is Phase.ACTION
               else Outcome.OK)
    assert parent.current.status is Status.COMPENSATED
    assert child.current.status is Status.COMPENSATED
    # label's action was in flight: the child treats it as possibly applied and compensates.
    assert ("label", Phase.COMPENSATE) in family.phases(child)


def test_parallel_children_both_confirm_or_both_cancel() -> None:
    family = Family(TwoChildren, Shipping)
    parent = family.start(TwoChildren)
    family.run()
    assert {c.current.status for c in family.children_of(parent)} == {Status.COMPLETED}

    family = Family(TwoChildren, Shipping)
    parent = family.start(TwoChildren)
    family.run(rejecting("settle"))
    kids = family.children_of(parent)
    assert len(kids) == 2 and {c.current.status for c in kids} == {Status.COMPENSATED}
    assert parent.current.status is Status.COMPENSATED


def test_a_prepared_child_waits_for_its_parent() -> None:
    family = Family(Checkout, Shipping)
    parent = family.start(Checkout)
    family.run(lambda cmd: None if cmd.step == "notify" else Outcome.OK)
    (child,) = family.children_of(parent)
    assert child.current.status is Status.RUNNING and child.current.stage is Stage.PREPARED
    assert child.current.machine_states() == ["prepared"]
    assert not child.pending and not child.timers


def test_a_child_node_is_validated_with_the_rest() -> None:
    with pytest.raises(DefinitionError) as err:
        class Bad(Saga):
            name = "bad"
            input_model = Order
            steps = (ChildSaga("x", 42, deadline=timedelta(0), input="nope"),  # type: ignore[arg-type]
                     ChildSaga("x", "shipping"))
    text = str(err.value)
    assert "saga must be a Saga class" in text and "deadline must be a positive" in text
    assert "input must be callable" in text and "duplicate node name 'x'" in text


def test_the_machine_draws_a_child_node_as_a_tried_confirmed_step() -> None:
    machine = compile_saga(Checkout).to_json()
    moves = {(t["from"], t["to"]) for t in machine["transitions"]}
    assert ("ship.trying", "ship.tried") in moves
    assert ("ship.tried", "ship.confirming") in moves and ("ship.tried", "ship.cancelling") in moves
    step = next(s for s in machine["steps"] if s["name"] == "ship")
    assert step["kind"] == "child" and step["child"] == "shipping"


def test_a_confirm_that_comes_before_the_child_prepared_is_not_lost() -> None:
    """An operator skips the parent's child node while the child still runs: the parent
    confirms early, and the child confirms as soon as its tree is done."""
    family = Family(Checkout, Shipping)
    parent = family.start(Checkout)
    family.run(lambda cmd: None if cmd.step == "label" else Outcome.OK)
    (child,) = family.children_of(parent)
    family._route(parent.repair("skip", step="ship", result={"by": "hand"}))
    family.run(lambda cmd: None if cmd.step == "label" else Outcome.OK)
    assert child.current.parent is not None and child.current.parent.phase is Phase.CONFIRM
    family.run()
    assert (parent.current.status, child.current.status) == (Status.COMPLETED,
                                                             Status.COMPLETED)
