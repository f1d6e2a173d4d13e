"""Observability settings of the coordinator worker, from ``SAGAFLOW_*`` environment variables."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from participant_sdk.durations import Duration, parse_duration

__all__ = ["ObservabilitySettings", "StuckPolicy", "parse_duration", "parse_thresholds"]

def parse_thresholds(text: str) -> dict[str, timedelta]:
    """``"order=300s,order.reserve_funds=60s"`` -> ``{"order": 300s, "order.reserve_funds": 60s}``.

    A key is a saga type or ``<saga type>.<step>``.
    """
    out: dict[str, timedelta] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"stuck threshold {part!r} must look like 'type[.step]=60s'")
        out[key.strip()] = parse_duration(value)
    return out


class StuckPolicy(BaseModel):
    """When a running or compensating saga counts as stuck.

    No progress (``sagas.last_progress_at``) for longer than the threshold of its current step
    (``"<type>.<step>"``), else of its type, else ``default``; or its current step retried at
    least ``max_retries`` times (``attempt - 1``), so "retrying forever" is never invisible.
    """

    model_config = ConfigDict(frozen=True)

    #: Threshold for types and steps without their own.
    default: timedelta = timedelta(minutes=5)
    #: Thresholds by ``type`` or ``type.step``.
    thresholds: dict[str, timedelta] = Field(default_factory=dict)
    #: Retries of the current phase that flag a saga (0 turns the criterion off).
    max_retries: int = Field(default=3, ge=0)
    #: A saga that only waits on purpose (sleeps, waits for signals) is stuck only when a
    #: wait is overdue by more than its threshold (its timer did not fire), or, waiting for a
    #: signal with no timeout, after this long without progress.
    signal_wait: timedelta = timedelta(days=7)

    def threshold(self, saga_type: str, step: str | None) -> timedelta:
        if step is not None:
            found = self.thresholds.get(f"{saga_type}.{step}")
            if found is not None:
                return found
        return self.thresholds.get(saga_type, self.default)

    def shortest(self, saga_type: str | None = None) -> timedelta:
        """The smallest threshold that can apply (coarse SQL filter)."""
        values = [self.default] + [
            v for k, v in self.thresholds.items()
            if saga_type is None or k == saga_type or k.startswith(saga_type + ".")
        ]
        return min(values)


class ObservabilitySettings(BaseSettings):
    """Metrics endpoint, periodic scan and stuck detection of a coordinator worker."""

    model_config = SettingsConfigDict(env_prefix="SAGAFLOW_", extra="ignore")

    #: Serve ``/healthz``, ``/readyz`` and Prometheus ``/metrics`` on this port (off when unset).
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    #: Address the probe port binds: only this host by default; ``0.0.0.0`` for Kubernetes
    #: probes and a Prometheus on another host.
    metrics_addr: str = "127.0.0.1"
    #: How often the in-flight, dead, dead-letter, outbox and stuck gauges are refreshed.
    observe_interval: Duration = timedelta(seconds=15)
    #: Default no-progress threshold (``SAGAFLOW_STUCK_AFTER=5m``).
    stuck_after: Duration = timedelta(minutes=5)
    #: Per type / step thresholds: ``SAGAFLOW_STUCK_THRESHOLDS="order=300s,order.pay=60s"``.
    stuck_thresholds: Annotated[dict[str, timedelta], NoDecode] = Field(default_factory=dict)
    #: Retries of the current phase that flag a saga as stuck (0: off).
    stuck_retries: int = Field(default=3, ge=0)
    #: A saga waiting for a signal with no timeout is stuck after this long without progress.
    stuck_signal_wait: Duration = timedelta(days=7)
    #: Most stuck sagas one scan looks at (gauges count at most this many).
    stuck_scan_limit: int = Field(default=1000, ge=1)

    @field_validator("stuck_thresholds", mode="before")
    @classmethod
    def _thresholds(cls, value: Any) -> Any:
        return parse_thresholds(value) if isinstance(value, str) else value

    def stuck_policy(self) -> StuckPolicy:
        return StuckPolicy(default=self.stuck_after, thresholds=self.stuck_thresholds,
                           max_retries=self.stuck_retries, signal_wait=self.stuck_signal_wait)
