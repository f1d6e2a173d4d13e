"""Lenient reply decoding: what is salvaged as a failed attempt and what stays a dead letter."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from coordinator.runtime.reply_decoding import UNKNOWN_PARTICIPANT, decode_reply_leniently
from participant_sdk.protocol import (
    CommandEnvelope,
    ErrorKind,
    Outcome,
    Phase,
    ProtocolError,
    encode,
    make_reply,
    reply_message_id,
)

_COMMAND = CommandEnvelope(
    message_id=uuid.uuid4(), saga_id=uuid.uuid4(), saga_type="order", step="pay",
    phase=Phase.TRY, attempt=2, participant="payments", action="charge",
    reply_to="saga.replies",
)


def command() -> CommandEnvelope:
    return _COMMAND


def body(**changes: Any) -> bytes:
    data = json.loads(encode(make_reply(command(), Outcome.OK, result={"a": 1})))
    data.update(changes)
    return json.dumps({k: v for k, v in data.items() if v is not ...}).encode()


def test_a_valid_reply_passes_unchanged() -> None:
    decoded = decode_reply_leniently(body())
    assert decoded.malformed is None and decoded.reply.result == {"a": 1}


@pytest.mark.parametrize(("changes", "reason"), [
    ({"result": 42}, "result: Input should be an object"),
    ({"result": [1]}, "result: Input should be an object"),
    ({"outcome": "maybe"}, "outcome: Input should be 'ok', 'rejected' or 'failed'"),
    ({"outcome": "failed", "error": {"kind": "novel", "message": "x"}}, "error.kind"),
    ({"message_id": "nope", "participant": ""}, "message_id"),
])
def test_addressed_but_malformed_becomes_a_failed_attempt(
    changes: dict[str, Any], reason: str
) -> None:
    decoded = decode_reply_leniently(body(**changes))
    reply = decoded.reply
    assert decoded.malformed is not None and reason in decoded.malformed
    assert reply.outcome is Outcome.FAILED and reply.error is not None
    assert reply.error.kind is ErrorKind.MALFORMED_REPLY
    assert not reply.error.kind.retryable
    assert reply.error.message == decoded.malformed
    original = command()
    assert (reply.saga_id, reply.step, reply.phase, reply.attempt, reply.in_reply_to) == (
        original.saga_id, original.step, original.phase, original.attempt, original.message_id)
    if "participant" in changes:
        assert reply.participant == UNKNOWN_PARTICIPANT
        assert reply.message_id == reply_message_id(original.message_id)


def test_over_long_diagnostics_are_truncated_not_refused() -> None:
    decoded = decode_reply_leniently(body(outcome="failed", result=None, error={
        "kind": "unexpected", "message": "m" * 9000, "type": "T" * 300}))
    assert decoded.malformed is None and decoded.reply.error is not None
    assert len(decoded.reply.error.message) == 8192 and len(decoded.reply.error.type or "") == 256


@pytest.mark.parametrize(("raw", "reason"), [
    (b"\x00not json", "not JSON"),
    (b"[1, 2]", "a JSON list, not an object"),
    (body(saga_id="x", result=42), "not addressed"),
    (body(attempt=0), "not addressed"),
    (body(in_reply_to=None), "not addressed"),
    (body(protocol=2), "protocol 2"),
    (body(protocol=2, result=42), "protocol 2"),
])
def test_unattributable_bodies_stay_dead_letters(raw: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        decode_reply_leniently(raw)


def test_the_reply_id_rule_is_not_enforced() -> None:
    """Duplicates are recognised by in_reply_to + attempt, so a foreign id loses nothing."""
    decoded = decode_reply_leniently(body(message_id=str(uuid.uuid4())))
    assert decoded.malformed is None
