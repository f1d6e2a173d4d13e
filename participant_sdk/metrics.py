"""Prometheus metrics of a participant, on an explicit registry (no global state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from participant_sdk.protocol import CommandEnvelope, ReplyEnvelope


class ParticipantMetrics:
    """Commands handled per action/phase/outcome, command duration, dead letters."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.commands = Counter(
            "sagaflow_participant_commands",
            "Commands answered, by action, phase, outcome and error kind.",
            ["participant", "action", "phase", "outcome", "error_kind"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "sagaflow_participant_command_duration_seconds",
            "Time to answer a command: barrier, handler, local retries and commit.",
            ["participant", "action", "phase"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.dead_letters = Counter(
            "sagaflow_participant_dead_letters",
            "Messages kept as dead letters (undecodable or unroutable).",
            ["participant"],
            registry=self.registry,
        )

    def observe(self, command: CommandEnvelope, reply: ReplyEnvelope, seconds: float) -> None:
        kind = reply.error.kind.value if reply.error is not None else ""
        self.commands.labels(
            command.participant, command.action, command.phase.value, reply.outcome.value, kind
        ).inc()
        self.duration.labels(command.participant, command.action, command.phase.value).observe(
            seconds
        )
