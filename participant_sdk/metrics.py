"""Prometheus metrics of a participant, on an explicit registry (no global state)."""

from __future__ import annotations

from typing import Any

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

        #: The labelled children, by label values: ``labels()`` validates and looks them up
        #: under a lock on every call (~5 us a command); the handlers set the few values.
        self._children: dict[tuple[str, ...], tuple[Any, Any]] = {}

    def observe(self, command: CommandEnvelope, reply: ReplyEnvelope, seconds: float) -> None:
        kind = reply.error.kind.value if reply.error is not None else ""
        values = (command.participant, command.action, command.phase.value, reply.outcome.value,
                  kind)
        children = self._children.get(values)
        if children is None:
            children = (self.commands.labels(*values), self.duration.labels(*values[:3]))
            if len(self._children) < 4096:  # bad commands carry any action name
                self._children[values] = children
        children[0].inc()
        children[1].observe(seconds)
