"""``ctx.now``: mappers and guards see the time of the event being applied (the start, a
reply, a timer), never the clock, so a replay of the history builds the same commands."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import BaseModel

from coordinator.engine import compile_saga
from coordinator.engine.simulate import Simulator
from coordinator.language.nodes import Choice, Sleep
from coordinator.language.saga import Saga, SagaStep, StepContext

T0 = datetime(2026, 3, 6, 17, 0, tzinfo=UTC)  # a Friday


class Order(BaseModel):
    order_id: str


def _stamp(ctx: StepContext[Order]) -> dict[str, str]:
    assert ctx.now is not None
    return {"at": ctx.now.isoformat()}


def _weekend(ctx: StepContext[Order]) -> bool:
    assert ctx.now is not None
    return ctx.now.weekday() >= 5


class Stamped(Saga):
    name = "stamped"
    input_model = Order
    steps = (
        SagaStep("open", "desk", "open", compensable=True, payload=_stamp),
        Sleep("overnight", timedelta(hours=12)),
        Choice("when", ((_weekend, SagaStep("weekend", "desk", "ship", compensable=True,
                                            payload=_stamp)),),
               otherwise=SagaStep("weekday", "desk", "ship", compensable=True,
                                  payload=_stamp)),
    )


def test_mappers_and_guards_see_the_events_time_and_replay_the_same() -> None:
    sim = Simulator(compile_saga(Stamped), now=T0)
    sim.start({"order_id": "o-1"})
    assert sim.last("open").payload == {"at": T0.isoformat()}
    sim.tick(timedelta(minutes=5))
    sim.reply()  # the sleep starts at the reply's time
    sim.tick(timedelta(hours=13))  # the timer loop applies the wake-up an hour late
    sim.fire_next()
    woke = T0 + timedelta(minutes=5, hours=13)  # Saturday 06:05: when it was applied
    assert sim.last().step == "weekend"
    assert sim.last().payload == {"at": woke.isoformat()}
    sim.reply()
    assert sim.current.status.value == "completed"
    assert sim.replayed() == sim.current
