"""Settings of a participant process, from ``SAGAFLOW_PARTICIPANT_*`` environment variables."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from participant_sdk.direct import parse_address
from participant_sdk.durations import Duration
from participant_sdk.kafka_security import KafkaSecurity
from participant_sdk.protocol import DEFAULT_TOPIC_PREFIX
from participant_sdk.startup_errors import load_settings


class ParticipantSettings(BaseSettings):
    """How a participant connects and how much it does at once."""

    model_config = SettingsConfigDict(env_prefix="SAGAFLOW_PARTICIPANT_", frozen=True)

    #: The participant's own Postgres database (business tables, barrier, dead letters).
    dsn: str = Field(
        validation_alias=AliasChoices("SAGAFLOW_PARTICIPANT_DSN", "dsn"),
    )
    #: Kafka bootstrap servers, comma separated.
    kafka_bootstrap: str = Field(
        default="127.0.0.1:9092",
        validation_alias=AliasChoices(
            "SAGAFLOW_PARTICIPANT_KAFKA_BOOTSTRAP", "SAGAFLOW_KAFKA_BOOTSTRAP", "kafka_bootstrap"
        ),
    )
    #: TLS and SASL of this process's Kafka clients, from ``SAGAFLOW_KAFKA_*`` (see
    #: :class:`~participant_sdk.kafka_security.KafkaSecurity`).
    kafka_security: KafkaSecurity = Field(default_factory=lambda: load_settings(KafkaSecurity))
    #: Prefix of topic names (see ``protocol.command_topic``).
    topic_prefix: str = Field(
        default=DEFAULT_TOPIC_PREFIX,
        validation_alias=AliasChoices(
            "SAGAFLOW_PARTICIPANT_TOPIC_PREFIX", "SAGAFLOW_TOPIC_PREFIX", "topic_prefix"
        ),
    )
    #: Consumer group; defaults to the participant's name.
    group_id: str | None = None
    #: Parallel lanes; the phases of one saga step always use the same lane, in order.
    lanes: int = Field(default=16, ge=1, le=1024)
    #: Lanes one saga's commands spread over (by step), so independent steps of one saga (a
    #: for-each, a parallel) run at most this many at once; 1: one saga, one lane, in order.
    saga_lanes: int = Field(default=4, ge=1, le=1024)
    #: Commands fetched but not finished, across lanes, before fetching pauses.
    max_in_flight: int = Field(default=256, ge=1)
    #: Database pool size (one connection per busy lane is enough).
    pool_size: int = Field(default=10, ge=1)
    #: asyncpg's prepared-statement cache per connection; 0 behind pgbouncer in transaction
    #: mode, where a prepared statement may land on another server connection.
    statement_cache_size: int = Field(default=100, ge=0)
    #: How long shutdown waits for in-flight commands before giving up on them.
    drain_timeout: Duration = timedelta(seconds=10)
    #: How often finished offsets are committed: the commands finished within one interval
    #: share one OffsetCommit. A crash redelivers at most what finished since the last
    #: commit; the barrier answers those again without running them.
    commit_interval: Duration = timedelta(seconds=1)
    #: Commands finished since the last commit that commit their offsets before the interval
    #: is over (bounds what a crash of a busy participant redelivers); 0: the interval alone.
    commit_max_pending: int = Field(default=1000, ge=0)
    #: Longest the broker holds a fetch that finds no command (it answers as soon as one
    #: arrives, so this adds no latency): an idle participant costs the broker one empty
    #: fetch per this. After a rebalance the first fetch may wait up to this behind the one
    #: parked before. 0.1 s to 30 s.
    fetch_max_wait: Duration = timedelta(seconds=2)
    #: How long the reply producer waits for more replies to send in one request. 0: a lone
    #: reply goes at once, and replies that finish while a request is in flight still share
    #: the next one (aiokafka sends one request per broker at a time).
    linger: Duration = timedelta(0)
    #: Local retries of transient failures (connection loss, 40001, 40P01) per command.
    retry_attempts: int = Field(default=5, ge=1)
    retry_initial: Duration = timedelta(milliseconds=50)
    retry_max: Duration = timedelta(seconds=2)
    #: Create the barrier and dead-letter tables at start if absent.
    install_schema: bool = True
    #: Serve ``/healthz``, ``/readyz`` and Prometheus ``/metrics`` on this port (off when unset).
    metrics_port: int | None = None
    #: Address the probe port binds: only this host by default; ``0.0.0.0`` for Kubernetes
    #: probes and a Prometheus on another host.
    metrics_addr: str = "127.0.0.1"
    #: Serve the direct lane (:mod:`participant_sdk.direct`) on this ``host:port``: a
    #: coordinator configured with this address hands commands over on it and takes the
    #: replies back, with Kafka only as the recovery path. Off when unset.
    direct_listen: str | None = None
    #: Token a coordinator must present on the direct lane (``SAGAFLOW_DIRECT_TOKEN``, shared
    #: with the coordinators); without one any process that reaches the port may send commands.
    direct_token: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices(
            "SAGAFLOW_PARTICIPANT_DIRECT_TOKEN", "SAGAFLOW_DIRECT_TOKEN", "direct_token"),
    )
    #: TEST ONLY: when set and the file does not exist, the process creates it and kills
    #: itself with SIGKILL right after the first committed command, before replying.
    crash_after_commit_flag: Path | None = None

    @field_validator("direct_listen")
    @classmethod
    def _direct_listen(cls, value: str | None) -> str | None:
        if value:
            parse_address(value)
        return value or None

    @field_validator("linger")
    @classmethod
    def _linger(cls, value: timedelta) -> timedelta:
        if not timedelta(0) <= value <= timedelta(seconds=1):
            raise ValueError("linger must be between 0 and 1s")
        return value

    @field_validator("fetch_max_wait")
    @classmethod
    def _fetch_wait(cls, value: timedelta) -> timedelta:
        if not timedelta(milliseconds=100) <= value <= timedelta(seconds=30):
            raise ValueError("fetch_max_wait must be between 100ms and 30s")
        return value
