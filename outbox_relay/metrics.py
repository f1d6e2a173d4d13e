"""Prometheus metrics of one relay, registered on an explicit registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class RelayMetrics:
    """The relay's instruments. Pass a registry; each relay can have its own."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.rows_published = Counter(
            "sagaflow_relay_rows_published",
            "Outbox rows acknowledged by Kafka and deleted.",
            registry=registry,
        )
        self.rows_dead_lettered = Counter(
            "sagaflow_relay_rows_dead_lettered",
            "Outbox rows moved to the dead-letter table.",
            ["error_class"],
            registry=registry,
        )
        self.transient_failures = Counter(
            "sagaflow_relay_transient_failures",
            "Batches or connections that failed transiently and were retried.",
            ["system"],
            registry=registry,
        )
        self.batch_size = Histogram(
            "sagaflow_relay_batch_size",
            "Rows claimed per non-empty batch.",
            buckets=(1, 5, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000),
            registry=registry,
        )
        self.publish_latency = Histogram(
            "sagaflow_relay_publish_latency_seconds",
            "Time from handing a batch to the producer until Kafka acknowledged all of it.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=registry,
        )
        self.outbox_lag = Gauge(
            "sagaflow_relay_outbox_lag_seconds",
            "Age of the oldest unpublished row in the shards this relay owns.",
            registry=registry,
        )
        self.outbox_backlog = Gauge(
            "sagaflow_relay_outbox_backlog_rows",
            "Unpublished rows in the shards this relay owns.",
            registry=registry,
        )
        self.dead_letters = Gauge(
            "sagaflow_relay_dead_letters",
            "Rows in the outbox dead-letter table (all shards).",
            registry=registry,
        )
        self.owned_shards = Gauge(
            "sagaflow_relay_owned_shards", "Shards this relay owns.", registry=registry
        )
        self.shard_owned = Gauge(
            "sagaflow_relay_shard_owned",
            "1 when this relay owns the shard.",
            ["shard"],
            registry=registry,
        )
        self.live_relays = Gauge(
            "sagaflow_relay_live_relays",
            "Relays seen alive at the last rebalance.",
            registry=registry,
        )
