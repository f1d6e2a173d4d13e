"""A child saga's side of nesting: the parent's requests, and the answers it gets back.

To its parent, a child saga is a participant of a TCC step: the parent's try starts it, its
confirm and cancel are :class:`ParentRequest` events, and the child answers each with a
reply addressed to the parent's node, once it can: a try when the child's tree succeeded
(``prepared``, with its results) or it rolled back; a confirm when it completed; a cancel
when it is undone. Both directions travel as deliveries, never as one transaction locking
both rows.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from coordinator.engine.decision import ChildStart, Delivery
from coordinator.engine.driver import drive, start_rollback
from coordinator.engine.events import ParentRequest, ReplyReceived
from coordinator.engine.results import node_results
from coordinator.engine.state import ParentLink, Stage, Status, replace
from coordinator.engine.work import Work
from participant_sdk.protocol import (
    ErrorInfo,
    ErrorKind,
    Outcome,
    Phase,
    ReplyEnvelope,
    reply_message_id,
)

__all__ = ["answer_parent", "answer_unknown_child", "on_parent_request", "refuse_child"]

_UNDONE = (Status.COMPENSATED, Status.CANCELLED)


def on_parent_request(w: Work, event: ParentRequest) -> str | None:
    """Apply the parent's confirm or cancel; returns why it was ignored, or ``None``."""
    link: ParentLink | None = w.get("parent")
    if link is None or (link.saga_id, link.step) != (event.parent_id, event.step):
        return f"request from {event.parent_id}/{event.step}, which is not this saga's parent"
    if (event.phase, event.attempt) == (link.phase, link.attempt):
        return f"duplicate parent request ({event.phase.value} attempt {event.attempt})"
    if event.phase is link.phase and event.attempt < link.attempt:
        return f"stale parent request ({event.phase.value} attempt {event.attempt})"
    w.update(parent=replace(link, {"phase": event.phase, "attempt": event.attempt,
                                   "message_id": event.message_id, "answered": False}))
    status, stage = w.get("status"), w.get("stage")
    if event.phase is Phase.CONFIRM and stage is Stage.PREPARED:
        w.update(stage=Stage.CONFIRM)
        w.note("parent saga confirms")
    elif (event.phase is Phase.CANCEL and status is Status.RUNNING
          and stage in (Stage.FORWARD, Stage.PREPARED)):
        why = f"parent saga {link.saga_id} cancels it" + (f" ({event.reason})"
                                                           if event.reason else "")
        start_rollback(w, why, Status.COMPENSATED)
    else:
        w.note(f"parent asks to {event.phase.value} (attempt {event.attempt}); "
               f"answered when this saga can")
    drive(w)
    return None


def answer_parent(w: Work) -> None:
    """Answer the parent's latest request if this saga now can (once per request)."""
    link: ParentLink | None = w.get("parent")
    if link is None or link.answered:
        return
    status, stage = w.get("status"), w.get("stage")
    ok: bool
    if link.phase is Phase.TRY:
        if stage is Stage.PREPARED or status is Status.COMPLETED:
            ok = True
        elif status in _UNDONE:
            ok = False
        else:
            return
    elif link.phase is Phase.CONFIRM:
        if status is not Status.COMPLETED and status not in _UNDONE:
            return
        ok = status is Status.COMPLETED
    else:
        if status is not Status.COMPLETED and status not in _UNDONE:
            return
        ok = status in _UNDONE
    state = w.state
    result = ({"saga_id": str(state.saga_id), "results": node_results(w.definition, state)}
              if ok else None)
    why = f"child saga {state.saga_id} is {status.value}: {state.reason or 'no reason given'}"
    w.deliver(link.saga_id, _reply(link, state.saga_type, ok, result, why),
              reply_message_id(link.message_id))
    w.update(parent=replace(link, {"answered": True}))
    w.note(f"answered the parent's {link.phase.value}: {'ok' if ok else 'rejected'}")


def refuse_child(start: ChildStart, why: str) -> Delivery:
    """The store could not start a child (unknown type, bad input, too deep): its try fails."""
    link = start.parent
    return Delivery(saga_id=link.saga_id, message_id=reply_message_id(link.message_id),
                    event=_reply(link, start.saga_type, False, None, why))


def answer_unknown_child(child_id: UUID, event: ParentRequest) -> Delivery:
    """A request to a child that was never started: a cancel has nothing to undo (a null
    compensation), a confirm cannot succeed."""
    link = ParentLink(saga_id=event.parent_id, step=event.step, depth=0, phase=event.phase,
                      attempt=event.attempt, message_id=event.message_id)
    ok = event.phase is Phase.CANCEL
    return Delivery(saga_id=event.parent_id, message_id=reply_message_id(event.message_id),
                    event=_reply(link, "saga", ok, None,
                                 f"child saga {child_id} was never started"))


def _reply(link: ParentLink, participant: str, ok: bool, result: dict[str, Any] | None,
           why: str) -> ReplyReceived:
    return ReplyReceived(reply=ReplyEnvelope(
        message_id=reply_message_id(link.message_id), in_reply_to=link.message_id,
        saga_id=link.saga_id, step=link.step, phase=link.phase, attempt=link.attempt,
        participant=participant, outcome=Outcome.OK if ok else Outcome.REJECTED,
        result=result, error=None if ok else ErrorInfo(kind=ErrorKind.BUSINESS, message=why)))
