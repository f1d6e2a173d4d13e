"""A time-skipping test kit: run a saga class in memory against participant handlers.

::

    env = SagaTestEnv(Trial, [Accounts(), Billing()])
    run = await env.start(TrialInput(account="a-1", ends_at=...))
    await run.run_to_end()           # a 30-day sleep passes in microseconds
    assert run.status == "completed"

It drives the same pure core as production (:class:`coordinator.engine.simulate.Simulator`
folds every event through ``advance``) and answers each command with the participant's real
handlers behind the SDK's in-memory barrier (``participant_sdk.testing.ParticipantHarness``).
The clock is virtual: when nothing is in flight it jumps to the next due timer (a sleep's
wake-up, a signal's timeout, a retry backoff, a delayed start), so days take no time.
Signals and queries go through the same validation as the API. Child sagas are not run here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from pydantic import BaseModel

from coordinator.definition import Saga
from coordinator.engine import CompiledSaga, ReplyReceived, SagaState, compile_saga
from coordinator.engine.decision import Decision
from coordinator.engine.simulate import Simulator
from coordinator.saga_queries import run_query
from coordinator.store.signals import signal_payload
from participant_sdk import Participant
from participant_sdk.testing import ParticipantHarness

__all__ = ["SagaRun", "SagaTestEnv"]

M = TypeVar("M", bound=BaseModel)


class SagaTestEnv:
    """One saga class and the participants it talks to, on a virtual clock."""

    def __init__(self, saga: type[Saga], participants: Iterable[Participant], *,
                 now: datetime | None = None) -> None:
        self.definition: CompiledSaga = compile_saga(saga)
        self.harnesses = {p.name: ParticipantHarness(p) for p in participants}
        missing = {s.participant for s in self.definition.steps if s.child is None
                   } - set(self.harnesses)
        if missing:
            raise ValueError(f"{saga.name} sends to participants not given: "
                             f"{', '.join(sorted(missing))}")
        self.now = now or datetime(2026, 1, 1, tzinfo=UTC)

    async def start(self, input: BaseModel | dict[str, Any], *,
                    saga_id: uuid.UUID | None = None, start_at: datetime | None = None
                    ) -> SagaRun:
        """Start the saga and run it until it waits (for time, a signal, or its end)."""
        sim = Simulator(self.definition, saga_id=saga_id or uuid.uuid4(), now=self.now)
        data = input.model_dump(mode="json") if isinstance(input, BaseModel) else dict(input)
        sim.start(data, start_at=start_at)
        run = SagaRun(self, sim)
        await run.run_until_idle()
        return run


class SagaRun:
    """One saga in the kit: answer its commands, skip time, signal it, query it."""

    def __init__(self, env: SagaTestEnv, sim: Simulator) -> None:
        self.env, self.sim = env, sim

    @property
    def state(self) -> SagaState:
        return self.sim.current

    @property
    def status(self) -> str:
        return self.state.status.value

    @property
    def now(self) -> datetime:
        """The virtual clock."""
        return self.sim.now

    def results(self) -> dict[str, Any]:
        return self.state.results()

    async def run_until_idle(self) -> None:
        """Deliver every command in flight to its participant and apply the replies, until
        none is left (time does not move)."""
        while self.sim.pending:
            command = next(iter(self.sim.pending.values()))
            harness = self.env.harnesses[command.participant]
            reply = await harness.send(command)
            self.sim.pending.pop(command.message_id, None)
            self.sim.apply(ReplyReceived(reply=reply))

    async def skip(self, delta: timedelta | None = None) -> bool:
        """Jump the clock to the next due timer (or by ``delta``, firing every timer due
        by then) and run until idle. False when there was no timer to jump to."""
        if delta is not None:
            until = self.sim.now + delta
            while (timer := self.sim.next_timer()) is not None and timer.due_at <= until:
                self.sim.fire(timer)
                await self.run_until_idle()
            self.sim.now = max(self.sim.now, until)
            return True
        timer = self.sim.next_timer()
        if timer is None:
            return False
        self.sim.fire(timer)
        await self.run_until_idle()
        return True

    async def run_to_end(self, *, max_jumps: int = 10_000) -> str:
        """Skip time until the saga finishes, goes dead, or waits for a signal with no
        timer left; its status then."""
        for _ in range(max_jumps):
            await self.run_until_idle()
            if self.state.status.is_terminal or self.status == "dead":
                return self.status
            if not await self.skip():
                return self.status
        raise AssertionError(f"saga did not settle in {max_jumps} timer jumps")

    async def signal(self, name: str, payload: BaseModel | dict[str, Any] | None = None, *,
                     signal_id: str | None = None) -> Decision:
        """Send a signal, validated as the API validates it, then run until idle."""
        body = payload.model_dump(mode="json") if isinstance(payload, BaseModel) else payload
        decision = self.sim.signal(name, signal_payload(self.env.definition, name, body),
                                   signal_id=signal_id)
        await self.run_until_idle()
        return decision

    def query(self, name: str, model: type[M] | None = None) -> M | dict[str, Any]:
        answer = run_query(self.env.definition, self.state, name)
        return model.model_validate(answer) if model is not None else answer

