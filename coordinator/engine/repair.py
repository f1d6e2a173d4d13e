"""Operator repairs: retry, skip, compensate, cancel and resolve.

Each verb checks that it is legal where the saga stands and raises
:class:`~coordinator.engine.decision.InvalidTransition` with the reason when it is not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from coordinator.engine.decision import InvalidTransition
from coordinator.engine.driver import drive, start_rollback
from coordinator.engine.events import OperatorRepair, RepairVerb
from coordinator.engine.nodes import task
from coordinator.engine.nodes.base import ROOT, abandon_wait
from coordinator.engine.nodes.leaf import send_finish, succeed
from coordinator.engine.starting import cancel_scheduled
from coordinator.engine.state import SagaState, Stage, Status, StepPhase
from coordinator.engine.tree import CompiledWait
from coordinator.engine.work import ACTIVE_PHASE, Work
from participant_sdk.protocol import Phase

__all__ = ["on_repair"]

_PHASE_OF = {v: k for k, v in ACTIVE_PHASE.items()}
_UNDO_STARTED = frozenset({StepPhase.CANCELLING, StepPhase.CANCELLED, StepPhase.COMPENSATING,
                           StepPhase.COMPENSATED, StepPhase.RESOLVED})


def on_repair(w: Work, event: OperatorRepair) -> None:
    status = w.state.status
    if status.is_terminal:
        raise InvalidTransition(f"saga is {status.value}: no repair applies to a finished saga")
    if status is Status.SCHEDULED and event.verb is not RepairVerb.CANCEL:
        raise InvalidTransition(f"saga is scheduled to start at {w.state.start_at}: nothing "
                                "ran yet, only cancel applies")
    if event.step is not None and event.step not in w.state.steps:
        known = ", ".join(w.state.steps)
        raise InvalidTransition(f"unknown step {event.step!r} (steps: {known})")
    before = w.state
    _VERBS[event.verb](w, event)
    w.note(f"operator {event.verb.value} by {event.actor}: {event.reason}")
    if before.status is Status.DEAD and w.get("status") is not Status.DEAD:
        _left_dead(w, event, before)
    drive(w)


def _left_dead(w: Work, event: OperatorRepair, before: SagaState) -> None:
    """A repair took the saga out of ``dead``: the dead reason leaves the snapshot (the
    history keeps it) and the repair is recorded. A verb that gave no reason of its own
    puts back the rollback's (or none, forward or confirming)."""
    reason = w.get("reason")
    if reason == before.reason:
        reason = w.get("rollback_reason") if w.get("stage") is Stage.ROLLBACK else None
    w.update(reason=reason, dead_reason=None, late_ok=None,
             repaired={"verb": event.verb.value, "actor": event.actor, "reason": event.reason,
                       "at": w.now.isoformat(), "dead_step": before.dead_step,
                       "dead_reason": before.dead_reason or before.reason})


def _dead_step(w: Work, event: OperatorRepair) -> str:
    dead = w.state.dead_step
    if dead is None:  # parked by a timeout (``engine.timeouts``): no step to act on
        raise InvalidTransition(f"saga is dead at no step ({w.state.reason}): compensate "
                                "rolls it back, resolve settles it by hand")
    if event.step is not None and event.step != dead:
        raise InvalidTransition(f"saga is dead at step {dead!r}, not at {event.step!r}")
    return dead


def _current_step(w: Work, event: OperatorRepair, *, waits: bool = False) -> str:
    """The step in progress that the verb is about: ``event.step``, or the only one
    (``waits``: a sleep or signal wait counts as in progress).

    With several steps in progress (parallel branches, for-each items, confirms) a verb
    without a step is ambiguous: it is refused, listing them."""
    waiting = w.state.waiting_nodes()
    candidates = sorted(w.state.active_steps() + (waiting if waits else []))
    retrying_a_wait = event.step in waiting or (event.step is None and not candidates)
    if not waits and waiting and retrying_a_wait:
        key = event.step or waiting[0]
        raise InvalidTransition(f"{key} is {w.step(key).phase.value}: nothing to retry; skip "
                                "ends the wait now")
    if not candidates:
        raise InvalidTransition("no step is in progress")
    if event.step is not None:
        if event.step not in candidates:
            raise InvalidTransition(f"step {event.step!r} is not in progress; in progress: "
                                    f"{', '.join(candidates)}")
        return event.step
    if len(candidates) > 1:
        raise InvalidTransition(f"{len(candidates)} steps are in progress "
                                f"({', '.join(candidates)}): name the step")
    return candidates[0]


def _resumed(w: Work) -> Status:
    """The status a dead saga goes back to: running forward or confirming, or compensating."""
    return Status.COMPENSATING if w.state.stage is Stage.ROLLBACK else Status.RUNNING


def _redrive(w: Work, key: str, phase: Phase, payload: dict[str, Any] | None) -> None:
    """Send ``phase`` of ``key`` again now, with a fresh retry budget."""
    step = w.step(key)
    w.abandon(key)
    changes: dict[str, Any] = {"budget_from": {**step.budget_from,
                                               phase: step.attempt(phase) + 1}}
    if payload is not None:
        changes["payload" if phase.is_forward else "payload_override"] = payload
    w.update_step(key, **changes)
    if phase.is_forward:
        w.send(key, phase, dict(w.step(key).payload or {}))
    else:
        send_finish(w, key, phase)


def _retry(w: Work, event: OperatorRepair) -> None:
    state = w.state
    if state.status is not Status.DEAD:
        key = _current_step(w, event)
        step = w.step(key)
        if step.outstanding is not None:
            raise InvalidTransition(
                f"{key}: {step.outstanding.phase.value} attempt {step.outstanding.attempt} is "
                "in flight; wait for its reply or its deadline")
        _redrive(w, key, _PHASE_OF[step.phase], event.payload)
        return
    key = _dead_step(w, event)
    if task.is_task(w, w.step(key)):
        w.update(status=_resumed(w), dead_step=None, reason=None)
        task.reopen(w, key)
        return
    spec, step = w.spec(key), w.step(key)
    # By the step's own phase, not the saga's stage: a race's loser whose undo gave up while
    # the saga confirmed the winners is cancelled again, never confirmed.
    if state.stage is Stage.CONFIRM and step.phase is StepPhase.CONFIRMING:
        w.update(status=Status.RUNNING, dead_step=None)
        _redrive(w, key, Phase.CONFIRM, event.payload)
        for other, s in w.ordered():  # confirms that gave up while the saga was dead
            if (s.phase is StepPhase.CONFIRMING and s.outstanding is None
                    and s.retry_timer is None):
                _redrive(w, other, Phase.CONFIRM, None)
    elif spec.reversible:
        w.update(status=_resumed(w), dead_step=None)
        _redrive(w, key, spec.rollback_phase, event.payload)
    elif (step.phase is StepPhase.FAILED and state.cause == key
          and state.rollback_outcome is Status.COMPENSATED and not _undo_started(w)):
        # Its effect is unknown and nothing was rolled back yet: drive it forward again.
        _back_to_forward(w, key)
        _redrive(w, key, spec.forward_phase, event.payload)
    else:
        raise InvalidTransition(
            f"{key} declares no compensation and cannot be re-driven: use skip (undone by "
            "hand), compensate (leave it as is) or resolve")


def _undo_started(w: Work) -> bool:
    return bool(w.state.undoing) or any(s.phase in _UNDO_STARTED for s in w.steps.values())


def _back_to_forward(w: Work, key: str) -> None:
    """Undo the rollback's start: the failed step's enclosing nodes run again and the steps
    that rollback abandoned go back to pending (their next try is a duplicate at worst)."""
    for other, s in w.ordered():
        if s.abandoned and s.phase is StepPhase.FAILED:
            w.update_step(other, phase=StepPhase.PENDING, abandoned=False, finished_at=None)
        elif s.walked:  # a for-each the rollback walked: its next walk starts over
            w.update_step(other, walked=0)
    parent = w.step(key).parent
    while parent is not None:
        if w.step(parent).phase is StepPhase.FAILED:
            w.update_step(parent, phase=StepPhase.RUNNING, finished_at=None)
        parent = w.step(parent).parent
    w.update(status=Status.RUNNING, stage=Stage.FORWARD, dead_step=None, reason=None,
             cause=None, rollback_outcome=None, rollback_reason=None)


def _skip(w: Work, event: OperatorRepair) -> None:
    """Treat the step's current phase as done by hand: a forward phase as succeeded (with
    ``event.result``), a confirm as confirmed, an undo as resolved."""
    state = w.state
    if state.status is Status.DEAD:
        key = _dead_step(w, event)
        w.update(dead_step=None, status=_resumed(w))
    else:
        key = _current_step(w, event, waits=True)
    phase = w.step(key).phase
    note = f"skipped by {event.actor}: {event.reason}"
    if task.is_task(w, w.step(key)):
        task.skip(w, key, event.result, event.actor, note)
        return
    if phase.is_deliberate_wait:
        _end_wait(w, key, event.result, note)
        return
    w.abandon(key)
    if phase in (StepPhase.TRYING, StepPhase.EXECUTING) and state.stage is Stage.FORWARD:
        succeed(w, key, w.spec(key).forward_phase, event.result)
        w.update_step(key, note=note)
    elif phase is StepPhase.CONFIRMING:
        w.update_step(key, phase=StepPhase.CONFIRMED, finished_at=w.now, note=note,
                      result=event.result if event.result is not None else w.step(key).result)
    else:
        w.update_step(key, phase=StepPhase.RESOLVED, finished_at=w.now, note=note)


def _end_wait(w: Work, key: str, result: dict[str, Any] | None, note: str) -> None:
    """A sleep woken, or a signal wait given ``result`` as its signal's payload (checked
    against the signal's model, as a real signal would be), now: its timer dropped."""
    state, node = w.step(key), w.definition.node(w.step(key).node)
    if isinstance(node, CompiledWait):
        model = w.definition.signals.get(node.signal)
        try:
            result = (model.model_validate(result or {}).model_dump(mode="json")
                      if model is not None else dict(result or {}))
        except ValidationError as exc:
            raise InvalidTransition(f"{key}: result is not a valid {node.signal!r} signal "
                                    f"payload: {exc.errors(include_url=False)}") from exc
    else:
        result = None
    if state.timer is not None:
        w.drop_timer(state.timer)
    w.update_step(key, phase=StepPhase.SUCCEEDED, timer=None, finished_at=w.now, result=result,
                  completed_seq=w.next_completion(), note=note)


def _compensate(w: Work, event: OperatorRepair) -> None:
    state = w.state
    reason = f"operator compensate by {event.actor}: {event.reason}"
    if state.stage is Stage.CONFIRM:
        raise InvalidTransition("every forward step succeeded and confirms have started: "
                                "tried steps can no longer be cancelled")
    if state.status is Status.COMPENSATING:
        raise InvalidTransition("saga is already compensating")
    if state.status is Status.RUNNING:
        start_rollback(w, reason, Status.COMPENSATED)
        return
    if state.dead_step is None and state.stage is Stage.FORWARD:  # parked by a timeout
        start_rollback(w, reason, Status.COMPENSATED)
        return
    key = _dead_step(w, event)
    spec = w.spec(key)
    if state.stage is Stage.FORWARD:  # dead while undoing a race's loser: roll back all
        start_rollback(w, reason, Status.COMPENSATED)
    w.update(status=Status.COMPENSATING, dead_step=None, reason=reason)
    if spec.reversible:
        _redrive(w, key, spec.rollback_phase, event.payload)
    else:
        w.update_step(key, phase=StepPhase.RESOLVED, finished_at=w.now,
                      note=f"left as is (no compensation) by {event.actor}: {event.reason}")


def _cancel(w: Work, event: OperatorRepair) -> None:
    state = w.state
    if state.status is Status.SCHEDULED:
        cancel_scheduled(w, f"cancelled by {event.actor} before its start: {event.reason}")
        return
    if state.status is Status.RUNNING and state.stage is Stage.FORWARD:
        start_rollback(w, f"cancelled by {event.actor}: {event.reason}", Status.CANCELLED)
        return
    if state.status is Status.RUNNING:
        raise InvalidTransition("saga is confirming: it can no longer be cancelled")
    raise InvalidTransition(f"only a running saga can be cancelled; this one is "
                            f"{state.status.value}")


def _resolve(w: Work, event: OperatorRepair) -> None:
    state = w.state
    if state.status is not Status.DEAD:
        raise InvalidTransition(f"only a dead saga can be resolved; this one is "
                                f"{state.status.value}")
    wanted = (event.payload or {}).get("status", Status.COMPLETED.value)
    if wanted not in (Status.COMPLETED.value, Status.COMPENSATED.value):
        raise InvalidTransition(f"resolve status must be 'completed' or 'compensated', "
                                f"got {wanted!r}")
    for key, step in w.ordered():  # confirms still in flight: their late replies go stale
        if step.outstanding is not None or step.retry_timer is not None:
            w.abandon(key)
            w.note(f"{key}: {step.phase.value} abandoned by resolve")
        elif step.phase.is_deliberate_wait and task.is_task(w, step):
            task.KIND.undo(w, w.definition.node(step.node), key, ROOT)
        elif step.phase.is_deliberate_wait:  # a wait the rollback never reached, dead first
            abandon_wait(w, key, step.phase, f"{step.phase.value} abandoned by resolve",
                         why="abandoned: the saga was resolved by hand")
    w.update(
        undoing=[],
        status=Status(wanted),
        stage=Stage.DONE,
        finished_at=w.now,
        dead_step=None,
        reason=f"resolved by {event.actor}: {event.reason}",
        resolution={"actor": event.actor, "reason": event.reason, "status": wanted,
                    "dead_step": state.dead_step, "dead_reason": state.reason,
                    "at": w.now.isoformat()},
    )


_VERBS: dict[RepairVerb, Callable[[Work, OperatorRepair], None]] = {
    RepairVerb.RETRY: _retry,
    RepairVerb.SKIP: _skip,
    RepairVerb.COMPENSATE: _compensate,
    RepairVerb.CANCEL: _cancel,
    RepairVerb.RESOLVE: _resolve,
}
