"""Coordinator settings, read from ``SAGAFLOW_*`` environment variables."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from pydantic import Field, PositiveInt, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from coordinator.config.functions import split_commas
from coordinator.config.gc_tuning import WORKER_GC_THRESHOLDS
from participant_sdk.direct import parse_address
from participant_sdk.durations import Duration
from participant_sdk.kafka_security import KafkaSecurity
from participant_sdk.protocol import DEFAULT_TOPIC_PREFIX
from participant_sdk.startup_errors import load_settings

__all__ = ["CoordinatorSettings"]


class CoordinatorSettings(BaseSettings):
    """Where the coordinator's worker finds Postgres, Kafka and its saga definitions."""

    model_config = SettingsConfigDict(env_prefix="SAGAFLOW_", extra="ignore")

    #: Postgres DSN of the coordinator's database, e.g.
    #: ``postgresql://user:password@host:5432/sagaflow`` (required: a command that needs the
    #: database and has none exits at once with exit code 2).
    dsn: str = ""
    #: Kafka bootstrap servers, comma-separated.
    kafka_bootstrap: str = "127.0.0.1:9092"
    #: TLS and SASL of this process's Kafka clients, from ``SAGAFLOW_KAFKA_*`` (see
    #: :class:`~participant_sdk.kafka_security.KafkaSecurity`).
    kafka_security: KafkaSecurity = Field(default_factory=lambda: load_settings(KafkaSecurity))
    #: Prefix of every topic (``<prefix>.replies``, ``<prefix>.<participant>.commands``).
    topic_prefix: str = DEFAULT_TOPIC_PREFIX
    #: Kafka consumer group shared by every worker replica.
    group_id: str = "sagaflow-coordinator"
    #: Saga classes to load, ``module:Class``; from the env as a comma-separated list.
    sagas: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: Apply pending migrations when the worker starts.
    migrate_on_start: bool = False
    #: Start the worker even when sagas are live on a version it does not register (by
    #: default it refuses: exit 2, naming each type, version and live count). Their replies
    #: and timers are then deferred, retried every 30 s, until a worker that registers the
    #: version handles them; none is dropped or dead-lettered.
    allow_unregistered_versions: bool = False
    #: Most replies fetched from Kafka and applied in one database transaction.
    reply_batch_size: int = Field(default=200, ge=1, le=10_000)
    #: Longest a fetch waits when no reply comes (a fetch returns as soon as replies are
    #: there, so this only sets how often an idle worker wakes up).
    reply_fetch_timeout: Duration = timedelta(seconds=1)
    #: Longest the broker holds a fetch that finds no reply (it answers as soon as one
    #: arrives, so busy or not this adds no latency): an idle worker costs the broker one
    #: empty fetch per this. After a rebalance the first fetch may wait up to this behind
    #: the one parked before. 0.1 s to 30 s.
    reply_fetch_max_wait: Duration = timedelta(seconds=2)
    #: Shortest time between two commits of the reply offsets (they are committed in the
    #: background, after the batch's transaction): the replies of a busy worker cost one
    #: OffsetCommit round trip per interval, not one per batch. A crash redelivers at most
    #: what came since the last commit; those replies are ignored as duplicates.
    reply_commit_interval: Duration = timedelta(seconds=1)
    #: Replies applied since the last commit that commit their offsets before the interval
    #: is over (bounds what a crash of a busy worker redelivers); 0: the interval alone.
    reply_commit_max_pending: int = Field(default=1000, ge=0)
    #: Most due timers claimed and fired in one transaction.
    timer_batch_size: int = Field(default=100, ge=1, le=10_000)
    #: Longest the timer and schedule loops sleep. Other processes hint the workers about
    #: timers due sooner and about schedule changes (``timer_hints``), so this bounds only how
    #: late a timer written by another worker replica (one that died before it fell due)
    #: fires. While a worker's hint connection is down it sleeps at most 1 s.
    timer_max_idle: Duration = timedelta(seconds=10)
    #: Send and LISTEN for the timer hints on ``sagaflow_timers`` (one connection per worker).
    #: Off behind a transaction-pooling PgBouncer, which drops notifications: then lower
    #: ``timer_max_idle`` to how late a timer the API wrote may fire (it was 1 s).
    timer_hints: bool = True
    #: When a late ``ok`` arrives for a dead saga's dead step (its participant confirmed,
    #: cancelled or compensated after the engine gave up), retry that step at once, as
    #: ``sagaflow:late-ok``: its barrier answers ``ok`` again and the saga goes on. Off, the
    #: late ``ok`` is recorded and the saga waits for an operator's Retry.
    resume_on_late_ok: bool = False
    #: After a commit that ended sagas (finished or dead), NOTIFY their ids on
    #: ``sagaflow_saga_ended`` in a transaction of its own (the ids of commits meanwhile share
    #: the next one), and in the API LISTEN there on a connection of its own: ``GET
    #: /sagas/{id}/result`` then answers as soon as the saga ends. Only while someone waits:
    #: the API listens while it has long polls (and 30 s after), and a process hints only
    #: while such a listener is connected (it looks every 5 s at most). Off (or behind a
    #: transaction-pooling PgBouncer, which drops notifications), a long poll re-reads its saga
    #: after 50 ms, then ever more slowly, up to once a second.
    result_hints: bool = True
    #: Thresholds of CPython's garbage collector in ``coordinator worker``
    #: (``gc.set_threshold``; JSON, CPython's own are ``[700, 10, 10]``). The default
    #: collects less often: full collections over the state cache cost about 40% of a
    #: worker's CPU at CPython's thresholds (``bench/README.md``).
    gc_thresholds: tuple[PositiveInt, PositiveInt, PositiveInt] = WORKER_GC_THRESHOLDS
    #: Connection pool bounds.
    pool_min_size: int = Field(default=1, ge=0)
    pool_max_size: int = Field(default=10, ge=1)
    #: After a commit that wrote commands, send the relays a wake-up hint: a NOTIFY after the
    #: commit, in a transaction of its own; commits during a hint share the next one, and
    #: ``relay_wake_interval`` (0: none) spaces hints further. Off, an idle relay finds
    #: commands at its next poll (up to its poll interval, 5 s, later).
    wake_relays: bool = True
    relay_wake_interval: Duration = timedelta(0)
    #: The worker and the API publish the commands of their own commits to Kafka right after
    #: each commit (their own idempotent producer), then delete their outbox rows; relays
    #: leave those rows alone for ``publish_lease`` and send whatever is still there after it
    #: (the process crashed, Kafka refused a row, the API's producer was not connected yet).
    #: Saves each hop the relay's hint, wake-up and claim. Off: every command goes through a
    #: relay (and ``wake_relays`` hints them).
    publish_commands: bool = True
    publish_lease: Duration = timedelta(seconds=2)
    #: Participants served on the direct lane (:mod:`participant_sdk.direct`), from the env
    #: as ``name=host:port,name=host:port``. With ``publish_commands``, this process hands
    #: those participants' commands over on the lane right after each commit and applies
    #: their replies as they come back; Kafka carries what the lane could not (no connection,
    #: ``direct_timeout`` passed, a participant whose database is away), and the relays what
    #: this process did not. Saves each hop two broker round trips and a consume and a
    #: produce on each side.
    direct_endpoints: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    #: The token the participants' lanes expect (``SAGAFLOW_DIRECT_TOKEN``).
    direct_token: SecretStr | None = None
    #: Longest a command waits for its answer on the lane before it goes over Kafka.
    direct_timeout: Duration = timedelta(seconds=10)
    #: How long stop() lets in-flight batches finish before cancelling them.
    shutdown_grace: Duration = timedelta(seconds=10)
    #: Checkpoint long histories every ``compact_interval`` (0, the default: off). A round
    #: takes sagas with ``compact_min_events`` events or more since their last checkpoint,
    #: at most ``compact_batch_size`` of them; ``compact_archive`` also moves the history up
    #: to the checkpoint to ``saga_history_archive``. A round holds two pool connections.
    compact_interval: Duration = timedelta(0)
    compact_min_events: int = Field(default=100, ge=1)
    compact_batch_size: int = Field(default=1000, ge=1, le=100_000)
    compact_archive: bool = False

    @field_validator("publish_lease")
    @classmethod
    def _positive_lease(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("publish_lease must be positive")
        return value

    @field_validator("reply_fetch_max_wait")
    @classmethod
    def _fetch_wait(cls, value: timedelta) -> timedelta:
        if not timedelta(milliseconds=100) <= value <= timedelta(seconds=30):
            raise ValueError("reply_fetch_max_wait must be between 100ms and 30s")
        return value

    @field_validator("compact_interval")
    @classmethod
    def _not_negative(cls, value: timedelta) -> timedelta:
        if value < timedelta(0):
            raise ValueError("must be 0 (off) or a positive duration")
        return value

    @field_validator("direct_endpoints", mode="before")
    @classmethod
    def _split_endpoints(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        endpoints: dict[str, str] = {}
        for item in split_commas(value):
            name, sep, address = item.partition("=")
            if not sep or not name.strip():
                raise ValueError(f"{item!r} is not name=host:port")
            endpoints[name.strip()] = address.strip()
        return endpoints

    @field_validator("direct_endpoints")
    @classmethod
    def _endpoint_addresses(cls, value: dict[str, str]) -> dict[str, str]:
        for address in value.values():
            parse_address(address)
        return value

    @field_validator("direct_timeout")
    @classmethod
    def _direct_timeout(cls, value: timedelta) -> timedelta:
        if not timedelta(milliseconds=10) <= value <= timedelta(minutes=5):
            raise ValueError("direct_timeout must be between 10ms and 5min")
        return value

    @field_validator("sagas", mode="before")
    @classmethod
    def _split_sagas(cls, value: Any) -> Any:
        return split_commas(value)
