"""A for-each's ``max_concurrency`` bounds every path, not only the forward one: confirms,
cancels and compensations (rollback and an operator's repairs) start at most that many
items at a time, the next one as one finishes, whatever the number of items."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pydantic import BaseModel

from coordinator.engine import compile_saga
from coordinator.engine.simulate import Simulator
from coordinator.language.nodes import ForEach
from coordinator.language.saga import Saga, SagaStep, TccStep
from participant_sdk.protocol import CommandEnvelope, ErrorKind, Outcome, Phase

CAP = 10


class Lines(BaseModel):
    count: int


class HoldEach(Saga):
    name = "hold_each"
    input_model = Lines
    steps = (
        ForEach("lines", lambda ctx: list(range(ctx.input.count)), max_concurrency=CAP,
                max_items=1000, body=(TccStep("hold", "payments", "hold"),)),
        TccStep("check", "payments", "check"),
    )


class ShipEach(Saga):
    name = "ship_each"
    input_model = Lines
    steps = (
        ForEach("lines", lambda ctx: list(range(ctx.input.count)), max_concurrency=CAP,
                max_items=1000,
                body=(SagaStep("ship", "shipping", "ship", compensable=True),)),
        SagaStep("check", "shipping", "check", compensable=False),
    )


Answer = Callable[[CommandEnvelope], tuple[Outcome, ErrorKind | None]]


def _run(saga: type[Saga], count: int, answer: Answer) -> tuple[Simulator, dict[Phase, int]]:
    """Answer commands oldest first (an operator retries a dead saga at its dead step);
    the most commands of each phase in flight at once under the for-each."""
    sim = Simulator(compile_saga(saga), check_touched=False)
    sim.start({"count": count})
    most: dict[Phase, int] = {}
    while sim.pending or sim.current.status.value == "dead":
        if sim.current.status.value == "dead":
            sim.repair("retry", step=sim.current.dead_step)
        else:
            command = next(iter(sim.pending.values()))
            outcome, kind = answer(command)
            sim.reply_to(command, outcome, kind=kind)
        sim.decisions.clear()
        in_flight: dict[Phase, int] = {}
        for c in sim.pending.values():
            if c.step.startswith("lines["):
                in_flight[c.phase] = in_flight.get(c.phase, 0) + 1
        for phase, n in in_flight.items():
            most[phase] = max(most.get(phase, 0), n)
    return sim, most


def _ok(command: CommandEnvelope) -> tuple[Outcome, ErrorKind | None]:
    return Outcome.OK, None


def _check_refused(command: CommandEnvelope) -> tuple[Outcome, ErrorKind | None]:
    if command.step == "check" and command.phase.is_forward:
        return Outcome.REJECTED, ErrorKind.BUSINESS
    return Outcome.OK, None


def test_a_thousand_tcc_items_confirm_at_most_max_concurrency_at_a_time() -> None:
    sim, most = _run(HoldEach, 1000, _ok)
    assert sim.current.status.value == "completed"
    assert most == {Phase.TRY: CAP, Phase.CONFIRM: CAP}
    assert sum(c.phase is Phase.CONFIRM for c in sim.sent) == 1001  # every hold, and check
    assert all(s.phase.value == "confirmed" for k, s in sim.current.steps.items()
               if k.endswith(".hold"))


@pytest.mark.parametrize(("saga", "undo"), [(HoldEach, Phase.CANCEL),
                                            (ShipEach, Phase.COMPENSATE)])
def test_a_rollback_undoes_at_most_max_concurrency_items_at_a_time(
    saga: type[Saga], undo: Phase,
) -> None:
    sim, most = _run(saga, 300, _check_refused)
    assert sim.current.status.value == "compensated"
    assert most[undo] == CAP
    assert sum(c.phase is undo and c.step.startswith("lines[") for c in sim.sent) == 300


def test_repairs_of_a_dead_rollback_keep_the_bound() -> None:
    refused: set[str] = set()

    def answer(command: CommandEnvelope) -> tuple[Outcome, ErrorKind | None]:
        if command.phase is Phase.CANCEL and command.step not in refused:
            refused.add(command.step)  # each cancel refused for good once: dead there
            return Outcome.FAILED, ErrorKind.BAD_COMMAND
        return _check_refused(command)

    sim, most = _run(HoldEach, 100, answer)
    assert sim.current.status.value == "compensated"
    assert most[Phase.CANCEL] <= CAP
    assert len(refused) == 101  # check and every item's cancel went dead once and was retried
