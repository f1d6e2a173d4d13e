"""Sleep and sleep-until: a leaf that sends nothing and waits for a durable timer of its own.

Entered, it works out its wake-up time (the node's duration or time, or its function of the
context) and asks for a ``sleep`` timer, which the store writes in the same transaction. The
timer firing wakes it and the walk goes on. Nothing to undo: a rollback (an operator cancel
among them) of a sleeping node drops its timer and marks it abandoned. The wake-up time is
computed from ``w.now`` and the context only, so replay gives the same timer.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from coordinator.engine.decision import TimerRequest
from coordinator.engine.events import TimerFired, TimerKind
from coordinator.engine.nodes.base import Kind, Progress, Scope, abandon_wait, context
from coordinator.engine.state import StepPhase
from coordinator.engine.tree import CompiledNode, CompiledSleep

if TYPE_CHECKING:
    from coordinator.engine.work import Work

__all__ = ["KIND", "sleep_timer_id", "wake"]


def sleep_timer_id(saga_id: UUID, key: str, entry: int) -> str:
    """The wake-up timer of the ``entry``-th time the node at ``key`` was entered."""
    return f"{saga_id}:{key}:{TimerKind.SLEEP.value}:{entry}"


def forward(w: Work, node: CompiledSleep, key: str, scope: Scope) -> Progress:
    state = w.steps.get(key)
    if state is None:
        state = w.create(key, node.name, scope.parent)
    if state.phase is StepPhase.SUCCEEDED:
        return Progress.DONE
    if state.phase is StepPhase.SLEEPING:
        return Progress.WAITING
    if state.phase is not StepPhase.PENDING:
        return Progress.FAILED
    try:
        due = _wake_time(w, node, scope)
    except Exception as exc:  # a user function failing is this node failing for good
        reason = f"{key}: wake-up time: {type(exc).__name__}: {exc}"
        w.update_step(key, phase=StepPhase.FAILED, started_at=w.now, finished_at=w.now,
                      note=reason)
        w.failed(key, reason)
        return Progress.FAILED
    if due <= w.now:
        w.update_step(key, phase=StepPhase.SUCCEEDED, started_at=w.now, finished_at=w.now,
                      due_at=due, completed_seq=w.next_completion())
        w.note(f"{key}: wake-up time {due.isoformat()} already past")
        return Progress.DONE
    entry = (state.count or 0) + 1
    tid = sleep_timer_id(w.saga_id, key, entry)
    w.timers.append(TimerRequest(timer_id=tid, due_at=due, step=key, phase=None,
                                 attempt=entry, kind=TimerKind.SLEEP))
    w.update_step(key, phase=StepPhase.SLEEPING, timer=tid, due_at=due, count=entry,
                  started_at=w.now, finished_at=None, abandoned=False)
    w.note(f"{key}: sleeping until {due.isoformat()}")
    return Progress.WAITING


def _wake_time(w: Work, node: CompiledSleep, scope: Scope) -> datetime:
    if node.until is not None:
        until = node.until(context(w, scope)) if callable(node.until) else node.until
        if not isinstance(until, datetime):
            raise TypeError(f"until must give a datetime, got {until!r}")
        if until.tzinfo is None or until.utcoffset() is None:
            raise ValueError(f"until gave a naive datetime ({until.isoformat()})")
        return until
    duration = node.duration(context(w, scope)) if callable(node.duration) else node.duration
    if not isinstance(duration, timedelta):
        raise TypeError(f"duration must give a timedelta, got {duration!r}")
    return w.now + duration


def wake(w: Work, event: TimerFired) -> str | None:
    """The node's timer fired: it is done. Returns why the timer was ignored, or ``None``."""
    state = w.step(event.step)
    if state.phase is not StepPhase.SLEEPING or state.timer != event.timer_id:
        return f"stale sleep timer {event.timer_id}"
    w.update_step(event.step, phase=StepPhase.SUCCEEDED, timer=None, finished_at=w.now,
                  completed_seq=w.next_completion())
    w.note(f"{event.step}: woke up")
    return None


def undo(w: Work, node: CompiledSleep, key: str, scope: Scope) -> Progress:
    """Nothing was applied; a sleep cut short drops its timer."""
    return abandon_wait(w, key, StepPhase.SLEEPING, "sleep cut short, timer dropped")


def result(w: Work, node: CompiledSleep, key: str, scope: Scope) -> Any:
    return None


def children(w: Work, node: CompiledSleep, key: str, scope: Scope
             ) -> Iterator[tuple[CompiledNode, str, Scope]]:
    return iter(())


def edges(node: CompiledSleep) -> Iterable[tuple[str, str, str]]:
    return (
        ("pending", "sleeping", "entered: wake-up timer set"),
        ("pending", "succeeded", "wake-up time already past"),
        ("pending", "failed", "wake-up time function raised or gave a naive datetime"),
        ("sleeping", "succeeded", "wake-up timer fired, or operator skip"),
        ("sleeping", "failed", "abandoned: rollback or operator cancel (timer dropped)"),
        ("failed", "pending", "operator retry (abandoned sibling re-run)"),
    )


KIND = Kind(forward, undo, result, children, edges)
