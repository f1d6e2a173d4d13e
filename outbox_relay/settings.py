"""Relay settings, read from ``SAGAFLOW_RELAY_*`` environment variables."""

from __future__ import annotations

import datetime as dt
import uuid

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from outbox_relay.schema import DEFAULT_SHARD_COUNT
from participant_sdk.durations import Duration
from participant_sdk.kafka_security import KafkaSecurity
from participant_sdk.startup_errors import load_settings


class RelaySettings(BaseSettings):
    """How one relay process connects, batches, polls and shares shards."""

    model_config = SettingsConfigDict(env_prefix="SAGAFLOW_RELAY_", frozen=True, extra="ignore")

    #: Postgres DSN of the database holding the outbox: the coordinator's database, so the
    #: coordinator's ``SAGAFLOW_DSN`` is read when the relay's own variable is unset
    #: (required: without either, ``sagaflow-relay`` exits at once with exit code 2).
    postgres_dsn: str = Field(
        default="",
        validation_alias=AliasChoices("SAGAFLOW_RELAY_POSTGRES_DSN", "SAGAFLOW_DSN",
                                      "postgres_dsn"),
    )
    #: Kafka bootstrap servers, comma separated.
    kafka_bootstrap: str = Field(
        default="127.0.0.1:9092",
        validation_alias=AliasChoices("SAGAFLOW_RELAY_KAFKA_BOOTSTRAP", "SAGAFLOW_KAFKA_BOOTSTRAP",
                                      "kafka_bootstrap"),
    )
    #: TLS and SASL of this process's Kafka clients, from ``SAGAFLOW_KAFKA_*`` (see
    #: :class:`~participant_sdk.kafka_security.KafkaSecurity`).
    kafka_security: KafkaSecurity = Field(default_factory=lambda: load_settings(KafkaSecurity))
    #: Shard count used when this relay installs the schema; the installed count wins after.
    shard_count: int = Field(default=DEFAULT_SHARD_COUNT, ge=1, le=32767)
    #: Rows claimed and published per batch.
    batch_size: int = Field(default=1000, ge=1, le=50_000)
    #: Longest sleep between polls when the outbox is idle. A LISTENing relay (``listen``)
    #: sleeps this long at once, woken early by the writers' hints (``RelayWaker``), so this
    #: only bounds how late it finds rows of a writer that sends no hint; without ``listen``
    #: the poll backs off from ``min_poll_interval`` up to this. Idle, a LISTENing relay runs
    #: one claim per ``poll_interval`` and its shard check per ``rebalance_interval``.
    poll_interval: Duration = dt.timedelta(seconds=5)
    #: Sleep while batches are in flight (their acks are settled at the next turn).
    min_poll_interval: Duration = dt.timedelta(milliseconds=5)
    #: How often shard ownership is checked against the live relays.
    rebalance_interval: Duration = dt.timedelta(seconds=1)
    #: How often outbox lag and backlog gauges are refreshed.
    lag_interval: Duration = dt.timedelta(seconds=2)
    #: Longest wait for Kafka to acknowledge one batch before it is treated as a transient failure.
    publish_timeout: Duration = dt.timedelta(seconds=30)
    #: Longest wait for the batch in flight when stopping.
    shutdown_timeout: Duration = dt.timedelta(seconds=20)
    #: Largest serialised record the producer accepts; keep it below the broker's
    #: ``message.max.bytes`` so oversized rows fail fast, before anything is sent.
    max_request_size: int = Field(default=1_000_000, ge=1024)
    #: aiokafka per-partition batch size in bytes, and linger. Since aiokafka 0.14 every
    #: batch waits its full linger from creation, so a linger adds itself to every hop of a
    #: saga; with 0 the producer still batches what accumulates while a request is in flight
    #: (one produce request in flight per broker).
    producer_batch_bytes: int = Field(default=512 * 1024, ge=1024)
    linger_ms: int = Field(default=0, ge=0)
    #: Serve ``/healthz``, ``/readyz`` and Prometheus ``/metrics`` on this port (off when unset).
    metrics_port: int | None = None
    #: Address the probe port binds: only this host by default; ``0.0.0.0`` for Kubernetes
    #: probes and a Prometheus on another host.
    metrics_addr: str = "127.0.0.1"
    #: LISTEN for the optional writer hint on ``sagaflow_outbox`` (cheap for the relay).
    listen: bool = True
    #: Stamp each message with a ``sagaflow-relay-epoch`` header ``shard.epoch``.
    epoch_header: bool = True
    #: Create the outbox tables at start if missing.
    install_schema: bool = True
    #: asyncpg's prepared-statement cache per connection; 0 behind pgbouncer in transaction
    #: mode, where a prepared statement may land on another server connection.
    statement_cache_size: int = Field(default=100, ge=0)
    #: Connections a relay tick (``RelayTick``) keeps for a warm function instance.
    pool_max_size: int = Field(default=1, ge=1, le=100)
    #: Name of this relay in logs, the shard table and pg_stat_activity.
    relay_id: str = Field(default_factory=lambda: f"relay-{uuid.uuid4().hex[:8]}")
