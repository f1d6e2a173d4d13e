"""Prometheus instruments of the schedules: how late runs start, and what each time became."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["ScheduleMetrics"]

_LAG_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


class ScheduleMetrics:
    """Pass the registry the process exports (the worker's)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.fire_lag = Histogram(
            "sagaflow_schedule_fire_lag_seconds",
            "Nominal fire time -> the run's saga started (late fires: downtime, load, jitter).",
            ["schedule"], buckets=_LAG_BUCKETS, registry=self.registry)
        self.runs = Counter(
            "sagaflow_schedule_runs",
            "Nominal fire times handled, by outcome (started, skipped, missed, buffered...).",
            ["schedule", "outcome"], registry=self.registry)

    def lag(self, schedule_id: str, seconds: float) -> None:
        self.fire_lag.labels(schedule_id).observe(max(seconds, 0.0))

    def recorded(self, schedule_id: str, outcome: str) -> None:
        self.runs.labels(schedule_id, outcome).inc()
