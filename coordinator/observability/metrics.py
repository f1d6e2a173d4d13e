"""Prometheus metrics of the coordinator, on an explicit registry (no global state).

Event-driven instruments are fed by :meth:`CoordinatorMetrics.observe_changes`, a
``SagaStore`` change listener called after each commit; the gauges are refreshed by the
worker's periodic scan (:mod:`.scan`) from cheap ``GROUP BY`` queries. Human tasks: the
open and overdue gauges come from the scan; the times to claim and to complete are observed
from the committed task changes, once, by the process that committed them (the API for
people's actions, the worker for timeouts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from coordinator.engine import ReplyReceived, SagaState, TimerFired, TimerKind
from coordinator.observability.stuck import node_name

if TYPE_CHECKING:
    from coordinator.store._writes import Change

__all__ = ["CoordinatorMetrics"]

_ENDED = frozenset({"completed", "compensated", "cancelled", "dead"})
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
#: People take minutes to days: one minute to two weeks.
_TASK_BUCKETS = (60, 300, 900, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 86400, 2 * 86400,
                 3 * 86400, 5 * 86400, 7 * 86400, 14 * 86400)
_TASK_CLOSED = frozenset({"completed", "rejected"})


class CoordinatorMetrics:
    """The coordinator's instruments. Pass a registry; each worker or test can have its own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.step_duration = Histogram(
            "sagaflow_step_duration_seconds",
            "Command written to the outbox -> its reply (or missed deadline) applied.",
            ["saga_type", "step", "phase", "outcome"], buckets=_BUCKETS, registry=r,
        )
        self.step_failures = Counter(
            "sagaflow_step_failures",
            "Failed attempts applied: failed or rejected replies and missed deadlines.",
            ["saga_type", "step", "phase", "error_kind"], registry=r,
        )
        self.step_retries = Counter(
            "sagaflow_step_retries",
            "Commands sent again (attempt > 1).",
            ["saga_type", "step", "phase"], registry=r,
        )
        self.commands_sent = Counter(
            "sagaflow_commands_written",
            "Commands written to the outbox.",
            ["saga_type", "step", "phase"], registry=r,
        )
        self.replies_ignored = Counter(
            "sagaflow_replies_ignored",
            "Replies and timers the core ignored (duplicate or stale).",
            ["saga_type"], registry=r,
        )
        self.sagas_started = Counter(
            "sagaflow_sagas_started", "Sagas created.", ["saga_type"], registry=r,
        )
        self.sagas_ended = Counter(
            "sagaflow_sagas_ended",
            "Sagas that reached completed, compensated, cancelled or dead.",
            ["saga_type", "status"], registry=r,
        )
        self.in_flight = Gauge(
            "sagaflow_sagas_in_flight",
            "Sagas not in a terminal status (running, compensating, dead), by type and status.",
            ["saga_type", "status"], registry=r,
        )
        self.dead_sagas = Gauge(
            "sagaflow_dead_sagas", "Sagas parked as dead (the dead-saga queue).",
            ["saga_type"], registry=r,
        )
        self.stuck_sagas = Gauge(
            "sagaflow_stuck_sagas",
            "Running or compensating sagas flagged stuck (no progress, or retrying too often).",
            ["saga_type", "reason"], registry=r,
        )
        self.dead_letters = Gauge(
            "sagaflow_dead_letters", "Rows in the coordinator's dead-letter table, by source.",
            ["source"], registry=r,
        )
        self.outbox_backlog = Gauge(
            "sagaflow_outbox_backlog_rows", "Unpublished outbox rows (all shards).", registry=r,
        )
        self.outbox_lag = Gauge(
            "sagaflow_outbox_lag_seconds", "Age of the oldest unpublished outbox row.", registry=r,
        )
        self.tasks_open = Gauge(
            "sagaflow_tasks_open",
            "Open human tasks by candidate group (a task offered to two groups counts in "
            "both; \"\" is a task offered to users only).", ["candidate_group"], registry=r,
        )
        self.tasks_overdue = Gauge(
            "sagaflow_tasks_overdue", "Open human tasks past their due time, by candidate "
            "group (as sagaflow_tasks_open).", ["candidate_group"], registry=r,
        )
        self.task_time_to_claim = Histogram(
            "sagaflow_task_time_to_claim_seconds",
            "Human task opened -> claimed (each claim).", ["saga_type", "task"],
            buckets=_TASK_BUCKETS, registry=r,
        )
        self.task_time_to_complete = Histogram(
            "sagaflow_task_time_to_complete_seconds",
            "Human task opened -> completed or rejected by a person or its default decision.",
            ["saga_type", "task", "state"], buckets=_TASK_BUCKETS, registry=r,
        )
        self.scan_errors = Counter(
            "sagaflow_observability_scan_errors", "Periodic scans that failed.", registry=r,
        )

    # -- fed by the store after each commit ------------------------------------------------

    def observe_changes(self, changes: Sequence[Change]) -> None:
        """Count what the committed ``changes`` did (a ``SagaStore`` change listener)."""
        before: dict[Any, SagaState] = {}
        for change in changes:
            saga = change.saga
            prior = before.get(saga.saga_id, saga.base)
            self._observe(change, prior)
            before[saga.saga_id] = change.decision.state

    def _observe(self, change: Change, prior: SagaState | None) -> None:
        saga_type = change.saga.saga_type
        decision = change.decision
        if decision.ignored is not None:
            self.replies_ignored.labels(saga_type).inc()
            return
        event = change.event
        if prior is None:  # nothing stored yet: this change started the saga
            self.sagas_started.labels(saga_type).inc()
        if isinstance(event, ReplyReceived):
            reply = event.reply
            phase = reply.phase.value
            sent = _sent_at(prior, reply.step, reply.in_reply_to)
            if sent is not None:
                self.step_duration.labels(saga_type, node_name(reply.step), phase,
                                          reply.outcome.value).observe(
                    max(0.0, (change.now - sent).total_seconds()))
            if reply.outcome.value != "ok":
                kind = reply.error.kind.value if reply.error is not None else reply.outcome.value
                self.step_failures.labels(saga_type, node_name(reply.step), phase, kind).inc()
        elif (isinstance(event, TimerFired) and event.kind is TimerKind.DEADLINE
              and event.phase is not None):
            phase = event.phase.value
            sent = _sent_at(prior, event.step, None)
            if sent is not None:
                self.step_duration.labels(saga_type, node_name(event.step), phase,
                                          "timeout").observe(
                    max(0.0, (change.now - sent).total_seconds()))
            self.step_failures.labels(saga_type, node_name(event.step), phase, "deadline").inc()
        for cmd in decision.commands:
            env = cmd.envelope
            step = node_name(env.step)
            self.commands_sent.labels(saga_type, step, env.phase.value).inc()
            if env.attempt > 1:
                self.step_retries.labels(saga_type, step, env.phase.value).inc()
        for task in decision.tasks:
            self._observe_task(saga_type, task.node, task.change, task.record)
        status = decision.state.status.value
        if status in _ENDED and (prior is None or status != prior.status.value):
            self.sagas_ended.labels(saga_type, status).inc()

    def _observe_task(self, saga_type: str, key: str, change: str,
                      record: Mapping[str, Any]) -> None:
        opened = _time(record.get("created_at"))
        if opened is None:
            return
        if change == "claimed" and (claimed := _time(record.get("claimed_at"))) is not None:
            self.task_time_to_claim.labels(saga_type, node_name(key)).observe(
                max(0.0, (claimed - opened).total_seconds()))
        elif change in _TASK_CLOSED and (closed := _time(record.get("closed_at"))) is not None:
            self.task_time_to_complete.labels(saga_type, node_name(key), change).observe(
                max(0.0, (closed - opened).total_seconds()))

    # -- refreshed by the periodic scan ----------------------------------------------------

    def set_in_flight(self, rows: Sequence[tuple[str, str, int]]) -> None:
        """Replace the in-flight and dead gauges with ``(saga_type, status, count)`` rows."""
        self.in_flight.clear()
        self.dead_sagas.clear()
        for saga_type, status, count in rows:
            self.in_flight.labels(saga_type, status).set(count)
            if status == "dead":
                self.dead_sagas.labels(saga_type).set(count)

    def set_stuck(self, counts: Mapping[tuple[str, str], int]) -> None:
        self.stuck_sagas.clear()
        for (saga_type, reason), count in counts.items():
            self.stuck_sagas.labels(saga_type, reason).set(count)

    def set_tasks(self, rows: Sequence[tuple[str, int, int]]) -> None:
        """Replace the task gauges with ``(candidate_group, open, overdue)`` rows."""
        self.tasks_open.clear()
        self.tasks_overdue.clear()
        for group, open_count, overdue in rows:
            self.tasks_open.labels(group).set(open_count)
            self.tasks_overdue.labels(group).set(overdue)

    def set_dead_letters(self, rows: Sequence[tuple[str, int]]) -> None:
        self.dead_letters.clear()
        for source, count in rows:
            self.dead_letters.labels(source).set(count)


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def _sent_at(prior: SagaState | None, step: str, message_id: Any) -> datetime | None:
    """When the command this event answers was written (the step's outstanding command)."""
    node = prior.steps.get(step) if prior is not None else None
    out = node.outstanding if node is not None else None
    if out is None or (message_id is not None and out.message_id != message_id):
        return None
    return out.sent_at
