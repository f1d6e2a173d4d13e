"""An in-memory driver of the pure core, for tests: no Postgres, no Kafka, a manual clock.

It applies decisions the way the store does (history appended, commands "published", timers
inserted and cancelled) and lets a test play participant and timer loop by hand. With
``play_children``, a child saga node's start and its confirm and cancel requests are
"published" as commands too, so the test answers for the child as for a participant.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from coordinator.engine.decide import advance, replay
from coordinator.engine.decision import Decision, HistoryEntry, TaskChange, TimerRequest
from coordinator.engine.events import (
    Event,
    OperatorRepair,
    ParentRequest,
    RepairVerb,
    ReplyReceived,
    SagaStarted,
    SignalReceived,
    TaskActed,
    TaskAction,
    TimerFired,
    TimerKind,
    event_from_json,
)
from coordinator.engine.state import SagaState
from coordinator.engine.tree import CompiledSaga
from participant_sdk.protocol import (
    CommandEnvelope,
    ErrorInfo,
    ErrorKind,
    Outcome,
    Phase,
    ReplyEnvelope,
)

__all__ = ["Simulator"]

_REPLY_NS = uuid.UUID("0c2d7f1e-8b3a-4d5e-9f60-7a1b2c3d4e5f")


class Simulator:
    """One saga driven through :func:`advance` with a hand-moved clock."""

    def __init__(
        self,
        definition: CompiledSaga,
        *,
        saga_id: uuid.UUID | None = None,
        now: datetime | None = None,
        play_children: bool = False,
        check_touched: bool = True,
    ) -> None:
        self.definition = definition
        self.play_children = play_children
        #: Check each decision's ``touched`` against the nodes it really changed (the store
        #: writes only those): on in tests, off where ``advance`` is timed.
        self.check_touched = check_touched
        self.saga_id = saga_id or uuid.UUID(int=1)
        self.now = now or datetime(2026, 1, 1, tzinfo=UTC)
        self.state: SagaState | None = None
        self.history: list[HistoryEntry] = []
        self.decisions: list[Decision] = []
        #: Every command ever emitted, in order.
        self.sent: list[CommandEnvelope] = []
        #: Commands not yet answered by :meth:`reply`, by message id.
        self.pending: dict[uuid.UUID, CommandEnvelope] = {}
        self.timers: dict[str, TimerRequest] = {}
        #: Human tasks as the tasks table would hold them, by id, and every change reported.
        self.tasks: dict[str, dict[str, Any]] = {}
        self.task_changes: list[TaskChange] = []
        self._replies = 0

    @property
    def current(self) -> SagaState:
        assert self.state is not None, "start the saga first"
        return self.state

    def apply(self, event: Event) -> Decision:
        decision = advance(self.definition, self.state, event, self.now)
        if self.check_touched and self.state is not None:
            _check_touched(self.state, decision)
        self.state = decision.state
        self.history.extend(decision.history)
        self.decisions.append(decision)
        commands = [c.envelope for c in decision.commands]
        if self.play_children:
            commands += self._child_commands(decision)
        for command in commands:
            self.sent.append(command)
            self.pending[command.message_id] = command
        for tid in decision.cancel_timers:
            self.timers.pop(tid, None)
        for timer in decision.timers:
            self.timers[timer.timer_id] = timer
        for change in decision.tasks:
            self.tasks[change.task_id] = {**self.tasks.get(change.task_id, {}), **change.record}
            self.task_changes.append(change)
        return decision

    def _child_commands(self, decision: Decision) -> list[CommandEnvelope]:
        """Child starts and requests to children, as the commands a participant would get."""
        out: list[CommandEnvelope] = []
        asks = [(s.parent.step, s.parent.phase, s.parent.attempt, s.saga_id, s.input)
                for s in decision.children]
        asks += [(d.event.step, d.event.phase, d.event.attempt, d.event.message_id, {})
                 for d in decision.deliveries
                 if isinstance(d.event, ParentRequest) and d.event.parent_id == self.saga_id]
        for step, phase, attempt, mid, payload in asks:
            out.append(CommandEnvelope(
                message_id=mid, saga_id=self.saga_id, saga_type=self.definition.name,
                step=step, phase=phase, attempt=attempt, participant="child_saga",
                action="child_saga", payload=payload, reply_to="child_saga"))
        return out

    def start(self, input: dict[str, Any], trace_context: dict[str, str] | None = None,
              *, start_at: datetime | None = None, started_by: str | None = None) -> Decision:
        return self.apply(SagaStarted(saga_id=self.saga_id, saga_type=self.definition.name,
                                      version=self.definition.version, input=input,
                                      trace_context=trace_context or {}, start_at=start_at,
                                      started_by=started_by))

    def act(self, task_id: str, action: TaskAction | str, actor: str, **kwargs: Any) -> Decision:
        """A person acts on a human task (``groups``, ``admin``, ``data``, ``to_user``, ...
        as :class:`TaskActed` takes them)."""
        return self.apply(TaskActed(task_id=task_id, action=TaskAction(action), actor=actor,
                                    **kwargs))

    def last(self, step: str | None = None, phase: Phase | None = None) -> CommandEnvelope:
        """The latest command sent (for ``step`` / ``phase`` if given)."""
        for env in reversed(self.sent):
            if (step is None or env.step == step) and (phase is None or env.phase == phase):
                return env
        raise LookupError(f"no command sent for step={step} phase={phase}")

    def reply_to(
        self,
        command: CommandEnvelope,
        outcome: Outcome = Outcome.OK,
        *,
        result: dict[str, Any] | None = None,
        kind: ErrorKind | None = None,
        message: str = "simulated",
    ) -> Decision:
        """Answer ``command`` as a participant would (may be a duplicate or stale reply)."""
        self.pending.pop(command.message_id, None)
        self._replies += 1
        error = None
        if outcome is not Outcome.OK:
            default = ErrorKind.BUSINESS if outcome is Outcome.REJECTED else ErrorKind.TRANSIENT
            error = ErrorInfo(kind=kind or default, message=message)
        reply = ReplyEnvelope(
            message_id=uuid.uuid5(_REPLY_NS, f"{command.message_id}/{self._replies}"),
            in_reply_to=command.message_id,
            saga_id=command.saga_id,
            step=command.step,
            phase=command.phase,
            attempt=command.attempt,
            participant=command.participant,
            outcome=outcome,
            result=result if outcome is Outcome.OK else None,
            error=error,
        )
        return self.apply(ReplyReceived(reply=reply))

    def reply(self, outcome: Outcome = Outcome.OK, **kwargs: Any) -> Decision:
        """Answer the latest command sent."""
        return self.reply_to(self.last(), outcome, **kwargs)

    def next_timer(self, kind: TimerKind | None = None) -> TimerRequest | None:
        due = [t for t in self.timers.values() if kind is None or t.kind is kind]
        return min(due, key=lambda t: (t.due_at, t.timer_id), default=None)

    def fire(self, timer: TimerRequest) -> Decision:
        """Move the clock to the timer's due time (never backwards) and fire it."""
        self.timers.pop(timer.timer_id, None)
        self.now = max(self.now, timer.due_at)
        return self.apply(TimerFired(timer_id=timer.timer_id, step=timer.step,
                                     phase=timer.phase, attempt=timer.attempt,
                                     kind=timer.kind))

    def fire_next(self, kind: TimerKind | None = None) -> Decision:
        timer = self.next_timer(kind)
        if timer is None:
            raise LookupError(f"no {kind or 'pending'} timer")
        return self.fire(timer)

    def repair(self, verb: RepairVerb | str, *, actor: str = "ops", reason: str = "test",
               **kwargs: Any) -> Decision:
        return self.apply(OperatorRepair(verb=RepairVerb(verb), actor=actor, reason=reason,
                                         **kwargs))

    def signal(self, name: str, payload: dict[str, Any] | None = None, *,
               signal_id: str | None = None) -> Decision:
        """Send the saga a signal (a fresh id unless one is given: the same id is a resend)."""
        self._replies += 1
        sid = signal_id or str(uuid.uuid5(_REPLY_NS, f"signal/{self._replies}"))
        return self.apply(SignalReceived(signal_id=sid, name=name, payload=payload or {}))

    def tick(self, delta: timedelta) -> None:
        self.now += delta

    def replayed(self) -> SagaState:
        """The state rebuilt from the history as the store would keep it (JSON round trip)."""
        stored = [(event_from_json(h.event.to_json()), h.at) for h in self.history]
        return replay(self.definition, stored)


def _check_touched(before: SagaState, decision: Decision) -> None:
    """Every node the decision replaced or added is in ``touched``, new keys in the order
    the steps mapping added them."""
    after, touched = decision.state.steps, decision.touched
    changed = {k for k, node in after.items() if before.steps.get(k) is not node}
    missing = changed - set(touched)
    assert not missing, f"nodes changed but not in Decision.touched: {sorted(missing)}"
    added = [k for k in after if k not in before.steps]
    assert added == [k for k in touched if k not in before.steps], (added, touched)
