"""The wire protocol between the coordinator and participants: the contract.

Everything a participant written in any language needs is here: topic names, Kafka header
names, and the JSON command and reply envelopes. Messages are UTF-8 JSON objects; the Kafka
key is always the saga id, so all messages of one saga land in one partition, in order.

Compatibility rule: ``protocol`` is the envelope version. A reader accepts every version up to
its own and ignores unknown fields, so new optional fields never need a version bump.
"""

from __future__ import annotations

import uuid
from enum import StrEnum
from typing import Any, Final, TypeVar

from pydantic import BaseModel, ConfigDict, Field

PROTOCOL_VERSION: Final = 1

#: Default prefix of every topic the product uses; deployments may choose another.
DEFAULT_TOPIC_PREFIX: Final = "saga"

#: Kafka header carrying the unique id of a message (bytes of the UUID's text form).
HEADER_MESSAGE_ID: Final = "saga-message-id"
#: Kafka header carrying the envelope kind, ``command`` or ``reply``.
HEADER_MESSAGE_KIND: Final = "saga-message-kind"
#: Kafka header carrying the protocol version as decimal text.
HEADER_PROTOCOL: Final = "saga-protocol"
#: W3C trace context headers, carried unchanged.
HEADER_TRACEPARENT: Final = "traceparent"
HEADER_TRACESTATE: Final = "tracestate"


def command_topic(participant: str, prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    """Topic a participant consumes its commands from."""
    return f"{prefix}.{participant}.commands"


def reply_topic(prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    """Topic the coordinator consumes every participant's replies from."""
    return f"{prefix}.replies"


class Phase(StrEnum):
    """Which handler of a step a command asks for."""

    TRY = "try"
    CONFIRM = "confirm"
    CANCEL = "cancel"
    ACTION = "action"
    COMPENSATE = "compensate"

    @property
    def is_rollback(self) -> bool:
        return self in (Phase.CANCEL, Phase.COMPENSATE)

    @property
    def is_forward(self) -> bool:
        return self in (Phase.TRY, Phase.ACTION)


class Outcome(StrEnum):
    """How a participant finished a command."""

    #: The handler committed its effect (or the barrier proved it already had).
    OK = "ok"
    #: The participant refuses for good: a business rule said no. Never retried.
    REJECTED = "rejected"
    #: The handler failed for a reason that may pass: the coordinator retries per policy.
    FAILED = "failed"


class ErrorKind(StrEnum):
    """Stable error codes in a reply's ``error.kind``."""

    #: A business rule refused the command (e.g. insufficient funds). Non-retryable.
    BUSINESS = "business"
    #: A transient failure (connection lost, serialization failure, timeout). Retryable.
    TRANSIENT = "transient"
    #: An unexpected exception in the handler. Retryable, reported with type and message.
    UNEXPECTED = "unexpected"
    #: The barrier refused a try or action that arrived after its cancel (hanging request).
    BARRIER_REFUSED = "barrier_refused"
    #: The participant could not decode or route the command. Non-retryable.
    BAD_COMMAND = "bad_command"

    @property
    def retryable(self) -> bool:
        return self in (ErrorKind.TRANSIENT, ErrorKind.UNEXPECTED)


_ENVELOPE_CONFIG = ConfigDict(extra="ignore", frozen=True, str_max_length=1_000_000)


class ErrorInfo(BaseModel):
    """Why a command did not succeed."""

    model_config = _ENVELOPE_CONFIG

    kind: ErrorKind
    message: str = Field(max_length=8192)
    type: str | None = Field(default=None, max_length=256, description="Exception class name.")


class CommandEnvelope(BaseModel):
    """Coordinator -> participant: run ``phase`` of ``step`` for ``saga_id``.

    ``(saga_id, step, phase)`` is the barrier key; ``attempt`` numbers retries of the same
    phase so that the coordinator can recognise stale replies.
    """

    model_config = _ENVELOPE_CONFIG

    protocol: int = Field(default=PROTOCOL_VERSION, ge=1)
    message_id: uuid.UUID
    saga_id: uuid.UUID
    saga_type: str = Field(min_length=1, max_length=200)
    step: str = Field(min_length=1, max_length=200)
    phase: Phase
    attempt: int = Field(ge=1)
    participant: str = Field(min_length=1, max_length=200)
    action: str = Field(min_length=1, max_length=200)
    payload: dict[str, Any] = Field(default_factory=dict)
    reply_to: str = Field(min_length=1, max_length=249)


class ReplyEnvelope(BaseModel):
    """Participant -> coordinator: the outcome of one command."""

    model_config = _ENVELOPE_CONFIG

    protocol: int = Field(default=PROTOCOL_VERSION, ge=1)
    message_id: uuid.UUID
    in_reply_to: uuid.UUID
    saga_id: uuid.UUID
    step: str = Field(min_length=1, max_length=200)
    phase: Phase
    attempt: int = Field(ge=1)
    participant: str = Field(min_length=1, max_length=200)
    outcome: Outcome
    result: dict[str, Any] | None = None
    error: ErrorInfo | None = None


class ProtocolError(ValueError):
    """An envelope could not be decoded; the raw bytes belong in a dead letter."""


def decode_command(raw: bytes) -> CommandEnvelope:
    """Parse a command, raising :class:`ProtocolError` with a readable reason."""
    return _decode(CommandEnvelope, raw)


def decode_reply(raw: bytes) -> ReplyEnvelope:
    """Parse a reply, raising :class:`ProtocolError` with a readable reason."""
    return _decode(ReplyEnvelope, raw)


def encode(envelope: CommandEnvelope | ReplyEnvelope) -> bytes:
    return envelope.model_dump_json().encode()


_Envelope = TypeVar("_Envelope", CommandEnvelope, ReplyEnvelope)


def _decode(model: type[_Envelope], raw: bytes) -> _Envelope:
    try:
        envelope = model.model_validate_json(raw)
    except ValueError as exc:
        raise ProtocolError(f"undecodable {model.__name__}: {exc}") from exc
    if envelope.protocol > PROTOCOL_VERSION:
        raise ProtocolError(
            f"{model.__name__} uses protocol {envelope.protocol}, "
            f"this reader knows up to {PROTOCOL_VERSION}"
        )
    return envelope


# --- Helpers added with the participant SDK (additions only; nothing above changed) ---------

#: Values of :data:`HEADER_MESSAGE_KIND`.
KIND_COMMAND: Final = "command"
KIND_REPLY: Final = "reply"

#: Namespace of reply message ids: ``uuid5(REPLY_ID_NAMESPACE, str(command.message_id))``.
REPLY_ID_NAMESPACE: Final = uuid.UUID("6b1f1c3e-4a52-5d8e-9f0a-2c7d3e9b8a41")


def reply_message_id(command_message_id: uuid.UUID) -> uuid.UUID:
    """The deterministic id of the reply to a command: a re-sent reply carries the same id."""
    return uuid.uuid5(REPLY_ID_NAMESPACE, str(command_message_id))


def make_reply(
    command: CommandEnvelope,
    outcome: Outcome,
    *,
    result: dict[str, Any] | None = None,
    error: ErrorInfo | None = None,
) -> ReplyEnvelope:
    """The reply to ``command`` (ids, saga, step, phase and attempt copied from it)."""
    return ReplyEnvelope(
        message_id=reply_message_id(command.message_id),
        in_reply_to=command.message_id,
        saga_id=command.saga_id,
        step=command.step,
        phase=command.phase,
        attempt=command.attempt,
        participant=command.participant,
        outcome=outcome,
        result=result,
        error=error,
    )


def envelope_headers(envelope: CommandEnvelope | ReplyEnvelope) -> list[tuple[str, bytes]]:
    """The protocol headers of a message (trace context headers are added by the sender)."""
    kind = KIND_COMMAND if isinstance(envelope, CommandEnvelope) else KIND_REPLY
    return [
        (HEADER_MESSAGE_ID, str(envelope.message_id).encode()),
        (HEADER_MESSAGE_KIND, kind.encode()),
        (HEADER_PROTOCOL, str(envelope.protocol).encode()),
    ]


def header_value(headers: Any, name: str) -> str | None:
    """The text of the first header called ``name`` in a Kafka header list, or None."""
    for key, value in headers or ():
        if key == name and value is not None:
            return bytes(value).decode("utf-8", errors="replace")
    return None
