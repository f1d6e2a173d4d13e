"""Delayed start: a saga that exists at once, ``scheduled``, and runs from its ``start_at``.

The start decision writes the saga (listed by the API, cancellable) and one ``start`` timer;
nothing is sent. When the timer fires the saga becomes ``running`` and the walk starts, so
its first command goes out then. An operator cancel before that drops the timer and ends the
saga ``cancelled``: nothing ran, so nothing is undone.
"""

from __future__ import annotations

from datetime import datetime

from coordinator.engine.decision import TimerRequest
from coordinator.engine.events import TimerFired, TimerKind
from coordinator.engine.state import Stage, Status
from coordinator.engine.work import Work

__all__ = ["cancel_scheduled", "schedule_start", "start_now", "start_timer_id"]


def start_timer_id(w: Work) -> str:
    return f"{w.saga_id}::{TimerKind.START.value}"


def schedule_start(w: Work, start_at: datetime) -> None:
    """The start timer of a saga created ``scheduled`` (see ``decide._initial``)."""
    w.timers.append(TimerRequest(timer_id=start_timer_id(w), due_at=start_at, step="",
                                 phase=None, attempt=1, kind=TimerKind.START))
    w.note(f"scheduled {w.definition.name} v{w.definition.version} to start at "
           f"{start_at.isoformat()}")


def start_now(w: Work, event: TimerFired) -> str | None:
    """The start timer fired: run. Returns why it was ignored, or ``None``."""
    if w.get("status") is not Status.SCHEDULED or event.timer_id != start_timer_id(w):
        return f"stale start timer {event.timer_id}"
    w.update(status=Status.RUNNING)
    w.note(f"started {w.definition.name} v{w.definition.version} (scheduled start)")
    return None


def cancel_scheduled(w: Work, reason: str) -> None:
    w.drop_timer(start_timer_id(w))
    w.update(status=Status.CANCELLED, stage=Stage.DONE, reason=reason, finished_at=w.now)
    w.note(f"saga cancelled before its start: {reason}")
