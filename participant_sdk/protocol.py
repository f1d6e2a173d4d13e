"""The wire protocol between the coordinator and participants: the contract.

The reference implementation of ``docs/wire-protocol.md``: topic names, Kafka header names,
limits, and the JSON command and reply envelopes (``docs/asyncapi.json`` is generated from
these models). Messages are UTF-8 JSON objects; the Kafka key is always the saga id, so all
messages of one saga land in one partition, in order.

Compatibility rule: ``protocol`` is the envelope version. A reader accepts every version up to
its own and ignores unknown fields, so new optional fields never need a version bump; a reply
is written in its command's version.
"""

from __future__ import annotations

import hashlib
import uuid
from enum import StrEnum
from typing import Annotated, Any, Final, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

PROTOCOL_VERSION: Final = 1

#: Longest ``saga_type``, ``step``, ``participant`` and ``action`` (Unicode code points).
MAX_NAME_LENGTH: Final = 200
#: Longest ``reply_to``: Kafka's limit on a topic name.
MAX_TOPIC_LENGTH: Final = 249
#: Longest ``error.message``; a reader truncates a longer one rather than refusing the reply.
MAX_ERROR_MESSAGE_LENGTH: Final = 8192
#: Longest ``error.type``; truncated like ``error.message``.
MAX_ERROR_TYPE_LENGTH: Final = 256
#: Longest string field, and longest top-level key of ``payload`` / ``result`` (values nested
#: inside those are limited only by Kafka's record size).
MAX_STRING_LENGTH: Final = 1_000_000
#: Appended to a string cut to its limit, so a reader sees that it was cut.
TRUNCATION_MARK: Final = "…[truncated]"

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
    #: Set by the coordinator, never sent by a participant: the reply was addressed to the
    #: outstanding command but otherwise invalid (e.g. ``result`` not an object). Non-retryable:
    #: the barrier would answer a retry with the same malformed reply.
    MALFORMED_REPLY = "malformed_reply"

    @property
    def retryable(self) -> bool:
        return self in (ErrorKind.TRANSIENT, ErrorKind.UNEXPECTED)


_ENVELOPE_CONFIG = ConfigDict(extra="ignore", frozen=True, str_max_length=MAX_STRING_LENGTH)


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` code points, ending with :data:`TRUNCATION_MARK` when cut."""
    if len(text) <= limit:
        return text
    return text[: limit - len(TRUNCATION_MARK)] + TRUNCATION_MARK


def _truncating(limit: int) -> BeforeValidator:
    """A long diagnostic text is cut, not refused: refusing would lose the whole reply."""
    return BeforeValidator(lambda v: truncate(v, limit) if isinstance(v, str) else v)


class ErrorInfo(BaseModel):
    """Why a command did not succeed."""

    model_config = _ENVELOPE_CONFIG

    kind: ErrorKind
    message: Annotated[str, _truncating(MAX_ERROR_MESSAGE_LENGTH)] = Field(
        max_length=MAX_ERROR_MESSAGE_LENGTH,
        description="Human-readable reason. Longer text is truncated by the reader.",
    )
    type: Annotated[str | None, _truncating(MAX_ERROR_TYPE_LENGTH)] = Field(
        default=None,
        max_length=MAX_ERROR_TYPE_LENGTH,
        description="Exception class name, or null. Longer text is truncated by the reader.",
    )


class CommandEnvelope(BaseModel):
    """Coordinator -> participant: run ``phase`` of ``step`` for ``saga_id``.

    ``(saga_id, step, phase)`` is the barrier key; ``attempt`` numbers retries of the same
    phase so that the coordinator can recognise stale replies.
    """

    model_config = _ENVELOPE_CONFIG

    protocol: int = Field(
        default=PROTOCOL_VERSION, ge=1,
        description="Envelope version. A reader refuses a version above its own.",
    )
    message_id: uuid.UUID = Field(
        description="Unique per command; a retry (next attempt) gets a new one, a re-send of "
        "the same command keeps it. Also in the saga-message-id header.",
    )
    saga_id: uuid.UUID = Field(description="The saga; also the Kafka key.")
    saga_type: str = Field(
        min_length=1, max_length=MAX_NAME_LENGTH, description="Name of the saga definition.",
    )
    step: str = Field(
        min_length=1, max_length=MAX_NAME_LENGTH,
        description="Step name, unique within the saga. Part of the barrier key.",
    )
    phase: Phase = Field(description="Which handler: part of the barrier key.")
    attempt: int = Field(
        ge=1, description="1 for the first send of this phase, +1 for every retry.",
    )
    participant: str = Field(
        min_length=1, max_length=MAX_NAME_LENGTH,
        description="Addressee; a participant refuses a command addressed to another name.",
    )
    action: str = Field(
        min_length=1, max_length=MAX_NAME_LENGTH,
        description="The step's forward action, on every phase (confirm, cancel and "
        "compensate included): route on (action, phase).",
    )
    payload: dict[str, Any] = Field(
        default_factory=dict,
        description="The step's input, a JSON object. Every phase of a step carries the same "
        "payload as its try/action.",
    )
    reply_to: str = Field(
        min_length=1, max_length=MAX_TOPIC_LENGTH,
        description="Topic to publish the reply to (the coordinator's replies topic).",
    )


class ReplyEnvelope(BaseModel):
    """Participant -> coordinator: the outcome of one command."""

    model_config = _ENVELOPE_CONFIG

    protocol: int = Field(
        default=PROTOCOL_VERSION, ge=1,
        description="Envelope version; at most the coordinator's.",
    )
    message_id: uuid.UUID = Field(
        description="uuid5(REPLY_ID_NAMESPACE, text of in_reply_to): a re-sent reply keeps it.",
    )
    in_reply_to: uuid.UUID = Field(description="message_id of the command answered.")
    saga_id: uuid.UUID = Field(description="Copied from the command; also the Kafka key.")
    step: str = Field(
        min_length=1, max_length=MAX_NAME_LENGTH, description="Copied from the command.",
    )
    phase: Phase = Field(description="Copied from the command.")
    attempt: int = Field(ge=1, description="Copied from the command.")
    participant: str = Field(
        min_length=1, max_length=MAX_NAME_LENGTH, description="Copied from the command.",
    )
    outcome: Outcome = Field(description="ok, rejected (final) or failed (retried per policy).")
    result: dict[str, Any] | None = Field(
        default=None,
        description="A JSON object or null: the handler's result on ok, a business "
        "refusal's details on rejected. Never a bare number, string or array.",
    )
    error: ErrorInfo | None = Field(
        default=None, description="Null on ok; why, on rejected and failed.",
    )


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


_REPLY_ID_PREFIX: Final = REPLY_ID_NAMESPACE.bytes
#: ``uuid.uuid5``'s version (5) and variant (RFC 4122) bits, applied to the hash directly.
_UUID5_CLEAR: Final = ~((0xF000 << 64) | (0xC000 << 48))
_UUID5_SET: Final = (5 << 76) | (0x8000 << 48)


def reply_message_id(command_message_id: uuid.UUID) -> uuid.UUID:
    """The deterministic id of the reply to a command: a re-sent reply carries the same id.

    ``uuid5(REPLY_ID_NAMESPACE, str(command_message_id))``, computed without ``uuid5``'s
    detour through the bytes constructor (a third of its time, on every reply)."""
    digest = hashlib.sha1(_REPLY_ID_PREFIX + str(command_message_id).encode(),
                          usedforsecurity=False).digest()
    return uuid.UUID(int=(int.from_bytes(digest[:16], "big") & _UUID5_CLEAR) | _UUID5_SET)


def make_reply(
    command: CommandEnvelope,
    outcome: Outcome,
    *,
    result: dict[str, Any] | None = None,
    error: ErrorInfo | None = None,
) -> ReplyEnvelope:
    """The reply to ``command`` (ids, saga, step, phase and attempt copied from it).

    It is written in the command's protocol version, so a coordinator can always read the
    replies to what it sent while participants are upgraded first.
    """
    return ReplyEnvelope(
        protocol=min(command.protocol, PROTOCOL_VERSION),
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
