"""Pins the public surface of outbox_relay and checks settings parsing (no services)."""

from __future__ import annotations

import datetime as dt

import pytest

import outbox_relay
from outbox_relay import RelaySettings
from outbox_relay.message import valid_topic


def test_exported_members() -> None:
    assert sorted(outbox_relay.__all__) == sorted(
        [
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
    )
    for name in outbox_relay.__all__:
        assert getattr(outbox_relay, name) is not None


def test_settings_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGAFLOW_RELAY_POLL_INTERVAL", "0.25")
    monkeypatch.setenv("SAGAFLOW_RELAY_BATCH_SIZE", "500")
    monkeypatch.setenv("SAGAFLOW_RELAY_METRICS_PORT", "9400")
    s = RelaySettings()
    assert s.poll_interval == dt.timedelta(seconds=0.25)
    assert (s.batch_size, s.metrics_port) == (500, 9400)
    assert RelaySettings(poll_interval="PT1S").poll_interval == dt.timedelta(seconds=1)  # type: ignore[arg-type]


def test_topic_names() -> None:
    assert valid_topic("saga.payments.commands")
    assert not valid_topic("bad topic!")
    assert not valid_topic("x" * 250)
