"""What happens to one step: its command sent, its phase succeeding or failing, the saga
parked as dead at it."""

from __future__ import annotations

from typing import Any

from coordinator.engine.events import TimerKind
from coordinator.engine.nodes.base import Progress, Scope, context, scope_of
from coordinator.engine.state import ErrorRecord, Status, StepPhase
from coordinator.engine.tree import CompiledStep
from coordinator.engine.work import Work
from participant_sdk.protocol import Phase

__all__ = ["abandon_forward", "fail", "go_dead", "send_finish", "start", "succeed"]

_DONE_PHASE = {
    Phase.TRY: StepPhase.TRIED,
    Phase.ACTION: StepPhase.SUCCEEDED,
    Phase.CONFIRM: StepPhase.CONFIRMED,
    Phase.CANCEL: StepPhase.CANCELLED,
    Phase.COMPENSATE: StepPhase.COMPENSATED,
}


def start(w: Work, spec: CompiledStep, key: str, scope: Scope) -> Progress:
    """Run the guard and the payload mapper, then send the forward command or skip."""
    try:
        if spec.when is None and spec.payload is None:  # no user function: no context to build
            runs, payload = True, w.get("input")
        else:
            ctx = context(w, scope)
            runs = spec.when(ctx) if spec.when is not None else True
            payload = spec.payload(ctx) if spec.payload is not None and runs else w.get("input")
    except Exception as exc:  # a user mapper failing is this step failing for good
        fail(w, key, spec.forward_phase, "mapper", f"{type(exc).__name__}: {exc}",
             retryable=False)
        return Progress.FAILED
    if not runs:
        w.update_step(key, phase=StepPhase.SKIPPED, finished_at=w.now)
        w.note(f"{key}: skipped (guard false)")
        return Progress.DONE
    w.send(key, spec.forward_phase, dict(payload), payload=dict(payload))
    return Progress.WAITING


def send_finish(w: Work, key: str, phase: Phase, scope: Scope | None = None) -> bool:
    """Send confirm/cancel/compensate; False when its payload mapper failed (saga is dead)."""
    spec, step = w.spec(key), w.step(key)
    payload: dict[str, Any] = step.payload_override or step.payload or {}
    if step.payload_override is None and spec.rollback_payload is not None:
        try:
            payload = dict(spec.rollback_payload(context(w, scope or scope_of(w, key))))
        except Exception as exc:
            w.update_step(key, last_error=ErrorRecord(
                kind="mapper", message=f"{type(exc).__name__}: {exc}", phase=phase,
                attempt=step.attempt(phase) + 1, at=w.now))
            go_dead(w, key, f"{key}: {phase.value} payload mapper raised {exc!r}")
            return False
    w.send(key, phase, payload)
    return True


def succeed(w: Work, key: str, phase: Phase, result: dict[str, Any] | None) -> None:
    step = w.step(key)
    changes: dict[str, Any] = {"phase": _DONE_PHASE[phase], "payload_override": None}
    if phase.is_forward:
        changes.update(result=result, completed_seq=w.next_completion(), uncertain=False,
                       finished_at=w.now)
    else:
        changes["finished_at"] = w.now
    w.update_step(key, **changes)
    w.note(f"{key}: {phase.value} ok (attempt {step.attempt(phase)})")


def fail(w: Work, key: str, phase: Phase, kind: str, message: str, *, retryable: bool) -> None:
    """Record a failure of the current attempt; retry after a backoff or give up.

    A forward phase that gives up fails its step; the node above decides what that means
    (a race may still win, anything else rolls the saga back). A confirm, cancel or
    compensation that gives up parks the saga as dead."""
    spec, step = w.spec(key), w.step(key)
    attempt = step.attempt(phase)
    error = ErrorRecord(kind=kind, message=message, phase=phase, attempt=attempt, at=w.now)
    w.update_step(key, last_error=error)
    policy = spec.policy(phase)
    if retryable and not policy.exhausted(step.used(phase)):
        seed = f"{w.saga_id}/{key}/{phase.value}/{attempt}"
        due = w.now + policy.backoff(step.used(phase), seed)
        tid = w.add_timer(key, phase, attempt + 1, TimerKind.RETRY, due)
        w.update_step(key, retry_timer=tid)
        w.note(f"{key}: {phase.value} attempt {attempt} failed ({kind}); "
               f"retry at {due.isoformat()}")
        return
    why = "retries exhausted" if retryable else "not retryable"
    w.note(f"{key}: {phase.value} attempt {attempt} failed for good ({kind}, {why})")
    reason = f"{key}: {phase.value} failed for good after {step.used(phase)} attempt(s) " \
             f"({kind}: {message})"
    if phase.is_forward:
        w.update_step(key, phase=StepPhase.FAILED, finished_at=w.now)
        w.failed(key, reason)
    else:
        go_dead(w, key, reason)


def abandon_forward(w: Work, key: str, why: str) -> None:
    """Give up a step whose forward command is in flight or waiting to retry: it failed,
    and its effect is unknown if a command was in flight."""
    step = w.step(key)
    in_flight = step.outstanding is not None
    w.abandon(key)
    w.update_step(key, phase=StepPhase.FAILED, finished_at=w.now, abandoned=True,
                  uncertain=step.uncertain or in_flight, note=why)


def go_dead(w: Work, key: str, reason: str) -> None:
    """Park the saga for a person at ``key``. Already dead (a second confirm gave up while
    another was dead): ``dead_step`` keeps naming the first; the confirm walk raises the
    other when the saga runs again."""
    w.abandon(key)
    if w.get("status") is Status.DEAD and w.get("dead_step") not in (None, key):
        w.note(f"{key} gave up too (saga already dead at {w.get('dead_step')}): {reason}")
        return
    w.update(status=Status.DEAD, dead_step=key, reason=reason, dead_reason=reason)
    w.note(f"saga dead at {key}: {reason}")
