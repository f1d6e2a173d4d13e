"""The signal envelope on Kafka: how another service signals a saga through its own outbox.

Topic ``{prefix}.signals``, key = the saga id (so one saga's signals keep their order), value a
JSON object with the wire protocol's rules: unknown fields ignored, a newer ``protocol`` or
anything undecodable kept as a dead letter, never guessed at::

    {"protocol": 1, "saga_id": "…", "name": "paid", "signal_id": "pay-7",
     "payload": {"amount_cents": 100}, "sender": "payments"}

``signal_id`` is required here: a producer's redelivery must be recognisable as the same
signal (the coordinator applies each id once per saga). With ``start`` it is signal-with-start:
the saga (of that type and input) is started first unless its id exists, in the same
transaction as the delivery::

    {"protocol": 1, "saga_id": "…", "name": "paid", "signal_id": "pay-7", "payload": {…},
     "start": {"saga_type": "await_payment", "input": {"order_id": "o-7"}}}
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from participant_sdk.protocol import PROTOCOL_VERSION, ProtocolError

__all__ = ["SIGNALS_SUFFIX", "SignalEnvelope", "SignalStart", "decode_signal", "encode_signal",
           "signal_topic"]

SIGNALS_SUFFIX: Final = "signals"


def signal_topic(prefix: str) -> str:
    """The topic the coordinator's workers read signals from."""
    return f"{prefix}.{SIGNALS_SUFFIX}"


class SignalStart(BaseModel):
    """The saga a signal-with-start starts when its id does not exist yet."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    saga_type: str = Field(min_length=1, max_length=100)
    input: dict[str, Any] = Field(default_factory=dict)
    #: Default: the newest registered version.
    version: int | None = Field(default=None, ge=1)


class SignalEnvelope(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, str_max_length=64 * 1024)

    protocol: int = Field(default=PROTOCOL_VERSION, ge=1)
    saga_id: uuid.UUID
    name: str = Field(min_length=1, max_length=100)
    signal_id: str = Field(min_length=1, max_length=200)
    payload: dict[str, Any] = Field(default_factory=dict)
    sender: str = Field(default="", max_length=200)
    start: SignalStart | None = None


def decode_signal(raw: bytes) -> SignalEnvelope:
    """Parse a signal, raising :class:`ProtocolError` with a readable reason."""
    try:
        envelope = SignalEnvelope.model_validate_json(raw)
    except ValueError as exc:
        raise ProtocolError(f"undecodable SignalEnvelope: {exc}") from exc
    if envelope.protocol > PROTOCOL_VERSION:
        raise ProtocolError(f"SignalEnvelope uses protocol {envelope.protocol}, this reader "
                            f"knows up to {PROTOCOL_VERSION}")
    return envelope


def encode_signal(envelope: SignalEnvelope) -> bytes:
    return envelope.model_dump_json().encode()
