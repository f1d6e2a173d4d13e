"""Applying participant replies and fired timers, ignoring stale and duplicate ones."""

from __future__ import annotations

from coordinator.engine import starting, timeouts
from coordinator.engine.driver import drive, start_rollback
from coordinator.engine.events import ReplyReceived, TimerFired, TimerKind
from coordinator.engine.nodes import sleep, task, wait
from coordinator.engine.nodes.leaf import fail, send_finish, succeed
from coordinator.engine.state import Status, StepPhase
from coordinator.engine.work import ACTIVE_PHASE, Work, message_id
from participant_sdk.protocol import ErrorKind, Outcome

TASK_TIMERS = frozenset({TimerKind.TASK_REMINDER, TimerKind.TASK_ESCALATION,
                         TimerKind.TASK_TIMEOUT})

__all__ = ["on_reply", "on_timer"]


def on_reply(w: Work, event: ReplyReceived) -> str | None:
    """Apply a reply; returns why it was ignored, or ``None`` when it was applied."""
    reply = event.reply
    if reply.saga_id != w.saga_id:
        return f"reply for another saga ({reply.saga_id})"
    step = w.steps.get(reply.step)
    if step is None:
        return f"unknown step {reply.step!r}"
    tag = f"{reply.step} {reply.phase.value} attempt {reply.attempt}"
    sent = step.outstanding
    if sent is None or (reply.phase, reply.attempt) != (sent.phase, sent.attempt):
        if _late_success(w, event):
            drive(w)
            return None
        if _late_ok_for_dead_step(w, event):
            return None
        if sent is None:
            return f"no command outstanding for {reply.step}: duplicate or late reply ({tag})"
        return (f"stale reply ({tag}); outstanding is {sent.phase.value} "
                f"attempt {sent.attempt}")
    if reply.in_reply_to != sent.message_id:
        return f"reply to unknown message {reply.in_reply_to} ({tag})"
    w.drop_timer(sent.deadline_timer)
    w.update_step(reply.step, outstanding=None)
    key, phase = reply.step, reply.phase
    if reply.outcome is Outcome.OK:
        succeed(w, key, phase, reply.result)
    else:
        err = reply.error
        message = err.message if err is not None else "(no error info)"
        if reply.outcome is Outcome.REJECTED:
            kind = err.kind.value if err is not None else "rejected"
            fail(w, key, phase, kind, message, retryable=False)
        else:
            error_kind = err.kind if err is not None else ErrorKind.UNEXPECTED
            retryable = w.spec(key).policy(phase).retries(error_kind)
            fail(w, key, phase, error_kind.value, message, retryable=retryable)
    drive(w)
    return None


def _late_success(w: Work, event: ReplyReceived) -> bool:
    """A forward attempt the engine had given up on (failed reply, deadline, abandoned)
    reports success after all: its effect exists, so the step is marked as possibly applied
    and rollback will undo it (or stop at it, if it cannot be undone)."""
    reply = event.reply
    step = w.step(reply.step)
    if (reply.outcome is not Outcome.OK or not reply.phase.is_forward or step.uncertain
            or step.phase not in (StepPhase.TRYING, StepPhase.EXECUTING, StepPhase.FAILED)
            # Only attempts of the current retry budget: one from before an operator retry
            # was recorded then (a resend of it is a duplicate).
            or not step.budget_from.get(reply.phase, 1) <= reply.attempt
            <= step.attempt(reply.phase)
            or reply.in_reply_to != message_id(w.saga_id, reply.step, reply.phase,
                                               reply.attempt)):
        return False
    w.update_step(reply.step, uncertain=True)
    w.note(f"{reply.step}: late ok for {reply.phase.value} attempt {reply.attempt}: "
           "may have applied")
    return True


def _late_ok_for_dead_step(w: Work, event: ReplyReceived) -> bool:
    """The dead step's participant did its confirm, cancel or compensation after all (the
    reply came after the engine gave up): recorded, so the page can say that a retry (which
    its barrier answers with the same ``ok``) completes the step. The saga stays dead."""
    reply, state = event.reply, w.state
    step = w.step(reply.step)
    if (state.status is not Status.DEAD or state.dead_step != reply.step
            or state.late_ok is not None or reply.outcome is not Outcome.OK
            or reply.phase.is_forward or ACTIVE_PHASE.get(reply.phase) is not step.phase
            # Only attempts of the current retry budget: one from before an operator retry
            # was recorded then (a resend of it is a duplicate).
            or not step.budget_from.get(reply.phase, 1) <= reply.attempt
            <= step.attempt(reply.phase)
            or reply.in_reply_to != message_id(w.saga_id, reply.step, reply.phase,
                                               reply.attempt)):
        return False
    w.update(late_ok={"step": reply.step, "phase": reply.phase.value,
                      "attempt": reply.attempt, "at": w.now.isoformat()})
    w.note(f"a late ok for the dead step arrived ({reply.step} {reply.phase.value} attempt "
           f"{reply.attempt}): Retry will complete it")
    return True


def on_timer(w: Work, event: TimerFired) -> str | None:
    """Apply a fired timer, on the path of its kind; returns why it was ignored, or ``None``."""
    if event.kind is TimerKind.START:  # the saga's own timer: about no node
        ignored = starting.start_now(w, event)
        if ignored is None:
            drive(w)
        return ignored
    if event.kind is TimerKind.TIMEOUT:  # the saga's own (step "") or a node's
        ignored = timeouts.fired(w, event, start_rollback)
        if ignored is None:
            drive(w)
        return ignored
    step = w.steps.get(event.step)
    if step is None:
        return f"timer for unknown step {event.step!r}"
    if event.kind is TimerKind.DEADLINE:
        ignored = _deadline(w, event)
    elif event.kind is TimerKind.RETRY:
        ignored = _retry(w, event)
    elif event.kind is TimerKind.SLEEP:
        ignored = sleep.wake(w, event)
    elif event.kind is TimerKind.SIGNAL_TIMEOUT:
        ignored = wait.timed_out(w, event)
    elif event.kind in TASK_TIMERS:
        ignored = task.on_timer(w, event)
    else:  # a kind added to the enum but not handled here: refuse it, never guess
        return f"timer kind {event.kind.value!r} has no handler"
    if ignored is None:
        drive(w)
    return ignored


def _deadline(w: Work, event: TimerFired) -> str | None:
    step = w.step(event.step)
    sent = step.outstanding
    if sent is None or sent.deadline_timer != event.timer_id:
        return f"stale deadline timer {event.timer_id}"
    w.update_step(event.step, outstanding=None,
                  uncertain=step.uncertain or sent.phase.is_forward)
    wait = w.spec(event.step).deadline_for(sent.phase)
    fail(w, event.step, sent.phase, "deadline",
         f"no reply within {wait.total_seconds():g}s", retryable=True)
    return None


def _retry(w: Work, event: TimerFired) -> str | None:
    step = w.step(event.step)
    if step.retry_timer != event.timer_id or event.phase is None:
        return f"stale retry timer {event.timer_id}"
    w.update_step(event.step, retry_timer=None)
    retry_phase = event.phase
    if retry_phase.is_forward:
        w.send(event.step, retry_phase, dict(step.payload or {}))
    else:
        send_finish(w, event.step, retry_phase)
    return None
