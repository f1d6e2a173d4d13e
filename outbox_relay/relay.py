"""The relay's import path: ``from outbox_relay.relay import Relay`` and the helpers below keep
working now that the relay lives in modules by concern (leasing, publishing, loop)."""

from outbox_relay.leasing import _CLAIM
from outbox_relay.loop import Relay
from outbox_relay.publishing import (
    _PRODUCER_FAULTS,
    HEADER_RELAY_EPOCH,
    ProducerFactory,
    _is_transient,
    _new_producer,
    _ProducerFault,
    _TransientPublishError,
    producer_config,
    traced_headers,
)

__all__ = [
    "HEADER_RELAY_EPOCH",
    "_CLAIM",
    "_PRODUCER_FAULTS",
    "ProducerFactory",
    "Relay",
    "_ProducerFault",
    "_TransientPublishError",
    "_is_transient",
    "_new_producer",
    "producer_config",
    "traced_headers",
]
