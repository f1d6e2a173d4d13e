"""Moving a saga along: the forward walk over the tree, confirm, rollback, background undo.

Forward walks the node tree; each node kind decides what starts and when it is done. When
the whole tree succeeded, every tried TCC step (in every branch) is confirmed, a for-each's
at most ``max_concurrency`` at a time, and the saga completes when the last confirm is
acknowledged. When a node fails for good and no race absorbs it, rollback undoes everything
that was, or may have been, applied: one child at a time in reverse order of completion
inside sequences, independent branches at once.
Branches a race gave up on are undone in the background, whatever the stage. A child saga
whose tree succeeded is ``prepared``: it confirms or rolls back when its parent says so.
"""

from __future__ import annotations

from coordinator.engine import timeouts
from coordinator.engine.confirming import confirm
from coordinator.engine.decision import EngineError
from coordinator.engine.nodes import ROOT, Progress, forward, undo
from coordinator.engine.nodes.base import scope_of
from coordinator.engine.nodes.leaf import abandon_forward
from coordinator.engine.state import Stage, Status, StepPhase
from coordinator.engine.work import Work
from participant_sdk.protocol import Phase

__all__ = ["drive", "start_rollback"]


#: Walks one event may take before the engine calls it a bug (each walk changes the stage
#: or finishes a background undo, so a legal decision needs a handful).
_MAX_WALKS = 1_000


def drive(w: Work) -> None:
    """Start whatever can start now; stop when everything waits for an event. Then arm and
    drop the timeouts (``engine.timeouts``) as the walk left the saga."""
    _drive(w)
    timeouts.settle(w)


def _drive(w: Work) -> None:
    for _ in range(_MAX_WALKS):
        if w.get("status") not in (Status.RUNNING, Status.COMPENSATING):
            return
        moved = _stage(w)
        undone = _background_undo(w)
        if undone is None or not (moved or undone):
            return
    raise EngineError(f"saga {w.saga_id}: the tree did not settle in {_MAX_WALKS} walks")


def _stage(w: Work) -> bool:
    """One walk of the current stage; True when the stage changed (walk again)."""
    stage, root = w.get("stage"), w.definition.root
    if stage is Stage.FORWARD:
        progress = forward(w, root, "", ROOT)
        if progress is Progress.WAITING:
            return False
        parent = w.get("parent")
        if progress is Progress.DONE and parent is not None and parent.phase is Phase.TRY:
            w.update(stage=Stage.PREPARED)  # a child: its parent confirms or cancels it
            w.note("tree done: waiting for the parent saga to confirm or cancel")
            return False
        if progress is Progress.DONE:
            w.update(stage=Stage.CONFIRM)
        else:
            key, reason = w.failure or (None, "a node failed for good")
            start_rollback(w, reason, Status.COMPENSATED, cause=key)
        return True
    if stage is Stage.CONFIRM:
        return _confirm(w)
    if stage is Stage.PREPARED:
        return False
    if stage is Stage.ROLLBACK and undo(w, root, "", ROOT) is Progress.DONE:
        outcome = w.get("rollback_outcome") or Status.COMPENSATED
        w.update(status=outcome, stage=Stage.DONE, finished_at=w.now)
        w.note(f"saga {outcome.value}")
    return False


def _background_undo(w: Work) -> bool | None:
    """Drive the undo of every branch a race gave up on. True when one finished (the stage
    may now move on), None when the saga went dead."""
    pending = w.get("undoing")
    if not pending or w.get("status") not in (Status.RUNNING, Status.COMPENSATING):
        return False
    left: list[str] = []
    for key in pending:
        node = w.definition.node(w.step(key).node)
        progress = undo(w, node, key, scope_of(w, key))
        if progress is Progress.FAILED:
            return None
        if progress is Progress.WAITING:
            left.append(key)
    if left == pending:
        return False
    w.update(undoing=left)
    return True


def _confirm(w: Work) -> bool:
    """Confirm the tried TCC steps (``confirming.confirm``: each for-each within its
    ``max_concurrency``); complete when all are confirmed and no branch is still being
    undone. Returns True when the stage changed (the saga went dead).

    A confirm that gave up while the saga was already dead at another step (it has neither a
    command in flight nor a retry pending) makes the saga dead at that step as soon as the
    saga runs again."""
    progress = confirm(w, w.definition.root, "", ROOT, frozenset(w.get("undoing")))
    if progress is Progress.FAILED:
        return True
    if progress is Progress.WAITING or w.get("undoing"):
        return False
    w.update(status=Status.COMPLETED, stage=Stage.DONE, finished_at=w.now)
    w.note("saga completed")
    return False


def start_rollback(w: Work, reason: str, outcome: Status, cause: str | None = None) -> None:
    """Abandon forward work in flight (its effect is unknown) and start undoing."""
    for key, step in w.ordered():
        if step.phase in (StepPhase.TRYING, StepPhase.EXECUTING):
            abandon_forward(w, key, "abandoned: rollback started while it was active")
    w.update(stage=Stage.ROLLBACK, status=Status.COMPENSATING, reason=reason,
             rollback_outcome=outcome, cause=cause, rollback_reason=reason)
    w.note(f"rollback started: {reason}")
