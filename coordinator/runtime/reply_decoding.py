"""Decoding replies: a correctly addressed but malformed reply fails its attempt at once.

A reply whose ``saga_id``, ``step``, ``phase``, ``attempt`` and ``in_reply_to`` decode answers
a command the coordinator can identify. If the rest is invalid (``result`` a bare number, an
unknown ``outcome``), dead-lettering it alone would leave the step waiting for its deadline
and then roll back a try that may well have succeeded, with no reason on the saga. So it is
turned into a valid ``failed`` reply with error kind ``malformed_reply`` that says what was
wrong; the engine then treats it as any other failure of that attempt (no engine change).

A body that is not a JSON object, lacks a decodable address, or uses a newer ``protocol``
cannot be attributed safely: that stays a :class:`ProtocolError` (a dead letter).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from participant_sdk.protocol import (
    MAX_NAME_LENGTH,
    PROTOCOL_VERSION,
    ErrorInfo,
    ErrorKind,
    Outcome,
    Phase,
    ProtocolError,
    ReplyEnvelope,
    decode_reply,
    reply_message_id,
)

__all__ = ["DecodedReply", "decode_reply_leniently"]

#: ``participant`` of a salvaged reply whose own ``participant`` field is unusable.
UNKNOWN_PARTICIPANT = "unknown"


@dataclass(frozen=True, slots=True)
class DecodedReply:
    """A reply to apply; ``malformed`` says why it was rebuilt as a failure (None if valid)."""

    reply: ReplyEnvelope
    malformed: str | None = None


class _Address(BaseModel):
    """The fields that tie a reply to one outstanding command."""

    model_config = ConfigDict(extra="ignore")

    saga_id: uuid.UUID
    step: str = Field(min_length=1, max_length=MAX_NAME_LENGTH)
    phase: Phase
    attempt: int = Field(ge=1)
    in_reply_to: uuid.UUID


def decode_reply_leniently(raw: bytes) -> DecodedReply:
    """The reply in ``raw``, or a ``failed`` stand-in when it is addressed but malformed.

    Raises :class:`ProtocolError` when the body cannot be attributed to a command.
    """
    try:
        return DecodedReply(decode_reply(raw))
    except ProtocolError as exc:
        if not isinstance(exc.__cause__, pydantic.ValidationError):
            raise  # a newer protocol: not ours to interpret
        invalid = exc.__cause__
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise ProtocolError(f"undecodable ReplyEnvelope: not JSON ({exc})") from exc
    if not isinstance(body, dict):
        raise ProtocolError(
            f"undecodable ReplyEnvelope: a JSON {type(body).__name__}, not an object"
        )
    version = body.get("protocol", PROTOCOL_VERSION)
    if isinstance(version, int) and version > PROTOCOL_VERSION:
        raise ProtocolError(
            f"ReplyEnvelope uses protocol {version}, this reader knows up to {PROTOCOL_VERSION}"
        )
    try:
        address = _Address.model_validate(body)
    except pydantic.ValidationError as exc:
        raise ProtocolError(
            f"undecodable ReplyEnvelope (not addressed): {_summary(exc)}; also {_summary(invalid)}"
        ) from exc
    reason = f"malformed reply: {_summary(invalid)}"
    salvaged = ReplyEnvelope(
        message_id=_uuid_or(body.get("message_id"), reply_message_id(address.in_reply_to)),
        in_reply_to=address.in_reply_to,
        saga_id=address.saga_id,
        step=address.step,
        phase=address.phase,
        attempt=address.attempt,
        participant=_name_or(body.get("participant"), UNKNOWN_PARTICIPANT),
        outcome=Outcome.FAILED,
        error=ErrorInfo(kind=ErrorKind.MALFORMED_REPLY, message=reason),
    )
    return DecodedReply(salvaged, malformed=reason)


def _summary(exc: pydantic.ValidationError) -> str:
    """``field: problem`` per error, without echoing (possibly huge) input values."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in error["loc"]) or "(body)"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def _uuid_or(value: Any, default: uuid.UUID) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return default


def _name_or(value: Any, default: str) -> str:
    if isinstance(value, str) and 1 <= len(value) <= MAX_NAME_LENGTH:
        return value
    return default
