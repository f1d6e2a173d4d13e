"""Moving a saga along: forward, confirm and rollback walks, success and failure of a phase.

Forward runs steps one at a time in declaration order. When every forward step succeeded,
every TCC step is confirmed at once (the confirms go out in one decision, in declaration
order) and the saga completes when the last confirm is acknowledged. When a forward phase
fails for good, rollback undoes every step whose forward command was ever sent, one at a
time: the failed one first and then the others in reverse order of completion.
"""

from __future__ import annotations

from typing import Any

from coordinator.engine.compiled import StepKind
from coordinator.engine.events import TimerKind
from coordinator.engine.state import ErrorRecord, Stage, Status, StepPhase
from coordinator.engine.work import Work
from participant_sdk.protocol import Phase

__all__ = ["drive", "fail", "go_dead", "send_finish", "start_rollback", "succeed"]

_FORWARD_DONE = frozenset({StepPhase.TRIED, StepPhase.SUCCEEDED, StepPhase.SKIPPED})
_ROLLED_BACK = frozenset({StepPhase.CANCELLED, StepPhase.COMPENSATED, StepPhase.RESOLVED})
_DONE_PHASE = {
    Phase.TRY: StepPhase.TRIED,
    Phase.ACTION: StepPhase.SUCCEEDED,
    Phase.CONFIRM: StepPhase.CONFIRMED,
    Phase.CANCEL: StepPhase.CANCELLED,
    Phase.COMPENSATE: StepPhase.COMPENSATED,
}


def drive(w: Work) -> None:
    """Start whatever can start now; stop at the first step that must wait."""
    while w.get("status") in (Status.RUNNING, Status.COMPENSATING):
        stage = w.get("stage")
        if stage is Stage.FORWARD and not _forward(w):
            return
        if stage is Stage.CONFIRM and not _confirm(w):
            return
        if stage is Stage.ROLLBACK and not _rollback(w):
            return


def _forward(w: Work) -> bool:
    """Returns True when the stage changed and the loop should go on."""
    for key, step in w.ordered():
        if step.phase in _FORWARD_DONE:
            continue
        if step.phase is not StepPhase.PENDING:
            return False  # in flight, or waiting for a retry timer
        spec = w.spec(key)
        try:
            ctx = w.context()
            runs = spec.when(ctx) if spec.when is not None else True
            payload = spec.payload(ctx) if spec.payload is not None and runs else w.get("input")
        except Exception as exc:  # a user mapper failing is this step failing for good
            fail(w, key, spec.forward_phase, "mapper", f"{type(exc).__name__}: {exc}",
                 retryable=False)
            return True
        if not runs:
            w.update_step(key, phase=StepPhase.SKIPPED, finished_at=w.now)
            w.note(f"{key}: skipped (guard false)")
            continue
        w.update_step(key, payload=dict(payload))
        w.send(key, spec.forward_phase, dict(payload))
        return False
    w.update(stage=Stage.CONFIRM)
    return True


def _confirm(w: Work) -> bool:
    """Confirm every tried TCC step in the same decision; complete when all are confirmed.

    Confirms are independent (each participant confirms its own reservation), so they all go
    out together and each keeps its own attempts, retry timer and deadline. A confirm that gave
    up while the saga was already dead at another step (it has neither a command in flight nor
    a retry pending) makes the saga dead at that step as soon as the saga runs again.
    """
    waiting = False
    for key, step in w.ordered():
        if w.spec(key).kind is not StepKind.TCC or step.phase is StepPhase.SKIPPED:
            continue
        if step.phase is StepPhase.CONFIRMING:
            if step.outstanding is None and step.retry_timer is None:
                go_dead(w, key, f"{key}: confirm gave up while the saga was dead at another "
                                f"step ({_last_error(w, key)})")
                return True
            waiting = True
        elif step.phase is StepPhase.TRIED:
            if not step.sent:  # an operator skipped its try: nothing to confirm
                w.update_step(key, phase=StepPhase.CONFIRMED, finished_at=w.now)
                continue
            if not send_finish(w, key, Phase.CONFIRM):
                return True
            waiting = True
    if waiting:
        return False
    w.update(status=Status.COMPLETED, stage=Stage.DONE, finished_at=w.now)
    w.note("saga completed")
    return False


def _last_error(w: Work, key: str) -> str:
    error = w.step(key).last_error
    return f"{error.kind}: {error.message}" if error is not None else "no error recorded"


def _rollback(w: Work) -> bool:
    for key in w.get("rollback_plan"):
        step = w.step(key)
        if step.phase in _ROLLED_BACK:
            continue
        if step.phase in (StepPhase.CANCELLING, StepPhase.COMPENSATING):
            return False
        spec = w.spec(key)
        if not spec.reversible:
            why = ("committed" if step.phase is StepPhase.SUCCEEDED
                   else "may have taken effect (no reply before its deadline)")
            go_dead(w, key, f"{key} {why} and declares no compensation: rollback cannot "
                            "pass it; compensate or resolve it by hand")
            return False
        if not send_finish(w, key, spec.rollback_phase):
            return True
        return False
    outcome = w.get("rollback_outcome") or Status.COMPENSATED
    w.update(status=outcome, stage=Stage.DONE, finished_at=w.now)
    w.note(f"saga {outcome.value}")
    return False


def send_finish(w: Work, key: str, phase: Phase) -> bool:
    """Send confirm/cancel/compensate; False when its payload mapper failed (saga is dead)."""
    spec, step = w.spec(key), w.step(key)
    payload: dict[str, Any] = step.payload_override or step.payload or {}
    if step.payload_override is None and spec.rollback_payload is not None:
        try:
            payload = dict(spec.rollback_payload(w.context()))
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
        seq = w.get("completions") + 1
        w.update(completions=seq)
        changes.update(result=result, completed_seq=seq, uncertain=False)
    else:
        changes["finished_at"] = w.now
    w.update_step(key, **changes)
    w.note(f"{key}: {phase.value} ok (attempt {step.attempt(phase)})")


def fail(w: Work, key: str, phase: Phase, kind: str, message: str, *, retryable: bool) -> None:
    """Record a failure of the current attempt; retry after a backoff or give up."""
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
        start_rollback(w, reason, Status.COMPENSATED)
    else:
        go_dead(w, key, reason)


def start_rollback(w: Work, reason: str, outcome: Status) -> None:
    """Abandon forward work and undo every step that was (or may have been) applied."""
    for key, step in w.ordered():
        if step.phase in (StepPhase.TRYING, StepPhase.EXECUTING):
            in_flight = step.outstanding is not None
            w.abandon(key)
            w.update_step(key, phase=StepPhase.FAILED, finished_at=w.now,
                          uncertain=step.uncertain or in_flight,
                          note="abandoned: rollback started while it was active")
    failed = [k for k, s in w.ordered()
              if s.phase is StepPhase.FAILED and s.sent
              and (w.spec(k).reversible or s.uncertain)]
    done = sorted(
        (s for _, s in w.ordered()
         if s.phase in (StepPhase.TRIED, StepPhase.SUCCEEDED) and s.sent),
        key=lambda s: -(s.completed_seq or 0),
    )
    plan = failed + [s.key for s in done]
    w.update(stage=Stage.ROLLBACK, status=Status.COMPENSATING, reason=reason,
             rollback_plan=plan, rollback_outcome=outcome)
    w.note(f"rollback started ({', '.join(plan) or 'nothing to undo'}): {reason}")


def go_dead(w: Work, key: str, reason: str) -> None:
    """Park the saga for a person at ``key``. Already dead (a second confirm gave up while
    another was dead): ``dead_step`` keeps naming the first; ``_confirm`` raises the other
    when the saga runs again."""
    w.abandon(key)
    if w.get("status") is Status.DEAD and w.get("dead_step") not in (None, key):
        w.note(f"{key} gave up too (saga already dead at {w.get('dead_step')}): {reason}")
        return
    w.update(status=Status.DEAD, dead_step=key, reason=reason)
    w.note(f"saga dead at {key}: {reason}")
