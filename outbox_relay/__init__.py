"""Transactional outbox: write messages inside your transaction; the relay publishes them."""

from typing import TYPE_CHECKING

from participant_sdk.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from outbox_relay.dead_letters import (
        OutboxDeadLetter,
        count_dead_letters,
        discard_dead_letter,
        list_dead_letters,
        requeue_dead_letter,
    )
    from outbox_relay.direct import DirectPublisher
    from outbox_relay.errors import InvalidMessageError, OutboxError, RelayStateError, SchemaError
    from outbox_relay.loop import Relay
    from outbox_relay.message import LeasedRow, OutboxMessage, enqueue, notify_relays
    from outbox_relay.metrics import RelayMetrics
    from outbox_relay.publishing import HEADER_RELAY_EPOCH
    from outbox_relay.schema import DDL, DEFAULT_SHARD_COUNT, NOTIFY_CHANNEL, install
    from outbox_relay.settings import RelaySettings
    from outbox_relay.tick import RelayTick, TickReport, relay_tick
    from outbox_relay.waker import RelayWaker

#: Every public name, loaded from its module on first use: writers (the coordinator's
#: store) enqueue without the relay, its Kafka client or its settings.
_LAZY = {
    "DDL": "outbox_relay.schema",
    "DEFAULT_SHARD_COUNT": "outbox_relay.schema",
    "DirectPublisher": "outbox_relay.direct",
    "HEADER_RELAY_EPOCH": "outbox_relay.publishing",
    "InvalidMessageError": "outbox_relay.errors",
    "LeasedRow": "outbox_relay.message",
    "NOTIFY_CHANNEL": "outbox_relay.schema",
    "OutboxDeadLetter": "outbox_relay.dead_letters",
    "OutboxError": "outbox_relay.errors",
    "OutboxMessage": "outbox_relay.message",
    "Relay": "outbox_relay.loop",
    "RelayMetrics": "outbox_relay.metrics",
    "RelaySettings": "outbox_relay.settings",
    "RelayStateError": "outbox_relay.errors",
    "RelayTick": "outbox_relay.tick",
    "RelayWaker": "outbox_relay.waker",
    "SchemaError": "outbox_relay.errors",
    "TickReport": "outbox_relay.tick",
    "count_dead_letters": "outbox_relay.dead_letters",
    "discard_dead_letter": "outbox_relay.dead_letters",
    "enqueue": "outbox_relay.message",
    "install": "outbox_relay.schema",
    "list_dead_letters": "outbox_relay.dead_letters",
    "notify_relays": "outbox_relay.message",
    "relay_tick": "outbox_relay.tick",
    "requeue_dead_letter": "outbox_relay.dead_letters",
}


__getattr__ = lazy_exports(__name__, globals(), _LAZY)


__all__ = [
    "DDL",
    "DEFAULT_SHARD_COUNT",
    "HEADER_RELAY_EPOCH",
    "NOTIFY_CHANNEL",
    "DirectPublisher",
    "InvalidMessageError",
    "LeasedRow",
    "OutboxDeadLetter",
    "OutboxError",
    "OutboxMessage",
    "Relay",
    "RelayMetrics",
    "RelaySettings",
    "RelayStateError",
    "RelayTick",
    "RelayWaker",
    "SchemaError",
    "TickReport",
    "count_dead_letters",
    "discard_dead_letter",
    "enqueue",
    "install",
    "list_dead_letters",
    "notify_relays",
    "relay_tick",
    "requeue_dead_letter",
]
