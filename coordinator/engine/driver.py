"""Moving a saga along: the forward walk over the tree, confirm, rollback, background undo.

Forward walks the node tree; each node kind decides what starts and when it is done. When
the whole tree succeeded, every tried TCC step (in every branch) is confirmed at once and the
saga completes when the last confirm is acknowledged. When a node fails for good and no race
absorbs it, rollback undoes everything that was, or may have been, applied: one child at a
time in reverse order of completion inside sequences, independent branches at once.
Branches a race gave up on are undone in the background, whatever the stage.
"""

from __future__ import annotations

from coordinator.engine.compiled import CompiledStep, StepKind
from coordinator.engine.leaf import abandon_forward, go_dead, send_finish
from coordinator.engine.nodes import ROOT, Progress, forward, undo
from coordinator.engine.nodes.base import scope_of
from coordinator.engine.state import Stage, Status, StepPhase
from coordinator.engine.work import Work
from participant_sdk.protocol import Phase

__all__ = ["drive", "start_rollback"]


def drive(w: Work) -> None:
    """Start whatever can start now; stop when everything waits for an event."""
    root = w.definition.root
    while w.get("status") in (Status.RUNNING, Status.COMPENSATING):
        if not _background_undo(w):
            return
        stage = w.get("stage")
        if stage is Stage.FORWARD:
            progress = forward(w, root, "", ROOT)
            if progress is Progress.WAITING:
                return
            if progress is Progress.DONE:
                w.update(stage=Stage.CONFIRM)
            else:
                key, reason = w.failure or (None, "a node failed for good")
                start_rollback(w, reason, Status.COMPENSATED, cause=key)
        elif stage is Stage.CONFIRM:
            if not _confirm(w):
                return
        elif stage is Stage.ROLLBACK:
            if undo(w, root, "", ROOT) is not Progress.DONE:
                return
            outcome = w.get("rollback_outcome") or Status.COMPENSATED
            w.update(status=outcome, stage=Stage.DONE, finished_at=w.now)
            w.note(f"saga {outcome.value}")
        else:
            return


def _background_undo(w: Work) -> bool:
    """Drive the undo of every branch a race gave up on; False if the saga went dead."""
    pending = w.get("undoing")
    if not pending:
        return True
    left: list[str] = []
    for key in pending:
        node = w.definition.node(w.step(key).node)
        progress = undo(w, node, key, scope_of(w, key))
        if progress is Progress.FAILED:
            return False
        if progress is Progress.WAITING:
            left.append(key)
    if left != pending:
        w.update(undoing=left)
    return True


def _confirm(w: Work) -> bool:
    """Confirm every tried TCC step in the same decision; complete when all are confirmed
    and no branch is still being undone. Returns True when the stage changed.

    A confirm that gave up while the saga was already dead at another step (it has neither a
    command in flight nor a retry pending) makes the saga dead at that step as soon as the
    saga runs again."""
    waiting = False
    for key, step in w.ordered():
        spec = w.definition.node(step.node)
        if not isinstance(spec, CompiledStep) or spec.kind is not StepKind.TCC:
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
    if waiting or w.get("undoing"):
        return False
    w.update(status=Status.COMPLETED, stage=Stage.DONE, finished_at=w.now)
    w.note("saga completed")
    return False


def _last_error(w: Work, key: str) -> str:
    error = w.step(key).last_error
    return f"{error.kind}: {error.message}" if error is not None else "no error recorded"


def start_rollback(w: Work, reason: str, outcome: Status, cause: str | None = None) -> None:
    """Abandon forward work in flight (its effect is unknown) and start undoing."""
    for key, step in w.ordered():
        if step.phase in (StepPhase.TRYING, StepPhase.EXECUTING):
            abandon_forward(w, key, "abandoned: rollback started while it was active")
    w.update(stage=Stage.ROLLBACK, status=Status.COMPENSATING, reason=reason,
             rollback_outcome=outcome, cause=cause)
    w.note(f"rollback started: {reason}")
