"""What can happen to a saga: the events the core folds into its state.

Each event serialises with ``to_json()`` (a dict with a ``type`` field) and comes back with
:func:`event_from_json`. The store persists exactly these dicts in the saga's history.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, TypeAdapter

from coordinator.engine.state import ParentLink
from participant_sdk.protocol import Phase, ReplyEnvelope

__all__ = [
    "EVENT_FORMAT_VERSION",
    "Event",
    "Migrated",
    "OperatorRepair",
    "ParentRequest",
    "RepairVerb",
    "ReplyReceived",
    "SagaStarted",
    "SignalReceived",
    "TaskActed",
    "TaskAction",
    "TimerFired",
    "TimerKind",
    "UpdateApplied",
    "event_from_json",
]

#: Readers ignore fields they do not know; validators are built on first use (see
#: ``state._FROZEN``).
_FROZEN = ConfigDict(frozen=True, extra="ignore", defer_build=True)
#: Format of a stored history event (and of a delivery's event); bumped like
#: ``STATE_FORMAT_VERSION``.
EVENT_FORMAT_VERSION = 1


class TimerKind(StrEnum):
    """Why a durable timer exists; the core handles each kind on its own path, and a kind it
    does not know is refused, never taken for a retry."""

    #: A reply did not come in time: the attempt counts as a retryable failure.
    DEADLINE = "deadline"
    #: A backoff ended: send the next attempt.
    RETRY = "retry"
    #: A sleep node's wake-up time came.
    SLEEP = "sleep"
    #: A wait for a signal ran out of time: it fails or goes on, as it declares.
    SIGNAL_TIMEOUT = "signal_timeout"
    #: A delayed start's time came: the scheduled saga starts running.
    START = "start"
    #: A human task's reminder is due: the people who can act on it are told again.
    TASK_REMINDER = "task_reminder"
    #: A human task's escalation tier is due: more people, or a higher priority.
    TASK_ESCALATION = "task_escalation"
    #: A human task's final timeout: rejected, decided by default, or the saga goes dead.
    TASK_TIMEOUT = "task_timeout"
    #: A saga's or a composite node's own timeout passed (``coordinator.engine.timeouts``).
    TIMEOUT = "timeout"


class RepairVerb(StrEnum):
    """What an operator can do to a saga."""

    RETRY = "retry"
    SKIP = "skip"
    COMPENSATE = "compensate"
    CANCEL = "cancel"
    RESOLVE = "resolve"


class _EventBase(BaseModel):
    model_config = _FROZEN

    #: :data:`EVENT_FORMAT_VERSION` of the writer (events written before it existed: 1).
    format_version: int = Field(default=EVENT_FORMAT_VERSION, ge=1, le=EVENT_FORMAT_VERSION)
    #: Version guards first decided when this event was applied (change id -> ``"old"`` /
    #: ``"new"``): set by the engine on the recorded event, so replay takes the same paths.
    patches: dict[str, Literal["old", "new"]] = Field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = self.model_dump(mode="json")
        if not out["patches"]:
            del out["patches"]  # the usual case: rows stay as they were
        return out


class SagaStarted(_EventBase):
    """A client asked for a new saga."""

    type: Literal["saga_started"] = "saga_started"
    saga_id: UUID
    saga_type: str
    version: int
    input: dict[str, Any]
    trace_context: dict[str, str] = Field(default_factory=dict)
    #: A child saga's parent (its first request is the try that started it).
    parent: ParentLink | None = None
    #: Run nothing before this time (timezone-aware): the saga is ``scheduled`` until then.
    start_at: AwareDatetime | None = None
    #: Who started it (the API's principal, a schedule, a parent): human tasks with four
    #: eyes keep this person from approving.
    started_by: str | None = None


class ReplyReceived(_EventBase):
    """A participant answered a command."""

    type: Literal["reply_received"] = "reply_received"
    reply: ReplyEnvelope


class TimerFired(_EventBase):
    """A durable timer the core asked for came due."""

    type: Literal["timer_fired"] = "timer_fired"
    timer_id: str
    step: str
    #: The protocol phase a deadline or retry timer is about; ``None`` for a node's own
    #: timer (a sleep), which is about no command.
    phase: Phase | None = None
    attempt: int
    kind: TimerKind


class OperatorRepair(_EventBase):
    """An operator acted on a saga through the API, CLI or UI."""

    type: Literal["operator_repair"] = "operator_repair"
    verb: RepairVerb
    actor: str
    reason: str
    #: The step the verb is about; default: the step that is stuck or failed.
    step: str | None = None
    #: ``retry``: replaces the payload of the re-driven command.
    #: ``resolve``: ``{"status": "completed" | "compensated"}`` picks the final status.
    payload: dict[str, Any] | None = None
    #: ``skip``: the result recorded for the skipped step.
    result: dict[str, Any] | None = None


class ParentRequest(_EventBase):
    """A parent saga asks its child to confirm (the parent succeeded) or cancel (it rolls
    back). The child answers with a reply addressed to the parent's node, like a participant."""

    type: Literal["parent_request"] = "parent_request"
    parent_id: UUID
    step: str
    phase: Phase
    attempt: int
    message_id: UUID
    reason: str = ""


class SignalReceived(_EventBase):
    """Something outside sent the saga a named signal (API, client, CLI or Kafka). The id
    makes a re-sent signal recognisable: the store applies each id once."""

    type: Literal["signal_received"] = "signal_received"
    signal_id: str = Field(min_length=1, max_length=200)
    name: str = Field(min_length=1, max_length=100)
    #: Already validated against the payload model of the saga's waits for ``name``.
    payload: dict[str, Any] = Field(default_factory=dict)
    sender: str = ""


class UpdateApplied(_EventBase):
    """Something outside sent the saga an update its validator accepted (``language.updates``);
    rejected updates are never events. Replay runs the update's ``apply`` again."""

    type: Literal["update_applied"] = "update_applied"
    update_id: str = Field(min_length=1, max_length=200)
    name: str = Field(min_length=1, max_length=100)
    #: Already validated against the update's model.
    payload: dict[str, Any] = Field(default_factory=dict)
    sender: str = ""


class TaskAction(StrEnum):
    """What a person can do to a human task."""

    CLAIM = "claim"
    UNCLAIM = "unclaim"
    COMPLETE = "complete"
    REASSIGN = "reassign"
    DELEGATE = "delegate"
    COMMENT = "comment"


class TaskActed(_EventBase):
    """A person acted on a human task (API, client, CLI, web UI or the test kit). Who they
    are (``actor``, ``groups``, ``admin``) is what the API authenticated; the engine decides
    whether they may."""

    type: Literal["task_acted"] = "task_acted"
    task_id: str = Field(min_length=1, max_length=200)
    action: TaskAction
    actor: str = Field(min_length=1, max_length=200)
    groups: list[str] = Field(default_factory=list)
    admin: bool = False
    #: ``complete``: the form, already validated against the task's form model.
    data: dict[str, Any] | None = None
    #: ``reassign`` / ``delegate``: the person the task goes to.
    to_user: str | None = Field(default=None, min_length=1, max_length=200)
    #: ``delegate``: the task comes back to the delegator once the delegate completes it.
    return_to_owner: bool = False
    #: ``comment`` (and an optional note on the other actions).
    comment: str = Field(default="", max_length=2000)


class Migrated(_EventBase):
    """An operator moved the saga from version ``from_version`` to ``to_version`` by the
    latter's declared migration; replay takes up the new version's definition here."""

    type: Literal["migrated"] = "migrated"
    from_version: int = Field(ge=1)
    to_version: int = Field(ge=1)
    migration: str
    actor: str
    reason: str = ""


Event = Annotated[
    SagaStarted | ReplyReceived | TimerFired | OperatorRepair | ParentRequest | SignalReceived
    | Migrated | TaskActed | UpdateApplied,
    Field(discriminator="type"),
]

_EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event, config=ConfigDict(defer_build=True))


def event_from_json(data: dict[str, Any]) -> Event:
    """Rebuild an event from :meth:`to_json` output (raises ``pydantic.ValidationError``)."""
    return _EVENT_ADAPTER.validate_python(data)
