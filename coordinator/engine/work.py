"""The scratch pad of one ``advance`` call: the state being built and the effects so far."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from functools import cached_property
from hashlib import sha1
from typing import Any, Final

from coordinator.engine.decision import (
    ChildStart,
    ConsumedSignal,
    Delivery,
    OutgoingCommand,
    TaskChange,
    TimerRequest,
)
from coordinator.engine.events import Event, ParentRequest, TimerKind
from coordinator.engine.quiet import NEUTRAL, Quiet
from coordinator.engine.state import (
    Outstanding,
    ParentLink,
    PatchChoice,
    SagaState,
    StepPhase,
    StepState,
    replace,
    trusted,
)
from coordinator.engine.stepmap import Editable, editable
from coordinator.engine.tree import CompiledSaga, CompiledStep, StepKind
from participant_sdk.protocol import PROTOCOL_VERSION, CommandEnvelope, Phase

__all__ = ["ACTIVE_PHASE", "Work", "message_id", "timer_id"]

#: Namespace of command message ids (uuid5); fixed forever, ids must stay reproducible.
MESSAGE_NAMESPACE = uuid.UUID("6f1c2a9e-5b1d-4c7a-9e2f-3d8b0a4c5e61")

ACTIVE_PHASE = {
    Phase.TRY: StepPhase.TRYING,
    Phase.ACTION: StepPhase.EXECUTING,
    Phase.CONFIRM: StepPhase.CONFIRMING,
    Phase.CANCEL: StepPhase.CANCELLING,
    Phase.COMPENSATE: StepPhase.COMPENSATING,
}

_NAMESPACE_BYTES: Final = MESSAGE_NAMESPACE.bytes
_VERSION_5: Final = (0x8000 << 48) | (5 << 76)
_VERSION_MASK: Final = ~((0xc000 << 48) | (0xf000 << 64))


def message_id(saga_id: uuid.UUID, step: str, phase: Phase, attempt: int) -> uuid.UUID:
    """The command id of one attempt: the same inputs always give the same id."""
    return _uuid5(f"{saga_id}/{step}/{phase.value}/{attempt}")


def _uuid5(name: str) -> uuid.UUID:
    """``uuid.uuid5(MESSAGE_NAMESPACE, name)``, built without ``UUID.__init__``'s checks
    (a command's id is made on every send)."""
    digest = sha1(_NAMESPACE_BYTES + name.encode()).digest()
    out = object.__new__(uuid.UUID)
    object.__setattr__(out, "int", int.from_bytes(digest[:16]) & _VERSION_MASK | _VERSION_5)
    object.__setattr__(out, "is_safe", uuid.SafeUUID.unknown)
    return out


def timer_id(saga_id: uuid.UUID, step: str, phase: Phase, attempt: int, kind: TimerKind) -> str:
    """The id of a durable timer: readable and deterministic."""
    return f"{saga_id}:{step}:{phase.value}:{attempt}:{kind.value}"


_BLANK: Final = StepState(key="", node="")


def _blank(key: str, node: str, parent: str | None) -> StepState:
    """``StepState(key=key, node=node, parent=parent)`` without validating the defaults again
    (a for-each makes one per item and per step it starts)."""
    new = object.__new__(StepState)
    object.__setattr__(new, "__dict__", {**_BLANK.__dict__, "key": key, "node": node,
                                         "parent": parent, "attempts": {}, "budget_from": {}})
    object.__setattr__(new, "__pydantic_fields_set__", {"key", "node", "parent"})
    object.__setattr__(new, "__pydantic_extra__", None)
    object.__setattr__(new, "__pydantic_private__", None)
    return new


class Work:
    """Accumulates the new state and the outbox rows and timers of one decision."""

    def __init__(self, definition: CompiledSaga, state: SagaState, now: datetime,
                 known_patches: Mapping[str, PatchChoice] | None = None) -> None:
        self.definition = definition
        #: Replay: every version-guard decision recorded for this saga (``None``: a live
        #: decision, which decides by the rule).
        self.known_patches: Mapping[str, PatchChoice] | None = known_patches
        self._state = state
        #: Field changes not yet folded into ``_state`` (folded on the next read of ``state``).
        self._pending: dict[str, Any] = {}
        self.now = now
        self.commands: list[OutgoingCommand] = []
        self.timers: list[TimerRequest] = []
        self.cancel_timers: list[str] = []
        self.children: list[ChildStart] = []
        self.deliveries: list[Delivery] = []
        self.consumed_signals: list[ConsumedSignal] = []
        self.tasks: list[TaskChange] = []
        self.notes: list[str] = []
        #: The steps mapping this decision built (safe to edit in place), if any.
        self._own_steps: Editable | None = None
        #: Keys of the nodes created or replaced, in the order first touched (an ordered set).
        self.touched: dict[str, None] = {}
        #: Every phase and status change made, as (key or "", node or "", from, to); the
        #: machine test checks each against the exported edges.
        self.moves: list[tuple[str, str, str, str]] = []
        #: Why the latest forward failure happened, and where (the rollback's reason).
        self.failure: tuple[str, str] | None = None
        #: What the walks know about the for-each items (``engine.quiet``); published with
        #: the steps mapping this decision makes.
        self.quiet = Quiet.inherit(state.steps, definition)

    # -- state edits -------------------------------------------------------------------------

    @property
    def state(self) -> SagaState:
        """The state built so far. Edits are batched: one copy of the snapshot per read after
        a burst of edits, not one per edited field."""
        if self._pending:
            self._state = replace(self._state, self._pending)
            self._pending = {}
        return self._state

    def get(self, field: str) -> Any:
        """One field of the state built so far, without folding pending edits."""
        return self._pending[field] if field in self._pending else getattr(self._state, field)

    @property
    def saga_id(self) -> uuid.UUID:
        return self._state.saga_id  # never changes

    @cached_property
    def saga_text(self) -> str:
        """``str(saga_id)``, made once: every command and timer id starts with it."""
        return str(self._state.saga_id)

    def _steps(self) -> Mapping[str, StepState]:
        steps: Mapping[str, StepState] = self._pending.get("steps", self._state.steps)
        return steps

    @property
    def steps(self) -> Mapping[str, StepState]:
        """The steps built so far, by key (read-only: edit with :meth:`update_step`)."""
        return self._steps()

    def step(self, key: str) -> StepState:
        return self._steps()[key]

    def ordered(self) -> list[tuple[str, StepState]]:
        """Steps in definition order. Never rely on the mapping's order: a JSONB snapshot
        does not keep key order."""
        steps = self._steps()
        order = self.definition.order
        keys = sorted(steps, key=lambda k: (order.get(steps[k].node, len(order)), k))
        return [(k, steps[k]) for k in keys]

    def spec(self, key: str) -> CompiledStep:
        return self.definition.step(self._steps()[key].node)

    def update(self, **changes: Any) -> None:
        assert "steps" not in changes, "edit nodes with create / update_step"
        status = changes.get("status")
        if status is not None and status != self.get("status"):
            self.moves.append(("", "", self.get("status").value, status.value))
        if not changes.keys() <= NEUTRAL:
            self._forget_quiet()
        self._pending.update(changes)

    def _forget_quiet(self) -> None:
        """A saga field a walk may read changed: no item's mark holds any more. The mapping
        this decision started from keeps its marks (they describe that state), so publish a
        mapping of our own."""
        self.quiet.forget()
        steps = self._steps()
        if self._own_steps is not steps and getattr(steps, "memo", None) is not None:
            self._fork(steps)

    def _fork(self, steps: Mapping[str, StepState]) -> Editable:
        own = self._own_steps = editable(steps)
        own.memo = self.quiet
        self._pending["steps"] = own
        return own

    def create(self, key: str, node: str, parent: str | None, **fields: Any) -> StepState:
        """The first state of a node instance entered now (``pending`` unless given)."""
        self._own(key, _blank(key, node, parent))
        if fields:
            self.update_step(key, **fields)
        return self.step(key)

    def _own(self, key: str, state: StepState) -> None:
        steps = self._steps()
        if self._own_steps is not steps:  # the first edit of this decision
            steps = self._fork(steps)
        steps.set(key, state)
        self.touched[key] = None
        if self.quiet.marks:
            self.quiet.edited(key)

    def next_completion(self) -> int:
        """The next number in the order in which nodes completed."""
        seq: int = self.get("completions") + 1
        self.update(completions=seq)
        return seq

    def failed(self, key: str, reason: str) -> None:
        """A node failed for good: remembered as the reason should the saga roll back."""
        self.failure = (key, reason)

    def undo_later(self, key: str) -> None:
        """Undo the branch at ``key`` while the saga goes on (a race's loser)."""
        undoing: list[str] = self.get("undoing")
        if key not in undoing:
            self.update(undoing=[*undoing, key])

    def update_step(self, key: str, **changes: Any) -> None:
        """Replace one step's fields. The steps mapping is copied once per decision: the
        state handed in is never modified, and later edits reuse this decision's copy."""
        old = self._steps()[key]
        if "phase" in changes and changes["phase"] != old.phase:
            changes.setdefault("phase_changed_at", self.now)
            self.moves.append((key, old.node, old.phase.value, changes["phase"].value))
        self._own(key, replace(old, changes))

    def note(self, text: str) -> None:
        self.notes.append(text)

    # -- effects -----------------------------------------------------------------------------

    def send(self, key: str, phase: Phase, payload: dict[str, Any], /, **also: Any) -> None:
        """Emit the next attempt of ``phase`` for ``key`` with its deadline timer (``also``:
        more fields of the step to write with it, in the same copy)."""
        spec, step = self.spec(key), self.step(key)
        attempt = step.attempt(phase) + 1
        saga_id = self._state.saga_id
        mid = _uuid5(f"{self.saga_text}/{key}/{phase.value}/{attempt}")
        if spec.kind is StepKind.CHILD:
            self._ask_child(spec, key, phase, attempt, mid, payload)
        else:
            # Built by the engine from checked values (names are checked when the saga is
            # defined): no validation on the hot path.
            envelope = trusted(
                CommandEnvelope,
                protocol=PROTOCOL_VERSION,
                message_id=mid,
                saga_id=saga_id,
                saga_type=self._state.saga_type,
                step=key,
                phase=phase,
                attempt=attempt,
                participant=spec.participant,
                action=spec.action,  # every phase carries the step's own action
                payload=payload,
                reply_to=self.definition.reply_topic,
            )
            topic = self.definition.command_topic(spec)
            self.commands.append(trusted(OutgoingCommand, topic=topic, envelope=envelope))
        deadline = self.add_timer(key, phase, attempt, TimerKind.DEADLINE,
                                  self.now + spec.deadline_for(phase))
        self.update_step(
            key,
            phase=ACTIVE_PHASE[phase],
            attempts={**step.attempts, phase: attempt},
            outstanding=trusted(Outstanding, message_id=mid, phase=phase, attempt=attempt,
                                sent_at=self.now, deadline_timer=deadline),
            retry_timer=None,
            sent=step.sent or phase.is_forward,
            started_at=step.started_at or self.now,
            **also,
        )
        self.note(f"{key}: sent {phase.value} attempt {attempt}")

    def _ask_child(self, spec: CompiledStep, key: str, phase: Phase, attempt: int,
                   mid: uuid.UUID, payload: dict[str, Any]) -> None:
        """A child saga node's command: its try starts the child (whose id is the try's
        message id); its confirm and cancel are requests delivered to that child."""
        saga_id = self._state.saga_id
        if phase is Phase.TRY:
            own: ParentLink | None = self.get("parent")
            link = ParentLink(saga_id=saga_id, step=key, depth=(own.depth if own else 0) + 1,
                              phase=phase, attempt=attempt, message_id=mid)
            assert spec.child is not None
            self.children.append(ChildStart(
                saga_id=mid, saga_type=spec.child, version=spec.child_version,
                input=payload, trace_context=dict(self._state.trace_context), parent=link))
            return
        child = message_id(saga_id, key, Phase.TRY, self.step(key).attempt(Phase.TRY))
        self.deliver(child, ParentRequest(parent_id=saga_id, step=key, phase=phase,
                                          attempt=attempt, message_id=mid,
                                          reason=self.get("reason") or ""), mid)

    def deliver(self, saga_id: uuid.UUID, event: Event, mid: uuid.UUID) -> None:
        """An event for another saga, applied in that saga's own transaction later."""
        self.deliveries.append(Delivery(saga_id=saga_id, event=event, message_id=mid))

    def add_timer(
        self, key: str, phase: Phase, attempt: int, kind: TimerKind, due_at: datetime
    ) -> str:
        tid = f"{self.saga_text}:{key}:{phase.value}:{attempt}:{kind.value}"  # timer_id
        self.timers.append(trusted(TimerRequest, timer_id=tid, due_at=due_at, step=key,
                                   phase=phase, attempt=attempt, kind=kind))
        return tid

    def drop_timer(self, tid: str) -> None:
        """Cancel a timer: drop it if this decision created it, else ask the store to."""
        before = len(self.timers)
        self.timers = [t for t in self.timers if t.timer_id != tid]
        if len(self.timers) == before:
            self.cancel_timers.append(tid)

    def abandon(self, key: str) -> None:
        """Forget the step's command in flight and its pending retry (late replies go stale)."""
        step = self.step(key)
        if step.outstanding is not None:
            self.drop_timer(step.outstanding.deadline_timer)
        if step.retry_timer is not None:
            self.drop_timer(step.retry_timer)
        if step.outstanding is not None or step.retry_timer is not None:
            self.update_step(key, outstanding=None, retry_timer=None)
